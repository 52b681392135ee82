"""Concurrent defers coalesced into one ``push_many`` per dehydrator and round trip.

A web service deferring from many requests at once would otherwise pay one store round trip per
defer, queued on the store's connection (and, on Redis, stamped by the server when each call ran,
so the queueing showed up as lateness). The :class:`DeferBatcher` lives in the scheduler's task
group. A defer that finds the store idle (nothing in flight, nothing waiting) is pushed at once by
its caller, so a single defer costs exactly what it did; one that arrives while a round trip is in
flight waits for the next tick, and every defer that waited goes out in one ``push_many`` per
dehydrator.

Each caller still gets its own id, its own error, and returns once its element is stored:

* **Due times** are the caller's: each waiter notes the store's clock when it was called, and
  its ttl is shortened by the time it waited before the batch was sent.
* **Errors.** ``push_many`` is all or nothing in every store: a batch refused for one item
  (a duplicate id, an element the serializer refuses) is pushed again one item at a time, in
  order, so only that item's caller gets the error (a duplicate within the batch: the first
  caller wins, as if the two had come one after the other). A store that is unavailable (after
  its own retries) fails the whole batch: each caller gets its own ``StoreUnavailableError``.
* **Cancellation.** A caller cancelled before its batch was sent takes its item out: nothing is
  stored. Once sent, the batch is not cut off (it is shielded, like the acker's), so a caller
  cancelled then has its element stored all the same: a cancelled defer may or may not have
  taken effect, as the store contract says of any cancelled call, but it is never lost half-way
  nor filed twice.
* **Stopping.** When the scheduler stops, the batcher sends what waits and ends; defers from then
  on are pushed directly by their callers, as when the scheduler is not running.
"""

from __future__ import annotations

from typing import Any, Final

import anyio

from rehydrate._core import _validate
from rehydrate.abc import Store
from rehydrate.errors import StoreUnavailableError

__all__ = ["DeferBatcher"]

#: The most items of one ``push_many`` (Redis refuses more than 10,000 in one script).
_MAX_BATCH: Final = 1000
#: How long a batch that was sent may take before its callers are told it did not confirm.
_SEND_TIMEOUT: Final = 60.0


class _Waiter:
    """One caller's defer, waiting for its batch to be sent."""

    __slots__ = ("asked", "element", "error", "id", "result", "ttl")

    def __init__(self, element: Any, ttl: float, id: str | None, asked: float) -> None:
        self.element, self.ttl, self.id = element, ttl, id
        #: The store's clock when the caller asked: its due time counts from here.
        self.asked = asked
        self.result: str | None = None
        self.error: BaseException | None = None


class _Batch:
    """The defers to one dehydrator waiting for the same tick; one event wakes them all."""

    __slots__ = ("direct", "done", "taken", "waiters")

    def __init__(self) -> None:
        self.waiters: list[_Waiter] = []
        self.done = anyio.Event()
        #: Being sent: a caller cancelled from now on no longer takes its defer out.
        self.taken = False
        #: Not sent by the batcher (it stopped first): each caller pushes its own.
        self.direct = False


class DeferBatcher:
    """Coalesces the plain defers (no ``replace``) issued concurrently to one store.

    :meth:`run` serves in the scheduler's task group until :meth:`stop`; :meth:`push` is what
    ``Scheduler.defer`` calls, whether or not it runs.
    """

    def __init__(self, store: Store) -> None:
        self._store = store
        self._pending: dict[str, _Batch] = {}
        self._wake = anyio.Event()
        #: Round trips of ours in flight (a direct push or a batch): while any is, defers wait.
        self._busy = 0
        self._open = False
        self._stopping = False
        #: Counters for benchmarks and tests: batches sent and the defers they carried.
        self.batches = 0
        self.batched = 0

    async def push(self, name: str, element: Any, ttl: float, id: str | None) -> str:
        """File one element; its id once it is stored."""
        store = self._store
        if not self._open:
            return await store.push(name, element, ttl=ttl, id=id)
        if not self._busy and not self._pending:
            # Nothing in flight: go now, alone. Defers arriving meanwhile wait for the next tick.
            self._busy += 1
            try:
                return await store.push(name, element, ttl=ttl, id=id)
            finally:
                self._busy -= 1
                if self._pending:
                    self._wake.set()
        # Checked here, so a bad name or id fails its own caller, not the batch.
        _validate.element_id(name, "name")
        if id is not None:
            _validate.element_id(id)
        waiter = _Waiter(element, ttl, id, store.clock())
        batch = self._pending.get(name)
        if batch is None:
            batch = self._pending[name] = _Batch()
        batch.waiters.append(waiter)
        if not self._busy:
            self._wake.set()
        try:
            await batch.done.wait()
        except BaseException:
            if not batch.taken and not batch.done.is_set():
                batch.waiters.remove(waiter)
                if not batch.waiters and self._pending.get(name) is batch:
                    del self._pending[name]
            raise
        if batch.direct:
            return await store.push(name, element, ttl=self._ttl_now(waiter), id=id)
        if waiter.error is not None:
            raise waiter.error
        assert waiter.result is not None
        return waiter.result

    def _ttl_now(self, waiter: _Waiter) -> float:
        """The waiter's ttl less the time it waited: due when its caller asked."""
        return max(0.0, waiter.ttl - max(0.0, self._store.clock() - waiter.asked))

    def stop(self) -> None:
        """Send what waits and end :meth:`run`; defers from now on are pushed by their callers."""
        self._open = False
        self._stopping = True
        self._wake.set()

    def open(self) -> None:
        """Coalesce from now on; :meth:`run` must be started (in the owner's task group)."""
        if not self._stopping:
            self._open = True

    async def run(self) -> None:
        """Send the waiting defers, one tick after another, until :meth:`stop`."""
        try:
            while self._open or self._pending:
                await self._wake.wait()
                self._wake = anyio.Event()
                await self._flush()
                if self._drained():
                    return
        finally:
            self.close()

    def close(self) -> None:
        """Stop coalescing; the callers of defers not sent yet push them themselves. Idempotent."""
        self._open = False
        pending, self._pending = self._pending, {}
        for batch in pending.values():
            batch.direct = True
            batch.done.set()

    def _drained(self) -> bool:
        """Stopping, and nothing waits any more."""
        return self._stopping and not self._pending

    async def _flush(self) -> None:
        # While a direct push is in flight, wait: it wakes us when it ends.
        while self._pending and not self._busy:
            batches, self._pending = self._pending, {}
            for batch in batches.values():
                batch.taken = True
            self._busy += 1
            try:
                # Shielded: a batch cut off half-way would leave its callers not knowing.
                with anyio.CancelScope(shield=True):
                    if len(batches) == 1:
                        ((name, batch),) = batches.items()
                        await self._send(name, batch)
                    else:
                        async with anyio.create_task_group() as tg:
                            for name, batch in batches.items():
                                tg.start_soon(self._send, name, batch)
                # Still busy: the callers just answered run first, and most defer again at once.
                # They join the next batch rather than one of them going alone, then the rest.
                await anyio.lowlevel.cancel_shielded_checkpoint()
            finally:
                self._busy -= 1

    async def _send(self, name: str, batch: _Batch) -> None:
        waiters = batch.waiters
        try:
            for start in range(0, len(waiters), _MAX_BATCH):
                chunk = waiters[start : start + _MAX_BATCH]
                try:
                    with anyio.fail_after(_SEND_TIMEOUT):
                        await self._send_chunk(name, chunk)
                except TimeoutError:
                    for waiter in chunk:
                        if waiter.result is None and waiter.error is None:
                            waiter.error = StoreUnavailableError(
                                f"a batch of defers to {name!r} did not confirm within "
                                f"{_SEND_TIMEOUT:g} s; it may or may not have been stored"
                            )
        finally:
            batch.done.set()

    async def _send_chunk(self, name: str, chunk: list[_Waiter]) -> None:
        store = self._store
        items = [(waiter.element, self._ttl_now(waiter), waiter.id) for waiter in chunk]
        try:
            ids = await store.push_many(name, items)
        except StoreUnavailableError as exc:
            for waiter in chunk:
                waiter.error = StoreUnavailableError(str(exc))
                waiter.error.__cause__ = exc
            return
        except Exception:
            for waiter in chunk:
                try:
                    waiter.result = await store.push(
                        name, waiter.element, ttl=self._ttl_now(waiter), id=waiter.id
                    )
                except Exception as exc:
                    waiter.error = exc
            return
        self.batches += 1
        self.batched += len(chunk)
        for waiter, pushed in zip(chunk, ids, strict=True):
            waiter.result = pushed
