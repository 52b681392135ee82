"""Clocks for the async side: the time, and a way to wait for it to pass."""

from __future__ import annotations

import time

import anyio

__all__ = ["SystemClock", "WallClock", "wait_or_sleep"]


class SystemClock:
    """``time.monotonic``: immune to wall-clock steps; the memory store's default."""

    real = True

    def __call__(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await anyio.sleep(seconds)

    def __repr__(self) -> str:
        return "SystemClock()"


class WallClock(SystemClock):
    """``time.time``: survives a restart, so durable stores keep due times in it."""

    def __call__(self) -> float:
        return time.time()

    def __repr__(self) -> str:
        return "WallClock()"


async def wait_or_sleep(event: anyio.Event, clock: object, timeout: float | None) -> bool:
    """Wait for ``event`` or for ``timeout`` seconds of ``clock``; ``True`` if the event fired."""
    if event.is_set():
        return True
    if timeout is not None and timeout <= 0:
        return False
    if timeout is None:
        await event.wait()
        return True
    if getattr(clock, "real", False):
        with anyio.move_on_after(timeout):
            await event.wait()
        return event.is_set()
    # A clock of its own (a FakeClock): race its sleep against the event.
    async with anyio.create_task_group() as tg:

        async def sleeper() -> None:
            await clock.sleep(timeout)  # type: ignore[attr-defined]
            tg.cancel_scope.cancel()

        tg.start_soon(sleeper)
        await event.wait()
        tg.cancel_scope.cancel()
    return event.is_set()
