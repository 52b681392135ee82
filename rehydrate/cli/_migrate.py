"""``rehydrate migrate --store URL [--check]``: create or check a store's tables.

Stores that keep a schema in a shared database (PostgreSQL) create it on first use by default;
deployments where the application's database user may not create tables run this once with a
user that may (``migrate``), and can verify from the application's side that it is done
(``migrate --check``: changes nothing, exits 1 with one line if the schema is missing or outdated).
"""

from __future__ import annotations

import argparse

from rehydrate.cli._common import STORE_ENV, CLIError, store_url
from rehydrate.cli._parser import Commands, exits

__all__ = ["register", "run"]


def register(commands: Commands) -> None:
    """Add ``rehydrate migrate``."""
    command = commands.add(
        "migrate",
        "create (or check, with --check) the store's tables",
        "Create or upgrade the tables of a store that keeps a schema in a shared database "
        "(PostgreSQL); with --check, change nothing and exit 1 unless the schema is up to date.",
        exits(
            "done (or up to date, with --check)", "the schema is missing or outdated (--check), or an error"
        ),
        run,
    )
    command.add_argument("--store", metavar="URL", help=f"the store (default: ${STORE_ENV})")
    command.add_argument("--check", action="store_true", help="only check; create nothing")


def run(args: argparse.Namespace) -> int:
    import anyio

    from rehydrate.stores import open_store

    url = store_url(args)
    store = open_store(url)
    if not store.capabilities.migrate:
        print(f"nothing to migrate: {type(store).__name__} creates what it needs when it opens")
        return 0

    async def body() -> int:
        if args.check:
            problem = await store.check_schema()
            if problem is not None:
                raise CLIError(f"{problem}: run `rehydrate migrate --store URL`")
            print(f"{store!r}: the schema is up to date")
            return 0
        version = await store.migrate()
        print(f"{store!r}: schema version {version}, up to date")
        return 0

    return anyio.run(body)
