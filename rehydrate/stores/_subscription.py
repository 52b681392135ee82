"""The subscription the memory and Redis stores share: an event, set by whoever notices a change."""

from __future__ import annotations

import anyio

from rehydrate._clock import wait_or_sleep
from rehydrate.abc import Clock, Subscription

__all__ = ["EventSubscription"]


class EventSubscription(Subscription):
    """Remembers a notification until the next :meth:`wait`, which consumes it.

    ``notify`` is called in the event loop's thread: by the memory store on a push that makes an
    element due sooner, by the Redis store's pub/sub reader on a message.
    """

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._event = anyio.Event()

    def notify(self) -> None:
        self._event.set()

    async def wait(self, timeout: float | None) -> bool:
        woke = await wait_or_sleep(self._event, self._clock, timeout)
        if woke:
            self._event = anyio.Event()
        return woke
