"""``memory://?serializer=json``: a test on the memory store fails where production's store would.

Without a serializer the memory store hands a handler the very object deferred; every durable
store writes bytes and reads them back, so a tuple comes back a list and a datetime is refused.
With one, the memory store does the same, through the scheduler as through the store's verbs (the
contract suite runs on it too: ``tests/stores/harness_memory_json.py``). Every async test runs on
asyncio and trio.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio import wait_all_tasks_blocked

from rehydrate import Every, InvalidTypeError, Retry, Scheduler, open_store
from rehydrate.abc import Serializer, Store
from rehydrate.serializers import JSONSerializer, PickleSerializer
from rehydrate.stores import MemoryStore
from rehydrate.testing import FakeClock

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["memory://?serializer=json", "sqlite"])
async def store(request: pytest.FixtureRequest, clock: FakeClock, tmp_path: Path) -> AsyncIterator[Store]:
    """The memory store with JSON, and SQLite (JSON by default) beside it: the same answers."""
    url = request.param if request.param != "sqlite" else f"sqlite:///{tmp_path / 'jobs.db'}"
    async with open_store(url, clock=clock) as store:
        yield store


async def until(done: Callable[[], bool]) -> None:
    """Until ``done()``: SQLite's work is done in a thread, which ``wait_all_tasks_blocked`` does
    not wait for (short real sleeps, bounded by real time)."""
    with anyio.move_on_after(10):
        while not done():
            await wait_all_tasks_blocked()
            await anyio.sleep(0.005)
    assert done()


async def test_a_handler_gets_what_the_store_reads_back(store: Store, clock: FakeClock) -> None:
    """A tuple comes back a list, an int key a str (JSON's object keys), from a defer, a recurring
    schedule and a dead letter alike, on the memory store as on SQLite."""
    scheduler = Scheduler(store)
    got: list[Any] = []
    ticks: list[Any] = []

    @scheduler.handler("jobs")
    async def job(element: Any) -> None:
        got.append(element)

    @scheduler.handler("ticks")
    async def tick(element: Any) -> None:
        ticks.append(element)

    @scheduler.handler("fails", retry=Retry(attempts=1))
    async def fails(element: Any) -> None:
        raise ValueError("boom")

    async with scheduler:
        await scheduler.defer("jobs", ("a", 1), delay=1, id="t")
        await scheduler.defer("jobs", {1: "a"}, delay=2, id="k")
        await scheduler.schedule("ticks", Every(60), id="s", element={"tags": ("x", "y")})
        await scheduler.defer("fails", ("dead", 1), id="d")
        await until(lambda: len(ticks) == 1)  # (a schedule's first occurrence is at once)
        assert ticks == [{"tags": ["x", "y"]}]
        clock.advance(2)
        await until(lambda: len(got) == 2)
        assert got == [["a", 1], {"1": "a"}]
        await until(lambda: scheduler.stats().dead_lettered == 1)
        (letter,) = await scheduler.dead_letters("fails")
        assert letter.element == ["dead", 1]


@pytest.mark.parametrize("element", [datetime(2026, 1, 2, tzinfo=UTC), {"a", "b"}, {"at": {1, 2}}])
async def test_what_sqlite_refuses_is_refused_at_the_defer_with_its_error(
    element: Any, clock: FakeClock, tmp_path: Path
) -> None:
    """The same error class and message as SQLite's, raised by ``defer`` itself, nothing filed."""
    raised: list[tuple[type[BaseException], str]] = []
    for url in ("memory://?serializer=json", f"sqlite:///{tmp_path / 'jobs.db'}"):
        async with Scheduler(open_store(url, clock=clock)) as scheduler:
            with pytest.raises(InvalidTypeError) as error:
                await scheduler.defer("jobs", element, delay=1, id="x")
            raised.append((type(error.value), str(error.value)))
            with pytest.raises(InvalidTypeError):
                await scheduler.schedule("jobs", Every(60), id="s", element=element)
            assert await scheduler.store.size("jobs") == 0
    assert raised[0] == raised[1]
    assert "not JSON-serializable" in raised[0][1]


async def test_without_a_serializer_the_memory_store_keeps_the_object(clock: FakeClock) -> None:
    """The default is unchanged: the object itself, whatever it is (what the docs warn about)."""
    element = {"when": datetime(2026, 1, 2, tzinfo=UTC), "t": (1, 2)}
    async with MemoryStore(clock=clock) as store:
        assert store.serializer is None
        await store.push("jobs", element, ttl=0, id="x")
        assert await store.look("jobs", "x") is element


class _Upper:
    """A serializer of one's own (the protocol: ``name``, ``dumps``, ``loads``)."""

    name = "upper"

    def dumps(self, element: Any) -> bytes:
        if not isinstance(element, str):
            raise TypeError("only text")
        return element.upper().encode()

    def loads(self, data: bytes) -> Any:
        return data.decode()


async def test_a_serializer_by_name_or_object(clock: FakeClock) -> None:
    cases: list[tuple[str | Serializer, Any]] = [
        ("json", ["a", 1]),
        (JSONSerializer(), ["a", 1]),
        ("pickle", ("a", 1)),
        (PickleSerializer(), ("a", 1)),
    ]
    for given, read in cases:
        async with MemoryStore(clock=clock, serializer=given) as store:
            assert store.serializer is not None
            assert store.serializer.name == getattr(given, "name", given)
            await store.push("jobs", ("a", 1), ttl=0, id="x")
            assert await store.pull("jobs", "x") == read
    async with MemoryStore(clock=clock, serializer=_Upper()) as store:
        await store.push("jobs", "shout", ttl=0, id="x")
        assert await store.look("jobs", "x") == "SHOUT"
        with pytest.raises(InvalidTypeError, match="element cannot be serialized by 'upper': only text"):
            await store.push("jobs", 1, ttl=0, id="y")
        assert await store.ids("jobs") == ["x"]
    assert repr(MemoryStore(clock=clock, serializer="json")).endswith("serializer=JSONSerializer())")
