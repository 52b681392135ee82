"""A real browser on the dashboard: headless Chromium (Debian's) driven by Playwright.

``rehydrate dashboard`` serves a SQLite store on a free loopback port while a worker process does
live work on it (elements pushed and delivered all the time, and three dead letters). The browser
sees the numbers change without a reload, clicks "requeue" on a dead letter and sees it leave, then
pauses, resumes and runs a schedule now from the schedules page.

``REHYDRATE_UPDATE_SCREENSHOT=1`` also writes the overview to ``docs/img/dashboard.png`` (the
picture in the docs); otherwise the screenshot goes to the test's temporary directory.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

CHROMIUM = shutil.which("chromium") or ("/usr/bin/chromium" if os.path.exists("/usr/bin/chromium") else None)
if CHROMIUM is None:
    pytest.skip("no Chromium installed (Debian: apt-get install chromium)", allow_module_level=True)
playwright_sync = pytest.importorskip("playwright.sync_api", reason="no playwright (the test extra has it)")

ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
#: How many samples the mail row's throughput chart has drawn.
POINTS = """document.querySelector('tr[data-name="mail"] svg[data-k="left_rate"] polyline')""" + (
    ".getAttribute('points').split(' ').length"
)
SCREENSHOT = Path(__file__).resolve().parent.parent / "docs" / "img" / "dashboard.png"

#: The live work: three dead letters first, then a steady stream of mail delivered as it falls due.
WORK = r"""
import random, sys, anyio, structlog
from rehydrate import Every, Retry, Scheduler
from rehydrate.stores import SQLiteStore

async def main(path):
    async with SQLiteStore(path) as store:
        failing = Scheduler(store)

        @failing.handler("payments", retry=Retry(attempts=1))
        async def charge(element):
            raise ConnectionError("card processor said 503")

        async with failing:
            for n in (1, 2, 3):
                await failing.defer("payments", {"invoice": n, "amount": 12.5 * n}, id=f"invoice-{n}")
            with anyio.fail_after(20):
                while await store.size("payments.dead") < 3:
                    await anyio.sleep(0.05)
        live = Scheduler(store)

        @live.handler("mail", concurrency=4)
        async def send(element):
            await anyio.sleep(random.uniform(0.05, 0.3))

        @live.handler("reminders")
        async def remind(element):
            pass

        async with live:
            await live.schedule("reminders", Every(3600), id="digest", element={"team": 7})
            print("ready", flush=True)
            rng = random.Random(7)
            with anyio.move_on_after(120):  # bounded: the test ends it long before
                n = 0
                while True:
                    n += 1
                    await live.defer("mail", {"to": f"user-{n}@example.com"}, delay=rng.uniform(0, 6))
                    if n % 5 == 0:
                        await live.defer("reminders", {"user": n}, delay=rng.uniform(30, 600))
                    await anyio.sleep(0.15)

structlog.configure(logger_factory=structlog.PrintLoggerFactory(sys.stderr))  # stdout says "ready"
anyio.run(main, sys.argv[1])
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def wait_for_port(port: int, process: subprocess.Popen[bytes], seconds: float = 20) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(
                f"the dashboard exited early: {process.stderr.read() if process.stderr else ''!r}"
            )
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise AssertionError(f"nothing listens on port {port} after {seconds} s")


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@pytest.fixture
def served(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[tuple[str, Path]]:
    """A SQLite store with live work, and ``rehydrate dashboard`` serving it: (base URL, db path)."""
    db = tmp_path / "jobs.db"
    worker = subprocess.Popen(
        [sys.executable, "-c", WORK, str(db)], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    dashboard: subprocess.Popen[bytes] | None = None
    try:
        assert worker.stdout is not None
        if worker.stdout.readline() != b"ready\n":
            stop(worker)
            raise AssertionError(
                f"the worker did not start: {worker.stderr.read() if worker.stderr else b''!r}"
            )
        port = free_port()
        dashboard = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "rehydrate",
                "dashboard",
                "--store",
                f"sqlite:///{db}",
                "--port",
                str(port),
                "--backend",
                request.param,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        wait_for_port(port, dashboard)
        yield f"http://127.0.0.1:{port}/", db
    finally:
        if dashboard is not None:
            stop(dashboard)
        stop(worker)
        for process in (worker, dashboard):
            if process is not None:
                for stream in (process.stdout, process.stderr):
                    if stream is not None:
                        stream.close()


def dead_ids(db: Path) -> list[str]:
    """The dead letters of ``payments``, asked of the store by ``rehydrate dead`` (its own process)."""
    shown = subprocess.run(
        [
            sys.executable,
            "-m",
            "rehydrate",
            "dead",
            "payments",
            "--store",
            f"sqlite:///{db}",
            "--format",
            "json",
        ],
        capture_output=True,
        check=True,
        timeout=30,
    )
    return [letter["id"] for letter in json.loads(shown.stdout)]


@pytest.mark.parametrize("served", ["asyncio", "trio"], indirect=True)
def test_a_browser_sees_live_numbers_and_requeues_a_dead_letter(
    served: tuple[str, Path], tmp_path: Path
) -> None:
    url, db = served
    with playwright_sync.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            page = browser.new_page(viewport={"width": 1360, "height": 520}, timezone_id="Europe/Paris")
            page.set_default_timeout(20_000)
            errors: list[str] = []  # a CSP violation (a script or style without its nonce) lands here
            page.on(
                "console", lambda message: errors.append(message.text) if message.type == "error" else None
            )
            page.goto(url)
            header = page.evaluate("() => getComputedStyle(document.querySelector('header')).backgroundColor")
            assert header == "rgb(29, 35, 42)"  # the inline stylesheet applied
            mail = page.locator('#overview tr[data-name="mail"]')
            mail.wait_for()
            page.locator('#overview tr[data-name="payments"]').wait_for()
            page.wait_for_function("() => document.getElementById('status').textContent.startsWith('live')")
            page.evaluate("() => { window.notReloaded = true; }")
            # The numbers change, by server-sent events, with no reload.
            before = mail.inner_text()
            page.wait_for_function(
                """([before]) => document.querySelector('#overview tr[data-name="mail"]').innerText"""
                " !== before",
                arg=[before],
            )
            page.wait_for_function(f"() => {POINTS} >= 4")
            assert page.evaluate("() => window.notReloaded") is True
            assert page.locator('tr[data-name="payments"] [data-k="dead"]').inner_text() == "3"
            # The worker that serves the mail sends heartbeats: it is listed, alive.
            page.wait_for_function(
                "() => [...document.querySelectorAll('#workers tr.alive')]"
                ".some(row => row.innerText.includes('mail'))"
            )
            update = os.environ.get("REHYDRATE_UPDATE_SCREENSHOT") == "1"
            if update:  # a picture for the docs: let the charts fill a little first
                page.wait_for_function(f"() => {POINTS} >= 12", timeout=60_000)
            shot = page.screenshot(path=str(tmp_path / "dashboard.png"))
            if update:
                SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
                SCREENSHOT.write_bytes(shot)
            # Drill down to the dead letters, and requeue one.
            page.locator('tr[data-name="payments"] a.dead').click()
            page.wait_for_url("**/dead?name=payments")
            rows = page.locator("#dead tr[data-row]")
            assert rows.count() == 3
            first = rows.first.get_attribute("data-row")
            assert first is not None
            assert "card processor said 503" in page.locator("#dead").inner_text()
            rows.first.get_by_role("button", name="requeue").click()
            page.locator(f'#dead tr[data-row="{first}"]').wait_for(state="detached")
            assert page.locator("#notice").inner_text() == f"requeued {first} into payments, due now"
            assert rows.count() == 2
            assert first not in dead_ids(db)
            page.reload()
            assert page.locator("#dead tr[data-row]").count() == 2
            # The live counts on this page follow too: two dead letters left.
            page.wait_for_function(
                """() => document.querySelector('tr[data-name="payments"] [data-k="dead"]')"""
                ".textContent === '2'"
            )
            # The requeued element is back in payments: find it by its id, and see its payload.
            page.goto(url + "elements?name=payments")
            page.get_by_label("id").fill(first)
            page.get_by_role("button", name="look").click()
            page.wait_for_url("**/element?name=payments&id=*")
            assert '"invoice"' in page.locator("pre").inner_text()
            assert page.locator("dd").first.inner_text() == "due"
            # The schedules: decoded, the next run in the browser's zone, and pause, resume, run now.
            page.get_by_role("link", name="schedules").first.click()
            page.wait_for_url("**/schedules")
            page.evaluate("() => { window.notReloaded = true; }")
            digest = page.locator('#schedules tr[data-row="digest"]')
            assert digest.locator("td.trigger").inner_text() == "every 1h"
            assert '"team": 7' in digest.inner_text()
            assert "rehydrate.schedule" not in page.content()
            at = float(digest.locator("time").get_attribute("data-at") or "nan")
            local = datetime.fromtimestamp(at, ZoneInfo("Europe/Paris")).strftime("%Y-%m-%d %H:%M:%S")
            assert digest.locator("time").inner_text().startswith(local)  # not UTC: the browser's zone
            assert digest.locator(".rel").inner_text().startswith("(in 59m")
            digest.get_by_role("button", name="pause").click()
            page.wait_for_function(
                """() => document.querySelector('#schedules tr[data-row="digest"] td.state')"""
                ".textContent === 'paused'"
            )
            assert page.locator("#notice").inner_text() == (
                "paused the schedule digest of reminders: it runs no more until resumed"
            )
            assert digest.get_by_role("button", name="run now").count() == 0  # paused: resume first
            digest.get_by_role("button", name="resume").click()
            page.wait_for_function(
                """() => document.querySelector('#schedules tr[data-row="digest"] td.state')"""
                ".textContent !== 'paused'"
            )
            assert page.locator("#notice").inner_text().startswith("resumed the schedule digest of reminders")
            assert digest.get_by_role("button", name="pause").count() == 1
            digest.get_by_role("button", name="run now").click()
            page.wait_for_function(
                "() => document.getElementById('notice').textContent.includes('extra run')"
            )
            assert page.locator("#notice").inner_text() == (
                "an extra run of the schedule digest in reminders is due now (its next run is unchanged)"
            )
            assert page.evaluate("() => window.notReloaded") is True  # all without a reload
            assert errors == []
        finally:
            browser.close()
