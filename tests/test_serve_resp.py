"""The RESP layer of ``rehydrate serve``: requests cut anywhere, limits, inline quoting, replies."""

from __future__ import annotations

import anyio
import pytest

from rehydrate._serve import _resp
from rehydrate._serve._resp import Parser, ProtocolError
from rehydrate._serve._selftest import SCENARIOS, run_self_test

PIPELINE = (
    b"*1\r\n$4\r\nPING\r\n*3\r\n$9\r\nREDE.LOOK\r\n$1\r\nd\r\n$3\r\n101\r\n*2\r\n$4\r\nECHO\r\n$0\r\n\r\n"
)


def test_pipelined_requests_in_one_read() -> None:
    parser = Parser()
    parser.feed(PIPELINE)
    assert parser.requests() == [[b"PING"], [b"REDE.LOOK", b"d", b"101"], [b"ECHO", b""]]
    assert parser.buffered == 0


def test_a_request_cut_at_every_byte_waits_for_the_rest() -> None:
    """Fed one byte at a time, the same requests come out, each once, when complete."""
    parser = Parser()
    found = []
    for i in range(len(PIPELINE)):
        parser.feed(PIPELINE[i : i + 1])
        found += parser.requests()
    assert found == [[b"PING"], [b"REDE.LOOK", b"d", b"101"], [b"ECHO", b""]]


def test_binary_safe_bulks() -> None:
    parser = Parser()
    parser.feed(b"*2\r\n$4\r\nECHO\r\n$5\r\na\r\n\x00\xff\r\n")
    assert parser.requests() == [[b"ECHO", b"a\r\n\x00\xff"]]


@pytest.mark.parametrize(
    ("data", "text"),
    [
        (b"*x\r\n", "Protocol error: invalid multibulk length"),
        (b"*2000000\r\n", "Protocol error: invalid multibulk length"),
        (b"*1\r\n+PING\r\n", "Protocol error: expected '$', got '+'"),
        (b"*1\r\n$-5\r\n", "Protocol error: invalid bulk length"),
        (b"*1\r\n$abc\r\n", "Protocol error: invalid bulk length"),
        (b"*1\r\n$1025\r\n", "Protocol error: invalid bulk length"),  # over max_bulk
        (b'PING "unbalanced\r\n', "Protocol error: unbalanced quotes in request"),
        (b"x" * (70 * 1024), "Protocol error: too big inline request"),
    ],
)
def test_malformed_requests_get_redis_texts(data: bytes, text: str) -> None:
    parser = Parser(max_bulk=1024)
    parser.feed(data)
    with pytest.raises(ProtocolError) as caught:
        parser.requests()
    assert str(caught.value) == text


def test_requests_before_a_malformed_one_are_run_then_it_raises() -> None:
    parser = Parser()
    parser.feed(b"*1\r\n$4\r\nPING\r\n*1\r\n+oops\r\n")
    assert parser.requests() == [[b"PING"]]
    with pytest.raises(ProtocolError):
        parser.requests()


def test_a_request_never_completed_is_bounded() -> None:
    """Many arguments within max_bulk each, but no end: refused once past the request bound."""
    parser = Parser(max_bulk=1024)
    parser.feed(b"*100000\r\n")
    for _ in range(4):  # 4 kB: within the bound
        parser.feed(b"$1000\r\n" + b"x" * 1000 + b"\r\n")
        assert parser.requests() == []
    parser.feed((b"$1000\r\n" + b"x" * 1000 + b"\r\n") * 70)  # 70 kB, and no end yet
    with pytest.raises(ProtocolError, match="request too large"):
        parser.requests()


def test_inline_requests_split_as_redis_cli_quotes() -> None:
    parser = Parser()
    parser.feed(b'REDE.PUSH d 3000 "Dehydrate this" 101\r\nPING\nECHO \'it\\\'s\' "a\\x41\\n"\r\n\r\n')
    assert parser.requests() == [
        [b"REDE.PUSH", b"d", b"3000", b"Dehydrate this", b"101"],
        [b"PING"],
        [b"ECHO", b"it's", b"aA\n"],
    ]


def test_replies_resp2_and_resp3() -> None:
    assert _resp.bulk(None, 2) == b"$-1\r\n"
    assert _resp.bulk(None, 3) == b"_\r\n"
    assert _resp.array([b"a", None], 2) == b"*2\r\n$1\r\na\r\n$-1\r\n"
    assert _resp.array([b"a", None], 3) == b"*2\r\n$1\r\na\r\n_\r\n"
    assert _resp.integer(-1) == b":-1\r\n"
    assert _resp.error("ERR a\r\nb") == b"-ERR a  b\r\n"
    assert _resp.map_reply({b"k": b":1\r\n"}, 2) == b"*2\r\n$1\r\nk\r\n:1\r\n"
    assert _resp.map_reply({b"k": b":1\r\n"}, 3) == b"%1\r\n$1\r\nk\r\n:1\r\n"


@pytest.mark.anyio
async def test_self_test_passes_and_names_a_failing_scenario() -> None:
    """REDE.TEST runs every scenario at once on a fake clock; a scenario whose expectation is
    not met is named in ReDe's failure text."""
    with anyio.fail_after(5):
        assert await run_self_test([]) == b"+PASS\r\n"
    assert await run_self_test([b"TestXAck", b"TestTimeToNext"]) == b"+PASS\r\n"
    assert await run_self_test([b"NoSuchTest"]) == b"-ERR unknown test 'NoSuchTest'\r\n"
    steps = SCENARIOS["TestLook"]
    broken = (steps[1][0], b"$3\r\nbad\r\n")  # type: ignore[index]
    SCENARIOS["TestLook"] = [steps[0], broken]
    try:
        assert await run_self_test([]) == b"-Test TestLook FAILED\r\n"
    finally:
        SCENARIOS["TestLook"] = steps
