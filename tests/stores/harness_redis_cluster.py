"""The Redis store in the contract suite, on a 3-master/3-replica Redis Cluster.

The cluster (``tests/redis_cluster.py``) is started once per session and shared; each test gets
its own key prefix, and its keys are deleted from every master afterwards. Time is pinned and
moved as in ``harness_redis.py``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.redis_cluster import drop_prefix_everywhere, shared_cluster

from .harness_redis import url_harness
from .harnesses import Harness


async def harness(request: pytest.FixtureRequest) -> AsyncIterator[Harness]:
    cluster = shared_cluster(request.config)

    async def drop(url: str, prefix: str) -> None:
        await drop_prefix_everywhere(cluster, prefix)

    async for h in url_harness(cluster.seed_url, drop):
        yield h
