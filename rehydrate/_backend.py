"""Which event loop runs the calling thread, as anyio names its backends (``asyncio``, ``trio``).

Not through sniffio: anyio no longer installs it (trio still does), so on a plain
``pip install 'rehydrate[redis,web]'`` an ``import sniffio`` fails. anyio has no public call that
names the running backend either (``anyio.lowlevel.current_token()`` gives its class, and the
name is private). Its public :func:`anyio.get_cancelled_exc_class` finds the backend as anyio
itself does for every call (sniffio where it is installed, else a running asyncio loop) and
returns that backend's own cancellation exception, which lives in the backend's package
(``asyncio.CancelledError``, ``trio.Cancelled``): the package's name is the backend's. Outside
an event loop it raises a ``RuntimeError`` (anyio's ``NoEventLoopError``, or sniffio's
``AsyncLibraryNotFoundError`` with an older anyio).
"""

from __future__ import annotations

__all__ = ["running_backend"]


def running_backend() -> str | None:
    """``"asyncio"`` or ``"trio"`` (the package of any other loop anyio runs on); ``None`` with
    no event loop in this thread."""
    import anyio  # (lazily: the command's one-shot verbs run without an event loop)

    try:
        cancelled = anyio.get_cancelled_exc_class()
    except RuntimeError:
        return None
    return cancelled.__module__.partition(".")[0]
