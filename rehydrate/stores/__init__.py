"""Stores: where dehydrators live. Pick one with :func:`open_store` and a URL.

* ``memory://``: in this process, the embedded default;
* ``sqlite:///path/to/file.db``: durable, shared by the processes of one machine;
* ``redis://host:6379/0`` (``rediss://`` for TLS): shared by many machines; Valkey too;
  ``redis+sentinel://host:26379/service/0`` for a Sentinel-managed primary.
* ``postgresql://user:password@host:5432/db`` (also ``postgres://``): shared by many machines.

Each store is imported only when asked for: the optional ones' dependencies stay optional, and the
command's SQLite verbs do not pay for the memory store's dehydrator.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from rehydrate.errors import InvalidTypeError, UnsupportedStoreError

if TYPE_CHECKING:
    from rehydrate.abc import Store
    from rehydrate.stores._memory import MemoryStore
    from rehydrate.stores._postgres import PostgresStore
    from rehydrate.stores._redis import RedisStore
    from rehydrate.stores._sqlite import SQLiteStore

__all__ = ["MemoryStore", "PostgresStore", "RedisStore", "SQLiteStore", "open_store"]

#: scheme -> (module, class) of the store that serves it.
_SCHEMES: dict[str, tuple[str, str]] = {
    "memory": ("rehydrate.stores._memory", "MemoryStore"),
    "sqlite": ("rehydrate.stores._sqlite", "SQLiteStore"),
    "redis": ("rehydrate.stores._redis", "RedisStore"),
    "rediss": ("rehydrate.stores._redis", "RedisStore"),
    "redis+sentinel": ("rehydrate.stores._redis", "RedisStore"),
    "rediss+sentinel": ("rehydrate.stores._redis", "RedisStore"),
    "postgresql": ("rehydrate.stores._postgres", "PostgresStore"),
    "postgres": ("rehydrate.stores._postgres", "PostgresStore"),
}


def open_store(url: str, **options: Any) -> Store:
    """Return an (unopened) store for ``url``; use it with ``async with``.

    ``options`` go to the store's ``from_url`` (``clock=`` for memory and SQLite, ``serializer=``
    for every store: none for memory unless given). ``create=False`` makes a store that would
    create its database (SQLite: the file) raise :class:`~rehydrate.errors.StoreUnavailableError`
    at ``open`` instead; every store accepts it. Raises
    :class:`~rehydrate.errors.UnsupportedStoreError` for an unknown scheme.
    """
    if not isinstance(url, str):
        raise InvalidTypeError(f"url must be a str, not {type(url).__name__}")
    scheme = urlsplit(url).scheme.lower()
    if scheme not in _SCHEMES:
        raise UnsupportedStoreError(
            f"unsupported store URL {url!r}: it must start with " + ", ".join(f"{s}://" for s in _SCHEMES)
        )
    module, cls = _SCHEMES[scheme]
    store_cls = getattr(importlib.import_module(module), cls)
    store: Store = store_cls.from_url(url, **options)
    return store


def __getattr__(name: str) -> Any:
    """Import the stores lazily: ``from rehydrate.stores import RedisStore``."""
    for module, cls in _SCHEMES.values():
        if cls == name:
            return getattr(importlib.import_module(module), cls)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
