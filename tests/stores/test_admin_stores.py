"""``rehydrate.Admin`` on every store of the contract suite, on asyncio and trio.

Each operation with each of its outcomes, the refusals included (pause a paused schedule, run
now what a worker holds, requeue an unknown dead letter): the answers a tool branches on.
"""

from __future__ import annotations

from typing import Any

import pytest

from rehydrate import (
    Admin,
    DehydratorInfo,
    DuplicateIdError,
    Every,
    InvalidArgumentError,
    InvalidTypeError,
    Scheduler,
)
from rehydrate._occurrences import rearm
from rehydrate.abc import Store

from .harnesses import Harness

pytestmark = pytest.mark.anyio


def _record(element: Any, error: str = "ValueError('boom')", attempts: int = 3) -> dict[str, Any]:
    """A dead letter as a scheduler's worker files it."""
    return {"element": element, "error": error, "attempts": attempts, "failed_at": 1_700_000_000.5}


async def _schedule(store: Store, name: str, id: str, interval: float = 3600) -> None:
    await Scheduler(store, heartbeat=None).schedule(name, Every(interval), id=id, element={"id": id})


async def test_dehydrators_count_elements_and_dead_letters(harness: Harness) -> None:
    store, admin = harness.store, Admin(harness.store)
    assert await admin.names() == []
    await store.push("jobs", "a", ttl=0, id="a")
    await store.push("jobs", "b", ttl=60, id="b")
    await store.push("mail.dead", _record("m"), ttl=3600, id="m")  # only dead letters: still listed
    await store.claim("jobs", lease=30)
    assert await admin.names() == ["jobs", "mail"]
    jobs, mail = await admin.dehydrators()
    assert jobs == DehydratorInfo(name="jobs", size=2, due=0, claimed=1, dead=0, ttn=jobs.ttn)
    assert jobs.ttn is not None
    assert 0 < jobs.ttn <= 60
    assert mail == DehydratorInfo(name="mail", size=0, due=0, claimed=0, dead=1, ttn=None)
    assert await admin.dehydrator("nothing") == DehydratorInfo(
        name="nothing", size=0, due=0, claimed=0, dead=0, ttn=None
    )


async def test_elements_come_in_due_order_a_page_at_a_time(harness: Harness) -> None:
    store, admin = harness.store, Admin(harness.store)
    for i in range(5):
        await store.push("jobs", {"n": i}, ttl=10 * (5 - i), id=f"e{i}")  # e4 is due first
    page = await admin.elements("jobs", offset=1, limit=2)
    assert [(info.id, element) for info, element in page] == [("e3", {"n": 3}), ("e2", {"n": 2})]
    assert [info.id for info, _ in await admin.elements("jobs", offset=4, limit=10)] == ["e0"]
    assert await admin.elements("jobs", offset=5) == []
    with pytest.raises(InvalidArgumentError, match="offset"):
        await admin.elements("jobs", offset=-1)
    with pytest.raises(InvalidArgumentError, match="limit"):
        await admin.elements("jobs", limit=None)  # type: ignore[arg-type]


async def test_remove_cancels_work_and_unschedules_schedules(harness: Harness) -> None:
    store, admin = harness.store, Admin(harness.store)
    await store.push("jobs", None, ttl=60, id="w")  # an element that is None is still there
    assert await admin.remove("jobs", "w") == "one-shot"
    assert await admin.remove("jobs", "w") == "unknown"
    await _schedule(store, "jobs", "s")  # due now
    (running,) = await store.claim("jobs", lease=30)
    # A run in flight keeps its claim: the schedule goes when the run ends.
    assert await admin.remove("jobs", "s") == "schedule"
    assert await admin.remove("jobs", "s") == "ending"
    assert await admin.find_schedule("jobs", "s") is None
    following = {**running.element, "next": running.element["next"] + 3_600_000_000}
    assert await rearm(
        store, "jobs", [("s", running.token, running.revision, running.element, following, 3600)]
    ) == [True]
    assert await store.size("jobs") == 0
    assert await admin.remove("jobs", "s") == "unknown"


async def test_pause_and_resume_say_what_they_did(harness: Harness) -> None:
    store, admin = harness.store, Admin(harness.store)
    await _schedule(store, "jobs", "s")
    await store.push("jobs", "work", ttl=60, id="w")
    assert await admin.pause("jobs", "s") == "paused"
    assert await admin.pause("jobs", "s") == "unchanged"
    info = await admin.find_schedule("jobs", "s")
    assert info is not None
    assert info.paused
    assert info.next_run is None
    assert await admin.run_now("jobs", "s") == "paused"
    assert await admin.resume("jobs", "s") == "resumed"
    assert await admin.resume("jobs", "s") == "unchanged"
    info = await admin.find_schedule("jobs", "s")
    assert info is not None
    assert not info.paused
    assert info.next_run is not None
    for verb in (admin.pause, admin.resume):
        assert await verb("jobs", "w") == "one-shot"
        assert await verb("jobs", "nope") == "unknown"
    assert [i.id for i in await admin.schedules("jobs")] == ["s"]
    assert await admin.unschedule("jobs", "w") is False  # one-shot work is left alone
    assert await admin.unschedule("jobs", "s") is True
    assert await admin.unschedule("jobs", "s") is False
    assert await store.look("jobs", "w") == "work"


async def test_schedule_files_and_changes_a_schedule_without_a_scheduler(harness: Harness) -> None:
    """``Admin.schedule`` is the scheduler's upsert: filed once, the same trigger keeps its next
    run (only the element changes), another trigger is planned anew, and one-shot work under the
    id is refused."""
    store, admin = harness.store, Admin(harness.store)
    await admin.schedule("jobs", Every(3600), id="s", element={"v": 1})
    first = await admin.find_schedule("jobs", "s")
    assert first is not None
    assert first.trigger == Every(3600)
    assert first.next_run is not None
    assert (await store.look("jobs", "s"))["element"] == {"v": 1}
    await admin.schedule("jobs", Every(3600), id="s", element={"v": 2})
    again = await admin.find_schedule("jobs", "s")
    assert again is not None
    assert again.next_run == first.next_run
    assert (await store.look("jobs", "s"))["element"] == {"v": 2}
    await admin.schedule("jobs", Every(60), id="s", element={"v": 2})
    changed = await admin.find_schedule("jobs", "s")
    assert changed is not None
    assert changed.trigger == Every(60)
    assert [i.id for i in await admin.schedules("jobs")] == ["s"]
    await store.push("jobs", "work", ttl=60, id="w")
    with pytest.raises(DuplicateIdError):
        await admin.schedule("jobs", Every(60), id="w")
    assert await store.look("jobs", "w") == "work"
    with pytest.raises(InvalidArgumentError, match="grace"):
        await admin.schedule("jobs", Every(60), id="t", misfire="all", grace=5)
    with pytest.raises(InvalidArgumentError):
        await admin.schedule("", Every(60), id="t")
    assert await store.look("jobs", "t") is None


async def test_a_paused_schedule_in_flight_is_paused_in_the_run(harness: Harness) -> None:
    """Paused while an occurrence runs: written into the element its worker holds, so the next
    occurrence is filed paused when the run ends, and never beside it."""
    store, admin = harness.store, Admin(harness.store)
    await _schedule(store, "jobs", "s")
    (_running,) = await store.claim("jobs", lease=30)
    assert await admin.pause("jobs", "s") == "paused"
    assert await admin.pause("jobs", "s") == "unchanged"
    held = await store.info("jobs", "s")
    assert held is not None
    assert held.claimed
    assert (await store.look("jobs", "s"))["paused"] is True


async def test_run_now_outcomes(harness: Harness) -> None:
    store, admin = harness.store, Admin(harness.store)
    await store.push("jobs", "later", ttl=3600, id="w")
    assert await admin.run_now("jobs", "w") == "one-shot"
    assert await store.ttn("jobs") == 0
    (claim,) = await store.claim("jobs", lease=30)
    assert claim.id == "w"
    assert await admin.run_now("jobs", "w") == "held"
    assert await admin.run_now("jobs", "nope") == "unknown"
    await _schedule(store, "digest", "d")
    await store.claim("digest", lease=30)  # its first run, due now, is running
    assert await admin.run_now("digest", "d") == "held"


async def test_dead_letters_requeue_and_delete(harness: Harness) -> None:
    store, admin = harness.store, Admin(harness.store)
    for i in range(3):
        await store.push("jobs.dead", _record({"n": i}), ttl=3600 + i, id=f"d{i}")
    await store.push("jobs.dead", "pushed by hand", ttl=3700, id="hand")
    letters = await admin.dead_letters("jobs")
    assert [(d.id, d.element, d.attempts) for d in letters] == [
        ("d0", {"n": 0}, 3),
        ("d1", {"n": 1}, 3),
        ("d2", {"n": 2}, 3),
    ]
    assert letters[0].error == "ValueError('boom')"
    assert letters[0].failed_at == 1_700_000_000.5
    assert [d.id for d in await admin.dead_letters("jobs", offset=1, limit=1)] == ["d1"]
    # Unknown ids, and an id live again in the dehydrator, stay where they are.
    await store.push("jobs", "live", ttl=60, id="d1")
    assert await admin.requeue("jobs", ["nope", "d1", "hand", "d0"], delay=5) == ["d0"]
    info = await store.info("jobs", "d0")
    assert info is not None
    assert info.due - store.clock() == pytest.approx(5, abs=1)
    assert await store.look("jobs", "d0") == {"n": 0}
    assert [d.id for d in await admin.dead_letters("jobs")] == ["d1", "d2"]
    assert await admin.delete_dead_letter("jobs", "d2") is True
    assert await admin.delete_dead_letter("jobs", "d2") is False
    assert await admin.requeue("jobs") == []  # d1 is live again; "hand" is no record
    assert await store.size("jobs.dead") == 2


async def test_bad_arguments_are_refused(harness: Harness) -> None:
    admin = Admin(harness.store)
    with pytest.raises(InvalidArgumentError):
        await admin.pause("", "s")
    with pytest.raises(InvalidArgumentError, match="limit"):
        await admin.schedules("jobs", limit=0)
    with pytest.raises(InvalidTypeError, match="Store"):
        Admin("memory://")  # type: ignore[arg-type]
