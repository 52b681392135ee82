"""Blocking facades over the async scheduler and admin, for code that is not async (a Flask
view, a script).

Each runs an event loop in a thread of its own (an anyio blocking portal); each method here hands a
call to that loop and waits for the answer.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from contextlib import AbstractContextManager, ExitStack
from types import TracebackType
from typing import Concatenate, Literal, ParamSpec, Self, TypeVar

from anyio.from_thread import BlockingPortal, start_blocking_portal

from rehydrate._admin import Admin
from rehydrate._scheduler import Scheduler, SchedulerNotRunningError, Stats
from rehydrate.abc import Store
from rehydrate.errors import InvalidArgumentError, InvalidTypeError

__all__ = ["SyncAdmin", "SyncScheduler"]

_P = ParamSpec("_P")
_T = TypeVar("_T")


def _blocking(
    method: Callable[Concatenate[Scheduler, _P], Awaitable[_T]],
) -> Callable[Concatenate[SyncScheduler, _P], _T]:
    """The blocking twin of an async :class:`Scheduler` method: same parameters, same types.

    Made from the method itself, so the facade cannot fall behind the async API (``defer`` once
    lacked ``replace``); ``tests/test_sync.py`` compares every public async method's signature.
    """
    name = method.__name__

    def call(self: SyncScheduler, /, *args: _P.args, **kwargs: _P.kwargs) -> _T:
        bound: Callable[_P, Awaitable[_T]] = getattr(self.scheduler, name)
        return self.portal.call(functools.partial(bound, *args, **kwargs))

    functools.update_wrapper(call, method)  # the signature, annotations and name of the original
    call.__qualname__ = f"SyncScheduler.{name}"
    call.__doc__ = f":meth:`Scheduler.{name}`, blocking (run in the scheduler's event loop).\n\n" + (
        method.__doc__ or ""
    )
    return call


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
            raise SchedulerNotRunningError(
                "use SyncScheduler in a with block: `with SyncScheduler(scheduler) as s:`"
            )
        return self._portal

    defer = _blocking(Scheduler.defer)
    cancel = _blocking(Scheduler.cancel)
    run_now = _blocking(Scheduler.run_now)
    run_now_outcome = _blocking(Scheduler.run_now_outcome)
    dead_letters = _blocking(Scheduler.dead_letters)
    requeue = _blocking(Scheduler.requeue)
    schedule = _blocking(Scheduler.schedule)
    schedule_many = _blocking(Scheduler.schedule_many)
    unschedule = _blocking(Scheduler.unschedule)
    schedules = _blocking(Scheduler.schedules)
    pause = _blocking(Scheduler.pause)
    resume = _blocking(Scheduler.resume)

    def stats(self) -> Stats:
        """:meth:`Scheduler.stats` (read in the loop thread, so it is consistent)."""
        return self.portal.call(self._stats)

    async def _stats(self) -> Stats:
        return self.scheduler.stats()


def _blocking_admin(
    method: Callable[Concatenate[Admin, _P], Awaitable[_T]],
) -> Callable[Concatenate[SyncAdmin, _P], _T]:
    """The blocking twin of an :class:`Admin` method (as :func:`_blocking` for the scheduler)."""
    name = method.__name__

    def call(self: SyncAdmin, /, *args: _P.args, **kwargs: _P.kwargs) -> _T:
        bound: Callable[_P, Awaitable[_T]] = getattr(self.admin, name)
        return self.portal.call(functools.partial(bound, *args, **kwargs))

    functools.update_wrapper(call, method)
    call.__qualname__ = f"SyncAdmin.{name}"
    call.__doc__ = f":meth:`Admin.{name}`, blocking (run in the admin's event loop).\n\n" + (
        method.__doc__ or ""
    )
    return call


class SyncAdmin:
    """:class:`Admin` from blocking code: the store is opened in an event loop in a thread of its
    own for the ``with`` block, and closed when it ends.

    ::

        with SyncAdmin("sqlite:///jobs.db") as admin:
            admin.pause("reports", "daily")
            print([info.name for info in admin.dehydrators()])

    ``store`` is a store URL or a :class:`~rehydrate.abc.Store` not opened yet (a store lives in
    the event loop it is opened in, so this one is opened, and closed, in the admin's).
    """

    def __init__(self, store: Store | str, *, backend: Literal["asyncio", "trio"] = "asyncio") -> None:
        if isinstance(store, str):
            from rehydrate.stores import open_store

            store = open_store(store)
        if backend not in ("asyncio", "trio"):
            raise InvalidArgumentError(f"backend must be 'asyncio' or 'trio', not {backend!r}")
        self.admin = Admin(store)
        self._backend = backend
        self._stack: ExitStack | None = None
        self._portal: BlockingPortal | None = None

    def __enter__(self) -> Self:
        stack = ExitStack()
        try:
            portal_cm: AbstractContextManager[BlockingPortal] = start_blocking_portal(self._backend)
            portal = stack.enter_context(portal_cm)
            stack.enter_context(portal.wrap_async_context_manager(self.admin.store))
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
            raise SchedulerNotRunningError("use SyncAdmin in a with block: `with SyncAdmin(store) as admin:`")
        return self._portal

    names = _blocking_admin(Admin.names)
    dehydrator = _blocking_admin(Admin.dehydrator)
    dehydrators = _blocking_admin(Admin.dehydrators)
    workers = _blocking_admin(Admin.workers)
    elements = _blocking_admin(Admin.elements)
    remove = _blocking_admin(Admin.remove)
    run_now = _blocking_admin(Admin.run_now)
    schedules = _blocking_admin(Admin.schedules)
    find_schedule = _blocking_admin(Admin.find_schedule)
    pause = _blocking_admin(Admin.pause)
    resume = _blocking_admin(Admin.resume)
    unschedule = _blocking_admin(Admin.unschedule)
    dead_letters = _blocking_admin(Admin.dead_letters)
    requeue = _blocking_admin(Admin.requeue)
    delete_dead_letter = _blocking_admin(Admin.delete_dead_letter)
