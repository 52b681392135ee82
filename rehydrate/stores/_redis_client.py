"""The Redis client seam: the Lua scripts, and the few things the store asks of a client.

:class:`Backend` runs scripts (one by one or pipelined, loading them on ``NOSCRIPT``) and listens
on a pub/sub channel, retrying lost connections and translating the client's failures into
rehydrate's errors. coredis is imported here, when a store opens, and used nowhere else: another
client would change this module alone.
"""

from __future__ import annotations

import functools
import hashlib
import math
import os
import pkgutil
import socket
import ssl
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import parse_qsl, unquote, urlsplit, urlunsplit

import anyio
import anyio.abc
import anyio.lowlevel
import anyio.to_thread
import attrs
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from rehydrate.errors import RehydrateError, StoreNotOpenError, StoreRefusedError, StoreUnavailableError
from rehydrate.stores._remote import Backoff

if TYPE_CHECKING:
    import coredis

__all__ = ["SCRIPTS", "Backend", "RedisRefusedError", "Script", "SentinelTarget", "redact"]

_SCRIPT_NAMES: Final = (
    "limit",
    "look",
    "migrate",
    "move",
    "names",
    "pull",
    "push",
    "push1",
    "range",
    "remove",
    "replace_if",
    "retry",
    "size",
    "summary",
    "take",
    "time",
    "ttn",
    "update",
    "worker",
    "workers",
)


# -- scripts ---------------------------------------------------------------------------------------


class Script:
    """One Lua script: the shared library followed by a verb. Called by SHA1, loaded on NOSCRIPT."""

    __slots__ = ("name", "sha", "source")

    def __init__(self, name: str, source: str) -> None:
        self.name = name
        self.source = source
        self.sha = hashlib.sha1(source.encode()).hexdigest()

    def __repr__(self) -> str:
        return f"<script {self.name} {self.sha[:8]}>"


def _read(name: str) -> str:
    # Through the package's loader, as an import reads a module: this module may first be
    # imported inside a running event loop (``Scheduler("redis://...")``), where reading a file
    # is a blocking call like any other but for the import system's own reads.
    data = pkgutil.get_data("rehydrate.stores", f"_redis_scripts/{name}.lua")
    if data is None:  # a loader that cannot read package data (never the case for a plain install)
        raise RuntimeError(f"rehydrate's Redis script {name}.lua could not be read")
    return data.decode("utf-8")


def _load_scripts() -> dict[str, Script]:
    lib = _read("_lib")
    return {name: Script(name, lib + "\n" + _read(name)) for name in _SCRIPT_NAMES}


#: Every script, read when this module is imported (the Redis store is imported only when asked
#: for): never from disk on the event loop, as reading them at the first ``open`` did.
SCRIPTS: Final = _load_scripts()


class RedisRefusedError(RehydrateError):
    """The Redis server refused a call for a reason retrying will not change (a key of the wrong
    type, a server-side limit...): the message is the server's. ``RHSERIALIZER ...`` comes from
    our scripts and becomes a :class:`~rehydrate.errors.SerializerMismatchError`."""


#: Replies that mean "not now" rather than "never": retried like a lost connection. RHMOVING is
#: our scripts' own: the dehydrator's Cluster slot is being migrated (see ``settled`` in _lib.lua).
_BUSY_REPLIES: Final = (
    "BUSY",
    "MASTERDOWN",
    "NOREPLICAS",
    "OOM",
    "LOADING",
    "TRYAGAIN",
    "CLUSTERDOWN",
    "RHMOVING",
)

#: Scripts that only read: they never wait for replicas (``min_replicas``).
_READ_ONLY: Final = frozenset({"look", "range", "size", "summary", "time", "ttn", "workers"})

#: Scripts run through the fast lane when it is free: a single defer's push (and a batch's),
#: whose round trip is what a web request waiting on ``defer`` pays.
_LANE_SCRIPTS: Final = frozenset({"push", "push1"})


@attrs.frozen
class SentinelTarget:
    """Where Sentinel says the primary is: the sentinels, the service's name, and the database."""

    sentinels: tuple[tuple[str, int], ...]
    service: str
    db: int


# -- the client seam -------------------------------------------------------------------------------


def _tls_context(query: str) -> ssl.SSLContext:
    """The TLS context of a ``rediss://`` URL's ``ssl_*`` options, as coredis reads them.

    Built here, in a worker thread (:meth:`_Backend.open`), and handed to coredis: left to
    coredis, it is built in ``from_url`` on the event loop, reading the CA files from disk.
    """
    options = dict(parse_qsl(query))
    ca = options.get("ssl_ca_certs")
    if ca is not None and os.path.isdir(ca):
        context = ssl.create_default_context(capath=ca)
    else:
        context = ssl.create_default_context(cafile=ca)
    if "ssl_certfile" in options:
        context.load_cert_chain(options["ssl_certfile"], options.get("ssl_keyfile"))
    if options.get("ssl_check_hostname", "").lower() in ("0", "false", "no", "off"):
        context.check_hostname = False
    if options.get("ssl_cert_reqs", "").lower() in ("none", "cert_none"):
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context


@functools.cache
def _sentinel_pool() -> type[Any]:
    """coredis's Sentinel pool, whose connections close their buffers when they cannot connect
    (its connection class is fixed in the pool's code, not an attribute)."""
    from coredis.connection._sentinel import SentinelManagedConnection
    from coredis.pool import SentinelConnectionPool

    connection_class = _closing(SentinelManagedConnection)

    class Pool(SentinelConnectionPool):
        async def _construct_connection(self) -> Any:
            location = await (self.get_primary_location() if self.is_primary else self.get_replica())
            return connection_class(location, self.service_name, self.is_primary, **self.connection_kwargs)

    return Pool


@functools.cache
def _closing(connection_class: type[Any]) -> type[Any]:
    """``connection_class`` that closes its buffers when it cannot connect.

    coredis 6.9 creates a connection's memory streams in its constructor and closes them only
    once connected: every refused attempt (a node that died, during a failover) left six streams
    to the garbage collector, each a ``ResourceWarning``.
    """

    class Closing(connection_class):  # type: ignore[misc]
        async def _connect(self) -> Any:
            try:
                return await super()._connect()
            except BaseException:
                for value in list(vars(self).values()):
                    if isinstance(value, MemoryObjectSendStream | MemoryObjectReceiveStream):
                        value.close()
                raise

    Closing.__name__ = Closing.__qualname__ = f"Closing{connection_class.__name__}"
    return Closing


def _close_failed_connections(client: Any) -> None:
    pool = getattr(client, "connection_pool", None)
    connection_class = getattr(pool, "connection_class", None)
    if isinstance(connection_class, type):
        pool.connection_class = _closing(connection_class)  # type: ignore[union-attr]


async def _close_layout(client: Any) -> None:
    """Close the error stream of coredis's cluster layout, which coredis 6.9 leaves open (a
    ``ResourceWarning`` for every cluster client closed). Looked up defensively: a later coredis
    may close it itself, or name it otherwise."""
    layout = getattr(getattr(client, "connection_pool", None), "cluster_layout", None)
    streams = getattr(layout, "_error_stream", None)
    if isinstance(streams, tuple):
        for stream in streams:
            close = getattr(stream, "close", None)
            if callable(close):
                close()


def redact(url: str) -> str:
    """The URL without its password, for messages (also with several hosts, as Sentinel URLs have)."""
    parts = urlsplit(url)
    userinfo, at, hosts = parts.netloc.rpartition("@")
    if not at or ":" not in userinfo:
        return url
    user = userinfo.split(":", 1)[0]
    return urlunsplit(parts._replace(netloc=f"{user}:***@{hosts}"))


# -- the fast lane ---------------------------------------------------------------------------------


class _Incomplete(Exception):
    """The buffer holds only part of a reply."""


def _parse(buf: bytes | bytearray, pos: int) -> tuple[Any, int]:
    """One RESP2 reply from ``buf`` at ``pos``: ``(value, position after it)``. An error reply is
    returned as a :class:`_ErrorReply`; a partial one raises :class:`_Incomplete`."""
    end = buf.find(b"\r\n", pos)
    if end < 0:
        raise _Incomplete
    kind, line = buf[pos], buf[pos + 1 : end]
    pos = end + 2
    if kind == 58:  # ':' integer
        return int(line), pos
    if kind == 36:  # '$' bulk string
        size = int(line)
        if size < 0:
            return None, pos
        if len(buf) < pos + size + 2:
            raise _Incomplete
        return bytes(buf[pos : pos + size]), pos + size + 2
    if kind == 42:  # '*' array
        count = int(line)
        if count < 0:
            return None, pos
        items = []
        for _ in range(count):
            item, pos = _parse(buf, pos)
            items.append(item)
        return items, pos
    if kind == 43:  # '+' simple string
        return bytes(line), pos
    if kind == 45:  # '-' error
        return _ErrorReply(bytes(line).decode("utf-8", "replace")), pos
    raise ValueError(f"not a RESP2 reply: {bytes(buf[pos - len(line) - 3 : pos])!r}")


class _ErrorReply:
    __slots__ = ("message",)

    def __init__(self, message: str) -> None:
        self.message = message


def _bulk(part: str | bytes | int) -> bytes:
    """One argument as a RESP bulk string."""
    if type(part) is str:
        data = part.encode()
    elif type(part) is int:
        data = b"%d" % part
    else:
        data = part if isinstance(part, bytes) else str(part).encode()
    return b"$%d\r\n%b\r\n" % (len(data), data)


def _command(*parts: str | bytes | int) -> bytes:
    """One command in RESP."""
    return b"*%d\r\n%b" % (len(parts), b"".join(map(_bulk, parts)))


class _Lane:
    """One plain connection that runs a script and reads its reply in the calling task.

    coredis hands every command to a writer task and the reply back through memory streams: about
    a quarter of a millisecond per call on a loopback, most of a single ``defer``. This lane costs
    a ``send``, one wait for the socket to be readable and a ``recv``: one turn of the event loop
    (an anyio socket stream took three: its send and receive each add a checkpoint). It serves one
    call at a time (a caller finding it busy goes through coredis), only plain ``redis://``
    servers (no TLS, Sentinel, Cluster, replica waits or client options), and is dropped at the
    first failure or cancellation mid-call (its replies could be out of step) and opened again by
    the next call.

    A call gives up after its ``timeout`` without a cancel scope of its own: a scope with a deadline
    arms and disarms a timer per call, a third of a single ``defer``'s CPU. The store's
    :meth:`watch` task sleeps until the deadline of the call in flight and, if it is still in
    flight then, wakes its wait with :func:`anyio.notify_closing`; the call then closes the
    connection and raises ``TimeoutError``, as a timed-out scope did.
    """

    def __init__(self, host: str, port: int, db: int, username: str | None, password: str | None) -> None:
        self._host, self._port, self._db = host, port, db
        self._username, self._password = username, password
        self._sock: socket.socket | None = None
        self._buf = bytearray()
        self.busy = False
        #: When the call in flight gives up (the event loop's clock); ``inf`` while none is.
        self._deadline = math.inf
        #: Set by a call that starts while :meth:`watch` waits for one (``None`` otherwise).
        self._idle: anyio.Event | None = None
        #: The connection whose call :meth:`watch` gave up on (cleared by each call).
        self._expired: socket.socket | None = None

    async def _open_socket(self) -> socket.socket:
        """A connected non-blocking socket to the first address that accepts one."""
        infos = await anyio.getaddrinfo(self._host, self._port, type=socket.SOCK_STREAM)
        error: OSError | None = None
        for family, kind, proto, _, address in infos:
            sock = socket.socket(family, kind, proto)
            try:
                sock.setblocking(False)
                if family in (socket.AF_INET, socket.AF_INET6):
                    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                try:
                    sock.connect(address)
                except BlockingIOError:
                    await anyio.wait_writable(sock)
                    code = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                    if code:
                        raise OSError(code, f"connect to {address}: {os.strerror(code)}") from None
            except OSError as exc:
                sock.close()
                error = exc
                continue
            except BaseException:
                sock.close()
                raise
            return sock
        raise error or OSError(f"no address for {self._host}:{self._port}")

    async def _connect(self, timeout: float) -> socket.socket:
        with anyio.fail_after(timeout):
            sock = await self._open_socket()
            try:
                hello: list[bytes] = []
                if self._password is not None:
                    auth = (self._username, self._password) if self._username else (self._password,)
                    hello.append(_command("AUTH", *auth))
                if self._db:
                    hello.append(_command("SELECT", self._db))
                self._buf = bytearray()
                if hello:
                    await self._send(sock, b"".join(hello))
                    for _ in hello:
                        reply = await self._read(sock)
                        if isinstance(reply, _ErrorReply):
                            raise _refused(reply.message)
            except BaseException:
                sock.close()
                raise
        return sock

    @staticmethod
    async def _send(sock: socket.socket, payload: bytes) -> None:
        view = memoryview(payload)
        while view:
            try:
                view = view[sock.send(view) :]
            except BlockingIOError:
                await anyio.wait_writable(sock)

    async def _read(self, sock: socket.socket) -> Any:
        """The next reply: read as soon as the socket is readable (no checkpoint besides that wait)."""
        buf = self._buf
        while True:
            if buf:
                try:
                    reply, pos = _parse(buf, 0)
                except _Incomplete:
                    pass
                else:
                    del buf[:pos]
                    return reply
            await anyio.wait_readable(sock)
            try:
                data = sock.recv(65536)
            except BlockingIOError:  # woken without data (spuriously): wait again
                continue
            if not data:
                raise anyio.EndOfStream
            buf += data

    async def call(self, payload: bytes, *, timeout: float, connect_timeout: float) -> Any:
        """Send one command; its reply (an :class:`_ErrorReply` for an error).

        A call already cancelled sends nothing. One cancelled after its send (or timed out)
        closes the connection: the reply it did not read would be the next call's.
        """
        self.busy = True
        try:
            sock = self._sock
            if sock is None:
                sock = self._sock = await self._connect(connect_timeout)
            else:
                await anyio.lowlevel.checkpoint_if_cancelled()
            # The deadline is kept by watch().
            self._expired = None
            self._deadline = anyio.current_time() + timeout
            idle = self._idle
            if idle is not None:
                self._idle = None
                idle.set()
            try:
                try:
                    sent = sock.send(payload)
                except BlockingIOError:
                    sent = 0
                if sent < len(payload):  # a socket buffer full: wait for room for the rest
                    await self._send(sock, payload[sent:])
                return await self._read(sock)
            except BaseException as exc:
                if self._sock is sock:
                    self._sock = None
                sock.close()
                if isinstance(exc, anyio.ClosedResourceError) and self._gave_up_on(sock):
                    raise TimeoutError(f"no reply within {timeout} s") from None
                raise
        finally:
            self._deadline = math.inf
            self.busy = False

    def _gave_up_on(self, sock: socket.socket) -> bool:
        """Whether :meth:`watch` gave up on the call on ``sock`` (a method: set while it waits)."""
        return self._expired is sock

    async def watch(self) -> None:
        """Give up on calls that outlive their deadline, for as long as the store is open.

        Sleeps until the deadline of the call in flight (under steady load, one wake-up per
        ``timeout``), or waits for a call to start; a call still in flight at its deadline has
        its wait woken with ``ClosedResourceError`` (:meth:`call` turns it into ``TimeoutError``).
        """
        self._idle = None  # an event of an earlier opening (another event loop, perhaps)
        while True:
            deadline = self._deadline
            if deadline != math.inf and anyio.current_time() < deadline:
                await anyio.sleep_until(deadline)
                continue
            if deadline != math.inf and self._sock is not None:
                self._expired = self._sock
                anyio.notify_closing(self._sock)
            # No call in flight, or one given up on: wait for the next call.
            idle = self._idle = anyio.Event()
            await idle.wait()

    async def aclose(self) -> None:
        sock, self._sock = self._sock, None
        if sock is not None:
            anyio.notify_closing(sock)  # a call waiting on it gets ClosedResourceError
            sock.close()


def _tls_error(exc: BaseException) -> ssl.SSLError | None:
    """The TLS error behind ``exc``, if a failed TLS handshake is what it reports.

    coredis says only "Unable to establish a connection"; the :class:`ssl.SSLError` is found in
    the causes, at times under the timeout (a plain-text server never answers the handshake, so
    it is still waiting to read when ``connect_timeout`` cancels it).
    """
    seen: set[int] = set()
    pending = [exc]
    while pending:
        error = pending.pop()
        if id(error) in seen:
            continue
        seen.add(id(error))
        if isinstance(error, ssl.SSLError):
            return error
        pending += [cause for cause in (error.__cause__, error.__context__) if cause is not None]
        if isinstance(error, BaseExceptionGroup):
            pending += error.exceptions
    return None


def _failure(exc: BaseException, url: str, connect_timeout: float) -> str:
    """``exc`` said for a person: a failed TLS handshake as such, with its reason and a likely
    fix; anything else as the client's exception."""
    tls = _tls_error(exc)
    if tls is None:
        return f"{type(exc).__name__}: {exc}"
    if isinstance(tls, ssl.SSLCertVerificationError):
        return (
            "the TLS handshake failed: the server's certificate is not trusted "
            f"({tls.verify_message or tls.reason}): name its CA with ?ssl_ca_certs=PATH"
        )
    if isinstance(tls, ssl.SSLWantReadError | ssl.SSLWantWriteError):
        reason = f"no TLS reply within connect_timeout, {connect_timeout:g} s"
    else:
        reason = f"{type(tls).__name__}: {tls.reason or tls}"
    asked_tls = urlsplit(url).scheme.lower().startswith("rediss")
    return f"the TLS handshake failed ({reason}): the server may not speak TLS on this port" + (
        "; use redis:// for a plain-text server" if asked_tls else ""
    )


def _refused(message: str) -> BaseException:
    """An error reply as coredis would have raised it (the same classes, the same message)."""
    from coredis.parser import Parser

    return Parser().parse_error(message)


def _lane_for(url: str) -> _Lane | None:
    """A lane for a plain ``redis://host:port/db`` URL; ``None`` for anything else."""
    parts = urlsplit(url)
    if parts.scheme.lower() != "redis" or parts.query:
        return None
    db = parts.path.removeprefix("/")
    return _Lane(
        parts.hostname or "localhost",
        parts.port or 6379,
        int(db) if db else 0,
        unquote(parts.username) if parts.username else None,
        unquote(parts.password) if parts.password is not None else None,
    )


class Backend:
    """The few things the store asks of a Redis client: run scripts (one by one or pipelined) and
    listen on a pub/sub channel. coredis is used here and nowhere else.

    Lost connections and timeouts are retried ``retries`` times with exponential backoff (from
    ``backoff`` seconds, at most 2 s apart), then raise :class:`StoreUnavailableError`. A script
    the server does not know (after ``SCRIPT FLUSH`` or a restart) is loaded and called again.
    """

    def __init__(
        self,
        url: str,
        *,
        cluster: bool,
        timeout: float,
        connect_timeout: float,
        retries: int,
        backoff: float,
        options: Mapping[str, Any],
        sentinel: SentinelTarget | None = None,
        min_replicas: int = 0,
        replica_timeout: float = 0.1,
    ) -> None:
        self.url = url
        self.cluster = cluster
        self.sentinel = sentinel
        self._timeout = timeout
        self._connect_timeout = connect_timeout
        self._retries = Backoff(retries, backoff)
        self._options = dict(options)
        self._min_replicas = min_replicas
        self._replica_ms = max(1, round(replica_timeout * 1000))
        self._client: coredis.Redis[bytes] | coredis.RedisCluster[bytes] | None = None
        self._stack: AsyncExitStack | None = None
        self._transient: tuple[type[BaseException], ...] = ()
        self._no_script: type[BaseException] = Exception
        self._response_error: type[BaseException] = Exception
        self._redis_error: type[BaseException] = Exception
        self._refused: tuple[type[BaseException], ...] = ()
        self._garbled: type[BaseException] = Exception
        self._unreplicated: type[BaseException] = Exception
        #: The encoded start of the lane's EVALSHA commands, by script and keys.
        self._lane_heads: dict[tuple[str, ...], bytes] = {}
        self._lane = (
            _lane_for(url) if not cluster and sentinel is None and not options and not min_replicas else None
        )

    @property
    def is_open(self) -> bool:
        return self._client is not None

    async def open(self) -> None:
        try:
            import coredis
            import coredis.exceptions as ce
            from coredis.retry import ConstantRetryPolicy, NoRetryPolicy
        except ImportError as exc:  # pragma: no cover - depends on the environment
            from rehydrate.errors import UnsupportedStoreError

            raise UnsupportedStoreError(
                "the Redis store needs coredis: pip install 'rehydrate[redis]'"
            ) from exc
        self._transient = (
            ce.ConnectionError,
            ce.ReadOnlyError,
            # A slot moving or a master failing over: MOVED/ASK/TRYAGAIN that outlasted coredis's
            # own redirections end as ClusterError ("Maximum retries exhausted."); a Sentinel
            # that does not know the primary yet, as SentinelError.
            ce.RedisClusterError,
            ce.SentinelError,
            TimeoutError,
            OSError,
            anyio.BrokenResourceError,
            anyio.ClosedResourceError,
            anyio.EndOfStream,
        )
        self._no_script = ce.NoScriptError
        self._response_error = ce.ResponseError
        self._redis_error = ce.RedisError
        self._refused = (ce.AuthenticationError, ce.AuthorizationError)
        self._garbled = ce.InvalidResponse
        self._unreplicated = ce.ReplicationError
        # On a cluster coredis must see connection errors through its retry policy: that is how
        # it learns that a master died and refreshes its slot map (with NoRetryPolicy it never
        # did, and the store kept calling the dead node). It retries twice, quickly; the store's
        # own retries (with backoff) come on top.
        policy = (
            ConstantRetryPolicy(
                (ce.ConnectionError, ce.ClusterDownError, TimeoutError),
                retries=2,
                delay=min(self._retries.first, 0.1),
            )
            if self.cluster
            else NoRetryPolicy()
        )
        options: dict[str, Any] = {
            "decode_responses": False,
            "retry_policy": policy,
            "stream_timeout": self._timeout,
            "connect_timeout": self._connect_timeout,
            **self._options,
        }
        stack = AsyncExitStack()
        client: coredis.Redis[bytes] | coredis.RedisCluster[bytes]
        parts = urlsplit(self.url)
        if parts.scheme.lower().startswith("rediss") and "ssl_context" not in options:
            options["ssl_context"] = await anyio.to_thread.run_sync(_tls_context, parts.query)
        try:
            if self.sentinel is not None:
                client = await self._sentinel_client(coredis, stack, options)
            elif self.cluster:
                from coredis.connection import TCPLocation

                # Given as a TCPLocation: coredis 6.9's from_url would warn about its own dict form.
                options.setdefault(
                    "startup_nodes", [TCPLocation(parts.hostname or "localhost", parts.port or 6379)]
                )
                client = coredis.RedisCluster.from_url(self.url, **options)
                stack.push_async_callback(_close_layout, client)
            else:
                client = coredis.Redis.from_url(self.url, **options)
            _close_failed_connections(client)
            await stack.enter_async_context(client)
            if self._lane is not None:
                # The lane's watchdog, for as long as the store is open (cancelled before the
                # group's exit when the stack closes).
                group = await stack.enter_async_context(anyio.create_task_group())
                group.start_soon(self._lane.watch)
                stack.callback(group.cancel_scope.cancel)
        except (ce.RedisError, OSError, TimeoutError) as exc:
            await stack.aclose()
            hint = " (cluster=1 needs a Redis Cluster)" if isinstance(exc, ce.RedisClusterError) else ""
            # An answer that waiting will not change (a wrong password or database): refused.
            refused = isinstance(exc, (ce.AuthenticationError, ce.AuthorizationError)) or (
                isinstance(exc, ce.ResponseError) and not str(exc).startswith(_BUSY_REPLIES)
            )
            raise (StoreRefusedError if refused else StoreUnavailableError)(
                f"Redis at {redact(self.url)} could not be opened{hint}: "
                f"{_failure(exc, self.url, self._connect_timeout)}",
                # Not reached (a server restarting, say): another try may succeed. Anything else
                # it answered, a failed TLS handshake or a configuration the client refused,
                # stays as it is.
                transient=not refused
                and isinstance(exc, (ce.ConnectionError, OSError, TimeoutError))
                and _tls_error(exc) is None,
            ) from exc
        self._client, self._stack = client, stack

    async def _sentinel_client(
        self, coredis: Any, stack: AsyncExitStack, options: dict[str, Any]
    ) -> coredis.Redis[bytes]:
        """A client for the primary Sentinel names; each new connection asks the sentinels again,
        and connections to a primary that was replaced are dropped, so failovers are followed."""
        from coredis.connection import TCPLocation

        assert self.sentinel is not None
        parts = urlsplit(self.url)
        node_options = {**options, "db": self.sentinel.db}
        if parts.password:
            node_options["password"] = parts.password
        if parts.username:
            node_options["username"] = parts.username
        retry_policy = node_options.pop("retry_policy")
        node_options.pop("decode_responses", None)
        sentinel_options = {
            "connect_timeout": self._connect_timeout,
            "stream_timeout": self._connect_timeout,
        }
        manager = coredis.Sentinel(
            [TCPLocation(host, port) for host, port in self.sentinel.sentinels],
            sentinel_kwargs=sentinel_options,
            retry_policy=retry_policy,
            decode_responses=False,
            **node_options,
        )
        await stack.enter_async_context(manager)
        client: coredis.Redis[bytes] = manager.primary_for(
            self.sentinel.service, connection_pool_class=_sentinel_pool()
        )
        return client  # type: ignore[no-any-return]

    async def aclose(self) -> None:
        stack, self._stack, self._client = self._stack, None, None
        if self._lane is not None:
            await self._lane.aclose()
        if stack is not None:
            await stack.aclose()

    def check_open(self) -> None:
        self._get()

    async def config_value(self, name: str) -> list[str] | None:
        """The server's setting ``name`` (``CONFIG GET``), one value per primary on a cluster, or
        ``None`` if a server refuses to say (``CONFIG`` renamed or not permitted, as managed
        services do) or does not know it."""
        client = self._get()
        if not self.cluster:
            found = await self._config_get(client, name)
            return None if found is None else [found]
        values: list[str] = []
        for node in client.primaries:  # type: ignore[union-attr]
            async with node:
                found = await self._config_get(node, name)
            if found is None:
                return None
            values.append(found)
        return values or None

    async def _config_get(self, client: Any, name: str) -> str | None:
        attempt = 1
        while True:
            try:
                found = await client.config_get([name])
            except (*self._transient, self._redis_error) as exc:
                if not isinstance(exc, self._transient):
                    return None  # an error reply: an unknown command, NOPERM...
                attempt = await self._retry(exc, attempt)
                continue
            for key, value in found.items():
                if (key.decode() if isinstance(key, bytes) else key).lower() == name:
                    return value.decode() if isinstance(value, bytes) else str(value)
            return None

    def _get(self) -> coredis.Redis[bytes] | coredis.RedisCluster[bytes]:
        if self._client is None:
            raise StoreNotOpenError(
                f"the Redis store at {redact(self.url)} is not open: use it as `async with store:` "
                "(or `await store.open()` first)"
            )
        return self._client

    def _unavailable(self, exc: BaseException, attempts: int) -> StoreUnavailableError:
        tries = "after 1 attempt" if attempts == 1 else f"after {attempts} attempts"
        return StoreUnavailableError(
            f"Redis at {redact(self.url)} is unavailable {tries}: "
            f"{_failure(exc, self.url, self._connect_timeout)}",
            transient=True,
        )

    async def _retry(self, exc: BaseException, attempt: int, retries: int | None = None) -> int:
        """After a failed attempt: raise if it cannot or may not be retried, else wait; the next attempt.

        Every exception of the client ends here, so none escapes as anything but a
        :class:`~rehydrate.errors.RehydrateError`. ``retries`` overrides the store's (``open``
        makes one attempt: a wrong URL fails fast).
        """
        if isinstance(exc, self._refused):
            raise StoreRefusedError(f"Redis at {redact(self.url)} refused this client: {exc}") from exc
        if isinstance(exc, self._garbled):
            raise StoreUnavailableError(
                f"{redact(self.url)} does not answer as a Redis server: {exc}"
            ) from exc
        if isinstance(exc, self._unreplicated):
            # The write is on the primary but not on enough replicas: retrying would not tell more.
            raise StoreUnavailableError(
                f"Redis at {redact(self.url)}: fewer than {self._min_replicas} replica(s) confirmed "
                f"the write within {self._replica_ms} ms (min_replicas); it may be lost in a failover"
            ) from exc
        transient = isinstance(exc, self._transient) or (
            isinstance(exc, self._response_error) and str(exc).startswith(_BUSY_REPLIES)
        )
        if not transient:
            raise RedisRefusedError(str(exc)) from exc
        return await self._retries.pause(attempt, exc, self._unavailable, retries=retries)

    async def _evalsha(
        self, client: Any, script: Script, keys: Sequence[str], args: Sequence[str | bytes | int]
    ) -> Any:
        if self._min_replicas and script.name not in _READ_ONLY:
            # coredis sends WAIT on the same connection right after the script.
            with client.ensure_replication(self._min_replicas, self._replica_ms):
                return await client.evalsha(script.sha, keys=keys, args=args)
        return await client.evalsha(script.sha, keys=keys, args=args)

    async def eval(
        self,
        script: Script,
        keys: Sequence[str],
        args: Sequence[str | bytes | int],
        *,
        retry_args: Sequence[str | bytes | int] | None = None,
        retries: int | None = None,
    ) -> Any:
        """Run ``script``; a retried attempt (after a lost connection) sends ``retry_args`` if given.

        ``retries`` overrides the store's number of retries. With ``min_replicas``, a script
        that writes waits for that many replicas to confirm it.
        """
        client = self._get()
        attempt = 1
        while True:
            try:
                try:
                    lane = self._lane
                    if (
                        lane is not None
                        and not lane.busy
                        and script.name in _LANE_SCRIPTS
                        and self._client is not None  # not closed meanwhile (a retry after aclose)
                    ):
                        return await self._lane_eval(lane, script, keys, args)
                    return await self._evalsha(client, script, keys, args)
                except self._no_script:
                    await client.script_load(script.source)
                    return await self._evalsha(client, script, keys, args)
            except (*self._transient, self._redis_error) as exc:
                attempt = await self._retry(exc, attempt, retries)
                if retry_args is not None:
                    args = retry_args

    async def _lane_eval(
        self, lane: _Lane, script: Script, keys: Sequence[str], args: Sequence[str | bytes | int]
    ) -> Any:
        """``EVALSHA`` through the lane; the script is loaded there if the server lacks it."""
        # "EVALSHA sha numkeys keys...": the same for every call of a script on a dehydrator.
        cache_key = (script.name, *keys)
        head = self._lane_heads.get(cache_key)
        if head is None:
            if len(self._lane_heads) > 4096:
                self._lane_heads.clear()
            parts: tuple[str | int, ...] = ("EVALSHA", script.sha, len(keys), *keys)
            head = self._lane_heads[cache_key] = b"".join(map(_bulk, parts))
        payload = b"*%d\r\n%b%b" % (3 + len(keys) + len(args), head, b"".join(map(_bulk, args)))
        for _ in range(2):
            try:
                reply = await lane.call(payload, timeout=self._timeout, connect_timeout=self._connect_timeout)
            except ValueError as exc:  # not RESP: whatever answered is not a Redis server
                raise self._garbled(str(exc)) from exc
            if not isinstance(reply, _ErrorReply):
                return reply
            if not reply.message.startswith("NOSCRIPT"):
                raise _refused(reply.message)
            loaded = await lane.call(
                _command("SCRIPT", "LOAD", script.source),
                timeout=self._timeout,
                connect_timeout=self._connect_timeout,
            )
            if isinstance(loaded, _ErrorReply):
                raise _refused(loaded.message)
        raise _refused(f"NOSCRIPT the server forgot {script.name} twice in a row")

    async def eval_many(
        self, calls: Sequence[tuple[Script, Sequence[str], Sequence[str | bytes | int]]]
    ) -> list[Any]:
        """Run several read-only scripts in one round trip (a pipeline, not a transaction); their
        replies in order.

        Calls the server answered NOSCRIPT did not run: their scripts are loaded and they run again.
        """
        client = self._get()
        results: list[Any] = [None] * len(calls)
        todo = list(range(len(calls)))
        attempt = 1
        while todo:
            try:
                try:
                    async with client.pipeline(transaction=False, raise_on_error=False) as pipe:
                        requests = [
                            pipe.evalsha(calls[i][0].sha, keys=calls[i][1], args=calls[i][2]) for i in todo
                        ]
                    replies = [await request for request in requests]
                except self._no_script:
                    # A cluster pipeline raises it rather than returning it: load the scripts, go again.
                    for source in {calls[i][0].source for i in todo}:
                        await client.script_load(source)
                    continue
            except (*self._transient, self._redis_error) as exc:
                attempt = await self._retry(exc, attempt)
                continue
            missing: list[int] = []
            for i, reply in zip(todo, replies, strict=True):
                if isinstance(reply, self._no_script):
                    missing.append(i)
                elif isinstance(reply, BaseException):
                    attempt = await self._retry(reply, attempt)
                    missing.append(i)
                else:
                    results[i] = reply
            for source in {calls[i][0].source for i in missing}:
                try:
                    await client.script_load(source)
                except (*self._transient, self._redis_error) as exc:
                    attempt = await self._retry(exc, attempt)
            todo = missing
        return results

    async def scan(self, match: str) -> list[str]:
        """Every key that matches the glob ``match`` (``SCAN``; on a cluster, on every primary).
        For views, not a hot path: a failed scan starts over, so a key is listed once."""
        client = self._get()
        attempt = 1
        while True:
            try:
                found = {key async for key in client.scan_iter(match=match, count=1000)}
            except (*self._transient, self._redis_error) as exc:
                attempt = await self._retry(exc, attempt)
                continue
            return sorted(key.decode() if isinstance(key, bytes) else key for key in found)

    @asynccontextmanager
    async def listen(self, channel: str, notify: Callable[[], None]) -> AsyncIterator[None]:
        """Call ``notify`` for every message on ``channel`` while the block runs.

        The subscription is confirmed on entry (retried like any call, then
        :class:`~rehydrate.errors.StoreUnavailableError`). A dropped connection is re-established
        by coredis, or else here, for as long as the block runs (a master failing over, a node
        restarting); every new subscription also calls ``notify``, since messages may have been
        missed meanwhile (a spurious wake-up is allowed, a missed one is not).
        """
        client = self._get()
        failure: list[BaseException] = []

        async def keep(*, task_status: anyio.abc.TaskStatus[None]) -> None:
            attempt = 1
            started = False
            while True:
                try:
                    async with client.pubsub(channels=[channel]) as pubsub:
                        confirmed = False
                        if started:
                            notify()
                        else:
                            started = True
                            task_status.started()
                        attempt = 1
                        while True:
                            message = await pubsub.get_message()
                            if message is None:
                                continue
                            if message["type"] == "message":
                                notify()
                            elif message["type"] == "subscribe":
                                if confirmed:
                                    notify()
                                confirmed = True
                except (*self._transient, self._redis_error) as exc:
                    if not started:
                        try:
                            attempt = await self._retry(exc, attempt)
                        except RehydrateError as error:
                            failure.append(error)
                            task_status.started()
                            return
                    else:
                        notify()
                        await anyio.sleep(self._retries.delay(min(attempt, 6)))
                        attempt += 1

        async with anyio.create_task_group() as tg:
            await tg.start(keep)
            if not failure:
                try:
                    yield
                finally:
                    tg.cancel_scope.cancel()
        if failure:
            raise failure[0]
