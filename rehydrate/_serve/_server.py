"""The RESP server: listeners (TCP, Unix socket, TLS), one task per connection, pipelining,
backpressure and a graceful stop.

Each connection reads what the client sent, runs every complete request in it, and writes all
their replies in one send: a pipelined client (``redis-benchmark -P 16``) costs one read and one
write per batch, not per command. A client that stops reading is not buffered for: a send that
cannot complete within ``send_timeout`` drops that client, and nothing else waits for it.

Plain TCP and Unix sockets are served on the sockets themselves (``anyio.wait_readable``, then
``recv`` and ``send``), not through anyio's streams: a stream's ``send`` yields to the event loop
after every write and arms a timeout each time, and its ``receive`` moves the data through a
queue and events; per request, that was most of the server's time (benchmarks/bench_serve.py).
The socket is only waited on when it has nothing to give or cannot take a reply whole. TLS goes
through anyio's TLS streams.
"""

from __future__ import annotations

import contextlib
import os
import socket
import ssl
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import anyio
import anyio.lowlevel
import attrs
import structlog
from anyio.abc import ByteStream, Listener, SocketAttribute
from anyio.streams.stapled import MultiListener
from anyio.streams.tls import TLSListener

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
    busy: bool = False  # (raw sockets) running a batch: a stop lets it finish


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
        local: bool = False,
    ) -> None:
        self.commands = Commands(
            store,
            elements=elements,
            shared=shared,
            password=password,
            info=self._figures,
            self_test=run_self_test,
            local=local,
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
                    for listener in _flatten(listeners):
                        raw = _raw_socket(listener)
                        if raw is None:
                            accepting.start_soon(listener.serve, self._client, clients)
                        else:
                            accepting.start_soon(self._accept, raw, clients)
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
            if client.idle is not None and not client.busy:
                client.idle.cancel()

    async def _accept(self, listening: socket.socket, clients: anyio.abc.TaskGroup) -> None:
        """Accept on a listening socket of ours, each client served by a task in ``clients``."""
        while True:
            await anyio.wait_readable(listening)
            while True:  # every connection waiting, before waiting again
                try:
                    sock, _ = listening.accept()
                except (BlockingIOError, InterruptedError):
                    break
                except OSError as exc:  # out of file descriptors, say: the next accept may work
                    log.warning("accept failed", error=str(exc))
                    await anyio.sleep(0.1)
                    break
                clients.start_soon(self._raw_client, sock)

    async def _raw_client(self, sock: socket.socket) -> None:
        try:
            sock.setblocking(False)
            if sock.family in (socket.AF_INET, socket.AF_INET6):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                peer = sock.getpeername()
                address = f"{peer[0]}:{peer[1]}"
            else:
                address = "unix"
        except OSError:  # gone already (reset before it was served): nothing to answer
            sock.close()
            return
        client = _Client(self.commands.connection(address))
        self._clients.add(client)
        self._connected_total += 1
        try:
            with sock, anyio.CancelScope() as scope:
                client.idle = scope  # cancelled by stop() while the client is not busy
                await self._converse_raw(sock, client)
        except OSError:
            pass  # the client went away, or reset: nothing of it is left to answer
        finally:
            self._clients.discard(client)

    async def _answer(self, parser: Parser, data: bytes, conn: Connection) -> tuple[bytes, bool]:
        """The replies to what one read completed, joined for one send, and whether the client
        is to be dropped after them (its input could not be parsed: the rest of it is no
        command). Both client loops answer through here."""
        parser.feed(data)
        replies: list[bytes] = []
        failed = False
        try:
            requests = parser.requests()
        except ProtocolError as exc:
            requests = []
            replies.append(error(f"ERR {exc}"))
            failed = True
        execute = self.commands.execute
        for request in requests:
            replies.append(await execute(conn, request))
            if conn.closing:
                break
        return b"".join(replies), failed

    async def _converse_raw(self, sock: socket.socket, client: _Client) -> None:
        conn = client.conn
        parser = Parser(max_bulk=self.max_bulk)
        recv = sock.recv
        more = False  # the last read filled its buffer: more may be waiting, read before waiting
        while not self._stopping:
            if more:
                # Reading on without waiting, a client that pipelines without end would keep the
                # loop (a batch on memory:// awaits nothing that suspends): let the others run.
                await anyio.lowlevel.checkpoint()
            else:
                await anyio.wait_readable(sock)
            try:
                data = recv(_READ)
            except (BlockingIOError, InterruptedError):
                more = False
                continue
            if not data:
                return  # the client closed its end
            more = len(data) == _READ
            client.busy = True
            replies, failed = await self._answer(parser, data, conn)
            if replies and not await self._send_raw(sock, replies, conn):
                return
            client.busy = False
            if failed or conn.closing:
                return

    async def _send_raw(self, sock: socket.socket, data: bytes, conn: Connection) -> bool:
        """Send ``data`` whole; wait (up to ``send_timeout``) only for what the socket could not
        take at once."""
        try:
            sent = sock.send(data)
        except (BlockingIOError, InterruptedError):
            sent = 0
        if sent == len(data):
            return True
        rest = memoryview(data)[sent:]
        with anyio.move_on_after(self.send_timeout):
            while rest:
                await anyio.wait_writable(sock)
                with contextlib.suppress(BlockingIOError, InterruptedError):
                    rest = rest[sock.send(rest) :]
            return True
        self._dropped += 1
        log.warning("dropping a client that stopped reading", client=conn.address, id=conn.id)
        return False

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
        while not self._stopping:
            with anyio.CancelScope() as idle:
                client.idle = idle
                data = await stream.receive(_READ)
            client.idle = None
            if idle.cancelled_caught:  # stopping, and this client had nothing in flight
                return
            replies, failed = await self._answer(parser, data, conn)
            if replies and not await self._send(stream, replies, conn):
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


def _flatten(listeners: Sequence[Listener[Any]]) -> list[Listener[Any]]:
    """The listeners, with those a MultiListener holds (localhost: IPv4 and IPv6) taken out."""
    out: list[Listener[Any]] = []
    for listener in listeners:
        if isinstance(listener, MultiListener):
            out.extend(_flatten(listener.listeners))
        else:
            out.append(listener)
    return out


def _raw_socket(listener: Listener[Any]) -> socket.socket | None:
    """A plain TCP or Unix listener's socket, served directly; ``None`` for TLS (and any other
    listener), served through anyio's streams."""
    if isinstance(listener, TLSListener):
        return None
    try:
        sock = listener.extra(SocketAttribute.raw_socket)
    except anyio.TypedAttributeLookupError:
        return None
    return sock if isinstance(sock, socket.socket) else None


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
    return TLSListener(listener, context, standard_compatible=False)
