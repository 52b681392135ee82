"""The Redis store in the contract suite, on Redis 7 (this module) and on Valkey (``harness_valkey``).

Each test gets a store with its own key prefix on the session's server of that kind (see
``tests/redis_server.py``), and its keys are deleted afterwards; a kind whose server binary this
machine lacks is skipped. ``REHYDRATE_TEST_REDIS_URL`` points the suite at a running server
instead: the ``redis`` harness uses it and the ``valkey`` one is skipped. Time is pinned to the
server's ``TIME`` when the test starts and moves only with ``advance``, so durations compare
exactly, as with the FakeClock of the other stores.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from rehydrate.stores._redis import RedisStore
from tests.redis_server import available_servers, drop_prefix, shared_server_url

from .harnesses import Harness
from .server_clock import advance, freeze


async def harness(request: pytest.FixtureRequest) -> AsyncIterator[Harness]:
    async for h in server_harness(request, "redis"):
        yield h


async def server_harness(request: pytest.FixtureRequest, kind: str) -> AsyncIterator[Harness]:
    """A Redis store on this session's server of ``kind`` (``redis`` or ``valkey``)."""
    if os.environ.get("REHYDRATE_TEST_REDIS_URL"):
        if kind != "redis":
            pytest.skip("REHYDRATE_TEST_REDIS_URL is set: the Redis store is tested on that server only")
        url = shared_server_url(request.config)
    elif kind not in available_servers():
        pytest.skip(f"no {kind} server binary on this machine")
    else:
        url = shared_server_url(request.config, kind)
    async for h in url_harness(url, drop_prefix):
        yield h


async def url_harness(url: str, drop: Callable[[str, str], Awaitable[None]]) -> AsyncIterator[Harness]:
    """A store on ``url`` under a key prefix of its own, time pinned; ``drop(url, prefix)`` cleans up."""
    prefix = f"rhtest-{uuid.uuid4().hex[:12]}"
    store = RedisStore.from_url(url, prefix=prefix, retries=2, retry_backoff=0.05)
    try:
        async with store:
            await freeze(store)
            yield Harness(
                store=store,
                advance=lambda seconds: advance(store, seconds),
                twin=lambda **kw: RedisStore.from_url(url, prefix=prefix, retries=2, **kw),
            )
    finally:
        await drop(url, prefix)
