"""One-shot verbs on SQLite without an event loop: what a shell script pays per call.

A verb such as ``rehydrate push`` on a ``sqlite://`` store is one transaction. Starting asyncio
for it cost more than the transaction: the event loop's import and start-up were most of the
command's time (``benchmarks/bench_cli.py``). The verbs stay the same ``async def`` functions
the other stores run; on SQLite they get a :class:`~rehydrate.stores._sqlite.BlockingSQLiteStore`,
whose coroutines never suspend, and :func:`drive` runs them to the end with one ``send``.
"""

from __future__ import annotations

import argparse
from collections.abc import Awaitable, Callable, Coroutine
from typing import TYPE_CHECKING, Any, Final, TypeVar

if TYPE_CHECKING:
    from rehydrate.abc import Store

__all__ = ["ONE_SHOT", "applies", "drive", "run"]

_T = TypeVar("_T")

#: The verbs that run without an event loop on SQLite (``stats --watch`` sleeps: it gets a loop;
#: ``requeue`` goes through the scheduler).
ONE_SHOT: Final = frozenset(
    {"push", "pull", "look", "poll", "xpoll", "xack", "ttn", "update", "stats", "dead"}
)


def applies(args: argparse.Namespace, url: str) -> bool:
    """Whether this command line can run without an event loop."""
    return (
        url[:7].lower() == "sqlite:"
        and getattr(args, "command", None) in ONE_SHOT
        and not getattr(args, "watch", False)
    )


def drive(coro: Coroutine[Any, Any, _T]) -> _T:
    """Run a coroutine that never suspends to its end, with no event loop."""
    try:
        coro.send(None)
    except StopIteration as done:
        result: _T = done.value
        return result
    coro.close()
    raise RuntimeError("a one-shot verb awaited something that needs an event loop")


def run(
    verb: Callable[[argparse.Namespace, Store], Awaitable[int]], args: argparse.Namespace, url: str
) -> int:
    """Open ``url`` as a blocking SQLite store, run ``verb`` on it, close it."""
    from rehydrate.cli._common import creates
    from rehydrate.stores._sqlite import BlockingSQLiteStore

    store = BlockingSQLiteStore.from_url(url, create=creates(args))

    async def body() -> int:
        async with store:
            return await verb(args, store)

    return drive(body())
