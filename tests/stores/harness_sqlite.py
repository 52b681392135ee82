from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from rehydrate.stores._sqlite import SQLiteStore
from rehydrate.testing import FakeClock

from .harnesses import Harness


async def harness(request: pytest.FixtureRequest) -> AsyncIterator[Harness]:
    tmp_path = request.getfixturevalue("tmp_path")
    clock = FakeClock(1000.0)
    path = tmp_path / "store.db"
    async with SQLiteStore(path, clock=clock) as store:
        yield Harness(
            store=store, advance=clock.advance, twin=lambda **kw: SQLiteStore(path, clock=clock, **kw)
        )
