"""``rehydrate serve``: ReDe's commands over RESP, for any Redis client, on any store.

Safe by default: it listens on loopback; another address needs a password (``--requirepass``,
``$REHYDRATE_SERVE_PASSWORD`` or ``--requirepass-file``, the last two out of ``ps``'s sight);
TLS when given a certificate. SIGTERM/SIGINT close the listeners and let the replies in flight
finish. This module is cheap to import (the parser is built from it for every command); the
server and the event loop are imported by :func:`run`.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any, Final

from rehydrate.cli import _common
from rehydrate.cli._common import BadValue, CLIError, duration
from rehydrate.cli._parser import Commands, exits

__all__ = ["PASSWORD_ENV", "register", "run"]

#: Where the password comes from when neither ``--requirepass`` nor ``--requirepass-file`` is given.
PASSWORD_ENV: Final = "REHYDRATE_SERVE_PASSWORD"
DEFAULT_PORT: Final = 6380  # beside Redis's 6379 (rehydrate._serve._server says so too)


def _port(text: str) -> int:
    """A TCP port, or 0 for none (as Redis's ``port 0``: a Unix socket only)."""
    try:
        value = int(text)
    except ValueError:
        raise BadValue(f"invalid port {text!r}: expected a whole number") from None
    if not 0 <= value < 65536:
        raise BadValue(f"invalid port {text!r}: it must be from 0 (no TCP) to 65535")
    return value


def _size(text: str) -> int:
    """A size in bytes: ``512``, ``64kb``, ``4mb``."""
    cleaned = text.strip().lower()
    for suffix, factor in (("kb", 1024), ("mb", 1024**2), ("gb", 1024**3), ("b", 1)):
        if cleaned.endswith(suffix):
            cleaned, scale = cleaned[: -len(suffix)], factor
            break
    else:
        scale = 1
    try:
        value = int(cleaned) * scale
    except ValueError:
        raise BadValue(f"invalid size {text!r}: expected bytes, e.g. 512, 64kb, 4mb") from None
    if value < 1:
        raise BadValue(f"invalid size {text!r}: it must be at least 1 byte")
    return value


DESCRIPTION: Final = (
    "Serve ReDe's commands (REDE.PUSH, GIDPUSH, PULL, POLL, XPOLL, XACK, LOOK, TTN, UPDATE) over "
    "the Redis protocol, RESP2 and RESP3, for any Redis client, on any store: on memory:// a "
    "standalone dehydrator server; on SQLite, Redis or PostgreSQL shared by many serve processes, "
    "and what a client pushes into a name is delivered to the @scheduler.handler of that name. "
    "It listens on 127.0.0.1 unless --bind says otherwise, which needs a password. See "
    "docs/serve.md."
)


def register(commands: Commands) -> None:
    """Add ``rehydrate serve``."""
    serve = commands.add(
        "serve",
        "serve ReDe's commands over RESP (any Redis client) on a store",
        DESCRIPTION,
        exits("stopped by a signal", "an error (one line on stderr)"),
        run,
    )
    serve.add_argument(
        "--store",
        metavar="URL",
        help=f"memory://, sqlite:///path.db, redis://host:6379/0 (default: ${_common.STORE_ENV})",
    )
    serve.add_argument(
        "--port", type=_port, default=DEFAULT_PORT, help=f"TCP port (default {DEFAULT_PORT}; 0: no TCP)"
    )
    serve.add_argument(
        "--bind",
        metavar="ADDR",
        default="127.0.0.1",
        help="address to listen on (default 127.0.0.1; another needs a password)",
    )
    serve.add_argument("--unix", metavar="PATH", help="also listen on this Unix socket")
    serve.add_argument(
        "--requirepass",
        metavar="PASSWORD",
        help=f"clients must AUTH with it (better: ${PASSWORD_ENV} or --requirepass-file)",
    )
    serve.add_argument("--requirepass-file", metavar="PATH", help="read the password from this file")
    serve.add_argument("--tls-cert", metavar="PATH", help="serve TLS with this certificate (PEM)")
    serve.add_argument("--tls-key", metavar="PATH", help="the certificate's key (default: in --tls-cert)")
    serve.add_argument(
        "--elements",
        choices=["bytes", "text", "json"],
        help="how element bytes map to the store's elements (default: bytes on memory://, else "
        "text; see docs/serve.md)",
    )
    serve.add_argument(
        "--max-bulk", type=_size, default=4 * 1024**2, metavar="SIZE", help="largest argument (default 4mb)"
    )
    serve.add_argument(
        "--send-timeout",
        type=duration,
        default=10.0,
        metavar="DURATION",
        help="drop a client that does not read its replies for this long (default 10s)",
    )
    serve.add_argument(
        "--grace", type=duration, default=5.0, metavar="DURATION", help="for replies in flight at SIGTERM"
    )
    serve.add_argument(
        "--backend",
        choices=["asyncio", "trio"],
        default="asyncio",
        help="event loop (default asyncio; trio needs pip install 'rehydrate[trio]')",
    )


def _loopback(host: str) -> bool:
    import ipaddress

    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _without_password(url: str) -> str:
    """The store URL for a log line: no password in it."""
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{parts.username or ''}:***@{host}"))


def _password(args: argparse.Namespace) -> str | None:
    if args.requirepass is not None and args.requirepass_file is not None:
        raise CLIError("give --requirepass or --requirepass-file, not both")
    if args.requirepass_file is not None:
        try:
            with open(args.requirepass_file, encoding="utf-8") as file:
                password = file.read().strip()
        except OSError as exc:
            where = args.requirepass_file
            raise CLIError(f"cannot read --requirepass-file {where}: {exc.strerror}") from None
    else:
        password = args.requirepass or os.environ.get(PASSWORD_ENV) or ""
    return password or None


def run(args: argparse.Namespace) -> int:
    import contextlib
    import gc
    import signal
    import ssl

    import anyio
    import structlog

    from rehydrate._serve._commands import elements_for, is_local
    from rehydrate._serve._server import Server, tcp_listener, tls_listener, unix_listener

    log = structlog.get_logger("rehydrate.cli")
    url = _common.store_url(args)
    password = _password(args)
    if args.port and not _loopback(args.bind) and password is None:
        raise CLIError(
            f"refusing to serve on {args.bind} without a password: give --requirepass-file, set "
            f"{PASSWORD_ENV}, or listen on 127.0.0.1"
        )
    if not args.port and not args.unix:
        raise CLIError("nothing to listen on: --port 0 needs --unix PATH")
    if args.tls_key and not args.tls_cert:
        raise CLIError("--tls-key needs --tls-cert")
    context = None
    if args.tls_cert:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        try:
            context.load_cert_chain(args.tls_cert, args.tls_key)
        except (OSError, ssl.SSLError) as exc:
            raise CLIError(f"cannot load the TLS certificate {args.tls_cert}: {exc}") from None
    elements = elements_for(url, args.elements)
    shared = not url.lower().startswith("memory:")

    async def serve() -> int:
        listeners: list[Any] = []
        where: list[str] = []
        try:
            if args.port:
                tcp = await tcp_listener(args.bind, args.port)
                listeners.append(tls_listener(tcp, context) if context else tcp)
                shown = f"[{args.bind}]" if ":" in args.bind else args.bind
                where.append(f"{'rediss' if context else 'redis'}://{shown}:{args.port}")
            if args.unix:
                unix = await unix_listener(args.unix)
                listeners.append(tls_listener(unix, context) if context else unix)
                where.append(f"unix://{args.unix}")
        except OSError as exc:
            for listener in listeners:
                await listener.aclose()
            raise CLIError(f"cannot listen: {exc.strerror or exc}") from None
        # serve writes (PUSH): it creates a missing SQLite database, as `rehydrate push` does.
        async with _common.open_from(args, create=True) as store:
            server = Server(
                store,
                elements=elements,
                shared=shared,
                password=password,
                max_bulk=args.max_bulk,
                send_timeout=args.send_timeout,
                grace=args.grace,
                local=is_local(url),
            )
            # What start-up left (imports, the loop, the store's client) is collected once and
            # frozen, as a worker does (cli/_worker.py, settle_heap): else the first full
            # collection walks it all a few seconds into serving, every client waiting.
            gc.collect()
            gc.freeze()
            with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                async with anyio.create_task_group() as tg:

                    async def serving() -> None:
                        await server.serve(listeners)
                        tg.cancel_scope.cancel()

                    tg.start_soon(serving)
                    log.info(
                        "serving",
                        listen=" ".join(where),
                        store=_without_password(url),
                        elements=elements.mode,
                        auth="required" if password else "none",
                    )
                    async for signum in signals:
                        if not server.stopping:
                            log.info("stopping", signal=signal.Signals(signum).name)
                            server.stop()
                        else:
                            log.warning("exiting at once", signal=signal.Signals(signum).name)
                            with contextlib.suppress(OSError):
                                sys.stderr.flush()
                            os._exit(128 + signum)
        if args.unix:
            with contextlib.suppress(OSError):
                os.unlink(args.unix)
        log.info("stopped")
        return 0

    result: int = anyio.run(serve, backend=args.backend)
    return result
