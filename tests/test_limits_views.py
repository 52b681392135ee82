"""Limits seen from outside: the scheduler's counters (parked, granted, woken), ``Admin.limits``
and ``SyncAdmin.limits``, ``rehydrate limits``, ``rehydrate stats``'s limit rows, a worker's
``/metrics`` and the heartbeat that carries each handler's declared limits. (The dashboard's
page and gauges: tests/test_web.py.) Every async test runs on asyncio and trio."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from anyio import wait_all_tasks_blocked
from prometheus_client.parser import text_string_to_metric_families

import rehydrate
from rehydrate import Admin, Concurrency, LimitStatus, Rate, Scheduler, SyncAdmin
from rehydrate.abc import LimitSpec
from rehydrate.cli._main import run
from rehydrate.stores import MemoryStore, SQLiteStore
from rehydrate.testing import FakeClock
from rehydrate.web._worker_metrics import app

pytestmark = pytest.mark.anyio


def serve_gated(scheduler: Scheduler, gate: anyio.Event, started: list[Any]) -> None:
    @scheduler.handler("jobs", limits=[Concurrency(2), Rate(100, per=60)], lease=30)
    async def handle(element: Any) -> None:
        started.append(element)
        await gate.wait()


async def test_counters_views_and_metrics_of_a_full_limit(clock: FakeClock) -> None:
    """Concurrency(2), five elements: two granted, three parked; the views show the key full
    with three waiting; as the gate opens, releases wake the waiters, and the counters say so."""
    async with MemoryStore(clock=clock) as store:
        scheduler = Scheduler(store, grace=0.1)
        gate = anyio.Event()
        started: list[Any] = []
        serve_gated(scheduler, gate, started)
        async with scheduler:
            for i in range(5):
                await scheduler.defer("jobs", i, delay=0)
            await wait_all_tasks_blocked()
            stats = scheduler.stats("jobs")
            assert (stats.limit_granted, stats.limit_parked, stats.delivered) == (2, 3, 2)
            (status,) = await Admin(store).limits()
            assert status == LimitStatus(
                limit="jobs",
                key="*",
                holders=2,
                holder_ids=status.holder_ids,
                starts=2,
                waiting=3,
                concurrency=2,  # from this worker's heartbeat
                rates=((100, 60.0),),
                saturation=1.0,
            )
            assert len(status.holder_ids) == 2
            assert all(h.startswith("jobs/") for h in status.holder_ids)
            assert await Admin(store).limits("other") == []
            (worker,) = await store.workers()
            entry = worker.data["handlers"]["jobs"]
            assert entry["limits"] == {"concurrency": 2, "rates": [[100, 60.0]], "lease": 30.0}
            # (sent as the scheduler started: the counters come with the next beats)
            assert {"limit_parked", "limit_granted", "limit_woken"} <= set(entry)
            async with httpx.AsyncClient(
                transport=httpx.ASGITransport(app=app(scheduler)), base_url="http://w"
            ) as http:
                text = (await http.get("/metrics")).text
            found = {
                (s.name, s.labels.get("name")): s.value
                for family in text_string_to_metric_families(text)
                for s in family.samples
            }
            assert found["rehydrate_limit_granted_total", "jobs"] == 2
            assert found["rehydrate_limit_parked_total", "jobs"] == 3
            assert ("rehydrate_limit_woken_total", "jobs") in found
            gate.set()
            await wait_all_tasks_blocked()
            assert len(started) == 5
            stats = scheduler.stats("jobs")
            assert (stats.limit_granted, stats.delivered, stats.acked) == (5, 5, 5)
            assert stats.limit_parked == 3  # each parked once: woken at a release, then granted
            assert stats.limit_woken >= 3
            assert scheduler.stats().limit_granted == 5  # the totals add them up
            (status,) = await Admin(store).limits()
            assert (status.holders, status.waiting, status.starts) == (0, 0, 5)  # the window remembers
            scheduler.stop()


async def test_a_handler_without_limits_counts_none(clock: FakeClock) -> None:
    async with MemoryStore(clock=clock) as store:
        scheduler = Scheduler(store, grace=0.1, heartbeat=None)

        @scheduler.handler("plain")
        async def handle(element: Any) -> None: ...

        async with scheduler:
            await scheduler.defer("plain", 1, delay=0)
            await wait_all_tasks_blocked()
            assert scheduler.limited_handlers == []
            stats = scheduler.stats("plain")
            assert (stats.delivered, stats.limit_granted, stats.limit_parked, stats.limit_woken) == (
                1,
                0,
                0,
                0,
            )
            scheduler.stop()


async def fill(path: Path) -> None:
    """A SQLite file with a full key (``jobs``/``acct``, Concurrency(1), one waiter) declared by
    a live worker, and a half-used key of a limit nobody declares."""
    spec = LimitSpec(concurrency=1, rates=((10, 1.0),), lease=60.0)
    async with SQLiteStore(path) as store:
        assert (await store.limit_acquire("jobs", "acct", "h1", spec)).granted
        assert not (await store.limit_acquire("jobs", "acct", "h2", spec, waiter=("jobs", "e2", 0))).granted
        assert (await store.limit_acquire("pdf", "*", "h3", LimitSpec(concurrency=4, lease=60.0))).granted
        declared = {"concurrency": 1, "rates": [[10, 1.0]], "lease": 60.0}
        await store.heartbeat("box:1:aa", {"handlers": {"jobs": {"limits": declared}}}, ttl=60)
        await store.push("jobs", "e2", ttl=60, id="e2")


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_the_command_and_stats_show_each_limit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], anyio_backend: str
) -> None:
    path = tmp_path / "jobs.db"
    await fill(path)
    url = f"sqlite:///{path}"

    def command(*argv: str) -> str:
        capsys.readouterr()
        code = run(["--store", url, *argv])
        out, err = capsys.readouterr()
        assert code == 0, err
        return out

    def rows(*argv: str) -> Any:
        return json.loads(command(*argv, "--format", "json"))

    # (in a thread: each command runs its own event loop, as from a shell)
    listing = await anyio.to_thread.run_sync(rows, "limits")
    assert [(r["limit"], r["key"]) for r in listing] == [("jobs", "acct"), ("pdf", "*")]
    assert listing[0] == {
        "limit": "jobs",
        "key": "acct",
        "holders": 1,
        "waiting": 1,
        "starts": 1,
        "concurrency": 1,
        "rates": [[10, 1.0]],
        "saturation": 1.0,
        "holder_ids": ["h1"],
    }
    assert (listing[1]["concurrency"], listing[1]["saturation"]) == (None, None)
    assert [r["limit"] for r in await anyio.to_thread.run_sync(rows, "limits", "pdf")] == ["pdf"]
    text = await anyio.to_thread.run_sync(command, "limits", "--format", "text")
    header, first, second = text.splitlines()
    assert header.split() == ["LIMIT", "KEY", "HOLDERS", "WAITING", "STARTS", "CAPACITY", "SATURATION"]
    assert first.split() == ["jobs", "acct", "1", "1", "1", "1,", "10/1.0s", "100%"]
    assert second.split()[-2:] == ["-", "-"]

    (jobs,) = await anyio.to_thread.run_sync(rows, "stats")
    assert jobs["limit"] == {
        "keys": 1,
        "holders": 1,
        "waiting": 1,
        "concurrency": 1,
        "rates": [[10, 1.0]],
        "saturation": 1.0,
    }
    text = await anyio.to_thread.run_sync(command, "stats", "--format", "text")
    limits_table = text.split("\n\n", 1)[1].splitlines()
    assert limits_table[0].split()[:4] == ["LIMIT", "KEYS", "HOLDERS", "WAITING"]
    assert limits_table[1].split()[:4] == ["jobs", "1", "1", "1"]
    assert limits_table[2].split()[:4] == ["pdf", "1", "1", "0"]  # a limit with no dehydrator too


def test_sync_admin_lists_the_limits(tmp_path: Path) -> None:
    path = tmp_path / "jobs.db"
    anyio.run(fill, path)
    with SyncAdmin(f"sqlite:///{path}") as admin:
        found = admin.limits()
        assert [(s.limit, s.key, s.holders, s.waiting, s.saturation) for s in found] == [
            ("jobs", "acct", 1, 1, 1.0),
            ("pdf", "*", 1, 0, None),
        ]
        with pytest.raises(rehydrate.InvalidArgumentError):
            admin.limits("")


async def test_admin_limits_refuses_a_store_without_limits(clock: FakeClock) -> None:
    class Plain(MemoryStore):
        capabilities = rehydrate.abc.Capabilities(claim_ahead=True, workers=True)

    async with Plain(clock=clock) as store:
        with pytest.raises(NotImplementedError, match="does not implement limits"):
            await Admin(store).limits()
