from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
import structlog
from blockbuster import blockbuster_ctx
from hypothesis import HealthCheck, settings

from rehydrate import Dehydrator
from rehydrate.testing import FakeClock

# -- hypothesis profiles -----------------------------------------------------------------------------
# How hard the property tests search: HYPOTHESIS_PROFILE=dev|ci|thorough (default: ci when $CI is set,
# dev otherwise). Tests give no max_examples of their own, so one knob scales them all.
# deadline=None: a store call's time depends on the machine's load, not on the example.
settings.register_profile("dev", max_examples=25, deadline=None)
settings.register_profile("ci", max_examples=50, deadline=None, print_blob=True)
settings.register_profile(
    "thorough", max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
PROFILE = os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI") else "dev")
settings.load_profile(PROFILE)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "asyncio_debug: run asyncio in debug mode even where the module turns it off"
    )
    config.addinivalue_line(
        "markers",
        "loop_may_block: a test that runs a store's I/O on the loop's thread on purpose (to make it "
        "deterministic): blockbuster does not watch it",
    )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A thorough search runs as long as it takes: no per-test timeout for the property tests."""
    if PROFILE == "thorough":
        for item in items:
            if hasattr(getattr(item, "obj", None), "hypothesis"):
                item.add_marker(pytest.mark.timeout(0))


@pytest.fixture(
    params=[
        # Debug mode: a coroutine never awaited, a non-thread-safe call from another thread or a
        # callback that hogs the loop is reported instead of passing silently.
        pytest.param(("asyncio", {"debug": True}), id="asyncio"),
        pytest.param(("trio", {}), id="trio"),
    ]
)
def anyio_backend(request: pytest.FixtureRequest) -> tuple[str, dict[str, object]]:
    """Every async test runs on asyncio and on trio; asyncio in debug mode where that can catch
    something (see ``asyncio_debug``)."""
    name, options = request.param
    if name == "asyncio" and not asyncio_debug(request.node):
        options = {}
    return name, options


#: The contract suite's harnesses that run asyncio without debug mode (see ``asyncio_debug``).
NO_ASYNCIO_DEBUG_HARNESSES = frozenset({"valkey", "redis_cluster"})


def asyncio_debug(item: pytest.Item) -> bool:
    """Whether ``item`` runs asyncio in debug mode: yes, unless its module says ``ASYNCIO_DEBUG =
    False`` or it is a contract test on one of ``NO_ASYNCIO_DEBUG_HARNESSES``; a test marked
    ``asyncio_debug`` always does.

    Of what debug mode checks, only a loop call from another thread fails a test (a coroutine never
    awaited fails one anyway, and a slow callback is only logged), while it records a stack on every
    callback and task, a tax on each store round trip: two to five times the CPU of a test on Redis.
    The Redis store stays on the loop's thread but to build a ``rediss://`` TLS context (its TLS
    test is marked), so the tests of the Redis family run without it, except the contract suite
    on Redis 7, which keeps the same calls covered in debug mode.
    """
    if item.get_closest_marker("asyncio_debug") is not None:
        return True
    callspec = getattr(item, "callspec", None)
    if callspec is not None and callspec.params.get("harness") in NO_ASYNCIO_DEBUG_HARNESSES:
        return False
    return bool(getattr(getattr(item, "module", None), "ASYNCIO_DEBUG", True))


@pytest.fixture(autouse=True)
def no_blocking_calls_on_the_loop(request: pytest.FixtureRequest) -> Iterator[None]:
    """Fail an async test whose library code blocks the event loop (file or socket I/O, sqlite3,
    ``time.sleep``, a lock wait...) instead of handing the work to a thread.

    blockbuster sees only calls made on a running asyncio loop's thread, from a frame in
    ``rehydrate``: work off-loaded to a worker thread (SQLite's connection) is not flagged, and
    neither is the tests' own set-up. The same code runs on trio, so asyncio's run covers it.
    """
    if "anyio_backend" not in request.fixturenames or request.node.get_closest_marker("loop_may_block"):
        yield
        return
    with blockbuster_ctx("rehydrate"):
        yield


@pytest.fixture(autouse=True)
def _reset_logging() -> Iterator[None]:
    """A test that runs the command in-process (``rehydrate.cli.run``) configures structlog for
    the whole process, onto that test's captured stderr, which is closed after it: give every test
    after it structlog's defaults back, whichever file it is in."""
    yield
    structlog.reset_defaults()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(1000.0)


@pytest.fixture
def dehydrator(clock: FakeClock) -> Dehydrator:
    return Dehydrator(clock=clock)
