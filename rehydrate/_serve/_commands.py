"""ReDe's commands, and what clients and tools send on connect, answered over a store.

A client of the public :class:`~rehydrate.abc.Store` API, nothing more: the same commands answer
on the memory store (a standalone dehydrator server, as ReDe's module is) and on the shared ones,
where a Python worker's ``@scheduler.handler`` receives what a client pushes.

Replies are ReDe's, byte for byte, with two tracked differences (docs/serve.md): POLL and XPOLL
give due order, and GIDPUSH's ids are the store's.
"""

from __future__ import annotations

import fnmatch
import itertools
import json
import math
import os
import re
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Final, cast
from urllib.parse import parse_qs, urlsplit

import attrs

from rehydrate._serve import _resp
from rehydrate._serve._resp import OK, PONG, array, bulk, error, integer, map_reply
from rehydrate._version import __version__
from rehydrate.errors import (
    DuplicateIdError,
    ElementTooLargeError,
    InvalidArgumentError,
    InvalidTypeError,
    StoreUnavailableError,
    UnknownIdError,
)

if TYPE_CHECKING:
    from rehydrate import Dehydrator
    from rehydrate.abc import Store

__all__ = ["Commands", "Connection", "Elements", "elements_for", "is_local"]

#: The Redis version a client is told (``HELLO``, ``INFO``): clients turn features on by it, and
#: the protocol spoken is Redis 7's. ``INFO`` also says ``rehydrate_version``.
REDIS_VERSION: Final = "7.0.0"
_NOT_INTEGER: Final = "ERR value is not an integer or out of range"
_INTEGER: Final = re.compile(rb"-?(0|[1-9][0-9]{0,18})\Z")
_DROP_BATCH: Final = 1000


@attrs.define(kw_only=True, eq=False)
class Connection:
    """One client's state: what ``HELLO``, ``AUTH`` and ``CLIENT SETNAME`` set."""

    id: int
    address: str = ""
    proto: int = 2
    authenticated: bool = False
    name: bytes = b""
    closing: bool = False  # QUIT: reply, then close
    commands: int = 0


@attrs.frozen(kw_only=True)
class Elements:
    """How element bytes on the wire map to the store's elements, and back.

    ``bytes``: kept as they are (the memory store without a serializer: binary-safe, as ReDe).
    ``text``: decoded as UTF-8 into a ``str`` (what a JSON store keeps), so a Python handler gets
    a ``str``; non-UTF-8 bytes are refused. ``json``: parsed as JSON, so a handler gets the
    object a Python producer would have deferred. Read back, an element that is ``bytes`` goes
    out as it is, a ``str`` as its UTF-8 text (in ``json``, as JSON), anything else (a Python
    producer's dict or list) as compact JSON: the text its serializer wrote.
    """

    mode: str

    def to_store(self, data: bytes) -> Any:
        if self.mode == "bytes":
            return data
        try:
            text = data.decode()
        except UnicodeDecodeError:
            raise InvalidArgumentError(
                "element is not UTF-8 text, and this store keeps text (see docs/serve.md)"
            ) from None
        if self.mode == "text":
            return text
        try:
            return json.loads(text)
        except ValueError as exc:
            raise InvalidArgumentError(f"element is not JSON: {exc}") from None

    def to_wire(self, value: Any) -> bytes | None:
        if value is None:
            return None
        if type(value) is bytes:
            return value
        if type(value) is str and self.mode != "json":
            return value.encode("utf-8", "surrogateescape")
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=repr).encode()


def elements_for(url: str, requested: str | None) -> Elements:
    """The element mapping for a store URL: as asked, else ``bytes`` for the memory store
    without a serializer (it keeps any object) and ``text`` for every other store."""
    if requested is not None:
        return Elements(mode=requested)
    parts = urlsplit(url)
    if parts.scheme.lower() == "memory" and "serializer" not in parse_qs(parts.query):
        return Elements(mode="bytes")
    return Elements(mode="text")


def is_local(url: str) -> bool:
    """Whether ``url`` is the memory store without a serializer, whose dehydrators ``serve`` may
    hold itself (see :class:`Commands`)."""
    parts = urlsplit(url)
    return parts.scheme.lower() == "memory" and not parts.query


Handler = Callable[[Connection, list[bytes]], Awaitable[bytes]]
SyncHandler = Callable[[Connection, list[bytes]], bytes]


@attrs.frozen
class _Spec:
    name: str  # as Redis names it in errors: lower case, REDE.* in upper case (its registered name)
    arity: int  # Redis's: n exactly, -n at least n
    run: Handler | SyncHandler
    flags: tuple[str, ...] = ()
    #: ``run`` answers without awaiting: called directly, no coroutine (the hot commands are, on
    #: the memory store, and every command that touches no store).
    sync: bool = False
    before_auth: bool = False
    first_key: int = 0
    last_key: int = 0


def _text(value: bytes) -> str:
    """A name or id from the wire (stores refuse what is not valid UTF-8, with their own text)."""
    return value.decode("utf-8", "surrogateescape")


def _ttl_ms(value: bytes) -> int:
    if not _INTEGER.match(value):
        raise _Reply(error(_NOT_INTEGER))
    return int(value)


def _ms(seconds: float) -> bytes:
    """TTN's reply: whole milliseconds, rounded up, so that a client that sleeps this long then
    polls finds the element due (a truncated value would wake it a fraction of a ms early)."""
    return integer(max(0, math.ceil(round(seconds * 1000, 6))))


def _check_name(name: str) -> str:
    """A new dehydrator's name, refused as every store refuses it: empty, or not UTF-8 text."""
    if not name:
        raise InvalidArgumentError("name must not be empty")
    try:
        name.encode()
    except UnicodeEncodeError:
        raise InvalidArgumentError("name must be valid Unicode text (encodable as UTF-8)") from None
    return name


class _Reply(Exception):
    """A reply decided deep inside a command (a bad integer): sent as it is."""

    def __init__(self, reply: bytes) -> None:
        super().__init__(reply)
        self.reply = reply


class Commands:
    """The command table, over one store.

    ``shared``: other processes write the store too (any store but memory), so a name "exists"
    while the store holds elements under it, or since this server pushed into it (until DEL).
    On the memory store, only this server writes, and a name exists from its first push to DEL,
    empty or not, exactly as a ReDe key does.

    ``local``: the store is ``memory://`` and nothing else in this process uses it, so ReDe's
    commands go straight to :class:`~rehydrate.Dehydrator` objects held here, one per name, on
    the store's clock: what the memory store holds, without its one await per call. A pipelined
    batch of them then runs without yielding once (benchmarks/bench_serve.py).
    """

    def __init__(
        self,
        store: Store,
        *,
        elements: Elements,
        shared: bool,
        password: str | None = None,
        info: Callable[[], dict[str, object]] | None = None,
        self_test: Callable[[list[bytes]], Awaitable[bytes]] | None = None,
        local: bool = False,
    ) -> None:
        self.store = store
        self.elements = elements
        self.shared = shared
        self.password = password
        self._info = info
        self._self_test = self_test
        self._keys: set[str] = set()
        self._ids = itertools.count(1)
        self._started = time.monotonic()
        self.processed = 0
        self._local: dict[str, Dehydrator] | None = None
        if local:
            from rehydrate import Dehydrator

            self._local = {}
            clock = store.clock
            self._new_dehydrator: Callable[[], Dehydrator] = lambda: Dehydrator(clock=clock)
        spec = _Spec
        # (name, arity, the handler over the store, the handler over local dehydrators, flags)
        rede: list[tuple[str, int, Handler, SyncHandler, tuple[str, ...]]] = [
            ("REDE.PUSH", 5, self._push, self._push_now, ("write",)),
            ("REDE.GIDPUSH", 4, self._gidpush, self._gidpush_now, ("write",)),
            ("REDE.PULL", 3, self._pull, self._pull_now, ("write",)),
            ("REDE.POLL", 2, self._poll, self._poll_now, ("write",)),
            ("REDE.XPOLL", 2, self._xpoll, self._xpoll_now, ("readonly",)),
            ("REDE.XACK", -3, self._xack, self._xack_now, ("write",)),
            ("REDE.LOOK", 3, self._look, self._look_now, ("readonly",)),
            ("REDE.TTN", 2, self._ttn, self._ttn_now, ("readonly",)),
            ("REDE.UPDATE", 4, self._update, self._update_now, ("write",)),
        ]
        table = [
            *(
                spec(name, arity, now if local else run, flags, sync=local, first_key=1, last_key=1)
                for name, arity, run, now, flags in rede
            ),
            spec("REDE.TEST", -1, self._test, ("admin",)),
            spec("ping", -1, self._ping, ("fast",), sync=True),
            spec("echo", 2, self._echo, ("fast",), sync=True),
            spec("hello", -1, self._hello, ("fast", "no-auth"), before_auth=True, sync=True),
            spec("auth", -2, self._auth, ("fast", "no-auth"), before_auth=True, sync=True),
            spec("quit", -1, self._quit, ("fast", "no-auth"), before_auth=True, sync=True),
            spec("select", 2, self._select, ("fast",), sync=True),
            spec("client", -2, self._client, (), sync=True),
            spec("command", -1, self._command, (), sync=True),
            spec("config", -2, self._config, ("admin",), sync=True),
            spec("module", -2, self._module, ("admin",), sync=True),
            spec("info", -1, self._info_command, ()),
            spec("del", -2, self._del, ("write",), first_key=1, last_key=-1),
            spec("unlink", -2, self._del, ("write",), first_key=1, last_key=-1),
            spec("exists", -2, self._exists, ("readonly",), first_key=1, last_key=-1),
            spec("type", 2, self._type, ("readonly",), first_key=1, last_key=1),
            spec("keys", 2, self._keys_command, ("readonly",)),
            spec("dbsize", 1, self._dbsize, ("readonly",)),
            spec("flushall", -1, self._flush, ("write",)),
            spec("flushdb", -1, self._flush, ("write",)),
        ]
        self._table: dict[bytes, _Spec] = {}
        for entry in table:
            self._table[entry.name.encode()] = entry
            self._table[entry.name.upper().encode()] = entry
            self._table[entry.name.lower().encode()] = entry

    def connection(self, address: str = "") -> Connection:
        return Connection(id=next(self._ids), address=address, authenticated=self.password is None)

    async def execute(self, conn: Connection, request: list[bytes]) -> bytes:
        """The reply to one request; never raises for what a client sends."""
        self.processed += 1
        conn.commands += 1
        spec = self._table.get(request[0])
        if spec is None:
            spec = self._table.get(request[0].upper())
            if spec is None:
                return self._unknown(request)
        argc = len(request)
        if (spec.arity > 0 and argc != spec.arity) or argc < -spec.arity:
            return error(f"ERR wrong number of arguments for '{spec.name}' command")
        if not conn.authenticated and not spec.before_auth:
            return error("NOAUTH Authentication required.")
        try:
            if spec.sync:
                return cast("SyncHandler", spec.run)(conn, request)
            return await cast("Handler", spec.run)(conn, request)
        except _Reply as reply:
            return reply.reply
        except DuplicateIdError:
            return error("ERROR: Element already dehydrating.")
        except (InvalidArgumentError, InvalidTypeError, ElementTooLargeError) as exc:
            return error(f"ERR {exc}")
        except StoreUnavailableError as exc:
            return error(f"TRYAGAIN the store is unavailable: {exc}")

    @staticmethod
    def _unknown(request: list[bytes]) -> bytes:
        shown = "".join(f"'{_text(arg)[:128]}' " for arg in request[1:])
        return error(f"ERR unknown command '{_text(request[0])[:128]}', with args beginning with: {shown}")

    # -- existence ----------------------------------------------------------------------------------

    async def exists(self, name: str) -> bool:
        if self._local is not None:
            return name in self._local
        if name in self._keys:
            return True
        return self.shared and await self.store.size(name) > 0

    async def drop(self, name: str) -> bool:
        """Remove a dehydrator, every element under its name: what ``DEL`` does to a ReDe key.

        The Store API has no verb to remove a name, so its elements are pulled by id, a batch
        at a time, until none is left.
        """
        if self._local is not None:
            return self._local.pop(name, None) is not None
        existed = await self.exists(name)
        self._keys.discard(name)
        while ids := await self.store.ids(name, limit=_DROP_BATCH):
            for id in ids:
                await self.store.pull(name, id)
        return existed

    # -- ReDe's commands ---------------------------------------------------------------------------

    async def _push(self, conn: Connection, args: list[bytes]) -> bytes:
        ttl = _ttl_ms(args[2])
        name = _text(args[1])
        element = self.elements.to_store(args[3])
        await self.store.push(name, element, ttl=max(ttl, 0) / 1000, id=_text(args[4]))
        self._keys.add(name)  # after the store took it: a refused name is not a key
        return OK

    async def _gidpush(self, conn: Connection, args: list[bytes]) -> bytes:
        ttl = _ttl_ms(args[2])
        name = _text(args[1])
        element = self.elements.to_store(args[3])
        id = await self.store.push(name, element, ttl=max(ttl, 0) / 1000)
        self._keys.add(name)
        return bulk(id.encode())

    async def _pull(self, conn: Connection, args: list[bytes]) -> bytes:
        value = await self.store.pull(_text(args[1]), _text(args[2]))
        return bulk(self.elements.to_wire(value), conn.proto)

    async def _look(self, conn: Connection, args: list[bytes]) -> bytes:
        value = await self.store.look(_text(args[1]), _text(args[2]))
        return bulk(self.elements.to_wire(value), conn.proto)

    async def _poll(self, conn: Connection, args: list[bytes]) -> bytes:
        to_wire = self.elements.to_wire
        return array([to_wire(v) for v in await self.store.poll(_text(args[1]))], conn.proto)

    async def _xpoll(self, conn: Connection, args: list[bytes]) -> bytes:
        ids = await self.store.xpoll(_text(args[1]))
        return array([id.encode("utf-8", "surrogateescape") for id in ids], conn.proto)

    async def _xack(self, conn: Connection, args: list[bytes]) -> bytes:
        name = _text(args[1])
        if not await self.exists(name):  # ReDe: no key, an empty array (not a nil per id)
            return b"*0\r\n"
        values = await self.store.xack(name, *[_text(id) for id in args[2:]])
        to_wire = self.elements.to_wire
        return array([to_wire(v) for v in values], conn.proto)

    async def _ttn(self, conn: Connection, args: list[bytes]) -> bytes:
        name = _text(args[1])
        seconds = await self.store.ttn(name)
        if seconds is None:
            # ReDe: -1 for a key that exists, empty; nil for no key.
            return integer(-1) if await self.exists(name) else _resp.nil(conn.proto)
        return _ms(seconds)

    async def _update(self, conn: Connection, args: list[bytes]) -> bytes:
        name = _text(args[1])
        element = self.elements.to_store(args[3])
        try:
            old = await self.store.update(name, _text(args[2]), element)
        except UnknownIdError:
            if await self.exists(name):
                return error("ERROR: No Such Element.")
            return error("ERROR: No Such dehydrator.")
        return bulk(self.elements.to_wire(old), conn.proto)

    # -- ReDe's commands on local dehydrators (memory://, see the class) ---------------------------

    def _create(self, raw: bytes) -> Dehydrator:
        assert self._local is not None
        name = _text(raw)
        d = self._local.get(name)
        if d is None:
            d = self._local[_check_name(name)] = self._new_dehydrator()
        return d

    def _find(self, raw: bytes) -> Dehydrator | None:
        assert self._local is not None
        return self._local.get(_text(raw))

    def _push_now(self, conn: Connection, args: list[bytes]) -> bytes:
        ttl = _ttl_ms(args[2])
        element = self.elements.to_store(args[3])
        # (ReDe creates the key before it pushes: a refused push leaves it, empty.)
        self._create(args[1]).push(element, ttl=max(ttl, 0) / 1000, id=_text(args[4]))
        return OK

    def _gidpush_now(self, conn: Connection, args: list[bytes]) -> bytes:
        ttl = _ttl_ms(args[2])
        element = self.elements.to_store(args[3])
        return bulk(self._create(args[1]).push(element, ttl=max(ttl, 0) / 1000).encode())

    def _pull_now(self, conn: Connection, args: list[bytes]) -> bytes:
        d = self._find(args[1])
        value = d.pull(_text(args[2])) if d is not None else None
        return bulk(self.elements.to_wire(value), conn.proto)

    def _look_now(self, conn: Connection, args: list[bytes]) -> bytes:
        d = self._find(args[1])
        value = d.look(_text(args[2])) if d is not None else None
        return bulk(self.elements.to_wire(value), conn.proto)

    def _poll_now(self, conn: Connection, args: list[bytes]) -> bytes:
        d = self._find(args[1])
        if d is None:
            return b"*0\r\n"
        to_wire = self.elements.to_wire
        return array([to_wire(v) for v in d.poll()], conn.proto)

    def _xpoll_now(self, conn: Connection, args: list[bytes]) -> bytes:
        d = self._find(args[1])
        if d is None:
            return b"*0\r\n"
        return array([id.encode("utf-8", "surrogateescape") for id in d.xpoll()], conn.proto)

    def _xack_now(self, conn: Connection, args: list[bytes]) -> bytes:
        d = self._find(args[1])
        if d is None:  # ReDe: no key, an empty array (not a nil per id)
            return b"*0\r\n"
        to_wire = self.elements.to_wire
        return array([to_wire(v) for v in d.xack(*[_text(id) for id in args[2:]])], conn.proto)

    def _ttn_now(self, conn: Connection, args: list[bytes]) -> bytes:
        d = self._find(args[1])
        if d is None:
            return _resp.nil(conn.proto)
        seconds = d.ttn()
        return integer(-1) if seconds is None else _ms(seconds)

    def _update_now(self, conn: Connection, args: list[bytes]) -> bytes:
        d = self._find(args[1])
        if d is None:
            return error("ERROR: No Such dehydrator.")
        element = self.elements.to_store(args[3])
        try:
            old = d.update(_text(args[2]), element)
        except UnknownIdError:
            return error("ERROR: No Such Element.")
        return bulk(self.elements.to_wire(old), conn.proto)

    async def _test(self, conn: Connection, args: list[bytes]) -> bytes:
        if self._self_test is None:
            return error("ERR REDE.TEST is not available here")
        return await self._self_test(args[1:])

    # -- connection ----------------------------------------------------------------------------------

    def _ping(self, conn: Connection, args: list[bytes]) -> bytes:
        if len(args) > 2:
            return error("ERR wrong number of arguments for 'ping' command")
        return PONG if len(args) == 1 else bulk(args[1])

    def _echo(self, conn: Connection, args: list[bytes]) -> bytes:
        return bulk(args[1])

    def _check_password(self, user: bytes, password: bytes) -> bool:
        import hmac

        expected = (self.password or "").encode()
        # Compared in constant time, and the user too: only Redis's "default" user exists here.
        return hmac.compare_digest(password, expected) and user == b"default"

    def _auth(self, conn: Connection, args: list[bytes]) -> bytes:
        if len(args) > 3:
            return error("ERR syntax error")
        if self.password is None:
            return error(
                "ERR AUTH <password> called without any password configured for the default user. "
                "Are you sure your configuration is correct?"
            )
        user, password = (b"default", args[1]) if len(args) == 2 else (args[1], args[2])
        if not self._check_password(user, password):
            return error("WRONGPASS invalid username-password pair or user is disabled.")
        conn.authenticated = True
        return OK

    def _hello(self, conn: Connection, args: list[bytes]) -> bytes:
        proto = conn.proto
        rest = args[1:]
        if rest:
            if not _INTEGER.match(rest[0]):
                return error("ERR Protocol version is not an integer or out of range")
            proto = int(rest[0])
            if proto not in (2, 3):
                return error("NOPROTO unsupported protocol version")
            rest = rest[1:]
        name = None
        while rest:
            option = rest[0].upper()
            if option == b"AUTH" and len(rest) >= 3:
                if self.password is None or not self._check_password(rest[1], rest[2]):
                    if self.password is None:
                        return error(
                            "ERR AUTH <password> called without any password configured for the "
                            "default user. Are you sure your configuration is correct?"
                        )
                    return error("WRONGPASS invalid username-password pair or user is disabled.")
                conn.authenticated = True
                rest = rest[3:]
            elif option == b"SETNAME" and len(rest) >= 2:
                name = rest[1]
                rest = rest[2:]
            else:
                return error(f"ERR Syntax error in HELLO option '{_text(rest[0])}'")
        if not conn.authenticated:
            return error(
                "NOAUTH HELLO must be called with the client already authenticated, otherwise the "
                "HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and "
                "select the RESP protocol version at the same time"
            )
        conn.proto = proto
        if name is not None:
            conn.name = name
        return map_reply(
            {
                b"server": bulk(b"redis"),
                b"version": bulk(REDIS_VERSION.encode()),
                b"proto": integer(proto),
                b"id": integer(conn.id),
                b"mode": bulk(b"standalone"),
                b"role": bulk(b"master"),
                b"modules": b"*0\r\n",
            },
            proto,
        )

    def _quit(self, conn: Connection, args: list[bytes]) -> bytes:
        conn.closing = True
        return OK

    def _select(self, conn: Connection, args: list[bytes]) -> bytes:
        if not _INTEGER.match(args[1]):
            return error(_NOT_INTEGER)
        if int(args[1]) != 0:  # one keyspace, as a Redis Cluster node has
            return error("ERR DB index is out of range")
        return OK

    def _client(self, conn: Connection, args: list[bytes]) -> bytes:
        sub = args[1].upper()
        if sub == b"SETINFO" and len(args) == 4:
            return OK
        if sub == b"SETNAME" and len(args) == 3:
            if any(c <= 32 or c > 126 for c in args[2]):
                return error("ERR Client names cannot contain spaces, newlines or special characters.")
            conn.name = args[2]
            return OK
        if sub == b"GETNAME" and len(args) == 2:
            return bulk(conn.name or None, conn.proto)
        if sub == b"ID" and len(args) == 2:
            return integer(conn.id)
        if sub in (b"SETINFO", b"SETNAME", b"GETNAME", b"ID"):
            return error(f"ERR wrong number of arguments for 'client|{_text(args[1]).lower()}' command")
        return error(f"ERR unknown subcommand '{_text(args[1])}'. Try CLIENT HELP.")

    def _command_info(self, spec: _Spec) -> bytes:
        flags = b"*%d\r\n%s" % (len(spec.flags), b"".join(b"+%s\r\n" % f.encode() for f in spec.flags))
        return (
            b"*6\r\n"
            + bulk(spec.name.lower().encode())
            + integer(spec.arity)
            + flags
            + integer(spec.first_key)
            + integer(spec.last_key)
            + integer(1 if spec.first_key else 0)
        )

    def _specs(self) -> list[_Spec]:
        return list({id(spec): spec for spec in self._table.values()}.values())

    def _command(self, conn: Connection, args: list[bytes]) -> bytes:
        specs = self._specs()
        if len(args) == 1:
            return b"*%d\r\n%s" % (len(specs), b"".join(self._command_info(s) for s in specs))
        sub = args[1].upper()
        if sub == b"COUNT":
            return integer(len(specs))
        if sub == b"DOCS":
            # Enough for redis-cli's interactive mode, which asks for docs to show hints.
            return b"%0\r\n" if conn.proto == 3 else b"*0\r\n"
        if sub == b"INFO":
            parts = []
            for name in args[2:]:
                spec = self._table.get(name.upper())
                parts.append(self._command_info(spec) if spec else _resp.nil(conn.proto))
            return b"*%d\r\n%s" % (len(parts), b"".join(parts))
        if sub == b"LIST":
            return array([s.name.lower().encode() for s in specs])
        return error(f"ERR unknown subcommand '{_text(args[1])}'. Try COMMAND HELP.")

    def _config(self, conn: Connection, args: list[bytes]) -> bytes:
        # redis-benchmark asks for "save" and "appendonly" on start: nothing is configurable here.
        if args[1].upper() == b"GET":
            return b"%0\r\n" if conn.proto == 3 else b"*0\r\n"
        return error(f"ERR unknown subcommand '{_text(args[1])}'. Try CONFIG HELP.")

    def _module(self, conn: Connection, args: list[bytes]) -> bytes:
        if args[1].upper() == b"LIST":
            entry = map_reply({b"name": bulk(b"REDE"), b"ver": integer(1)}, conn.proto)
            return b"*1\r\n" + entry
        return error(f"ERR unknown subcommand '{_text(args[1])}'. Try MODULE HELP.")

    async def _info_command(self, conn: Connection, args: list[bytes]) -> bytes:
        figures: dict[str, object] = {
            "redis_version": REDIS_VERSION,
            "rehydrate_version": __version__,
            "redis_mode": "standalone",
            "process_id": os.getpid(),
            "uptime_in_seconds": int(time.monotonic() - self._started),
        }
        if self._info is not None:
            figures.update(self._info())
        import anyio

        figures["used_memory"] = await anyio.to_thread.run_sync(_rss)  # a file read: off the loop
        figures["total_commands_processed"] = self.processed
        keys = len(await self._all_names())
        text = "".join(f"{k}:{v}\r\n" for k, v in figures.items())
        text += f"# Keyspace\r\ndb0:keys={keys},expires=0,avg_ttl=0\r\n"
        return bulk(("# Server\r\n" + text).encode())

    # -- keys ------------------------------------------------------------------------------------

    async def _del(self, conn: Connection, args: list[bytes]) -> bytes:
        removed = 0
        for key in args[1:]:
            removed += await self.drop(_text(key))
        return integer(removed)

    async def _exists(self, conn: Connection, args: list[bytes]) -> bytes:
        count = 0
        for key in args[1:]:
            count += await self.exists(_text(key))
        return integer(count)

    async def _type(self, conn: Connection, args: list[bytes]) -> bytes:
        return b"+dehy-type\r\n" if await self.exists(_text(args[1])) else b"+none\r\n"

    async def _all_names(self) -> list[str]:
        if self._local is not None:
            return sorted(self._local)
        return sorted(set(await self.store.names()) | self._keys)

    async def _keys_command(self, conn: Connection, args: list[bytes]) -> bytes:
        pattern = _text(args[1])
        names = [n for n in await self._all_names() if fnmatch.fnmatchcase(n, pattern)]
        return array([n.encode("utf-8", "surrogateescape") for n in names], conn.proto)

    async def _dbsize(self, conn: Connection, args: list[bytes]) -> bytes:
        return integer(len(await self._all_names()))

    async def _flush(self, conn: Connection, args: list[bytes]) -> bytes:
        if len(args) > 2 or (len(args) == 2 and args[1].upper() not in (b"ASYNC", b"SYNC")):
            return error("ERR syntax error")
        for name in await self._all_names():
            await self.drop(name)
        return OK


def _rss() -> int:
    """This process's resident memory in bytes (``INFO``'s ``used_memory``), where it can be read."""
    try:
        with open("/proc/self/statm", "rb") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
