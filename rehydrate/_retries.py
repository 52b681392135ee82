"""The delayed retries of failed handlers, coalesced: one ``reschedule_many`` per round trip.

When a downstream service goes down, every handler in flight fails within the same moment: with
``concurrency=1000``, a thousand ``reschedule`` calls, one round trip each, queued on the store's
connection. The :class:`Rescheduler` lives in a runner's task group, like the acker, and sends
every retry that waits in one fenced :meth:`~rehydrate.abc.Store.reschedule_many`.

Unlike an ack, a retry's caller waits for its own answer: whether the retry was filed, or the
element's lease had been lost meanwhile (the delivery's outcome, its log line and its span say
which). So:

* **Due times** count from when the handler failed: each retry notes the store's clock then, and
  its delay is shortened by the time it waited for its batch.
* **Errors.** A store error fails the batch: each of its callers gets it (and logs it; the
  element's lease brings it back, so nothing is lost).
* **Cancellation.** A caller cancelled before its batch was sent takes its retry out (its lease
  brings the element back); once sent, the batch is shielded and finishes.
* **Stopping.** When :meth:`Rescheduler.run` ends (its task group is cancelled), the retries that
  wait are sent by their own callers, one ``reschedule`` each, and so are later ones.
"""

from __future__ import annotations

from typing import Final

import anyio

from rehydrate.abc import Store

__all__ = ["Rescheduler"]

#: Most retries in one ``reschedule_many``.
_MAX_BATCH: Final = 1000


class _Retry:
    __slots__ = ("asked", "delay", "id", "result", "token")

    def __init__(self, id: str, token: int, delay: float, asked: float) -> None:
        self.id, self.token, self.delay, self.asked = id, token, delay, asked
        self.result: bool | None = None


class _Batch:
    __slots__ = ("direct", "done", "error", "retries", "sent")

    def __init__(self) -> None:
        self.retries: list[_Retry] = []
        self.done = anyio.Event()
        #: Taken by the sender: a caller cancelled from now on no longer takes its retry out.
        self.sent = False
        #: The rescheduler stopped before sending it: each caller sends its own.
        self.direct = False
        self.error: BaseException | None = None


class Rescheduler:
    """Coalesces the fenced retries of one dehydrator's failed deliveries."""

    def __init__(self, store: Store, name: str) -> None:
        self._store = store
        self._name = name
        self._batch = _Batch()
        self._wake = anyio.Event()
        self._running = False
        self._closed = False
        #: For tests and benchmarks: store calls made, and the retries they carried.
        self.calls = 0
        self.sent = 0

    async def reschedule(self, id: str, token: int, delay: float) -> bool:
        """File the claimed element ``id`` anew in ``delay`` seconds, released, if it is still
        under ``token``; whether it was. Raises what the store raised."""
        store = self._store
        if not self._running:
            return await store.reschedule(self._name, id, ttl=delay, token=token)
        retry = _Retry(id, token, delay, store.clock())
        batch = self._batch
        batch.retries.append(retry)
        self._wake.set()
        try:
            await batch.done.wait()
        except BaseException:
            if not batch.sent:
                batch.retries.remove(retry)
            raise
        if batch.direct:
            return await store.reschedule(self._name, id, ttl=self._delay_now(retry), token=token)
        if batch.error is not None:
            raise batch.error
        assert retry.result is not None
        return retry.result

    def _delay_now(self, retry: _Retry) -> float:
        return max(0.0, retry.delay - max(0.0, self._store.clock() - retry.asked))

    async def run(self) -> None:
        """Send the retries that wait, a batch per round trip, until cancelled."""
        self._running = not self._closed
        try:
            while True:
                await self._wake.wait()
                self._wake = anyio.Event()
                while self._batch.retries:
                    batch, self._batch = self._batch, _Batch()
                    batch.sent = True
                    try:
                        # Shielded: a batch cut off half-way would leave its callers not knowing.
                        with anyio.CancelScope(shield=True):
                            await self._send(batch.retries)
                    except Exception as exc:
                        batch.error = exc
                    finally:
                        batch.done.set()
        finally:
            self._running = False
            self._closed = True
            self._batch.direct = True
            self._batch.done.set()

    async def _send(self, retries: list[_Retry]) -> None:
        store, name = self._store, self._name
        waiting = retries
        while waiting:
            # An id may wait twice (its lease ran out, it was claimed again, and both runs failed):
            # reschedule_many takes each id once, so the second goes in the next call.
            chunk: list[_Retry] = []
            later: list[_Retry] = []
            ids: set[str] = set()
            for retry in waiting:
                if retry.id in ids or len(chunk) >= _MAX_BATCH:
                    later.append(retry)
                else:
                    ids.add(retry.id)
                    chunk.append(retry)
            results = await store.reschedule_many(
                name, [(retry.id, retry.token, self._delay_now(retry)) for retry in chunk]
            )
            self.calls += 1
            self.sent += len(chunk)
            for retry, ok in zip(chunk, results, strict=True):
                retry.result = ok
            waiting = later
