from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from rehydrate.stores import MemoryStore
from rehydrate.testing import FakeClock

from .harnesses import Harness


async def harness(request: pytest.FixtureRequest) -> AsyncIterator[Harness]:
    clock = FakeClock(1000.0)
    async with MemoryStore(clock=clock) as store:
        yield Harness(
            store=store, advance=clock.advance, twin=lambda **kw: MemoryStore(clock=clock, **kw), shared=False
        )
