"""The RESP server: listeners (TCP, Unix socket, TLS), one task per connection, pipelining,
backpressure and a graceful stop.

Each connection reads what the client sent, runs every complete request in it, and writes all
their replies in one send: a pipelined client (``redis-benchmark -P 16``) costs one read and one
write per batch, not per command. A client that stops reading is not buffered for: a send that
cannot complete within ``send_timeout`` drops that client, and nothing else waits for it.
"""

from __future__ import annotations

import contextlib
import os
import socket
import ssl
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import anyio
import attrs
import structlog
from anyio.abc import ByteStream, Listener, SocketAttribute

from rehydrate._serve._commands import Commands, Connection, Elements
from rehydrate._serve._resp import DEFAULT_MAX_BULK, Parser, ProtocolError, error
from rehydrate._serve._selftest import run_self_test

if TYPE_CHECKING:
    from rehydrate.abc import Store

__all__ = ["DEFAULT_PORT", "Server"]

#: The port ``rehydrate serve`` listens on by default: ReDe's users reach Redis on 6379; this one
#: is beside it, so both can run on one machine.
DEFAULT_PORT = 6380
_READ = 65536

log = structlog.get_logger("rehydrate.serve")


@attrs.define(eq=False)
class _Client:
    conn: Connection
    idle: anyio.CancelScope | None = None


class Server:
    """Serves ReDe's commands over ``store`` on the listeners given to :meth:`serve`."""

    def __init__(
        self,
        store: Store,
        *,
        elements: Elements,
        shared: bool,
        password: str | None = None,
        max_bulk: int = DEFAULT_MAX_BULK,
        send_timeout: float = 10.0,
        grace: float = 5.0,
    ) -> None:
        self.commands = Commands(
            store,
            elements=elements,
            shared=shared,
            password=password,
            info=self._figures,
            self_test=run_self_test,
        )
        self.max_bulk = max_bulk
        self.send_timeout = send_timeout
        self.grace = grace
        self._clients: set[_Client] = set()
        self._stopping = False
        self._accepting = anyio.CancelScope()
        self._connected_total = 0
        self._dropped = 0

    def _figures(self) -> dict[str, object]:
        return {
            "connected_clients": len(self._clients),
            "total_connections_received": self._connected_total,
            "rejected_slow_clients": self._dropped,
        }

    async def serve(self, listeners: Sequence[Listener[Any]], *, started: anyio.Event | None = None) -> None:
        """Accept and serve clients until :meth:`stop`; then wait (up to ``grace``) for the
        replies in flight, and return."""
        async with anyio.create_task_group() as clients:
            with self._accepting:
                async with anyio.create_task_group() as accepting:
                    for listener in listeners:
                        accepting.start_soon(listener.serve, self._client, clients)
                    if started is not None:
                        started.set()
            for listener in listeners:
                with contextlib.suppress(Exception):
                    await listener.aclose()
            # Stopped: no new client; each one finishes the batch it is running, then closes.
            # What takes longer than the grace is cancelled.
            clients.cancel_scope.deadline = anyio.current_time() + self.grace

    @property
    def stopping(self) -> bool:
        return self._stopping

    def stop(self) -> None:
        """Close the listeners, and each connection once its replies in flight are sent."""
        self._stopping = True
        self._accepting.cancel()
        for client in list(self._clients):
            if client.idle is not None:
                client.idle.cancel()

    async def _client(self, stream: ByteStream) -> None:
        address = _peer(stream)
        client = _Client(self.commands.connection(address))
        self._clients.add(client)
        self._connected_total += 1
        try:
            async with stream:
                await self._converse(stream, client)
        except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            pass  # the client went away: nothing of it is left to answer
        except ssl.SSLError as exc:
            log.debug("tls error", client=address, error=str(exc))
        finally:
            self._clients.discard(client)

    async def _converse(self, stream: ByteStream, client: _Client) -> None:
        conn = client.conn
        parser = Parser(max_bulk=self.max_bulk)
        execute = self.commands.execute
        while not self._stopping:
            with anyio.CancelScope() as idle:
                client.idle = idle
                data = await stream.receive(_READ)
            client.idle = None
            if idle.cancelled_caught:  # stopping, and this client had nothing in flight
                return
            parser.feed(data)
            replies: list[bytes] = []
            failed = False
            try:
                requests = parser.requests()
            except ProtocolError as exc:
                requests = []
                replies.append(error(f"ERR {exc}"))
                failed = True
            for request in requests:
                replies.append(await execute(conn, request))
                if conn.closing:
                    break
            if replies and not await self._send(stream, b"".join(replies), conn):
                return
            if failed or conn.closing:
                return

    async def _send(self, stream: ByteStream, data: bytes, conn: Connection) -> bool:
        """Send, or give up on a client that does not read within ``send_timeout``."""
        with anyio.move_on_after(self.send_timeout):
            await stream.send(data)
            return True
        self._dropped += 1
        log.warning("dropping a client that stopped reading", client=conn.address, id=conn.id)
        return False


def _peer(stream: ByteStream) -> str:
    try:
        peer = stream.extra(SocketAttribute.remote_address)
    except Exception:  # a Unix socket's peer has no name
        return "unix"
    if isinstance(peer, tuple):
        return f"{peer[0]}:{peer[1]}"
    return str(peer) or "unix"


async def tcp_listener(host: str, port: int) -> Listener[Any]:
    return await anyio.create_tcp_listener(local_host=host, local_port=port, reuse_port=False)


async def unix_listener(path: str) -> Listener[Any]:
    """Listen on ``path``, replacing a socket file left by a server that is no longer there (one
    that still answers is not taken over: that is an error). Called once, at start-up."""
    await anyio.to_thread.run_sync(_clear_stale_socket, path)
    return await anyio.create_unix_listener(path)


def _clear_stale_socket(path: str) -> None:
    if not os.path.exists(path):
        return
    probe = socket.socket(socket.AF_UNIX)
    try:
        probe.connect(path)
    except ConnectionRefusedError:
        os.unlink(path)
    except OSError:
        pass  # not a socket, or not ours: creating the listener reports it
    else:
        raise OSError(f"{path} is in use by a running server")
    finally:
        probe.close()


def tls_listener(listener: Listener[Any], context: ssl.SSLContext) -> Listener[Any]:
    from anyio.streams.tls import TLSListener

    return TLSListener(listener, context, standard_compatible=False)
