"""``rehydrate migrate --store URL [--check]``: create or check a store's tables.

Stores that keep a schema in a shared database (PostgreSQL) create it on first use by default;
deployments where the application's database user may not create tables run this once with a
user that may (``migrate``), and can verify from the application's side that it is done
(``migrate --check``: changes nothing, exits 1 with one line if the schema is missing or outdated).
"""

from __future__ import annotations

import argparse

import anyio

from rehydrate.cli._common import CLIError, store_url
from rehydrate.stores import open_store

__all__ = ["run"]


def run(args: argparse.Namespace) -> int:
    url = store_url(args)
    store = open_store(url)
    migrate = getattr(store, "migrate", None)
    check = getattr(store, "check_schema", None)
    if migrate is None or check is None:
        print(f"nothing to migrate: {type(store).__name__} creates what it needs when it opens")
        return 0

    async def body() -> int:
        if args.check:
            problem: str | None = await check()
            if problem is not None:
                raise CLIError(f"{problem}: run `rehydrate migrate --store URL`")
            print(f"{store!r}: the schema is up to date")
            return 0
        version: int = await migrate()
        print(f"{store!r}: schema version {version}, up to date")
        return 0

    return anyio.run(body)
