"""The contract suite, run against the example store: one class, one fixture.

Run it with ``pytest examples/contract_store`` (the project's own test run collects it too).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from dict_store import DictStore

from rehydrate.testing import FakeClock
from rehydrate.testing.contract import Harness, StoreContract


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    """Every test on both of anyio's backends (anyio's own fixture runs asyncio alone)."""
    return str(request.param)


class TestDictStore(StoreContract):
    @pytest.fixture
    async def harness(self) -> AsyncIterator[Harness]:
        clock = FakeClock(1000.0)
        async with DictStore(clock=clock) as store:
            yield Harness(
                store=store,
                advance=clock.advance,
                # Another store object (the lifecycle tests open and close it); in memory, it
                # shares nothing with the first.
                twin=lambda **options: DictStore(clock=clock, **options),
                shared=False,
            )
