"""A blocking facade over the async scheduler, for code that is not async (a Flask view, a script).

The scheduler runs in an event loop in a thread of its own (an anyio blocking portal); each method
here hands a call to that loop and waits for the answer.
"""

from __future__ import annotations

from collections.abc import Iterable
from contextlib import AbstractContextManager, ExitStack
from datetime import datetime
from types import TracebackType
from typing import Any, Literal, Self

from anyio.from_thread import BlockingPortal, start_blocking_portal

from rehydrate._core._validate import Seconds
from rehydrate._scheduler import DeadLetter, Scheduler, SchedulerNotRunningError, Stats
from rehydrate.errors import InvalidArgumentError, InvalidTypeError

__all__ = ["SyncScheduler"]


class SyncScheduler:
    """Run a :class:`Scheduler` in a background thread and call it from blocking code.

    ::

        with SyncScheduler(scheduler) as s:      # starts the loop thread and the scheduler
            s.defer("emails", {"to": "a@b.c"}, delay=60)

    Handlers run in that thread's event loop (``backend="asyncio"`` or ``"trio"``). Leaving the
    ``with`` block shuts the scheduler down gracefully, as ``async with`` does.
    """

    def __init__(
        self, scheduler: Scheduler | None = None, *, backend: Literal["asyncio", "trio"] = "asyncio"
    ) -> None:
        if scheduler is not None and not isinstance(scheduler, Scheduler):
            raise InvalidTypeError(f"scheduler must be a Scheduler, not {type(scheduler).__name__}")
        if backend not in ("asyncio", "trio"):
            raise InvalidArgumentError(f"backend must be 'asyncio' or 'trio', not {backend!r}")
        self.scheduler = scheduler if scheduler is not None else Scheduler()
        self._backend = backend
        self._stack: ExitStack | None = None
        self._portal: BlockingPortal | None = None

    def __enter__(self) -> Self:
        stack = ExitStack()
        try:
            portal_cm: AbstractContextManager[BlockingPortal] = start_blocking_portal(self._backend)
            portal = stack.enter_context(portal_cm)
            stack.enter_context(portal.wrap_async_context_manager(self.scheduler))
        except BaseException:
            stack.close()
            raise
        self._stack, self._portal = stack, portal
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        stack, self._stack, self._portal = self._stack, None, None
        if stack is not None:
            stack.__exit__(exc_type, exc, tb)

    @property
    def portal(self) -> BlockingPortal:
        if self._portal is None:
            raise SchedulerNotRunningError("use SyncScheduler in a with block")
        return self._portal

    def defer(
        self,
        name: str,
        element: Any,
        *,
        delay: Seconds | None = None,
        at: datetime | None = None,
        id: str | None = None,
    ) -> str:
        """:meth:`Scheduler.defer`, blocking."""
        return self.portal.call(lambda: self.scheduler.defer(name, element, delay=delay, at=at, id=id))

    def cancel(self, name: str, id: str) -> Any:
        """:meth:`Scheduler.cancel`, blocking."""
        return self.portal.call(self.scheduler.cancel, name, id)

    def dead_letters(self, name: str, *, limit: int | None = None) -> list[DeadLetter]:
        """:meth:`Scheduler.dead_letters`, blocking."""
        return self.portal.call(lambda: self.scheduler.dead_letters(name, limit=limit))

    def requeue(self, name: str, ids: Iterable[str] | None = None, *, delay: Seconds = 0) -> list[str]:
        """:meth:`Scheduler.requeue`, blocking."""
        return self.portal.call(lambda: self.scheduler.requeue(name, ids, delay=delay))

    def stats(self) -> Stats:
        """:meth:`Scheduler.stats` (read in the loop thread, so it is consistent)."""
        return self.portal.call(self._stats)

    async def _stats(self) -> Stats:
        return self.scheduler.stats()
