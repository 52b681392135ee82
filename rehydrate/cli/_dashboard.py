"""``rehydrate dashboard``: serve :func:`rehydrate.web.app` with Hypercorn until SIGINT/SIGTERM.

Hypercorn because it serves ASGI on asyncio *and* trio (``--backend``), as the rest of rehydrate
runs. This module is cheap to import (``rehydrate --help`` imports it for :func:`register`); the
event loop and the web stack are imported inside :func:`run`.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Final

from rehydrate.cli import _common
from rehydrate.cli._common import CLIError, port
from rehydrate.cli._parser import Commands, exits

__all__ = ["TOKEN_ENV", "register", "run"]

#: Where the token comes from when ``--token`` is not given.
TOKEN_ENV: Final = "REHYDRATE_DASHBOARD_TOKEN"


def register(commands: Commands) -> None:
    """Add ``rehydrate dashboard``."""
    dashboard = commands.add(
        "dashboard",
        "serve a web dashboard and /metrics (Prometheus) for a store",
        "A live web page of every dehydrator (counts, charts, elements, dead letters, and actions: "
        "requeue, delete, cancel, run now) and /metrics for Prometheus, served by Hypercorn until "
        f"SIGTERM/SIGINT. Beyond loopback it needs a token (--token or ${TOKEN_ENV}). Needs the web "
        "extra: pip install 'rehydrate[web]'.",
        exits("stopped by a signal", "an error (one line on stderr)"),
        run,
    )
    dashboard.add_argument(
        "--store",
        metavar="URL",
        help=f"memory://, sqlite:///path.db, redis://host:6379/0 (default: ${_common.STORE_ENV})",
    )
    dashboard.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    dashboard.add_argument("--port", type=port, default=8000, help="port to listen on (default 8000)")
    dashboard.add_argument("--token", help=f"required of every visitor (default: ${TOKEN_ENV})")
    dashboard.add_argument(
        "--backend",
        choices=["asyncio", "trio"],
        default="asyncio",
        help="event loop (default asyncio; trio needs pip install 'rehydrate[trio]')",
    )


def _bind(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def run(args: argparse.Namespace) -> int:
    import anyio
    import structlog

    log = structlog.get_logger("rehydrate.cli")
    try:
        from hypercorn.config import Config

        from rehydrate import web
        from rehydrate.web._security import is_loopback_host
    except ModuleNotFoundError as exc:
        raise CLIError(f"the dashboard needs {exc.name}: pip install 'rehydrate[web]'") from None
    token = args.token or os.environ.get(TOKEN_ENV) or None
    if token is None and not is_loopback_host(args.host):
        raise CLIError(
            f"refusing to serve the dashboard on {args.host} without a token: give --token or set "
            f"{TOKEN_ENV} (or listen on 127.0.0.1)"
        )
    if args.backend == "trio":
        try:
            import trio  # noqa: F401
        except ModuleNotFoundError:
            raise CLIError("--backend trio needs trio: pip install 'rehydrate[trio]'") from None
    _common.store_url(args)  # a missing --store is a one-line error before anything starts
    import contextlib
    import signal
    import socket  # here, not at the top: --help imports this module

    # Listen here, then hand the socket to Hypercorn: a busy port is one line, not a lifespan traceback.
    where = _bind(args.host, args.port)
    try:
        family = socket.AF_INET6 if ":" in args.host else socket.AF_INET
        listener = socket.create_server((args.host, args.port), family=family)
    except OSError as exc:
        raise CLIError(f"cannot listen on {where}: {exc.strerror or exc}") from None
    config = Config()
    config.bind = [f"fd://{listener.detach()}"]
    config.accesslog = None
    config.loglevel = "WARNING"  # our own line says where it listens
    config.graceful_timeout = 2.0  # live pages keep a stream open: do not wait long for them

    async def serve() -> int:
        from rehydrate.web._hypercorn import serve as serve_hypercorn

        async with _common.open_from(args) as store:
            board = web.app(store, token=token)
            serving = anyio.CancelScope()
            # Watched until the server has stopped: the first signal stops it gracefully (live
            # pages' streams get graceful_timeout), a second exits at once (not a
            # KeyboardInterrupt traceback, nor death by SIGTERM, once a watch had ended).
            with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                async with anyio.create_task_group() as tg:

                    async def server() -> None:
                        # In a task of its own, not this one that closes the store: see
                        # rehydrate.web._hypercorn for what Hypercorn leaves on its task.
                        with serving:
                            await serve_hypercorn(board, config, args.backend)
                        tg.cancel_scope.cancel()  # stopped: the signal watch is done too

                    tg.start_soon(server)
                    shown = f"[{args.host}]" if ":" in args.host else args.host
                    log.info(
                        "dashboard listening",
                        url=f"http://{shown}:{args.port}/",
                        metrics=f"http://{shown}:{args.port}/metrics",
                        token="required" if token else "none (loopback only)",
                        backend=args.backend,
                    )
                    async for signum in signals:
                        if not serving.cancel_called:
                            log.info("stopping", signal=signal.Signals(signum).name)
                            serving.cancel()
                        else:
                            log.warning("exiting at once", signal=signal.Signals(signum).name)
                            with contextlib.suppress(OSError):
                                sys.stderr.flush()
                            os._exit(128 + signum)
        log.info("dashboard stopped")
        return 0

    result: int = anyio.run(serve, backend=args.backend)
    return result
