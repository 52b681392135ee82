"""The dashboard's ASGI app in this process (httpx), against the memory and SQLite stores.

Every action, the token, the CSRF refusals, bad ids, paging, live samples (the event stream, read
through the ASGI interface itself) and ``/metrics`` parsed with prometheus_client's parser.
"""

from __future__ import annotations

import contextlib
import html
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

import anyio
import httpx
import pytest
import structlog
from prometheus_client.parser import text_string_to_metric_families
from starlette.applications import Starlette
from starlette.routing import Mount

from rehydrate import Cron, Every, Retry, Scheduler, open_store
from rehydrate._clock import wall
from rehydrate._occurrences import rearm
from rehydrate.abc import Store
from rehydrate.cli._main import run
from rehydrate.stores import MemoryStore, PostgresStore, RedisStore, SQLiteStore
from rehydrate.testing import FakeClock
from rehydrate.web import app
from rehydrate.web._history import History, Reading
from rehydrate.web._sampling import Sampler
from rehydrate.web._security import Guard, is_loopback_host, origin_refusal
from tests.pg_server import drop_tables, skip_without_server
from tests.pg_server import shared_server_url as pg_url
from tests.redis_server import drop_prefix
from tests.redis_server import shared_server_url as redis_url

pytestmark = pytest.mark.anyio

LOCAL = "http://127.0.0.1:8000"
TOKEN = "s3cret-token"


@pytest.fixture(params=["memory", "sqlite"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    clock = FakeClock(1000.0)
    opened: Store = (
        MemoryStore(clock=clock) if request.param == "memory" else SQLiteStore(tmp_path / "s.db", clock=clock)
    )
    async with opened:
        yield opened


def client(asgi: Any, base: str = LOCAL, **kwargs: Any) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=asgi), base_url=base, **kwargs)


async def make_dead(store: Store, name: str, ids: list[str]) -> None:
    """Dead letters made by a real scheduler whose handler always fails (one attempt each)."""
    scheduler = Scheduler(store)

    @scheduler.handler(name, retry=Retry(attempts=1))
    async def fail(element: object) -> None:
        raise ValueError(f"cannot handle {element!r}")

    async with scheduler:
        for id in ids:
            await scheduler.defer(name, {"n": id}, id=id)
        # The dead letter lands after the handler has raised, and nothing signals it: look again.
        with anyio.fail_after(10):
            while await store.size(name + ".dead") < len(ids):  # noqa: ASYNC110
                await anyio.sleep(0.01)


async def csrf_of(http: httpx.AsyncClient, page: str) -> str:
    response = await http.get(page)
    assert response.status_code == 200, response.text
    found = re.search(r'name="csrf" value="([^"]+)"', response.text)
    assert found, "the page has no action form"
    return found.group(1)


async def post(http: httpx.AsyncClient, action: str, csrf: str | None, **fields: str) -> httpx.Response:
    data = dict(fields) if csrf is None else {"csrf": csrf, **fields}
    return await http.post(action, data=data, headers={"Accept": "application/json"})


# -- pages -------------------------------------------------------------------------------------


async def test_overview_matches_the_stores_summary(store: Store) -> None:
    for i in range(3):
        await store.push("mail", {"i": i}, ttl=i * 10)
    await store.push("sms", "x", ttl=5)
    await make_dead(store, "sms", ["broken"])
    async with client(app(store)) as http:
        page = await http.get("/")
        assert page.status_code == 200
        assert 'href="elements?name=mail"' in page.text
        assert 'href="dead?name=sms"' in page.text
        assert "Content-Security-Policy" in page.headers
        assert "nonce-" in page.headers["Content-Security-Policy"]
        data = (await http.get("/", headers={"Accept": "application/json"})).json()
    assert sorted(data) == ["mail", "sms"]  # sms.dead folds into sms
    for name in data:
        summary = await store.summary(name)
        assert (data[name]["size"], data[name]["due"], data[name]["claimed"]) == (
            summary.size,
            summary.due,
            summary.claimed,
        )
    assert data["sms"]["dead"] == 1
    assert data["mail"]["dead"] == 0
    assert data["mail"]["next_due_in"] == 0.0  # one is due now, for no time yet


ISO_MS = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}\+00:00")


async def test_the_json_says_next_due_in_and_next_due_at_as_the_command_does(store: Store) -> None:
    """The overview's JSON and the live samples name times as ``rehydrate stats --format json``
    does: ``next_due_in`` (seconds) and ``next_due_at`` (ISO 8601 UTC, to the millisecond), ``at``
    in ISO 8601; there is no ``next_due`` any more. (``/metrics`` keeps its Prometheus names.)"""
    from rehydrate.cli._common import utc_text

    await store.push("mail", "a", ttl=30, id="a")
    await store.push("sms", "b", ttl=0, id="b")
    cast(FakeClock, store.clock).advance(4)  # b is 4 s overdue
    board = app(store, sample_interval=0.05)
    async with client(board) as http:
        data = (await http.get("/", headers={"Accept": "application/json"})).json()
        page = (await http.get("/")).text
        metrics = (await http.get("/metrics")).text
        listing = (await http.get("/elements?name=mail", headers={"Accept": "application/json"})).json()
    mail, sms = data["mail"], data["sms"]
    assert "next_due" not in mail
    assert mail["next_due_in"] == pytest.approx(26)
    assert sms["next_due_in"] == pytest.approx(-4)  # overdue: negative, as in the command
    for point in (mail, sms):
        assert ISO_MS.fullmatch(point["at"]), point["at"]
        assert ISO_MS.fullmatch(point["next_due_at"]), point["next_due_at"]
        at = datetime.fromisoformat(point["at"]).timestamp()
        assert point["next_due_at"] == utc_text(at + point["next_due_in"], "milliseconds")
    assert 'data-k="next_due_in"' in page
    assert 'data-k="next_due"' not in page
    assert "next_due: fmtSeconds" not in page
    assert "next_due_in: fmtSeconds" in page
    assert "rehydrate_next_due_seconds" in metrics  # Prometheus names are their own contract
    (element,) = listing["elements"]
    assert element["due_in"] == pytest.approx(26)
    assert ISO_MS.fullmatch(element["due_at"])
    (_, first), (_, sample) = await read_events(board, "/events", 2)
    assert ISO_MS.fullmatch(first["at"])
    assert ISO_MS.fullmatch(sample["at"])
    assert first["dehydrators"]["mail"][0]["next_due_in"] == pytest.approx(26)
    assert "next_due" not in sample["dehydrators"]["sms"]
    assert sample["dehydrators"]["sms"]["next_due_in"] == pytest.approx(-4)


async def test_workers_alive_and_expired(store: Store) -> None:
    """The workers section: what each worker's heartbeat said, alive or expired, escaped; the same
    rows as JSON at /workers and in every server-sent sample."""
    jobs = {"concurrency": 8, "in_flight": 2, "lateness_p50": 0.004, "lateness_p99": 0.25}
    data = {"host": "<b>box</b>", "pid": 42, "handlers": {"jobs": jobs}, "totals": {"in_flight": 2}}
    await store.heartbeat("w-alive", data, ttl=60)
    await store.heartbeat("w-dead", {"host": "gone", "pid": 7}, ttl=1)
    cast(FakeClock, store.clock).advance(2)  # w-dead's heartbeat expired a second ago
    board = app(store, sample_interval=0.05)
    async with client(board) as http:
        page = (await http.get("/")).text
        listed = (await http.get("/workers")).json()
    assert "<h1>Workers</h1>" in page
    assert '<tr data-worker="w-alive" class="alive">' in page
    assert '<tr data-worker="w-dead" class="expired">' in page
    assert "&lt;b&gt;box&lt;/b&gt;" in page
    assert "<b>box</b>" not in page
    assert "jobs 2/8 · 4ms / 250ms" in page
    assert 'id="no-workers" class="muted" hidden' in page
    assert "needs worker heartbeats" not in page  # the footer no longer says they are missing
    assert [(w["id"], w["alive"], w["pid"]) for w in listed] == [("w-alive", True, 42), ("w-dead", False, 7)]
    assert listed[0]["handlers"] == {"jobs": jobs}
    (_, first), (_, sample) = await read_events(board, "/events", 2)
    assert (
        [w["id"] for w in first["workers"]] == [w["id"] for w in sample["workers"]] == ["w-alive", "w-dead"]
    )
    await store.deregister_worker("w-alive")
    await store.deregister_worker("w-dead")
    async with client(board) as http:
        page = (await http.get("/")).text
    assert 'id="no-workers" class="muted">' in page  # shown: nobody sends heartbeats


async def test_elements_in_due_order_paged(store: Store) -> None:
    ids = [await store.push("jobs", {"i": i}, ttl=100 - i, id=f"e{i}") for i in range(7)]
    in_order = list(reversed(ids))
    async with client(app(store)) as http:
        first = (await http.get("/elements?name=jobs&limit=3", headers={"Accept": "application/json"})).json()
        second = (
            await http.get("/elements?name=jobs&offset=3&limit=3", headers={"Accept": "application/json"})
        ).json()
        last = (
            await http.get("/elements?name=jobs&offset=6&limit=3", headers={"Accept": "application/json"})
        ).json()
        text = (await http.get("/elements?name=jobs&offset=3&limit=3")).text
    assert [e["id"] for e in first["elements"]] == in_order[:3]
    assert [e["id"] for e in second["elements"]] == in_order[3:6]
    assert [e["id"] for e in last["elements"]] == in_order[6:]
    assert first["total"] == 7
    assert "4-6 of 7" in text
    assert '<form method="get" action="element"><input type="hidden" name="name" value="jobs">' in text
    assert 'href="elements?name=jobs&amp;offset=0&amp;limit=3"' in text  # earlier
    assert 'href="elements?name=jobs&amp;offset=6&amp;limit=3"' in text  # later


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("", "missing name"),
        ("name=jobs&offset=-1", "offset must be between 0"),
        ("name=jobs&limit=0", "limit must be between 1 and 500"),
        ("name=jobs&limit=many", "limit must be a whole number, got 'many'"),
    ],
)
async def test_bad_paging_is_a_400_that_says_why(store: Store, query: str, message: str) -> None:
    async with client(app(store)) as http:
        response = await http.get(f"/elements?{query}")
    assert response.status_code == 400
    assert message in html.unescape(response.text)


async def test_one_element_payload_and_info_escaped(store: Store) -> None:
    await store.push("jobs", {"html": "<script>alert(1)</script>"}, ttl=30, id="a<b>")
    async with client(app(store)) as http:
        page = await http.get("/element", params={"name": "jobs", "id": "a<b>"})
        missing = await http.get("/element", params={"name": "jobs", "id": "nope"})
    assert page.status_code == 200
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page.text
    assert "<script>alert" not in page.text
    assert "a&lt;b&gt;" in page.text
    assert "waiting" in page.text
    assert "in 30.0s" in page.text
    assert missing.status_code == 404
    assert "no element 'nope' in 'jobs'" in html.unescape(missing.text)


async def test_a_huge_payload_is_cut_short(store: Store) -> None:
    await store.push("jobs", "x" * 300_000, ttl=30, id="big")
    async with client(app(store)) as http:
        page = await http.get("/element?name=jobs&id=big")
    assert page.status_code == 200
    assert "100,002 more characters not shown" in page.text  # 300,000 and two quotes, less 200,000
    assert len(page.text) < 220_000


async def test_dead_letters_listed_oldest_first(store: Store) -> None:
    await make_dead(store, "jobs", ["d1", "d2", "d3"])
    async with client(app(store)) as http:
        listing = (await http.get("/dead?name=jobs&limit=2", headers={"Accept": "application/json"})).json()
        text = (await http.get("/dead?name=jobs")).text
    assert listing["total"] == 3
    assert len(listing["dead"]) == 2
    assert set(listing["dead"]) <= {"d1", "d2", "d3"}
    assert "cannot handle" in text
    assert "requeue all 3" in text


# -- actions -----------------------------------------------------------------------------------


async def test_requeue_one_dead_letter(store: Store) -> None:
    await make_dead(store, "jobs", ["d1", "d2"])
    async with client(app(store)) as http:
        csrf = await csrf_of(http, "/dead?name=jobs")
        done = await post(http, "requeue", csrf, name="jobs", id="d1")
        again = await post(http, "requeue", csrf, name="jobs", id="d1")
    assert done.status_code == 200, done.text
    assert done.json()["message"] == "requeued d1 into jobs, due now"
    assert await store.look("jobs", "d1") == {"n": "d1"}
    assert await store.look("jobs.dead", "d1") is None
    assert await store.size("jobs.dead") == 1
    assert again.status_code == 404
    assert "no dead letter 'd1' in 'jobs'" in again.json()["error"]


async def test_requeue_refuses_a_dead_letter_whose_id_is_live(store: Store) -> None:
    await make_dead(store, "jobs", ["x"])
    await store.push("jobs", "a new x", ttl=60, id="x")
    async with client(app(store)) as http:
        csrf = await csrf_of(http, "/dead?name=jobs")
        refused = await post(http, "requeue", csrf, name="jobs", id="x")
    assert refused.status_code == 409
    assert "live again" in refused.json()["error"]
    assert await store.size("jobs.dead") == 1
    assert await store.look("jobs", "x") == "a new x"


async def test_requeue_all_dead_letters(store: Store) -> None:
    await make_dead(store, "jobs", ["d1", "d2", "d3"])
    async with client(app(store)) as http:
        csrf = await csrf_of(http, "/dead?name=jobs")
        done = await post(http, "requeue", csrf, name="jobs", all="1")
    assert done.status_code == 200
    assert done.json()["message"] == "requeued 3 dead letters into jobs"
    assert await store.size("jobs.dead") == 0
    assert sorted(await store.ids("jobs")) == ["d1", "d2", "d3"]


async def test_delete_a_dead_letter(store: Store) -> None:
    await make_dead(store, "jobs", ["d1"])
    async with client(app(store)) as http:
        csrf = await csrf_of(http, "/dead?name=jobs")
        done = await post(http, "delete", csrf, name="jobs", id="d1")
        again = await post(http, "delete", csrf, name="jobs", id="d1")
    assert done.status_code == 200
    assert await store.size("jobs.dead") == 0
    assert await store.size("jobs") == 0
    assert again.status_code == 404
    assert "no dead letter 'd1'" in again.json()["error"]


async def test_cancel_an_element(store: Store) -> None:
    await store.push("jobs", "payload", ttl=60, id="j1")
    async with client(app(store)) as http:
        csrf = await csrf_of(http, "/elements?name=jobs")
        done = await post(http, "cancel", csrf, name="jobs", id="j1")
        again = await post(http, "cancel", csrf, name="jobs", id="j1")
    assert done.status_code == 200
    assert done.json()["next"] == "elements?name=jobs"
    assert await store.look("jobs", "j1") is None
    assert again.status_code == 404
    assert "no element 'j1' in 'jobs'" in again.json()["error"]


async def test_cancel_a_schedule_in_flight_unschedules_it(store: Store) -> None:
    """Cancel on a schedule is ``Scheduler.unschedule``: an occurrence in flight keeps its claim
    (the schedule goes when it ends), where a pull would take it from under its worker."""
    scheduler = Scheduler(store)
    await scheduler.schedule("jobs", Every(3600), id="s", element="payload")  # due now
    (running,) = await store.claim("jobs", lease=30)
    async with client(app(store)) as http:
        csrf = await csrf_of(http, "/elements?name=jobs")
        done = await post(http, "cancel", csrf, name="jobs", id="s")
        again = await post(http, "cancel", csrf, name="jobs", id="s")
    assert done.status_code == 200, done.text
    assert "removed the schedule s" in done.json()["message"]
    assert await scheduler.schedules("jobs") == []
    info = await store.info("jobs", "s")
    assert info is not None
    assert info.claimed  # the run's, until it ends
    following = {**running.element, "next": running.element["next"] + 3_600_000_000}
    ended = [("s", running.token, running.revision, running.element, following, 3600)]
    assert await rearm(store, "jobs", ended) == [True]
    assert await store.size("jobs") == 0  # and then gone, not filed again
    assert again.status_code == 404
    assert "is removed: its last run is ending" in again.json()["error"]


async def test_run_an_element_now(store: Store) -> None:
    await store.push("jobs", "later", ttl=3600, id="j1")
    async with client(app(store)) as http:
        csrf = await csrf_of(http, "/elements?name=jobs")
        done = await post(http, "run-now", csrf, name="jobs", id="j1")
        missing = await post(http, "run-now", csrf, name="jobs", id="nope")
    assert done.status_code == 200, done.text
    assert await store.xpoll("jobs") == ["j1"]
    assert await store.ttn("jobs") == 0.0
    assert missing.status_code == 404


async def test_run_a_schedule_now_runs_an_extra_occurrence(store: Store) -> None:
    """Run now on a schedule asks for an extra run (Scheduler.run_now): its next run stays where
    it was, and a paused schedule is refused rather than run."""
    scheduler = Scheduler(store)
    await scheduler.schedule("jobs", Every(3600), id="s", element="payload")
    await scheduler.schedule("jobs", Every(3600), id="p", element="paused")
    await scheduler.pause("jobs", "p")
    before = {info.id: info for info in await scheduler.schedules("jobs")}
    async with client(app(store)) as http:
        csrf = await csrf_of(http, "/elements?name=jobs")
        done = await post(http, "run-now", csrf, name="jobs", id="s")
        paused = await post(http, "run-now", csrf, name="jobs", id="p")
    assert done.status_code == 200, done.text
    assert "extra run" in done.json()["message"]
    assert await store.xpoll("jobs") == ["s"]
    requested = (await store.look("jobs", "s"))["extra"] / 1e6  # when it was asked for (Unix time)
    assert wall(store.clock) - 5 < requested <= wall(store.clock)
    after = {info.id: info for info in await scheduler.schedules("jobs")}
    assert after == before  # the next run of each is unchanged
    assert paused.status_code == 409
    assert "paused schedule" in paused.json()["error"]


async def test_run_now_refuses_an_element_in_flight(store: Store) -> None:
    await store.push("jobs", "busy", ttl=0, id="j1")
    (claim,) = await store.claim("jobs", lease=30)
    async with client(app(store)) as http:
        csrf = await csrf_of(http, "/elements?name=jobs")
        refused = await post(http, "run-now", csrf, name="jobs", id="j1")
    assert refused.status_code == 409
    assert "in flight" in refused.json()["error"]
    assert await store.ack("jobs", [("j1", claim.token)]) == [True]  # the worker's claim is untouched


# -- schedules -----------------------------------------------------------------------------------

#: What a schedule's envelope looks like in the store: never shown as such.
ENVELOPE_KEYS = ("rehydrate.schedule", "&quot;next&quot;", "&quot;trigger&quot;")


#: Built here, not in a test: its zone is read from disk once (blockbuster watches the tests).
WEEKDAYS_IN_PARIS = Cron("0 9 * * MON-FRI", tz="Europe/Paris")
#: The wall time of the schedules' store: a Wednesday, 08:55:10 in Paris.
WEDNESDAY = datetime(2026, 12, 2, 7, 55, 10, tzinfo=UTC)


@pytest.fixture(params=["memory", "sqlite"])
async def wall_store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    """A store whose fake clock reads Unix time from :data:`WEDNESDAY` (schedules run by wall time)."""
    clock = FakeClock(start=WEDNESDAY)
    opened: Store = (
        MemoryStore(clock=clock) if request.param == "memory" else SQLiteStore(tmp_path / "s.db", clock=clock)
    )
    async with opened:
        yield opened


async def file_schedules(store: Store) -> Scheduler:
    """``tick`` every 90 s, ``digest`` on weekday mornings in Paris (paused), and one-shot work."""
    scheduler = Scheduler(store)
    await scheduler.schedule("jobs", Every(90), id="tick", element={"n": "<b>1</b>"})
    await scheduler.schedule("jobs", WEEKDAYS_IN_PARIS, id="digest", element={"team": 7})
    assert await scheduler.pause("jobs", "digest") is True
    await store.push("jobs", "one-shot", ttl=600, id="work")
    return scheduler


async def test_schedules_are_shown_decoded_with_their_trigger_next_run_and_state(wall_store: Store) -> None:
    store = wall_store
    """``/schedules``: each schedule's trigger as written, its next run (UTC as served, local time
    and relative in the browser), paused or not, its state and its element, decoded; the buttons
    that apply. The elements and element pages show schedules decoded too, never the envelope."""
    await file_schedules(store)
    cast(FakeClock, store.clock).advance(30)  # tick's first run (at filing) is 30 s overdue
    async with client(app(store)) as http:
        listing = (await http.get("/schedules", headers={"Accept": "application/json"})).json()
        page = (await http.get("/schedules?name=jobs")).text
        everywhere = (await http.get("/schedules")).text
        elements = (await http.get("/elements?name=jobs")).text
        one = (await http.get("/element?name=jobs&id=tick")).text
        paused_one = (await http.get("/element?name=jobs&id=digest")).text
        work = (await http.get("/element?name=jobs&id=work")).text
        overview = (await http.get("/")).text
    rows = {row["id"]: row for row in listing["schedules"]}
    assert list(rows) == ["tick", "digest"]  # next to run first, paused last
    tick, digest = rows["tick"], rows["digest"]
    assert (tick["trigger_text"], digest["trigger_text"]) == (
        "every 1m30s",
        "cron 0 9 * * MON-FRI (Europe/Paris)",
    )
    assert tick["trigger"] == {"every": 90.0, "start": None}  # as `rehydrate schedules` gives it
    assert tick["element"] == {"n": "<b>1</b>"}
    assert (tick["paused"], tick["state"], tick["running"]) == (False, "due", False)
    assert tick["next_run_in"] == pytest.approx(-30)
    assert datetime.fromisoformat(tick["next_run"]).timestamp() == pytest.approx(wall(store.clock) - 30)
    assert (digest["paused"], digest["state"], digest["next_run"], digest["next_run_in"]) == (
        True,
        "paused",
        None,
        None,
    )
    # The page: decoded, escaped, times for the script to show in the browser's zone.
    assert "<code>every 1m30s</code>" in page
    assert "<code>cron 0 9 * * MON-FRI (Europe/Paris)</code>" in page
    assert "&lt;b&gt;1&lt;/b&gt;" in page
    assert "<b>1</b>" not in page
    assert re.search(r'<time datetime="2026-12-02T07:55:10\.000\+00:00" data-at="1796198110\.0">', page)
    assert "2026-12-02 07:55:10 UTC</time>" in page
    assert "(30s ago)" in page
    assert 'data-now="1796198140.0"' in page
    for key in ENVELOPE_KEYS:
        assert key not in page, key
        assert key not in elements, key
        assert key not in one, key
    tick_row = page.split('data-row="tick"')[1].split("</tr>")[0]
    digest_row = page.split('data-row="digest"')[1].split("</tr>")[0]
    assert 'action="pause"' in tick_row
    assert 'action="resume"' not in tick_row
    assert 'action="run-now"' in tick_row
    assert 'action="cancel"' in tick_row
    assert ">remove</button>" in tick_row
    assert 'action="resume"' in digest_row
    assert 'action="pause"' not in digest_row
    assert 'action="run-now"' not in digest_row  # paused: resume it to run it
    assert ">paused</td>" in digest_row
    assert "- (paused)" in digest_row
    assert 'data-row="work"' not in page  # one-shot work is no schedule
    assert 'data-row="tick"' in everywhere
    assert "<h1>Schedules" in everywhere
    # The elements page: a schedule's row says so, with its trigger and element, and its buttons.
    assert '<a href="schedules?name=jobs">schedule</a> <code>every 1m30s</code>' in elements
    assert 'href="schedules?name=jobs">schedules of jobs</a>' in elements
    elements_digest = elements.split('data-row="digest"')[1].split("</tr>")[0]
    assert "waiting, paused" in elements_digest
    assert 'action="resume"' in elements_digest
    # One schedule: its trigger, next run and element (pretty), not the envelope.
    assert "<dt>trigger</dt><dd><code>every 1m30s</code></dd>" in one
    assert "&quot;n&quot;: &quot;&lt;b&gt;1&lt;/b&gt;&quot;" in one
    assert 'action="pause"' in one
    assert 'action="run-now"' in one
    assert 'action="resume"' in paused_one
    assert "- (paused)" in paused_one
    assert "<dt>trigger</dt>" not in work  # one-shot work: as before
    assert 'href="schedules"' in overview  # every page links to the schedules


async def test_pause_resume_run_now_and_remove_a_schedule(wall_store: Store) -> None:
    store = wall_store
    """The schedule's buttons: each a POST guarded as cancel is (CSRF), each the public
    ``Scheduler`` method, and 404 for a missing schedule, 409 where it does not apply."""
    scheduler = await file_schedules(store)
    cast(FakeClock, store.clock).advance(30)
    async with client(app(store)) as http:
        csrf = await csrf_of(http, "/schedules?name=jobs")
        forged = await post(http, "pause", "forged", name="jobs", id="tick")
        unguarded = await post(http, "resume", None, name="jobs", id="digest")
        assert (forged.status_code, unguarded.status_code) == (403, 403)
        assert [i.paused for i in await scheduler.schedules("jobs")] == [False, True]  # nothing changed

        paused = await post(http, "pause", csrf, name="jobs", id="tick")
        assert paused.status_code == 200, paused.text
        assert paused.json()["message"] == "paused the schedule tick of jobs: it runs no more until resumed"
        assert paused.json()["next"] == "schedules?name=jobs"
        again = await post(http, "pause", csrf, name="jobs", id="tick")
        assert again.status_code == 409
        assert "paused already" in again.json()["error"]
        refused = await post(http, "run-now", csrf, name="jobs", id="tick")
        assert refused.status_code == 409
        assert "paused schedule" in refused.json()["error"]

        resumed = await post(http, "resume", csrf, name="jobs", id="tick")
        assert resumed.status_code == 200, resumed.text
        assert (
            resumed.json()["message"]
            == "resumed the schedule tick of jobs: next run 2026-12-02T07:56:40.000+00:00"
        )
        again = await post(http, "resume", csrf, name="jobs", id="tick")
        assert again.status_code == 409
        assert "is not paused" in again.json()["error"]
        assert {i.id: i.paused for i in await scheduler.schedules("jobs")} == {"tick": False, "digest": True}

        before = {i.id: i for i in await scheduler.schedules("jobs")}["tick"]
        ran = await post(http, "run-now", csrf, name="jobs", id="tick")
        assert ran.status_code == 200, ran.text
        assert "extra run" in ran.json()["message"]
        after = {i.id: i for i in await scheduler.schedules("jobs")}["tick"]
        assert after == before  # its next run is kept
        assert await store.xpoll("jobs") == ["tick"]  # due now
        state = (await http.get("/schedules", headers={"Accept": "application/json"})).json()
        assert state["schedules"][0]["state"] == "extra run due"

        for action in ("pause", "resume", "run-now", "cancel"):
            missing = await post(http, action, csrf, name="jobs", id="nope")
            assert missing.status_code == 404, (action, missing.text)
        for action in ("pause", "resume"):
            one_shot = await post(http, action, csrf, name="jobs", id="work")
            assert one_shot.status_code == 409
            assert "not a schedule but one-shot work" in one_shot.json()["error"]

        removed = await post(http, "cancel", csrf, name="jobs", id="digest")
        assert removed.status_code == 200
        assert "removed the schedule digest" in removed.json()["message"]
        gone = await post(http, "pause", csrf, name="jobs", id="digest")
        assert gone.status_code == 404
        assert "no schedule 'digest' in 'jobs'" in gone.json()["error"]
    assert [i.id for i in await scheduler.schedules("jobs")] == ["tick"]
    assert await store.look("jobs", "work") == "one-shot"  # untouched throughout


async def test_a_running_schedule_says_so_and_is_not_run_again(wall_store: Store) -> None:
    store = wall_store
    scheduler = Scheduler(store)
    await scheduler.schedule("jobs", Every(3600), id="s", element="payload")  # due now
    (claim,) = await store.claim("jobs", lease=30)
    async with client(app(store)) as http:
        listing = (await http.get("/schedules", headers={"Accept": "application/json"})).json()
        page = (await http.get("/schedules")).text
        csrf = await csrf_of(http, "/schedules")
        refused = await post(http, "run-now", csrf, name="jobs", id="s")
        paused = await post(http, "pause", csrf, name="jobs", id="s")  # the run ends first
        after = (await http.get("/schedules", headers={"Accept": "application/json"})).json()
    (row,) = listing["schedules"]
    assert (row["state"], row["running"], row["attempt"]) == ("running", True, 1)
    assert 'action="run-now"' not in page.split('data-row="s"')[1].split("</tr>")[0]
    assert refused.status_code == 409
    assert "in flight" in refused.json()["error"]
    assert paused.status_code == 200
    assert after["schedules"][0]["state"] == "paused (a run ends first)"
    assert (await store.info("jobs", "s")).claimed  # type: ignore[union-attr]
    assert claim.id == "s"


async def test_schedule_actions_by_script_with_the_token(wall_store: Store) -> None:
    store = wall_store
    """A script acts as on cancel: ``Authorization: Bearer`` and no CSRF field; none without it."""
    scheduler = await file_schedules(store)
    board = app(store, token=TOKEN)
    bearer = {"Authorization": f"Bearer {TOKEN}", "Accept": "application/json"}
    async with client(board, "http://jobs.example.com") as script:
        anonymous = await script.post("pause", data={"name": "jobs", "id": "tick"})
        assert anonymous.status_code == 401
        done = await script.post("pause", data={"name": "jobs", "id": "tick"}, headers=bearer)
        assert done.status_code == 200, done.text
        listing = (await script.get("/schedules?name=jobs", headers=bearer)).json()
    assert [row["paused"] for row in listing["schedules"]] == [True, True]
    assert all(info.paused for info in await scheduler.schedules("jobs"))


async def test_an_action_without_javascript_redirects_back(store: Store) -> None:
    await make_dead(store, "jobs", ["d1"])
    async with client(app(store)) as http:
        csrf = await csrf_of(http, "/dead?name=jobs")
        response = await http.post("requeue", data={"csrf": csrf, "name": "jobs", "id": "d1"})
    assert response.status_code == 303
    assert response.headers["location"] == "dead?name=jobs"


# -- CSRF --------------------------------------------------------------------------------------


async def test_csrf_refusals(store: Store) -> None:
    await store.push("jobs", "keep me", ttl=60, id="j1")
    async with client(app(store)) as http:
        csrf = await csrf_of(http, "/elements?name=jobs")
        missing = await post(http, "cancel", None, name="jobs", id="j1")
        wrong = await post(http, "cancel", csrf[:-2] + "xx", name="jobs", id="j1")
        cross_origin = await http.post(
            "cancel",
            data={"csrf": csrf, "name": "jobs", "id": "j1"},
            headers={"Origin": "http://evil.example", "Accept": "application/json"},
        )
        cross_site = await http.post(
            "cancel",
            data={"csrf": csrf, "name": "jobs", "id": "j1"},
            headers={"Sec-Fetch-Site": "cross-site", "Accept": "application/json"},
        )
        not_a_form = await http.post("cancel", json={"csrf": csrf, "name": "jobs", "id": "j1"})
    async with client(app(store)) as stranger:  # no session cookie at all
        no_session = await post(stranger, "cancel", csrf, name="jobs", id="j1")
    assert (missing.status_code, "missing CSRF token") == (403, missing.json()["error"].split(":")[0])
    assert wrong.status_code == 403
    assert "wrong CSRF token" in wrong.json()["error"]
    assert cross_origin.status_code == 403
    assert "Origin 'http://evil.example'" in cross_origin.json()["error"]
    assert cross_site.status_code == 403
    assert "Sec-Fetch-Site: cross-site" in cross_site.json()["error"]
    assert not_a_form.status_code == 415
    assert no_session.status_code == 403
    assert "missing session" in no_session.json()["error"]
    assert await store.look("jobs", "j1") == "keep me"  # nothing was cancelled


async def test_a_same_origin_browser_post_passes(store: Store) -> None:
    await store.push("jobs", "x", ttl=60, id="j1")
    async with client(app(store)) as http:
        csrf = await csrf_of(http, "/elements?name=jobs")
        done = await http.post(
            "cancel",
            data={"csrf": csrf, "name": "jobs", "id": "j1"},
            headers={"Origin": LOCAL, "Sec-Fetch-Site": "same-origin", "Accept": "application/json"},
        )
    assert done.status_code == 200, done.text


# -- the token ---------------------------------------------------------------------------------


async def test_the_token(store: Store) -> None:
    await store.push("jobs", "x", ttl=60, id="j1")
    board = app(store, token=TOKEN)
    async with client(board, "http://jobs.example.com") as http:
        missing = await http.get("/")
        assert missing.status_code == 401
        assert "needs its token" in missing.text
        assert missing.headers["www-authenticate"].startswith("Bearer")
        wrong = await http.get("/?token=nope")
        assert wrong.status_code == 403
        wrong_header = await http.get("/metrics", headers={"Authorization": "Bearer nope"})
        assert wrong_header.status_code == 403
        assert (await http.get("/elements?name=jobs")).status_code == 401
        events = await http.get("/events")
        assert events.status_code == 401
        assert "needs its token" in events.json()["error"]
        # The token in the URL becomes a session cookie, and leaves the address bar.
        traded = await http.get("/elements?name=jobs&token=" + TOKEN)
        assert traded.status_code == 303
        assert traded.headers["location"] == "elements?name=jobs"
        cookie = traded.headers["set-cookie"]
        assert "HttpOnly" in cookie
        assert "SameSite=strict" in cookie
        assert "Path=/" in cookie
        assert (await http.get("/elements?name=jobs")).status_code == 200
        csrf = await csrf_of(http, "/elements?name=jobs")
        assert (await post(http, "cancel", csrf, name="jobs", id="j1")).status_code == 200
    async with client(board, "http://jobs.example.com") as script:
        bearer = await script.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
        assert bearer.status_code == 200
        login = await script.post("login", data={"token": "nope"})
        assert login.status_code == 403
        login = await script.post("login", data={"token": TOKEN})
        assert login.status_code == 303
        assert (await script.get("/")).status_code == 200
    async with client(app(store, token="another token"), "http://jobs.example.com") as other:
        other.cookies.set("rehydrate_dashboard", cookie.split(";")[0].split("=", 1)[1])
        assert (await other.get("/")).status_code == 401  # a session of another token is not one


async def test_without_a_token_only_loopback_is_served(store: Store) -> None:
    board = app(store)
    async with client(board, "http://jobs.example.com") as http:
        response = await http.get("/")
    assert response.status_code == 403
    assert "no token" in response.text
    remote = httpx.ASGITransport(app=board, client=("203.0.113.9", 5555))
    async with httpx.AsyncClient(transport=remote, base_url=LOCAL) as http:
        assert (await http.get("/")).status_code == 403
    async with client(board, "http://localhost:8000") as http:
        assert (await http.get("/")).status_code == 200


async def test_mounted_under_a_prefix(store: Store) -> None:
    await make_dead(store, "jobs", ["d1"])
    outer = Starlette(routes=[Mount("/jobs", app=app(store))])
    async with client(outer) as http:
        bare = await http.get("/jobs")
        assert bare.status_code in (301, 307, 308)
        assert bare.headers["location"].endswith("/jobs/")
        page = await http.get("/jobs/")
        assert 'href="dead?name=jobs"' in page.text  # relative: resolves under /jobs/
        assert "Path=/jobs/" in page.headers["set-cookie"]
        csrf = await csrf_of(http, "/jobs/dead?name=jobs")
        done = await http.post("/jobs/requeue", data={"csrf": csrf, "name": "jobs", "id": "d1"})
        assert done.status_code == 303
        assert done.headers["location"] == "dead?name=jobs"
    assert await store.size("jobs.dead") == 0


# -- live samples ------------------------------------------------------------------------------


async def read_events(asgi: Any, path: str, count: int) -> list[tuple[str, Any]]:
    """Drive the ASGI app directly: read ``count`` server-sent events, then disconnect."""
    events: list[tuple[str, Any]] = []
    buffer = ""
    enough = anyio.Event()
    status: list[int] = []

    async def receive() -> dict[str, Any]:
        if not hasattr(receive, "sent"):
            receive.sent = True  # type: ignore[attr-defined]
            return {"type": "http.request", "body": b"", "more_body": False}
        await enough.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        nonlocal buffer
        if message["type"] == "http.response.start":
            status.append(message["status"])
        elif message["type"] == "http.response.body":
            buffer += message.get("body", b"").decode()
            while "\n\n" in buffer:
                block, buffer = buffer.split("\n\n", 1)
                lines = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
                if "event" in lines:
                    events.append((lines["event"], json.loads(lines["data"])))
            if len(events) >= count:
                enough.set()

    scope = {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": b"",
        "headers": [(b"host", b"127.0.0.1:8000")],
        "client": ("127.0.0.1", 40000),
        "server": ("127.0.0.1", 8000),
    }
    with anyio.fail_after(10):
        await asgi(scope, receive, send)
    assert status == [200]
    return events


async def test_events_stream_history_then_samples(store: Store) -> None:
    await store.push("jobs", "a", ttl=0, id="a")
    board = app(store, sample_interval=0.05)
    events = await read_events(board, "/events", 3)
    (kind, first), *rest = events
    assert kind == "history"
    assert [p["size"] for p in first["dehydrators"]["jobs"]] == [1]
    assert [k for k, _ in rest] == ["sample", "sample"]
    assert all(later["at"] > first["at"] for _, later in rest)
    assert rest[-1][1]["dehydrators"]["jobs"]["size"] == 1


def test_history_derives_throughput_and_lateness() -> None:
    history = History(keep=3)
    first = history.add(
        100.0, [Reading(name="j", size=3, due=3, claimed=0, dead=0, next_due=-4.0, ids=frozenset("abc"))]
    )["j"]
    assert (first.left_rate, first.arrived_rate, first.oldest_due) == (None, None, 4.0)  # no rate yet
    point = history.add(
        102.0, [Reading(name="j", size=3, due=1, claimed=0, dead=1, next_due=-1.5, ids=frozenset("cde"))]
    )["j"]
    assert (point.left_rate, point.arrived_rate, point.exact) == (1.0, 1.0, True)  # a, b left; d, e came
    assert point.oldest_due == 1.5
    # Too big to list: the net fall in size, a lower bound.
    point = history.add(104.0, [Reading(name="j", size=1, due=0, claimed=1, dead=1, next_due=5.0)])["j"]
    assert (point.left_rate, point.arrived_rate, point.exact, point.oldest_due) == (1.0, 0.0, False, 0.0)
    history.add(106.0, [Reading(name="j", size=1, due=0, claimed=1, dead=1, next_due=3.0)])
    assert len(history.points()["j"]) == 3  # keep
    history.add(108.0, [])
    assert history.points() == {}  # an emptied dehydrator is dropped
    with pytest.raises(ValueError, match="forward in time"):
        history.add(107.0, [])


async def test_the_sampler_reads_the_store_once_per_interval(store: Store) -> None:
    """However many pages watch, the store is read at most once per interval."""
    now = [100.0]
    sampler = Sampler(store, interval=2.0, keep=10, now=lambda: now[0])
    await store.push("jobs", "a", ttl=0, id="a")
    await sampler.refresh()
    await store.push("jobs", "b", ttl=0, id="b")
    await sampler.refresh()  # too soon: the first sample stands
    assert [p.size for p in sampler.history.points()["jobs"]] == [1]
    assert sampler.due_in() == 2.0
    now[0] = 102.0
    await sampler.refresh()
    points = sampler.history.points()["jobs"]
    assert [p.size for p in points] == [1, 2]
    assert (points[-1].arrived_rate, points[-1].left_rate) == (0.5, 0.0)  # one new id in 2 s


# -- /metrics ----------------------------------------------------------------------------------


def gauges(text: str) -> dict[str, dict[str, float]]:
    values: dict[str, dict[str, float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            values.setdefault(sample.name, {})[sample.labels.get("name", "")] = sample.value
    return values


async def test_metrics_match_the_stores_summary(store: Store) -> None:
    clock = store.clock
    assert isinstance(clock, FakeClock)
    await store.push("mail", "a", ttl=0, id="a")
    clock.advance(7)  # "a" is now 7 s overdue
    await store.push("mail", "b", ttl=5, id="b")
    await store.push("mail", "c", ttl=1, id="c")
    await store.claim("mail", lease=60, limit=1)
    await store.push("sms", "later", ttl=42, id="s")
    await make_dead(store, "calls", ["x", "y"])
    async with client(app(store)) as http:
        response = await http.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    values = gauges(response.text)
    for name in ("mail", "sms", "calls"):
        summary = await store.summary(name)
        assert values["rehydrate_size"][name] == summary.size
        assert values["rehydrate_due"][name] == summary.due
        assert values["rehydrate_in_flight"][name] == summary.claimed
        assert values["rehydrate_dead_letters"][name] == await store.size(name + ".dead")
    assert values["rehydrate_in_flight"]["mail"] == 1
    assert values["rehydrate_dead_letters"]["calls"] == 2
    assert values["rehydrate_next_due_seconds"]["sms"] == pytest.approx(42, abs=0.01)
    assert values["rehydrate_next_due_seconds"]["mail"] == pytest.approx(1, abs=0.01)  # "c", not yet due
    assert "calls" not in values["rehydrate_next_due_seconds"]  # empty: no next due
    assert values["rehydrate_store_up"][""] == 1.0


async def test_metrics_say_how_long_the_oldest_due_element_waited(store: Store) -> None:
    clock = store.clock
    assert isinstance(clock, FakeClock)
    await store.push("mail", "a", ttl=0, id="a")
    await store.push("mail", "b", ttl=3, id="b")
    clock.advance(10)
    async with client(app(store)) as http:
        values = gauges((await http.get("/metrics")).text)
    assert values["rehydrate_next_due_seconds"]["mail"] == pytest.approx(-10, abs=0.01)
    assert values["rehydrate_due"]["mail"] == 2


# -- pieces ------------------------------------------------------------------------------------


def test_app_validates_its_arguments() -> None:
    store = MemoryStore()
    with pytest.raises(TypeError, match=r"store must be a rehydrate\.abc\.Store"):
        app("memory://")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="token must be a non-empty str"):
        app(store, token="  ")
    with pytest.raises(ValueError, match="secret must be bytes"):
        app(store, secret=b"short")
    with pytest.raises(ValueError, match="sample_interval must be more than 0"):
        app(store, sample_interval=0)
    with pytest.raises(ValueError, match="page_size must be an int from 1 to 500"):
        app(store, page_size=0)
    assert callable(app(store, token="t", secret=b"0123456789abcdef"))  # built before any event loop runs


def test_loopback_and_origin_rules() -> None:
    assert all(is_loopback_host(h) for h in ("127.0.0.1", "localhost", "::1", "[::1]", "127.9.9.9"))
    assert not any(is_loopback_host(h) for h in ("0.0.0.0", "::", "10.0.0.1", "example.com", ""))
    assert origin_refusal(origin=None, fetch_site=None, host="a:1") is None
    assert origin_refusal(origin="http://a:1", fetch_site="same-origin", host="a:1") is None
    assert origin_refusal(origin="null", fetch_site=None, host="a:1") is not None
    assert origin_refusal(origin="http://a:2", fetch_site=None, host="a:1") is not None
    assert origin_refusal(origin=None, fetch_site="same-site", host="a:1") is not None


def test_sessions_end() -> None:
    now = [1_000_000.0]
    guard = Guard("t", lifetime=3600, now=lambda: now[0])
    cookie = guard.cookie(guard.new_session(authenticated=True))
    now[0] += 3600
    assert guard.session(cookie) is not None
    now[0] += 1
    assert guard.session(cookie) is None


def test_sessions_cannot_be_forged() -> None:
    guard = Guard("t")
    session = guard.new_session(authenticated=True)
    cookie = guard.cookie(session)
    assert guard.session(cookie) == session
    sid, _, issued, mac = cookie.split(".")
    assert guard.session(f"{sid}.0.{issued}.{mac}") is None  # flipping the flag breaks the signature
    assert guard.session(f"{sid}.1.{int(issued) + 3600}.{mac}") is None  # and so does a younger date
    assert guard.session("garbage") is None
    assert Guard("t").session(cookie) is None  # another app's secret
    assert guard.csrf_matches(session, guard.csrf(session))
    assert not guard.csrf_matches(guard.new_session(authenticated=True), guard.csrf(session))


# -- rehydrate dashboard -----------------------------------------------------------------------


@pytest.fixture
def _reset_logging() -> Iterator[None]:
    """The command configures structlog for the process; give the other tests their default back."""
    yield
    structlog.reset_defaults()


@pytest.mark.usefixtures("_reset_logging")
@pytest.mark.parametrize(
    ("argv", "code", "message"),
    [
        (["--host", "0.0.0.0"], 1, "refusing to serve the dashboard on 0.0.0.0 without a token"),
        (["--host", "192.0.2.1"], 1, "give --token or set REHYDRATE_DASHBOARD_TOKEN"),
        (["--port", "70000"], 1, "--port: invalid port '70000': it must be from 1 to 65535"),
        (["--port", "web"], 1, "--port: invalid port 'web': expected a whole number"),
    ],
)
def test_dashboard_mistakes_print_one_line(
    argv: list[str],
    code: int,
    message: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("REHYDRATE_DASHBOARD_TOKEN", raising=False)
    full = ["dashboard", "--store", "memory://", *argv]
    if code == 2:
        with pytest.raises(SystemExit) as exit:
            run(full)
        got = exit.value.code
    else:
        got = run(full)
    err = capsys.readouterr().err
    assert got == code
    assert len(err.strip().splitlines()) == 1, err
    assert message in err


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _serve(
    store: Path | str, port: int, *extra: str, env: dict[str, str] | None = None
) -> subprocess.Popen[str]:
    """``rehydrate dashboard`` on ``store`` (a SQLite file, or a store URL) in a process."""
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "rehydrate",
            "dashboard",
            "--store",
            store if isinstance(store, str) else f"sqlite:///{store}",
            "--port",
            str(port),
            *extra,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
    )


def _get(url: str, http: httpx.Client | None = None, **kwargs: Any) -> httpx.Response:
    """GET (with ``http`` if given), retried while the server is still starting (bounded)."""
    deadline = time.monotonic() + 20
    while True:
        try:
            return http.get(url, **kwargs) if http is not None else httpx.get(url, timeout=5, **kwargs)
        except httpx.ConnectError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_dashboard_serves_with_the_token_from_the_environment_until_sigterm(
    tmp_path: Path, backend: str
) -> None:
    async def fill() -> None:
        async with SQLiteStore(tmp_path / "s.db") as store:
            await store.push("jobs", "x", ttl=60)

    anyio.run(fill)
    port = _free_port()
    server = _serve(tmp_path / "s.db", port, "--backend", backend, env={"REHYDRATE_DASHBOARD_TOKEN": TOKEN})
    try:
        assert _get(f"http://127.0.0.1:{port}/").status_code == 401
        metrics = _get(f"http://127.0.0.1:{port}/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
        assert metrics.status_code == 200
        assert "rehydrate_store_up 1.0" in metrics.text
        assert 'rehydrate_size{name="jobs"} 1.0' in metrics.text
    finally:
        server.send_signal(signal.SIGTERM)
        _, err = server.communicate(timeout=20)
    assert server.returncode == 0, err
    assert "dashboard listening" in err
    assert f"http://127.0.0.1:{port}/" in err
    assert "token=required" in err
    assert "dashboard stopped" in err


@asynccontextmanager
async def dashboard_store(kind: str, config: pytest.Config, tmp_path: Path) -> AsyncIterator[str]:
    """A store URL of ``kind`` for dashboard processes, with one element in it."""
    if kind == "sqlite":
        url = f"sqlite:///{tmp_path / 's.db'}"
    elif kind == "redis":
        url = f"{redis_url(config)}?prefix=rhdash-{os.urandom(6).hex()}"
    else:
        skip_without_server()
        url = f"{pg_url(config)}?table=rhdash_{os.urandom(6).hex()}"
    async with open_store(url) as store:
        await store.push("jobs", "x", ttl=60)
        try:
            yield url
        finally:
            if isinstance(store, RedisStore):
                await drop_prefix(redis_url(config), url.rpartition("prefix=")[2])
            elif isinstance(store, PostgresStore):
                await drop_tables(store)


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
@pytest.mark.parametrize("kind", ["sqlite", "redis", "postgresql"])
def test_dashboard_stops_cleanly_on_sigterm_and_sigint(
    kind: str, backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Two dashboards on one store, each scraped over a kept-alive connection, one stopped by
    SIGTERM and one by SIGINT (Ctrl-C): both exit 0 with no traceback. Hypercorn on asyncio left
    its task marked as cancelled, and the Redis store's close in that task raised it."""

    async def body() -> None:
        async with dashboard_store(kind, request.config, tmp_path) as url:
            await anyio.to_thread.run_sync(check, url)

    def check(url: str) -> None:
        ports = [_free_port(), _free_port()]
        servers = [_serve(url, port, "--backend", backend) for port in ports]  # both starting at once
        try:
            for server, port, sig in zip(servers, ports, (signal.SIGTERM, signal.SIGINT), strict=True):
                metrics = f"http://127.0.0.1:{port}/metrics"
                with httpx.Client(timeout=5) as http:  # one connection, kept alive between requests
                    assert "rehydrate_store_up 1.0" in _get(metrics, http).text
                    assert 'rehydrate_size{name="jobs"} 1.0' in http.get(metrics).text
                    server.send_signal(sig)  # the connection still open
                    _, err = server.communicate(timeout=20)
                assert server.returncode == 0, err
                assert "Traceback" not in err, err
                assert err.strip().splitlines()[-1].endswith("dashboard stopped"), err
        finally:
            for server in servers:
                if server.poll() is None:
                    server.kill()
                    server.communicate()

    anyio.run(body)


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_a_live_page_holds_the_stop_until_the_graceful_timeout_or_a_second_signal(
    tmp_path: Path, backend: str
) -> None:
    """A live page's event stream never ends by itself. One dashboard gets SIGTERM with one open:
    it ends the stream after the graceful timeout (2 s) and exits 0 without a traceback (asyncio
    logged one when Hypercorn cut the connection). Another gets a second Ctrl-C meanwhile: it exits
    at once, 128 + SIGINT, with a line rather than a KeyboardInterrupt traceback."""

    async def fill() -> None:
        async with SQLiteStore(tmp_path / "s.db") as store:
            await store.push("jobs", "x", ttl=60)

    anyio.run(fill)
    ports = [_free_port(), _free_port()]
    servers = [_serve(tmp_path / "s.db", port, "--backend", backend) for port in ports]
    try:
        with contextlib.ExitStack() as streams:
            readers = []  # kept: a line iterator collected closes its stream
            for port in ports:
                _get(f"http://127.0.0.1:{port}/metrics")  # serving
                url = f"http://127.0.0.1:{port}/events"
                readers.append(streams.enter_context(httpx.stream("GET", url, timeout=5)).iter_lines())
                while not next(readers[-1]).startswith("data:"):  # open, its first event read
                    pass
            graceful, hurried = servers
            graceful.send_signal(signal.SIGTERM)
            hurried.send_signal(signal.SIGINT)
            time.sleep(0.2)  # stopping, gracefully: the streams are still open
            hurried.send_signal(signal.SIGINT)
            _, hurried_err = hurried.communicate(timeout=1.5)  # sooner than the graceful timeout
            assert graceful.poll() is None  # still waiting for its stream
            stopped = time.monotonic()
            _, graceful_err = graceful.communicate(timeout=10)
            waited = time.monotonic() - stopped
    finally:
        for server in servers:
            if server.poll() is None:
                server.kill()
                server.communicate()
    assert hurried.returncode == 128 + signal.SIGINT, hurried_err
    assert "Traceback" not in hurried_err, hurried_err
    assert "exiting at once" in hurried_err.strip().splitlines()[-1], hurried_err
    assert graceful.returncode == 0, graceful_err
    assert "Traceback" not in graceful_err, graceful_err
    assert graceful_err.strip().splitlines()[-1].endswith("dashboard stopped"), graceful_err
    assert waited < 2.0 + 1.0  # ended by the graceful timeout, not Hypercorn's backstop after it


def test_dashboard_on_a_busy_port_says_so(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        server = _serve(tmp_path / "s.db", port)
        _, err = server.communicate(timeout=30)
    assert server.returncode == 1
    assert f"cannot listen on 127.0.0.1:{port}" in err.splitlines()[-1]
    assert "Traceback" not in err


async def test_a_store_that_cannot_be_read(tmp_path: Path) -> None:
    """/metrics still answers (``rehydrate_store_up 0``), the live stream says why, pages say 500."""
    store = SQLiteStore(tmp_path / "s.db")
    board = app(store, sample_interval=0.05)
    async with store:
        await store.push("jobs", "x", ttl=0)
        async with client(board) as http:
            assert gauges((await http.get("/metrics")).text)["rehydrate_size"]["jobs"] == 1
    # The store is closed under the app's feet.
    with structlog.testing.capture_logs() as logs:
        async with client(board) as http:
            values = gauges((await http.get("/metrics")).text)
            page = await http.get("/elements?name=jobs")
        events = await read_events(board, "/events", 1)
    assert values["rehydrate_store_up"][""] == 0.0
    assert "rehydrate_size" not in values
    assert page.status_code == 500
    assert "is not open" in html.unescape(page.text)
    assert events[0][0] == "trouble"
    assert "is not open" in events[0][1]["error"]
    assert any(entry["event"] == "dashboard could not read the store for /metrics" for entry in logs)


async def test_the_sampler_waits_a_round_when_the_store_fails(tmp_path: Path) -> None:
    """A store that cannot be read is tried once per interval, not in a tight loop of warnings."""
    store = SQLiteStore(tmp_path / "s.db")
    async with store:
        await store.push("jobs", "x", ttl=0)
    sampler = Sampler(store, interval=0.2, keep=10)  # the store is closed now
    with structlog.testing.capture_logs() as logs, anyio.move_on_after(0.5):
        await sampler.run()
    warnings = [entry for entry in logs if entry["event"] == "dashboard could not sample the store"]
    assert 1 <= len(warnings) <= 3, len(warnings)


@asynccontextmanager
async def shared_store(kind: str, config: pytest.Config) -> AsyncIterator[Store]:
    """A fresh Redis or PostgreSQL store on the test session's server, emptied afterwards."""
    if kind == "redis":
        url, prefix = redis_url(config), f"rhweb-{os.urandom(6).hex()}"
        try:
            async with RedisStore.from_url(url, prefix=prefix) as store:
                yield store
        finally:
            await drop_prefix(url, prefix)
        return
    skip_without_server()
    async with PostgresStore.from_url(pg_url(config), table=f"rhweb_{os.urandom(6).hex()}") as store:
        try:
            yield store
        finally:
            await drop_tables(store)


@pytest.mark.parametrize("kind", ["redis", "postgresql"])
async def test_on_the_shared_stores_too(kind: str, request: pytest.FixtureRequest) -> None:
    """The dashboard needs nothing but the store contract: Redis and PostgreSQL, briefly, end to end."""
    async with shared_store(kind, request.config) as store:
        await store.push("mail", "a", ttl=0, id="a")
        await store.push("mail", "b", ttl=600, id="b")
        await make_dead(store, "calls", ["x", "y"])
        async with client(app(store)) as http:
            values = gauges((await http.get("/metrics")).text)
            overview = (await http.get("/", headers={"Accept": "application/json"})).json()
            listing = (await http.get("/elements?name=mail", headers={"Accept": "application/json"})).json()
            csrf = await csrf_of(http, "/dead?name=calls")
            done = await post(http, "requeue", csrf, name="calls", id="x")
        assert values["rehydrate_size"] == {"mail": 2, "calls": 0}
        assert values["rehydrate_dead_letters"] == {"mail": 0, "calls": 2}
        assert values["rehydrate_next_due_seconds"]["mail"] <= 0  # "a" is due, for how long the clock says
        assert (overview["mail"]["size"], overview["calls"]["dead"]) == (2, 2)
        assert [e["id"] for e in listing["elements"]] == ["a", "b"]
        assert done.status_code == 200
        assert await store.look("calls", "x") == {"n": "x"}
        assert await store.ids("calls.dead") == ["y"]


@pytest.mark.parametrize("kind", ["redis", "postgresql"])
async def test_schedules_on_the_shared_stores_too(kind: str, request: pytest.FixtureRequest) -> None:
    """The schedules page and its buttons need nothing but the store contract and ``Scheduler``."""
    async with shared_store(kind, request.config) as store:
        scheduler = await file_schedules(store)
        async with client(app(store)) as http:
            listed = (await http.get("/schedules?name=jobs", headers={"Accept": "application/json"})).json()
            csrf = await csrf_of(http, "/schedules?name=jobs")
            paused = await post(http, "pause", csrf, name="jobs", id="tick")
            resumed = await post(http, "resume", csrf, name="jobs", id="digest")
            ran = await post(http, "run-now", csrf, name="jobs", id="digest")
            missing = await post(http, "pause", csrf, name="jobs", id="nope")
            page = (await http.get("/schedules?name=jobs")).text
        assert [(r["id"], r["trigger_text"], r["paused"]) for r in listed["schedules"]] == [
            ("tick", "every 1m30s", False),
            ("digest", "cron 0 9 * * MON-FRI (Europe/Paris)", True),
        ]
        assert (paused.status_code, resumed.status_code, ran.status_code) == (200, 200, 200)
        assert missing.status_code == 404
        assert {i.id: i.paused for i in await scheduler.schedules("jobs")} == {"tick": True, "digest": False}
        assert "rehydrate.schedule" not in page
        (digest,) = [i for i in await scheduler.schedules("jobs") if i.id == "digest"]
        assert digest.next_run is not None
        if digest.next_run.timestamp() - wall(store.clock) > 5:  # (not at 09:00 in Paris itself)
            assert "extra run due" in page  # digest's extra run, due now; its 09:00 run still ahead


def test_a_rate_that_is_only_a_lower_bound_says_so() -> None:
    from rehydrate.web._history import Point
    from rehydrate.web._pages import overview_page

    def point(exact: bool) -> Point:
        return Point(
            at=1.0, size=20_000, due=0, claimed=0, dead=0, next_due=1.0, oldest_due=0.0,
            left_rate=0.5, arrived_rate=0.0, exact=exact,
        )  # fmt: skip

    assert ">≥ 30.0/min<" in overview_page(latest={"big": point(False)}, nonce="n", keep=10)
    assert ">30.0/min<" in overview_page(latest={"big": point(True)}, nonce="n", keep=10)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0.4, "now"), (-0.4, "now"), (42, "in 42s"), (-30, "30s ago"), (250, "in 4m 10s"), (240, "in 4m"),
     (3600 * 3 + 1200, "in 3h 20m"), (86400 * 2 + 3600 * 3 + 59, "in 2d 3h"), (-86400, "1d ago")],
)  # fmt: skip
def test_times_relative_to_now_in_two_units(seconds: float, text: str) -> None:
    """What the schedules page says beside a next run (its script says the same as time passes)."""
    from rehydrate.web._pages import from_now

    assert from_now(seconds) == text


# -- limits ------------------------------------------------------------------------------------


async def fill_limits(store: Store) -> None:
    """Two keys of ``charge`` (Concurrency(2), declared by a live worker's heartbeat): acct-1
    full with one element waiting, acct-2 half full; and a ``reports`` slot nobody declares."""
    from rehydrate.abc import LimitSpec

    spec = LimitSpec(concurrency=2, lease=30.0)
    for holder in ("h1", "h2"):
        assert (await store.limit_acquire("charge", "acct-1", holder, spec)).granted
    refused = await store.limit_acquire("charge", "acct-1", "h3", spec, waiter=("charge", "e3", 0))
    assert not refused.granted
    assert (await store.limit_acquire("charge", "acct-2", "h4", spec)).granted
    assert (await store.limit_acquire("reports", "*", "r1", LimitSpec(concurrency=5, lease=30.0))).granted
    declared = {"concurrency": 2, "rates": [], "lease": 30.0}
    await store.heartbeat("box:1:aa", {"handlers": {"charge": {"limits": declared}}}, ttl=60)


def limit_gauges(text: str) -> dict[str, dict[str, float]]:
    values: dict[str, dict[str, float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if "limit" in sample.labels:
                values.setdefault(sample.name, {})[sample.labels["limit"]] = sample.value
    return values


async def test_the_limits_page_shows_each_key_fullest_first(store: Store) -> None:
    await fill_limits(store)
    async with client(app(store)) as http:
        listing = (await http.get("/limits", headers={"Accept": "application/json"})).json()
        page = (await http.get("/limits")).text
        only = (await http.get("/limits?limit=charge", headers={"Accept": "application/json"})).json()
        overview = (await http.get("/")).text
    rows = listing["limits"]
    assert [(r["limit"], r["key"]) for r in rows] == [
        ("charge", "acct-1"),
        ("charge", "acct-2"),
        ("reports", "*"),
    ]
    first = rows[0]
    assert (first["holders"], first["waiting"], first["concurrency"], first["saturation"]) == (2, 1, 2, 1.0)
    assert first["holder_ids"] == ["h1", "h2"]
    assert rows[1]["saturation"] == 0.5
    assert (rows[2]["concurrency"], rows[2]["saturation"]) == (None, None)  # no worker declares it
    assert [r["key"] for r in only["limits"]] == ["acct-1", "acct-2"]
    assert 'data-limit="charge" data-key="acct-1"' in page
    assert "<td>2</td>" in page  # the capacity column
    assert "100%" in page
    assert 'href="limits"' in overview  # every page links to the limits


async def test_metrics_give_each_limits_holders_waiting_capacity_and_saturation(store: Store) -> None:
    await fill_limits(store)
    async with client(app(store)) as http:
        values = limit_gauges((await http.get("/metrics")).text)
    assert values["rehydrate_limit_holders"] == {"charge": 3.0, "reports": 1.0}
    assert values["rehydrate_limit_waiting"] == {"charge": 1.0, "reports": 0.0}
    assert values["rehydrate_limit_keys"] == {"charge": 2.0, "reports": 1.0}
    assert values["rehydrate_limit_capacity"] == {"charge": 2.0}  # reports: declared by nobody
    assert values["rehydrate_limit_saturation"] == {"charge": 1.0}  # its fullest key
