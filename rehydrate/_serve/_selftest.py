"""``REDE.TEST``: ReDe's internal scenarios, translated, on a fake clock.

ReDe's module runs them inside the server, sleeping about 37 seconds while every client waits.
Here each runs through the same command table the clients use, on a memory store of its own
(the served store is never touched) whose :class:`~rehydrate.testing.FakeClock` is moved instead
of slept on: the reply comes at once. The order and names are ReDe's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from rehydrate._serve._resp import error, simple

__all__ = ["SCENARIOS", "run_self_test"]

# A step: a request and the reply expected, byte for byte; or a number: seconds to move the clock.
# A reply of None: any error reply (ReDe's TestUpdate checks only that it is an error).
_Step = tuple[tuple[str, ...], bytes | None] | float

SCENARIOS: Final[dict[str, list[_Step]]] = {
    "TestLook": [
        (("REDE.PUSH", "TEST_DEHYDRATOR_look", "100", "look_test_value", "look_test_id"), b"+OK\r\n"),
        (("REDE.LOOK", "TEST_DEHYDRATOR_look", "look_test_id"), b"$15\r\nlook_test_value\r\n"),
        (("REDE.LOOK", "TEST_DEHYDRATOR_look", "no_such_id"), b"$-1\r\n"),
        (("REDE.LOOK", "TEST_DEHYDRATOR_look", "look_test_id"), b"$15\r\nlook_test_value\r\n"),
        (("REDE.PULL", "TEST_DEHYDRATOR_look", "look_test_id"), b"$15\r\nlook_test_value\r\n"),
        (("REDE.LOOK", "TEST_DEHYDRATOR_look", "look_test_id"), b"$-1\r\n"),
    ],
    "TestPush": [
        (("REDE.PUSH", "TEST_DEHYDRATOR_push", "100", "push_test_value", "push_test_id"), b"+OK\r\n"),
        (
            ("REDE.PUSH", "TEST_DEHYDRATOR_push", "100", "push_test_value", "push_test_id"),
            b"-ERROR: Element already dehydrating.\r\n",
        ),
        (("REDE.LOOK", "TEST_DEHYDRATOR_push", "push_test_id"), b"$15\r\npush_test_value\r\n"),
        (("REDE.TTN", "TEST_DEHYDRATOR_push"), b":100\r\n"),
    ],
    "TestPull": [
        (("REDE.PUSH", "TEST_DEHYDRATOR_pull", "100", "pull_test_value", "pull_test_id"), b"+OK\r\n"),
        (("REDE.PUSH", "TEST_DEHYDRATOR_pull", "100", "pull_test_value2", "pull_test_id2"), b"+OK\r\n"),
        (("REDE.PULL", "TEST_DEHYDRATOR_pull", "no_such_id"), b"$-1\r\n"),
        (("REDE.PULL", "TEST_DEHYDRATOR_pull", "pull_test_id"), b"$15\r\npull_test_value\r\n"),
        (("REDE.PULL", "TEST_DEHYDRATOR_pull", "pull_test_id"), b"$-1\r\n"),
        (("REDE.LOOK", "TEST_DEHYDRATOR_pull", "pull_test_id2"), b"$16\r\npull_test_value2\r\n"),
        (("REDE.PULL", "TEST_DEHYDRATOR_pull", "pull_test_id2"), b"$16\r\npull_test_value2\r\n"),
        (("REDE.TTN", "TEST_DEHYDRATOR_pull"), b":-1\r\n"),
    ],
    "TestPoll": [
        (("REDE.POLL", "TEST_DEHYDRATOR_poll"), b"*0\r\n"),
        (("REDE.PUSH", "TEST_DEHYDRATOR_poll", "1000", "poll_test_value", "poll_test_id"), b"+OK\r\n"),
        (("REDE.PUSH", "TEST_DEHYDRATOR_poll", "3000", "poll_test_value2", "poll_test_id2"), b"+OK\r\n"),
        (("REDE.PUSH", "TEST_DEHYDRATOR_poll", "1000", "poll_test_value3", "poll_test_id3"), b"+OK\r\n"),
        (("REDE.POLL", "TEST_DEHYDRATOR_poll"), b"*0\r\n"),
        1.0,
        (
            ("REDE.POLL", "TEST_DEHYDRATOR_poll"),
            b"*2\r\n$15\r\npoll_test_value\r\n$16\r\npoll_test_value3\r\n",
        ),
        (("REDE.POLL", "TEST_DEHYDRATOR_poll"), b"*0\r\n"),
        2.0,
        (("REDE.POLL", "TEST_DEHYDRATOR_poll"), b"*1\r\n$16\r\npoll_test_value2\r\n"),
        (("REDE.POLL", "TEST_DEHYDRATOR_poll"), b"*0\r\n"),
    ],
    "TestTimeToNext": [
        (("REDE.TTN", "TEST_DEHYDRATOR_ttn"), b"$-1\r\n"),
        (("REDE.PUSH", "TEST_DEHYDRATOR_ttn", "3000", "ttn_test_value", "ttn_test_id"), b"+OK\r\n"),
        (("REDE.PUSH", "TEST_DEHYDRATOR_ttn", "1000", "ttn_test_value2", "ttn_test_id2"), b"+OK\r\n"),
        (("REDE.TTN", "TEST_DEHYDRATOR_ttn"), b":1000\r\n"),
        1.0,
        (("REDE.TTN", "TEST_DEHYDRATOR_ttn"), b":0\r\n"),
        (("REDE.POLL", "TEST_DEHYDRATOR_ttn"), b"*1\r\n$15\r\nttn_test_value2\r\n"),
        (("REDE.TTN", "TEST_DEHYDRATOR_ttn"), b":2000\r\n"),
        2.0,
        (("REDE.POLL", "TEST_DEHYDRATOR_ttn"), b"*1\r\n$14\r\nttn_test_value\r\n"),
        (("REDE.TTN", "TEST_DEHYDRATOR_ttn"), b":-1\r\n"),
    ],
    "TestUpdate": [
        (("REDE.UPDATE", "TEST_DEHYDRATOR_update", "update_test_id", "x"), None),
        (("REDE.PUSH", "TEST_DEHYDRATOR_update", "1000", "update_test_value", "update_test_id"), b"+OK\r\n"),
        (
            ("REDE.UPDATE", "TEST_DEHYDRATOR_update", "update_test_id", "update_test_value2"),
            b"$17\r\nupdate_test_value\r\n",
        ),
        (("REDE.LOOK", "TEST_DEHYDRATOR_update", "update_test_id"), b"$18\r\nupdate_test_value2\r\n"),
        (("REDE.UPDATE", "TEST_DEHYDRATOR_update", "no_such_id", "x"), None),
        1.0,  # the due time is kept
        (("REDE.POLL", "TEST_DEHYDRATOR_update"), b"*1\r\n$18\r\nupdate_test_value2\r\n"),
    ],
    "TestXPoll": [
        (("REDE.XPOLL", "TEST_DEHYDRATOR_xpoll"), b"*0\r\n"),
        (("REDE.PUSH", "TEST_DEHYDRATOR_xpoll", "3000", "xpoll_test_value", "101"), b"+OK\r\n"),
        (("REDE.PUSH", "TEST_DEHYDRATOR_xpoll", "1000", "xpoll_test_value2", "102"), b"+OK\r\n"),
        (("REDE.XPOLL", "TEST_DEHYDRATOR_xpoll"), b"*0\r\n"),
        1.0,
        (("REDE.XPOLL", "TEST_DEHYDRATOR_xpoll"), b"*1\r\n$3\r\n102\r\n"),
        2.0,
        (("REDE.XPOLL", "TEST_DEHYDRATOR_xpoll"), b"*2\r\n$3\r\n102\r\n$3\r\n101\r\n"),
        (("REDE.XPOLL", "TEST_DEHYDRATOR_xpoll"), b"*2\r\n$3\r\n102\r\n$3\r\n101\r\n"),
    ],
    "TestXAck": [
        (("REDE.XACK", "TEST_DEHYDRATOR_xack", "101"), b"*0\r\n"),
        (("REDE.PUSH", "TEST_DEHYDRATOR_xack", "3000", "xack_test_value", "101"), b"+OK\r\n"),
        (("REDE.PUSH", "TEST_DEHYDRATOR_xack", "1000", "xack_test_value2", "102"), b"+OK\r\n"),
        1.0,
        (("REDE.POLL", "TEST_DEHYDRATOR_xack"), b"*1\r\n$16\r\nxack_test_value2\r\n"),
        2.0,
        (("REDE.XPOLL", "TEST_DEHYDRATOR_xack"), b"*1\r\n$3\r\n101\r\n"),
        (
            ("REDE.XACK", "TEST_DEHYDRATOR_xack", "101", "102", "103"),
            b"*3\r\n$15\r\nxack_test_value\r\n$-1\r\n$-1\r\n",
        ),
        (("REDE.TTN", "TEST_DEHYDRATOR_xack"), b":-1\r\n"),
    ],
}


async def run_self_test(names: Sequence[bytes]) -> bytes:
    """``+PASS``, or ``-Test <Name> FAILED`` at the first scenario that fails (ReDe's replies)."""
    from rehydrate._serve._commands import Commands, Elements
    from rehydrate.stores import open_store
    from rehydrate.testing import FakeClock

    wanted = [name.decode("utf-8", "replace") for name in names] or list(SCENARIOS)
    for name in wanted:
        steps = SCENARIOS.get(name)
        if steps is None:
            return error(f"ERR unknown test '{name}'")
        clock = FakeClock(1_000_000.0)
        async with open_store("memory://", clock=clock) as store:
            commands = Commands(store, elements=Elements(mode="bytes"), shared=False)
            conn = commands.connection()
            for step in steps:
                if isinstance(step, float):
                    clock.advance(step)
                    continue
                request, expected = step
                reply = await commands.execute(conn, [word.encode() for word in request])
                if reply != expected and not (expected is None and reply.startswith(b"-")):
                    return error(f"Test {name} FAILED")
    return simple("PASS")
