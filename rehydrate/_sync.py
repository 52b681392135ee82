"""Blocking facades over the async scheduler and admin, for code that is not async (a Flask
view, a script).

Each runs an event loop in a thread of its own (an anyio blocking portal); each method here hands
a call to that loop and waits for the answer.

The scheduler's thread is started here rather than by anyio's ``start_blocking_portal``, whose
context manager is a generator: a process forked from one that started it (a pre-forking web
server's worker) inherits that generator, and its finaliser waits for a thread the child does not
have, so the child hung when it closed the facade or exited. Here the child merely drops what it
inherited. (:class:`SyncAdmin` lives for a ``with`` block, which a fork does not cross.)
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import os
import threading
from collections.abc import Awaitable, Callable
from concurrent.futures import Future
from contextlib import AbstractContextManager, ExitStack
from types import TracebackType
from typing import Any, Concatenate, Literal, ParamSpec, Self, TypeVar

import anyio
from anyio.from_thread import BlockingPortal, start_blocking_portal

from rehydrate._admin import Admin
from rehydrate._scheduler import Scheduler, SchedulerNotRunningError, Stats
from rehydrate.abc import Store
from rehydrate.errors import InvalidArgumentError, InvalidTypeError, RehydrateError

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

    In a ``with`` block (a script)::

        with SyncScheduler(scheduler) as s:      # starts the loop thread and the scheduler
            s.defer("emails", {"to": "a@b.c"}, delay=60)

    or for the life of a process (a Flask or Django app), started once and closed at exit::

        tasks = SyncScheduler(scheduler, producer=True).start()   # closed at exit

    Handlers run in that thread's event loop (``backend="asyncio"`` or ``"trio"``). With
    ``producer=True`` the scheduler is run by :meth:`Scheduler.producer`: it only defers, and its
    handlers are left to ``rehydrate worker`` (a web app's case; ``docs/web-apps.md``). Leaving
    the ``with`` block, or :meth:`close`, shuts the scheduler down gracefully, as ``async with``
    does.

    Every async method of :class:`Scheduler` has a blocking twin here, with the same parameters:
    ``defer``, ``cancel``, ``run_now``, ``dead_letters``, ``requeue``, ``schedule``,
    ``schedule_many``, ``unschedule``, ``schedules``, ``pause``, ``resume``; and :meth:`stats`.
    They may be called from any number of threads at once (a threaded WSGI server's); each waits
    for its own answer. Handlers are registered, and the rest read, on :attr:`scheduler`.

    The loop thread belongs to the process that started it: a process forked after
    :meth:`start` (a pre-forking server's worker, loaded with ``--preload``) has no such thread,
    and its calls raise :class:`~rehydrate.errors.SchedulerNotRunningError`; start one in each
    process, after the fork.
    """

    def __init__(
        self,
        scheduler: Scheduler | None = None,
        *,
        backend: Literal["asyncio", "trio"] = "asyncio",
        producer: bool = False,
    ) -> None:
        if scheduler is not None and not isinstance(scheduler, Scheduler):
            raise InvalidTypeError(f"scheduler must be a Scheduler, not {type(scheduler).__name__}")
        if backend not in ("asyncio", "trio"):
            raise InvalidArgumentError(f"backend must be 'asyncio' or 'trio', not {backend!r}")
        if not isinstance(producer, bool):
            raise InvalidTypeError(f"producer must be a bool, not {type(producer).__name__}")
        #: The scheduler it runs: register handlers and read its properties here.
        self.scheduler = scheduler if scheduler is not None else Scheduler()
        self._backend = backend
        self._producer = producer
        self._portal: BlockingPortal | None = None
        self._thread: threading.Thread | None = None
        #: The scheduler's ``async with``, entered in the loop thread through the portal.
        self._running: AbstractContextManager[Any] | None = None
        #: The process that started the loop thread (a forked child has none).
        self._pid: int | None = None

    def start(self) -> Self:
        """Start the loop thread and the scheduler; ``self``. For a facade that lives as long as
        its process (made at start-up, :meth:`close` at exit); ``with`` calls it too. One never
        closed is closed (gracefully) when the interpreter exits, by ``atexit``.

        Returns once the store is open (and the handlers are served, unless ``producer``);
        raises what opening it raised.
        """
        if self.running:
            raise RehydrateError("this SyncScheduler is already started")
        found: Future[BlockingPortal] = Future()
        thread = threading.Thread(
            target=self._loop, args=(found,), name="rehydrate-sync-scheduler", daemon=True
        )
        thread.start()
        portal = found.result()  # (raises if the event loop could not start)
        running = portal.wrap_async_context_manager(
            self.scheduler.producer() if self._producer else self.scheduler
        )
        try:
            running.__enter__()
        except BaseException:
            self._stop(portal, thread, cancel=True)
            raise
        self._portal, self._thread, self._running, self._pid = portal, thread, running, os.getpid()
        atexit.register(self.close)
        return self

    def _loop(self, found: Future[BlockingPortal]) -> None:
        """The loop thread: an event loop running a portal until :meth:`_stop`."""

        async def serve() -> None:
            async with BlockingPortal() as portal:
                found.set_result(portal)
                await portal.sleep_until_stopped()

        try:
            anyio.run(serve, backend=self._backend)
        except BaseException as exc:  # the loop could not start (trio not installed...)
            if not found.done():
                found.set_exception(exc)
            else:
                raise

    @staticmethod
    def _stop(portal: BlockingPortal, thread: threading.Thread, *, cancel: bool) -> None:
        with contextlib.suppress(RuntimeError):  # (stopped already)
            portal.call(portal.stop, cancel)
        thread.join()

    def close(self) -> None:
        """Shut the scheduler down gracefully (as leaving ``async with`` does: running handlers
        get ``grace``), then end the loop thread. Idempotent; in a forked child, which has no
        loop thread, it only forgets the parent's."""
        self.__exit__(None, None, None)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        portal, thread, running = self._portal, self._thread, self._running
        self._portal = self._thread = self._running = None
        if portal is None or thread is None or running is None or self._pid != os.getpid():
            return
        atexit.unregister(self.close)
        try:
            running.__exit__(exc_type, exc, tb)
        finally:
            self._stop(portal, thread, cancel=exc_type is not None)

    @property
    def running(self) -> bool:
        """Whether it is started (and not closed) in this process."""
        return self._portal is not None and self._pid == os.getpid()

    @property
    def portal(self) -> BlockingPortal:
        """The loop thread's anyio portal: ``portal.call(async_function, *args)`` runs anything
        else in the scheduler's event loop."""
        if self._portal is None:
            raise SchedulerNotRunningError(
                "start the SyncScheduler first: `with SyncScheduler(scheduler) as s:`, or "
                "`s = SyncScheduler(scheduler).start()` and `s.close()` at exit"
            )
        if self._pid != os.getpid():
            raise SchedulerNotRunningError(
                f"this SyncScheduler was started in process {self._pid}, before this one was forked "
                "from it: its event loop thread is not here; start one in each process, after the fork"
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

    def stats(self, name: str | None = None) -> Stats:
        """:meth:`Scheduler.stats` (read in the loop thread, so it is consistent)."""
        return self.portal.call(self._stats, name)

    async def _stats(self, name: str | None) -> Stats:
        return self.scheduler.stats(name)


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
    limits = _blocking_admin(Admin.limits)
    elements = _blocking_admin(Admin.elements)
    remove = _blocking_admin(Admin.remove)
    run_now = _blocking_admin(Admin.run_now)
    schedules = _blocking_admin(Admin.schedules)
    schedule = _blocking_admin(Admin.schedule)
    find_schedule = _blocking_admin(Admin.find_schedule)
    pause = _blocking_admin(Admin.pause)
    resume = _blocking_admin(Admin.resume)
    unschedule = _blocking_admin(Admin.unschedule)
    dead_letters = _blocking_admin(Admin.dead_letters)
    requeue = _blocking_admin(Admin.requeue)
    delete_dead_letter = _blocking_admin(Admin.delete_dead_letter)
