"""The PostgreSQL store in the contract suite.

Each test gets a store with its own table on the session's server (see ``tests/pg_server.py``;
``REHYDRATE_TEST_PG_URL`` points at a running one instead), dropped afterwards. Time is pinned to
the server's clock when the test starts and moves only with ``advance`` (an offset every statement
adds to ``clock_timestamp()``), so durations compare exactly, as with the other stores.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest

from rehydrate.stores._postgres import PostgresStore
from tests.pg_server import drop_tables, shared_server_url

from .harnesses import Harness
from .server_clock import advance, freeze


async def harness(request: pytest.FixtureRequest) -> AsyncIterator[Harness]:
    url = shared_server_url(request.config)
    table = f"rhtest_{uuid.uuid4().hex[:12]}"
    store = PostgresStore.from_url(url, table=table, retries=2, retry_backoff=0.05)
    async with store:
        try:
            await freeze(store)
            yield Harness(
                store=store,
                advance=lambda seconds: advance(store, seconds),
                twin=lambda **kw: PostgresStore.from_url(url, table=table, retries=2, **kw),
            )
        finally:
            await drop_tables(store)
