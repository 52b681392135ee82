"""The Redis store in the contract suite.

Each test gets a store with its own key prefix on the session's server (see ``tests/redis_server.py``;
``REHYDRATE_TEST_REDIS_URL`` points at a running one instead), and its keys are deleted afterwards.
Time is pinned to the server's ``TIME`` when the test starts and moves only with ``advance``, so
durations compare exactly, as with the FakeClock of the other stores.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest

from rehydrate.stores._redis import RedisStore
from tests.redis_server import drop_prefix, shared_server_url

from .harnesses import Harness


async def harness(request: pytest.FixtureRequest) -> AsyncIterator[Harness]:
    url = shared_server_url(request.config)
    prefix = f"rhtest-{uuid.uuid4().hex[:12]}"
    store = RedisStore.from_url(url, prefix=prefix, retries=2, retry_backoff=0.05)
    try:
        async with store:
            await store._freeze_for_tests()
            yield Harness(
                store=store,
                advance=store._advance_for_tests,
                twin=lambda **kw: RedisStore.from_url(url, prefix=prefix, retries=2, **kw),
            )
    finally:
        await drop_prefix(url, prefix)
