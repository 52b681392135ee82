"""Store fixtures for the one contract suite.

Each store's harness lives in ``tests/stores/harness_<store>.py`` and registers itself in
``HARNESSES``; the ``harness`` fixture runs every contract test against each. A harness yields a
:class:`~tests.stores.harnesses.Harness`: the store, opened, and a way to move its time forward
without sleeping (a FakeClock for memory and SQLite, a server-time offset for Redis).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from .harnesses import HARNESSES, Harness


@pytest.fixture(params=sorted(HARNESSES))
async def harness(request: pytest.FixtureRequest) -> AsyncIterator[Harness]:
    async for h in HARNESSES[request.param](request):
        yield h
