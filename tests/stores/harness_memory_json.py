"""The memory store with the JSON serializer (``memory://?serializer=json``) in the contract suite:
what ``docs/reference/testing.md`` recommends testing on, so it must keep the contract as the
durable stores do, refusals and round-tripped elements included."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from rehydrate.stores import MemoryStore
from rehydrate.testing import FakeClock

from .harnesses import Harness


async def harness(request: pytest.FixtureRequest) -> AsyncIterator[Harness]:
    clock = FakeClock(1000.0)
    async with MemoryStore(clock=clock, serializer="json") as store:
        yield Harness(
            store=store,
            advance=clock.advance,
            twin=lambda **kw: MemoryStore(clock=clock, **{"serializer": "json", **kw}),
            shared=False,
        )
