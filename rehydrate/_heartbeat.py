"""A running scheduler's heartbeat: who it is and how it is doing, in the store, every few seconds.

The :class:`Heartbeat` task lives in the scheduler's task group. It registers the worker at once
(``Store.heartbeat``), then sends its counters every ``interval`` seconds with a TTL of
:data:`TTL_INTERVALS` intervals (measured by the store's clock, which stamps them), so a worker
that dies shows as expired within three intervals; on stop it deregisters.

It waits on its own clock, real time by default, not on the store's: liveness is about real
seconds, and a test that steps a ``FakeClock`` store through hours would otherwise wake it at
every step (on asyncio, ``anyio.wait_all_tasks_blocked`` naps 0.1 s whenever a task woke, so a
test stepping through a day took seconds more per test). Tests of the heartbeat pass a clock.

A heartbeat that fails (the store unreachable, a store
without the verbs) is logged and tried again at the next interval: it never stops the scheduler,
whose work matters more than its visibility.
"""

from __future__ import annotations

import os
import secrets
import socket
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

import anyio
import anyio.abc
import structlog

from rehydrate._backend import running_backend
from rehydrate._clock import SystemClock, wall
from rehydrate._deliveries import Counters, Stats
from rehydrate._version import __version__

if TYPE_CHECKING:
    from rehydrate._core._limits import LimitSpec
    from rehydrate.abc import Clock, Store

__all__ = ["TTL_INTERVALS", "Heartbeat", "backend_name", "new_worker_id", "spec_data"]

logger = structlog.get_logger("rehydrate")

#: A heartbeat expires after this many intervals: one late or lost heartbeat is not a death.
TTL_INTERVALS: Final = 3
#: How long a stopping worker tries to deregister (then its record simply expires).
_DEREGISTER_TIMEOUT: Final = 5.0


def new_worker_id() -> str:
    """``host:pid:random``: readable, and unique even where pids repeat (containers)."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"


def backend_name() -> str:
    """The event loop running this task (``asyncio``, ``trio``; see :mod:`rehydrate._backend`),
    or ``"unknown"`` outside one."""
    return running_backend() or "unknown"


def _numbers(stats: Stats) -> dict[str, Any]:
    return {
        "delivered": stats.delivered,
        "acked": stats.acked,
        "retried": stats.retried,
        "dead_lettered": stats.dead_lettered,
        "lost": stats.lost,
        "in_flight": stats.in_flight,
        "lateness_p50": stats.lateness_p50,
        "lateness_p99": stats.lateness_p99,
        "lateness_max": stats.lateness_max,
        "limit_parked": stats.limit_parked,
        "limit_granted": stats.limit_granted,
        "limit_woken": stats.limit_woken,
    }


def spec_data(spec: LimitSpec) -> dict[str, Any]:
    """A handler's limits as its heartbeat tells them (what views compute saturation from)."""
    return {
        "concurrency": spec.concurrency,
        "rates": [[n, per] for n, per in spec.rates],
        "lease": spec.lease,
    }


class Heartbeat:
    """Registers a scheduler in its store and keeps its record fresh; see the module docstring.

    ``concurrency`` maps each handler to its concurrency; ``counters`` is the scheduler's live
    table of per-dehydrator counters and ``in_flight(name)`` what is running in each, read at
    every beat, so handlers registered later are reported too.
    """

    def __init__(
        self,
        *,
        store: Store,
        worker_id: str,
        interval: float,
        concurrency: Callable[[], dict[str, int]],
        counters: dict[str, Counters],
        in_flight: Callable[[str], int],
        total: Callable[[], Stats],
        clock: Clock | None = None,
        limits: Callable[[], dict[str, LimitSpec]] | None = None,
    ) -> None:
        self.store = store
        self.worker_id = worker_id
        self.interval = interval
        self.ttl = interval * TTL_INTERVALS
        self._concurrency = concurrency
        self._counters = counters
        self._in_flight = in_flight
        self._total = total
        self._limits = limits
        self.clock: Clock = clock if clock is not None else SystemClock()
        self._started_at = wall(store.clock)
        self._backend = "unknown"
        #: Whether the last beat failed (a recovery is logged once, not every beat).
        self._failing = False
        self._unsupported = False

    def data(self) -> dict[str, Any]:
        """What the next heartbeat sends (a JSON object; ``docs/monitoring.md`` lists the fields)."""
        concurrency = self._concurrency()
        limits = {} if self._limits is None else self._limits()
        handlers: dict[str, Any] = {}
        for name in sorted(set(concurrency) | set(self._counters)):
            counters = self._counters.get(name) or Counters()
            entry = _numbers(counters.snapshot(in_flight=self._in_flight(name)))
            handlers[name] = {"concurrency": concurrency.get(name), **entry}
            if name in limits:
                handlers[name]["limits"] = spec_data(limits[name])
        return {
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "backend": self._backend,
            "version": __version__,
            "started_at": self._started_at,
            "interval": self.interval,
            "handlers": handlers,
            "totals": _numbers(self._total()),
        }

    async def beat(self) -> bool:
        """Send one heartbeat; ``False`` (logged) if it failed. Never raises but cancellation."""
        if self._unsupported:
            return False
        if not self.store.capabilities.workers:  # declared by the store's class (Store.capabilities)
            return self._unsupported_store()
        try:
            await self.store.heartbeat(self.worker_id, self.data(), ttl=self.ttl)
        except NotImplementedError:  # declared, yet not implemented: the same, found out late
            return self._unsupported_store()
        except Exception as exc:  # the store is down, a bug in a third-party store: never fatal
            if not self._failing:
                logger.warning(
                    "heartbeat failed; trying again every interval",
                    worker=self.worker_id,
                    error=f"{type(exc).__name__}: {exc}",
                    interval=self.interval,
                )
            self._failing = True
            return False
        if self._failing:
            logger.info("heartbeat sent again", worker=self.worker_id)
            self._failing = False
        return True

    def _unsupported_store(self) -> bool:
        """No heartbeats to this store from now on (logged once); ``False``, as a failed beat."""
        self._unsupported = True
        logger.warning(
            "heartbeats: this store does not keep workers; none will be sent", store=repr(self.store)
        )
        return False

    async def run(
        self, stopped: anyio.Event, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Beat at once (then report started), every ``interval``, until ``stopped``; deregister."""
        self._backend = backend_name()
        clock = self.clock
        try:
            await self.beat()
            task_status.started()
            deadline = clock()
            while not stopped.is_set():
                # The next beat is an interval after the last one was due, or after now if the
                # last one overran (a slow store): no burst of beats to catch up.
                deadline = max(deadline + self.interval, clock())
                if await clock.wait(stopped, deadline):
                    break
                await self.beat()
        finally:
            with anyio.CancelScope(shield=True), anyio.move_on_after(_DEREGISTER_TIMEOUT):
                try:
                    if not self._unsupported:
                        await self.store.deregister_worker(self.worker_id)
                except Exception as exc:
                    logger.warning(
                        "could not deregister this worker; its record will expire",
                        worker=self.worker_id,
                        error=f"{type(exc).__name__}: {exc}",
                    )
