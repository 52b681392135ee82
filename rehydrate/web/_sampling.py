"""Reading every dehydrator of a store through the public contract, and sampling it over time."""

from __future__ import annotations

import time
from collections.abc import Callable

import anyio
import structlog

from rehydrate._admin import Admin
from rehydrate._scheduler import DEAD_SUFFIX
from rehydrate.abc import Store
from rehydrate.errors import RehydrateError
from rehydrate.web._history import ID_SET_LIMIT, History, Point, Reading

__all__ = ["DEAD_SUFFIX", "Sampler", "dehydrator_names", "next_due", "read"]

log = structlog.get_logger("rehydrate.web")


async def dehydrator_names(store: Store) -> list[str]:
    """The dehydrators worth showing: those holding elements or dead letters (``x.dead`` folds into ``x``)."""
    return await Admin(store).names()


async def next_due(store: Store, name: str, ttn: float | None) -> float | None:
    """Seconds until the earliest element is due, negative when it is overdue (``ttn`` stops at 0).

    The earliest id in due order and its :class:`~rehydrate.ElementInfo` tell how far in the past
    it fell due: a backlog, or workers that are down. Falls back to ``ttn`` if the element left
    between the two calls.
    """
    if ttn is None or ttn > 0:
        return ttn
    first = await store.ids(name, limit=1)
    info = await store.info(name, first[0]) if first else None
    if info is None:
        return ttn
    return min(0.0, info.due - store.clock())


async def read(store: Store, name: str, *, id_set_limit: int = ID_SET_LIMIT) -> Reading:
    """One dehydrator now: its summary, dead letters, signed next due, and (if small) its ids.

    ``id_set_limit=0`` skips the id set (a Prometheus scrape needs no throughput).
    """
    summary = await store.summary(name)
    ids = None
    if id_set_limit > 0 and summary.size <= id_set_limit:
        listed = await store.ids(name, limit=id_set_limit + 1)
        if len(listed) <= id_set_limit:
            ids = frozenset(listed)
    return Reading(
        name=name,
        size=summary.size,
        due=summary.due,
        claimed=summary.claimed,
        dead=await store.size(name + DEAD_SUFFIX),
        next_due=await next_due(store, name, summary.ttn),
        ids=ids,
    )


class Sampler:
    """Samples every dehydrator into a :class:`History`, at most once per ``interval`` seconds.

    Either :meth:`run` keeps it fresh (the dashboard's lifespan, when it is the top-level app), or
    each live page asks :meth:`refresh` before it sends (a mounted app gets no lifespan events):
    both go through :meth:`refresh`, so a store is never read more often than once per interval
    however many pages watch.
    """

    def __init__(
        self, store: Store, *, interval: float, keep: int, now: Callable[[], float] = time.time
    ) -> None:
        self.store = store
        self.interval = interval
        self.history = History(keep=keep)
        self._now = now
        # Made on first use, inside the event loop (the app may be built before one runs).
        self._lock: anyio.Lock | None = None
        self._sampled: anyio.Event | None = None

    @property
    def sampled(self) -> anyio.Event:
        """Set when the next sample lands (a fresh event after each one): live pages wait on it."""
        if self._sampled is None:
            self._sampled = anyio.Event()
        return self._sampled

    async def sample(self) -> dict[str, Point]:
        """Read every dehydrator now and add the readings to the history."""
        readings = [await read(self.store, name) for name in await dehydrator_names(self.store)]
        points = self.history.add(max(self._now(), (self.history.sampled_at or 0) + 1e-6), readings)
        event, self._sampled = self.sampled, anyio.Event()
        event.set()
        return points

    async def refresh(self) -> None:
        """Sample unless a sample younger than the interval exists (one reader at a time)."""
        if self._lock is None:
            self._lock = anyio.Lock()
        async with self._lock:
            last = self.history.sampled_at
            if last is None or self._now() - last >= self.interval * 0.9:
                await self.sample()

    def due_in(self) -> float:
        """Seconds until the next sample is due."""
        last = self.history.sampled_at
        return 0.0 if last is None else max(0.0, last + self.interval - self._now())

    async def run(self) -> None:
        """Sample every ``interval`` until cancelled; a store error waits for the next round."""
        while True:
            try:
                await self.refresh()
            except RehydrateError as exc:  # a store that is down: say so, and try a round later
                log.warning("dashboard could not sample the store", error=repr(exc))
                await anyio.sleep(self.interval)
                continue
            await anyio.sleep(max(self.due_in(), 0.05))
