"""The examples in ``examples/``: driven with a fake clock on both backends, and run as scripts.

Each example keeps its logic in a ``run`` function that takes a store (and the time scale), so
the tests give it a memory store on a :class:`~rehydrate.testing.FakeClock` and realistic delays
(seconds to minutes) and check what happened; then run each script once, as a user would.
"""

from __future__ import annotations

import importlib
import importlib.util
import itertools
import os
import random
import signal
import subprocess
import sys
import threading
from collections.abc import Awaitable, Callable
from datetime import timedelta
from pathlib import Path
from types import ModuleType
from typing import Any, TypeVar

import anyio
import anyio.lowlevel
import pytest

from rehydrate import Backoff, Retry, Scheduler
from rehydrate.stores import MemoryStore
from rehydrate.testing import FakeClock
from tests.test_cli_worker import entries, finish, start, wait_for

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"

T = TypeVar("T")


def load(name: str) -> ModuleType:
    """Import ``examples/<name>.py`` (``examples`` is not a package)."""
    spec = importlib.util.spec_from_file_location(f"rehydrate_examples.{name}", EXAMPLES / f"{name}.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up here
    spec.loader.exec_module(module)
    return module


flaky_retries = load("flaky_retries")
debounce = load("debounce")
reminders = load("reminders")
claim_check = load("claim_check")


async def in_fake_time(clock: FakeClock, step: float, run: Callable[[], Awaitable[T]]) -> T:
    """Await ``run()`` while time moves ``step`` seconds whenever every task is blocked.

    Like trio's autojump clock: the example sleeps on its store's clock as it would in real time,
    and the test takes no longer than the work itself.
    """

    async def pump() -> None:
        while True:
            await anyio.wait_all_tasks_blocked()
            clock.advance(step)

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(pump)
            result = await run()
            tg.cancel_scope.cancel()
    return result


@pytest.mark.anyio
class TestDrivenWithAFakeClock:
    async def test_flaky_retries(self) -> None:
        """Backoff with jitter between attempts; dead letters inspected, requeued or reported."""
        clock = FakeClock()
        store = MemoryStore(clock=clock)
        services = {
            "flaky": flaky_retries.FakeService(failures=2),
            "outage": flaky_retries.FakeService(failures=4),
            "broken": flaky_retries.FakeService(permanent=True),
        }
        backoff = Backoff(initial=1, multiplier=2, maximum=60, jitter=0.5)
        retry = Retry(attempts=4, backoff=backoff, on=flaky_retries.TransientError)
        step = 0.25
        report = await in_fake_time(
            clock, step, lambda: flaky_retries.run(store, services, retry, random.Random(5))
        )

        assert report.delivered == {"hook-flaky": 3, "hook-outage": 1}
        assert {name: s.calls for name, s in services.items()} == {"flaky": 3, "outage": 5, "broken": 1}
        # Attempt n + 1 comes backoff(n) after attempt n: between half of 2 ** (n - 1) seconds
        # (the jitter) and all of it, give or take one step of the fake clock.
        for id in ("hook-flaky", "hook-outage"):
            times = [t for _, t in report.attempts[id]][:4]  # the outage's first round
            for n, (before, after) in enumerate(itertools.pairwise(times), start=1):
                nominal = 2 ** (n - 1)
                assert 0.5 * nominal <= after - before <= nominal + step
        assert [a for a, _ in report.attempts["hook-outage"]] == [1, 2, 3, 4, 1]

        # Oldest first; which died first depends on the jitter each drew (trio shuffles its tasks).
        dead = sorted((d.id, d.attempts) for d in report.dead_letters)
        assert dead == [("hook-broken", 1), ("hook-outage", 4)]  # a 400 is not retried
        assert report.requeued == ["hook-outage"]
        [reported] = report.reported
        assert reported.id == "hook-broken"
        assert reported.element == {"service": "broken", "body": "order 42 -> broken"}
        assert reported.error == "PermanentError('400 Bad Request')"
        stats = report.stats
        assert (stats.delivered, stats.acked, stats.retried, stats.dead_lettered) == (9, 2, 5, 2)
        assert [d.id for d in await Scheduler(store).dead_letters("webhooks")] == ["hook-broken"]
        assert await store.size("webhooks") == 0

    async def test_debounce(self) -> None:
        """A burst gives one delivery with its last content; max_wait flushes an endless burst."""
        clock = FakeClock()
        store = MemoryStore(clock=clock)
        got = await in_fake_time(clock, 1, lambda: debounce.run(store, unit=1))

        R = debounce.Reindexed
        assert got == [
            R("notes", "notes v2", edits=2, at=13),  # last edit at 3, quiet 10
            R("readme", "readme v5", edits=5, at=14),  # last edit at 4
            R("essay", "essay v7", edits=7, at=25),  # first edit at 0, max_wait 25
            R("essay", "essay v12", edits=5, at=53),  # a new burst from 28: 44 + min(10, 28 + 25 - 44)
        ]
        assert await store.size("reindex") == 0

    async def test_debounce_edit_replaces_the_pending_delivery(self) -> None:
        """edit() re-defers the same id later with the new content, carrying the burst over."""
        clock = FakeClock()
        store = MemoryStore(clock=clock)
        await store.open()
        scheduler = Scheduler(store)  # not running: nothing is delivered
        assert await debounce.edit(scheduler, "doc", "a", quiet=30, max_wait=60) == 30
        clock.advance(20)
        assert await debounce.edit(scheduler, "doc", "b", quiet=30, max_wait=60) == 30
        assert await store.size("reindex") == 1
        assert await store.look("reindex", "doc") == {
            "doc": "doc",
            "content": "b",
            "first_edit": 0.0,
            "edits": 2,
        }
        info = await store.info("reindex", "doc")
        assert info is not None
        assert info.due == 50
        clock.advance(35)
        assert await debounce.edit(scheduler, "doc", "c", quiet=30, max_wait=60) == 5  # max_wait

    async def test_reminders(self) -> None:
        """Reminders at datetimes fire in order across a restart; cancelled ones do not; edits show."""
        clock = FakeClock()
        store = MemoryStore(clock=clock)
        outcome = await in_fake_time(
            clock, 5, lambda: reminders.run(lambda: store, spacing=timedelta(minutes=10))
        )

        assert [(f.user, f.text) for f in outcome.fired] == [
            ("ann", "tea is ready"),
            ("bob", "standup moved to room 4"),
            ("ann", "dentist"),
        ]
        assert [f.at for f in outcome.fired] == sorted(f.at for f in outcome.fired)
        # ``at`` is converted to a delay from the wall clock's now when deferred, so a reminder is
        # due a hair (the real time the test took) before its ten minutes: within one step.
        assert all(0 <= f.lateness <= 5 for f in outcome.fired)
        assert clock() <= 3.5 * 600 + 5
        assert [r["text"] for r in outcome.pending_at_restart] == ["standup moved to room 4", "dentist"]
        assert (outcome.late_change, outcome.late_cancel) == (False, False)
        async with store:  # closed by the example's restart; a memory store keeps its elements
            assert await store.size("reminders") == 0

    async def test_claim_check(self) -> None:
        """Redeemed payloads are pulled; unredeemed ones expire and the janitor's poll collects them."""
        clock = FakeClock()
        store = MemoryStore(clock=clock)
        outcome = await in_fake_time(clock, 0.5, lambda: claim_check.run(store, unit=60, size=4096))

        assert list(outcome.thumbnails) == ["cat.png"]
        assert outcome.collected == ["dog.png", "fox.png"]
        assert outcome.expired_tickets == ["fox.png"]
        assert outcome.ticket_size < 100  # the ticket carries the claim id, not the payload
        assert await store.size("uploads.parked") == 0
        assert await store.size("thumbnails") == 0


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        (
            "flaky_retries",
            [
                "hook-flaky: delivered on attempt 3",
                "hook-broken: attempt 1 failed (400 Bad Request), giving up",
                "requeued ['hook-outage']",
                "hook-outage: delivered on attempt 1",
                "delivered ['hook-flaky', 'hook-outage']; still dead: ['hook-broken']",
            ],
        ),
        # The two below run in real time (20 ms units, 0.3 s spacing): on a loaded machine a unit
        # can slip, and how edits group or when a cancel lands with it. What they must print
        # whatever the timing is checked here; their exact outcomes, in fake time, above.
        (
            "debounce",
            [
                "reindex 'readme' with 'readme v5'",  # the last edit is always delivered
                "reindex 'essay' with 'essay v12'",
                "19 edits, ",
            ],
        ),
        (
            "reminders",
            [
                "-- the service restarts --",
                "REMINDER for ann: dentist",
                " reminders fired, at most ",
            ],
        ),
        (
            "claim_check",
            [
                "worker: thumbnail of cat.png (1048576 bytes",
                "janitor: dog.png expired unclaimed, 1048576 bytes freed",
                "worker: ticket for fox.png came too late",
                "redeemed ['cat.png'], collected ['dog.png', 'fox.png'], expired tickets ['fox.png']",
            ],
        ),
    ],
)
def test_script_runs(name: str, expected: list[str]) -> None:
    """``python examples/<name>.py`` runs to completion, with warnings as errors, and says so."""
    done = subprocess.run(
        [sys.executable, "-W", "error", str(EXAMPLES / f"{name}.py")],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    for line in expected:
        assert line in done.stdout, f"{line!r} not in:\n{done.stdout}"


def test_examples_use_the_public_api_only() -> None:
    for path in EXAMPLES.rglob("*.py"):  # (a store written against the contract too)
        source = path.read_text()
        assert "rehydrate._" not in source, path.name
        assert "from rehydrate.stores._" not in source, path.name


# -- examples/web_app: a web process defers, a `rehydrate worker` process delivers ------------------

WEB_APP = EXAMPLES / "web_app"


def load_web_app(module: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[ModuleType, Path]:
    """Import ``examples/web_app/<module>.py`` afresh on a SQLite store in ``tmp_path`` (its
    ``tasks`` module reads ``$REHYDRATE_STORE`` when imported); and where its emails are logged."""
    sent = tmp_path / "sent.log"
    monkeypatch.setenv("REHYDRATE_STORE", f"sqlite:///{tmp_path / 'tasks.db'}")
    monkeypatch.setenv("SENT", str(sent))
    monkeypatch.syspath_prepend(str(WEB_APP))
    for name in ("tasks", module):
        monkeypatch.delitem(sys.modules, name, raising=False)
    return importlib.import_module(module), sent


def start_worker(tmp_path: Path) -> subprocess.Popen[str]:
    """``rehydrate worker tasks:scheduler`` in ``examples/web_app``, as its docstring says."""
    return start(
        WEB_APP,
        "tasks:scheduler",
        env={"REHYDRATE_STORE": os.environ["REHYDRATE_STORE"], "SENT": os.environ["SENT"]},
    )


def sent_to(log: Path) -> list[str]:
    return sorted(entry[3] for entry in entries(log))


def stop_worker(worker: subprocess.Popen[str]) -> None:
    worker.send_signal(signal.SIGTERM)
    code, logs = finish(worker)
    assert code == 0, logs


@pytest.mark.anyio
async def test_fastapi_app_defers_and_a_worker_delivers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lifespan runs the handlers' module with ``producer()``: requests defer into SQLite,
    nothing is delivered in the web process nor is it listed as a worker; ``rehydrate worker``
    delivers each signup once, and is the only worker listed."""
    import httpx

    web, sent = load_web_app("fastapi_app", tmp_path, monkeypatch)
    store = web.scheduler.store
    async with (
        web.lifespan(web.app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=web.app), base_url="http://web") as client,
    ):
        emails = [f"user{i}@example.com" for i in range(5)]
        replies: list[Any] = []

        async def post(email: str) -> None:
            reply = await client.post("/signup", json={"email": email})
            replies.append((reply.status_code, reply.json()["status"]))

        async with anyio.create_task_group() as tg:  # concurrent requests, as a server sees them
            for email in emails:
                tg.start_soon(post, email)
        assert replies == [(202, "queued")] * 5
        again = await client.post("/signup", json={"email": emails[0]})
        assert (again.status_code, again.json()) == (202, {"status": "already queued"})
        assert sorted(await store.ids("welcome_emails")) == [f"welcome-{e}" for e in emails]
        await anyio.lowlevel.checkpoint()
        assert await store.workers() == []  # the web process is no worker
        assert not sent.exists()  # and runs no handler

        worker = await anyio.to_thread.run_sync(start_worker, tmp_path)
        try:
            await anyio.to_thread.run_sync(
                lambda: wait_for(lambda: len(entries(sent)) >= 5, worker, "5 welcome emails")
            )
            assert [w.data["pid"] for w in await store.workers()] == [worker.pid]
        finally:
            await anyio.to_thread.run_sync(stop_worker, worker)
    assert sent_to(sent) == sorted(emails)
    assert {entry[2] for entry in entries(sent)} == {str(worker.pid)}


def test_flask_app_defers_from_request_threads_and_a_worker_delivers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``create_app()`` starts a producer ``SyncScheduler`` once; views on many threads defer
    through it at once; ``rehydrate worker`` delivers; the web process is no worker."""
    web, sent = load_web_app("flask_app", tmp_path, monkeypatch)
    app = web.create_app()
    tasks = app.extensions["tasks"]
    try:
        emails = [f"user{i}@example.com" for i in range(8)]
        replies: list[Any] = []

        def post(email: str) -> None:
            reply = app.test_client().post("/signup", json={"email": email})
            replies.append((reply.status_code, reply.get_json()["status"]))

        threads = [threading.Thread(target=post, args=(email,)) for email in emails]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert replies == [(202, "queued")] * 8
        post(emails[0])
        assert replies[-1] == (202, "already queued")
        store = tasks.scheduler.store
        assert len(tasks.portal.call(store.ids, "welcome_emails")) == 8
        assert tasks.portal.call(store.workers) == []

        worker = start_worker(tmp_path)
        try:
            wait_for(lambda: len(entries(sent)) >= 8, worker, "8 welcome emails")
            assert [w.data["pid"] for w in tasks.portal.call(store.workers)] == [worker.pid]
        finally:
            stop_worker(worker)
    finally:
        tasks.close()
    assert sent_to(sent) == sorted(emails)


@pytest.mark.parametrize("name", ["fastapi_app", "flask_app"])
def test_the_web_apps_page_shows_the_examples_as_tested(name: str) -> None:
    """docs/web-apps.md shows each app as it is in examples/web_app (below its docstring), so
    the code a reader copies is the code the tests above run."""
    source = (WEB_APP / f"{name}.py").read_text()
    body = source.split('"""\n', 1)[1].strip()
    page = (EXAMPLES.parent / "docs" / "web-apps.md").read_text()
    assert f"```python\n# {name}.py\n{body}\n```" in page
