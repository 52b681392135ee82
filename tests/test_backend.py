"""The running event loop's name, as heartbeats report it, with and without sniffio.

anyio no longer installs sniffio, so a plain ``pip install 'rehydrate[redis,web]'`` has none; the
test extras bring it back (trio needs it). The tests without it run in a child process that cannot
import it (``tests/no_sniffio.py``), on asyncio only: trio itself imports sniffio.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from rehydrate._backend import running_backend
from rehydrate._heartbeat import backend_name
from tests.no_sniffio import python


@pytest.mark.anyio
async def test_the_running_backend_is_named(anyio_backend_name: str) -> None:
    assert running_backend() == anyio_backend_name
    assert backend_name() == anyio_backend_name


def test_outside_an_event_loop_there_is_none() -> None:
    assert running_backend() is None
    assert backend_name() == "unknown"


def test_a_heartbeat_names_asyncio_without_sniffio(tmp_path: Path) -> None:
    """What a worker on a fresh install reports (it said ``unknown``), on SQLite as in production."""
    code = f"""
import anyio
from rehydrate import Scheduler
from rehydrate._backend import running_backend

scheduler = Scheduler("sqlite:///{tmp_path / "jobs.db"}")

@scheduler.handler("jobs")  # (a scheduler with no handler is a producer, and sends no heartbeat)
async def job(element):
    pass

async def main():
    async with scheduler:
        (worker,) = await scheduler.store.workers()
        print(worker.data["backend"], running_backend())

anyio.run(main)
print(running_backend())
"""
    done = subprocess.run(python(code), capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["asyncio", "asyncio", "None"]
