"""``rehydrate worker --metrics-port``: the collector in this process (httpx on its ASGI app,
values against ``Scheduler.stats``), then a real worker process: its metrics scraped, its heartbeat
in the store, and its record expiring within the heartbeat's TTL once it is SIGKILLed."""

from __future__ import annotations

import http.client
import json
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
import structlog

pytest.importorskip("prometheus_client")
pytest.importorskip("hypercorn")
httpx = pytest.importorskip("httpx")

from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from rehydrate import Retry, Scheduler, open_store  # noqa: E402
from rehydrate._core._retry import Backoff  # noqa: E402
from rehydrate.stores import MemoryStore  # noqa: E402
from rehydrate.testing import FakeClock  # noqa: E402
from rehydrate.web._worker_metrics import app  # noqa: E402
from tests.test_cli_worker import finish, start, wait_for  # noqa: E402


@pytest.fixture(autouse=True)
def _reset_logging() -> Iterator[None]:
    """``rehydrate workers`` run in this process configures structlog (onto pytest's captured
    stderr, closed after the test): give the other tests their default back."""
    yield
    structlog.reset_defaults()


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of an exposition, by name and sorted labels."""
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


@pytest.mark.anyio
async def test_metrics_match_the_scheduler_stats() -> None:
    clock = FakeClock()
    async with MemoryStore(clock=clock) as store:
        scheduler = Scheduler(store, grace=0, heartbeat=None)
        scheduler.keep_lateness_histogram()

        @scheduler.handler("jobs")
        async def job(element: int) -> None: ...

        @scheduler.handler("flaky", retry=Retry(attempts=2, backoff=Backoff(initial=1, jitter=0)))
        async def flaky(element: int) -> None:
            raise ValueError("no")

        async with scheduler:
            for i in range(5):
                await scheduler.defer("jobs", i, delay=i * 0.02)
            await scheduler.defer("flaky", 0)
            for _ in range(4):
                await anyio.wait_all_tasks_blocked()
                clock.advance(0.5)
                await anyio.wait_all_tasks_blocked()
            async with httpx.AsyncClient(
                transport=httpx.ASGITransport(app=app(scheduler)), base_url="http://w"
            ) as http:
                response = await http.get("/metrics")
                assert (await http.get("/nope")).status_code == 404
                assert (await http.post("/metrics")).status_code == 405
            scheduler.stop()
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    found = samples(response.text)
    for name in ("jobs", "flaky"):
        stats = scheduler.stats(name)
        for outcome in ("acked", "retried", "dead_lettered", "lost"):
            key = ("rehydrate_deliveries_total", (("name", name), ("outcome", outcome)))
            assert found[key] == getattr(stats, outcome)
        assert found[("rehydrate_deliveries_started_total", (("name", name),))] == stats.delivered
        assert found[("rehydrate_lateness_seconds_count", (("name", name),))] == stats.delivered
    jobs, flaky_stats = scheduler.stats("jobs"), scheduler.stats("flaky")
    assert (jobs.acked, flaky_stats.retried, flaky_stats.dead_lettered) == (5, 1, 1)
    # The first element is claimed at once; the next four, due every 20 ms, at the 0.5 s step.
    buckets = {
        dict(labels)["le"]: value
        for (metric, labels), value in found.items()
        if metric == "rehydrate_lateness_seconds_bucket" and dict(labels)["name"] == "jobs"
    }
    assert (buckets["0.005"], buckets["0.25"], buckets["0.5"], buckets["+Inf"]) == (1, 1, 5, 5)
    assert found[("rehydrate_lateness_seconds_sum", (("name", "jobs"),))] == pytest.approx(
        sum(0.5 - i * 0.02 for i in range(1, 5))
    )
    ((_, labels),) = [key for key in found if key[0] == "rehydrate_worker_info"]
    assert dict(labels)["worker"] == scheduler.worker_id


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


APP = """
from rehydrate import Scheduler

scheduler = Scheduler("memory://", grace=0.5)

@scheduler.handler("jobs", lease=30, concurrency=4)
async def handle(element):
    pass
"""


def workers(url: str) -> list[Any]:
    async def body() -> list[Any]:
        async with open_store(url) as store:
            return await store.workers()

    return anyio.run(body)


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        return samples(response.read().decode())


def until(predicate: Callable[[], bool], process: subprocess.Popen[str], what: str) -> None:
    wait_for(predicate, process, what, timeout=30)


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_a_sigkilled_worker_expires_within_its_heartbeat_ttl(
    backend: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A real worker process: it registers at once, its metrics port answers with what it did,
    and once SIGKILLed (no chance to deregister) its record shows expired within the TTL (three
    heartbeats of 0.2 s)."""
    (tmp_path / "hbapp.py").write_text(APP)
    url = f"sqlite:///{tmp_path / 'hb.db'}"
    port = free_port()
    worker = start(
        tmp_path,
        *("hbapp:scheduler", "--store", url, "--heartbeat", "0.2"),
        *("--metrics-port", str(port), "--backend", backend),
    )
    try:
        until(
            lambda: (tmp_path / "hb.db").exists() and any(w.alive for w in workers(url)),
            worker,
            "a heartbeat",
        )
        (record,) = workers(url)
        assert (record.data["pid"], record.data["backend"]) == (worker.pid, backend)
        assert record.data["handlers"]["jobs"]["concurrency"] == 4
        assert record.expires - record.last_seen == pytest.approx(0.6)

        async def push() -> None:
            async with open_store(url) as store:
                await store.push_many("jobs", [(i, 0, None) for i in range(3)])

        anyio.run(push)
        acked = ("rehydrate_deliveries_total", (("name", "jobs"), ("outcome", "acked")))
        until(lambda: scrape(port).get(acked) == 3, worker, "3 acked deliveries in the metrics")
        assert scrape(port)[("rehydrate_lateness_seconds_count", (("name", "jobs"),))] == 3
        until(lambda: workers(url)[0].data["totals"]["acked"] == 3, worker, "the heartbeat's counters")

        worker.send_signal(signal.SIGKILL)
        killed = time.monotonic()
        worker.wait(timeout=10)
        (record,) = workers(url)  # not deregistered: it had no chance
        while record.alive:
            assert time.monotonic() - killed < 0.6 + 1.0, "still alive well past its TTL"
            time.sleep(0.05)
            (record,) = workers(url)
        expired_after = time.monotonic() - killed
        assert expired_after <= 0.6 + 1.0
    finally:
        if worker.poll() is None:
            worker.kill()
        worker.communicate()
    from rehydrate.cli._main import run

    capsys.readouterr()
    assert run(["--store", url, "workers", "--format", "json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert (row["alive"], row["pid"], row["handlers"]["jobs"]["acked"]) == (False, record.data["pid"], 3)
    assert row["expires_in"] < 0
    print(f"expired {expired_after:.2f}s after SIGKILL (TTL 0.6s)", file=sys.stderr)


def test_each_process_serves_its_own_port_and_stops_cleanly(tmp_path: Path) -> None:
    """``--processes 2 --metrics-port N``: child 0 on N, child 1 on N+1, each its own worker id;
    SIGTERM stops the servers with the workers (exit 0, nothing but JSON log lines)."""
    (tmp_path / "hbapp.py").write_text(APP)
    url = f"sqlite:///{tmp_path / 'hb.db'}"
    port = free_port()
    while True:  # N+1 must be free too
        try:
            with socket.create_server(("127.0.0.1", port + 1)):
                break
        except OSError:
            port = free_port()
    worker = start(
        tmp_path, "hbapp:scheduler", "--store", url, "--processes", "2", "--metrics-port", str(port)
    )
    try:

        def both() -> bool:
            try:
                return (
                    len(
                        {
                            dict(k[1])["worker"]
                            for p in (port, port + 1)
                            for k in scrape(p)
                            if k[0] == "rehydrate_worker_info"
                        }
                    )
                    == 2
                )
            except OSError:
                return False

        until(both, worker, "metrics on both ports")
        until(lambda: len([w for w in workers(url) if w.alive]) == 2, worker, "two workers registered")
        worker.send_signal(signal.SIGTERM)
        code, logs = finish(worker)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.communicate()
    assert code == 0
    assert sum(entry["event"] == "metrics listening" for entry in logs) == 2
    assert workers(url) == []  # both deregistered
    with pytest.raises(urllib.error.URLError, match="refused"):
        scrape(port)


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_sigterm_after_a_keep_alive_scrape_exits_0(backend: str, tmp_path: Path) -> None:
    """Prometheus keeps its connection open between scrapes: SIGTERM with that connection idle
    stops the server gracefully (the connection closed by the server, exit 0, JSON log lines
    only) rather than cancelling Hypercorn mid-shutdown (on asyncio: a traceback per task and
    exit 1)."""
    (tmp_path / "hbapp.py").write_text(APP)
    url = f"sqlite:///{tmp_path / 'hb.db'}"
    port = free_port()
    worker = start(
        tmp_path, "hbapp:scheduler", "--store", url, "--metrics-port", str(port), "--backend", backend
    )
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:

        def scraped() -> bool:
            try:
                connection.request("GET", "/metrics")
            except OSError:
                connection.close()  # not listening yet: try again on a new connection
                return False
            response = connection.getresponse()
            body = response.read().decode()
            assert response.status == 200
            assert not response.will_close  # HTTP/1.1: the connection stays open for the next
            return "rehydrate_worker_info" in body

        until(scraped, worker, "a scrape")
        until(lambda: any(w.alive for w in workers(url)), worker, "the worker serving")
        assert scraped()  # again, on the same connection: it is kept alive
        assert connection.sock is not None
        kept = connection.sock
        worker.send_signal(signal.SIGTERM)
        code, logs = finish(worker)
        assert kept.recv(1) == b""  # the server closed the idle connection on its way out
    finally:
        connection.close()
        if worker.poll() is None:
            worker.kill()
            worker.communicate()
    assert code == 0
    assert [entry["event"] for entry in logs][-2:] == ["stopping", "worker stopped"]
