"""The Redis store in the contract suite, on a 3-master/3-replica Redis Cluster.

The cluster (``tests/redis_cluster.py``) is started once per session and shared; each test gets
its own key prefix, and its keys are deleted from every master afterwards. Time is pinned and
moved as in ``harness_redis.py``.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest

from rehydrate.stores._redis import RedisStore
from tests.redis_cluster import drop_prefix_everywhere, shared_cluster

from .harnesses import Harness


async def harness(request: pytest.FixtureRequest) -> AsyncIterator[Harness]:
    cluster = shared_cluster(request.config)
    url = cluster.seed_url
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
        await drop_prefix_everywhere(cluster, prefix)
