"""Hypercorn inside an anyio program: started in a task, stopped by cancelling that task.

Both the dashboard and ``rehydrate worker --metrics-port`` serve ASGI with Hypercorn on whichever
backend the process runs (asyncio or trio), and both stop it as structured concurrency stops
anything: by cancelling the task that serves. Hypercorn does not take that well when run as it
comes:

* its shutdown awaits its connections (a scraper's keep-alive connection, idle between scrapes,
  is closed then; a request in flight is answered), and a cancelled scope that interrupts those
  awaits leaves it in a state it does not expect: on asyncio every connection's task then ends in
  ``InvalidStateError`` (``Exception is not set``);
* on asyncio (Python 3.11 and 3.12 at least), its task group leaves the task it runs in marked as cancelled
  (``Task.cancelling()`` stays 1 once its shutdown trigger fires). In a task that goes on to close
  a store, the next cancel scope that closes there (a Redis store's watchdog group) takes that mark
  for a cancellation from outside and re-raises ``CancelledError``.

So :func:`serve` runs Hypercorn in a task of its own, shielded, and turns its own cancellation
into Hypercorn's shutdown trigger. The shield holds the caller for at most Hypercorn's
``graceful_timeout`` (and the app's lifespan shutdown), which the caller sets.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import TYPE_CHECKING, Any

import anyio

if TYPE_CHECKING:
    from hypercorn.config import Config

__all__ = ["serve"]

ASGIApp = Callable[
    [
        MutableMapping[str, Any],
        Callable[[], Awaitable[MutableMapping[str, Any]]],
        Callable[[MutableMapping[str, Any]], Awaitable[None]],
    ],
    Awaitable[None],
]


async def serve(app: ASGIApp, config: Config, backend: str) -> None:
    """Serve ``app`` with Hypercorn on ``backend`` (``"asyncio"`` or ``"trio"``) until cancelled.

    Cancelling this task shuts Hypercorn down gracefully, then the cancellation goes on as usual;
    an error from Hypercorn (its lifespan startup failed, say) is raised here. Requests still
    running then (a live page's event stream never ends by itself) get ``config.graceful_timeout``
    and are then cancelled here, inside the app, so that Hypercorn has no connection of its own to
    cut: on asyncio (Python 3.11) cutting one logs a ``CancelledError`` traceback from asyncio's
    streams. Hypercorn's own timeout, a second later, is only a backstop.
    """
    shutdown = anyio.Event()
    grace = config.graceful_timeout
    config.graceful_timeout = grace + 1.0
    running: set[anyio.CancelScope] = set()

    async def guarded(scope: MutableMapping[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        with anyio.CancelScope() as request:
            running.add(request)
            try:
                await app(scope, receive, send)
            finally:
                running.discard(request)

    async def run() -> None:
        with anyio.CancelScope(shield=True):
            if backend == "trio":
                from hypercorn.trio import serve as serve_trio

                await serve_trio(guarded, config, shutdown_trigger=shutdown.wait)  # type: ignore[arg-type]
            else:
                from hypercorn.asyncio import serve as serve_asyncio

                await serve_asyncio(guarded, config, shutdown_trigger=shutdown.wait)  # type: ignore[arg-type]

    async with anyio.create_task_group() as tg:

        async def server() -> None:
            await run()
            tg.cancel_scope.cancel()  # ended on its own: nothing left to wait for

        tg.start_soon(server)
        try:
            await anyio.sleep_forever()
        finally:
            shutdown.set()  # cancelled (or Hypercorn failed): the shielded server winds down
            deadline = anyio.current_time() + grace
            for request in list(running):
                request.deadline = deadline
