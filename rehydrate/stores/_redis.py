"""The Redis store: dehydrators shared by every process that reaches one Redis (or Valkey) server.

Each verb is one Lua script (``_redis_scripts/``), so it is atomic on the server. A dehydrator's
elements are one HASH from id to a binary header (seq, due time, TTL or lease, and the attempt,
claim number and revision when not zero) followed by the payload; their order is a run of small
sorted sets, *time buckets* of at most 120 members (seq and id, scored by due time in integer
microseconds), indexed by one sorted set of where each starts. Redis keeps the buckets as
listpacks, a few bytes per member, where one sorted set of every element costs a skip-list node
each: this is the core's queue-map, sized for memory (issue 44). A claim files the element anew
at the end of its lease, so an expired lease is simply "due again". Push, pull and ack cost
O(log b) for b buckets; a poll or a claim reads the first buckets. ``_redis_scripts/_lib.lua``
documents the keys and their invariants, ``docs/stores-design-history.md`` the measurements that
chose them.

Time is the server's ``TIME``, read inside the scripts: workers with wrong clocks still agree.
The client is coredis (it runs on asyncio and trio), reached only through
:class:`~rehydrate.stores._redis_client.Backend`, so another client would change that module alone.
"""

from __future__ import annotations

import itertools
import json
import secrets
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager, suppress
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from rehydrate._clock import ServerClock
from rehydrate._core import _limits, _validate, _workers
from rehydrate._core._fence import STAMP, stamp
from rehydrate._core._limits import LimitAnswer, LimitInfo, LimitSpec, Wake
from rehydrate._core._records import Claim, ElementInfo, Summary, WorkerRecord, new_claim
from rehydrate._core._validate import Seconds
from rehydrate.abc import Capabilities, Serializer, Subscription
from rehydrate.errors import (
    DuplicateIdError,
    InvalidArgumentError,
    InvalidTypeError,
    RehydrateError,
    StoreRefusedError,
    UnknownIdError,
)
from rehydrate.serializers import JSONSerializer
from rehydrate.stores import _remote
from rehydrate.stores._base import (
    Converter,
    StoreBase,
    as_bool,
    as_float,
    as_int,
    as_size,
    as_str,
    element_bytes,
    url_options,
)
from rehydrate.stores._redis_client import SCRIPTS, Backend, RedisRefusedError, SentinelTarget, redact
from rehydrate.stores._subscription import EventSubscription

if TYPE_CHECKING:
    pass

__all__ = ["RedisStore"]

#: The most elements one script call takes, removes or lists unless ``batch_size`` says otherwise.
_BATCH: Final = 1000
_MAX_BATCH: Final = 10_000
#: push_many is one atomic script; bigger batches are refused rather than split.
_PUSH_MANY_MAX: Final = 10_000
#: The server's limit on one argument of a command (``proto-max-bulk-len``) unless it says
#: otherwise: Redis's and Valkey's default, 512 MB. An element is sent as one argument.
_BULK_DEFAULT: Final = 512 * 1024 * 1024


# -- helpers ---------------------------------------------------------------------------------------


def _micros(value: object, name: str) -> int:
    """A duration in integer microseconds (at most ``MAX_SECONDS``: exact in a Lua double)."""
    return round(_validate.seconds(value, name) * 1_000_000)


def _escape(name: str) -> str:
    """A name fit for a hash tag: no braces (and so no ambiguity: ``%`` is escaped too)."""
    return name.replace("%", "%25").replace("{", "%7B").replace("}", "%7D")


def _tag(part: str) -> str:
    """A limit's name or partition key as a part of its hash tag: no braces, and no colon, which
    separates the two (``%`` is escaped too, so the two parts are read back exactly)."""
    return _escape(part).replace(":", "%3A")


def _untag(part: str) -> str:
    return part.replace("%3A", ":").replace("%7D", "}").replace("%7B", "{").replace("%25", "%")


def _glob(text: str) -> str:
    """``text`` matched literally by ``SCAN MATCH``."""
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)


def _fence_text(token: int | None) -> str:
    """A claim's token as the scripts compare it: the header's attempt10 .. claim16, or "" for none."""
    if token is None:
        return ""
    claim, attempt = divmod(token, STAMP)
    return f"{attempt:010d}{claim:016d}"


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


#: The revisions the scripts write: 16 digits (seqs; a dehydrator draws fewer than that).
_REV_MAX: Final = 10**16 - 1


def _rev_text(revision: int) -> str:
    """A revision as the scripts compare it (rev16); one no script ever wrote matches nothing."""
    return f"{revision:016d}" if revision <= _REV_MAX else "x"


def _info(id: str, reply: Sequence[Any], at: int) -> ElementInfo:
    """An :class:`ElementInfo` from look.lua's due, how, attempt, rev at ``reply[at:]``."""
    how = _text(reply[at + 1])
    return ElementInfo(
        id=id,
        due=int(reply[at]) / 1e6,
        ttl=int(how[1:]) / 1e6,
        attempt=int(reply[at + 2]),
        claimed=how[0] == "l",
        revision=int(reply[at + 3]),
    )


def as_duration(text: str) -> float:
    """Seconds, or milliseconds with ``ms`` (``replica_timeout=100ms``), or seconds with ``s``."""
    lowered = text.strip().lower()
    scale = 1.0
    if lowered.endswith("ms"):
        lowered, scale = lowered[:-2], 0.001
    elif lowered.endswith("s"):
        lowered = lowered[:-1]
    try:
        return float(lowered) * scale
    except ValueError:
        raise ValueError("expected seconds (0.1, 0.1s) or milliseconds (100ms)") from None


#: The options a Redis URL's query may carry: the constructor's, and coredis's TLS options
#: (``rediss://`` only), which stay in the URL for the client to read.
_URL_OPTIONS: Final[dict[str, Converter]] = {
    "prefix": as_str,
    "cluster": as_bool,
    "serializer": as_str,
    "timeout": as_float,
    "connect_timeout": as_float,
    "retries": as_int,
    "retry_backoff": as_float,
    "batch_size": as_int,
    "min_replicas": as_int,
    "replica_timeout": as_duration,
    "max_element_bytes": as_size,
}
_TLS_OPTIONS: Final[dict[str, Converter]] = {
    "ssl_ca_certs": as_str,
    "ssl_certfile": as_str,
    "ssl_keyfile": as_str,
    "ssl_cert_reqs": as_str,
    "ssl_check_hostname": as_bool,
}


_SENTINEL_SCHEMES: Final = ("redis+sentinel", "rediss+sentinel")


def _is_sentinel(url: str) -> bool:
    return urlsplit(url).scheme.lower() in _SENTINEL_SCHEMES


def _sentinel_target(url: str) -> SentinelTarget:
    """``redis+sentinel://[[user]:password@]host:26379[,host2:26380]/service_name[/db]``."""
    parts = urlsplit(url)
    shown = redact(url)
    hosts = parts.netloc.rpartition("@")[2]
    sentinels: list[tuple[str, int]] = []
    for item in hosts.split(","):
        host, colon, port = item.strip().rpartition(":")
        if not colon:
            host, port = item.strip(), "26379"
        host = host.strip("[]")
        if not host or not (port.isascii() and port.isdigit()) or not 0 < int(port) < 65536:
            raise InvalidArgumentError(
                f"bad sentinel address {item!r} in {shown!r}: expected host:port, several joined by commas"
            )
        sentinels.append((host, int(port)))
    path = [piece for piece in parts.path.split("/") if piece]
    if not path or len(path) > 2:
        raise InvalidArgumentError(
            f"a Sentinel URL names the service and optionally the database "
            f"(redis+sentinel://host:26379/mymaster/0), not {parts.path!r} in {shown!r}"
        )
    db = path[1] if len(path) == 2 else "0"
    if not (db.isascii() and db.isdigit()):
        raise InvalidArgumentError(f"the database in a Sentinel URL is a number, not {db!r} in {shown!r}")
    return SentinelTarget(sentinels=tuple(sentinels), service=path[0], db=int(db))


def _check_url(url: str) -> None:
    """Refuse what coredis would misread silently or with a traceback: scheme, port, database."""
    parts = urlsplit(url)
    shown = redact(url)
    scheme = parts.scheme.lower()
    if scheme not in ("redis", "rediss", *_SENTINEL_SCHEMES):
        raise InvalidArgumentError(
            f"a Redis URL starts with redis://, rediss://, redis+sentinel:// or rediss+sentinel://, "
            f"not {shown!r}"
        )
    if scheme in _SENTINEL_SCHEMES:
        _sentinel_target(url)
    else:
        try:
            parts.port  # noqa: B018 - urlsplit checks the port when asked for it
        except ValueError as exc:
            raise InvalidArgumentError(f"bad port in the Redis URL {shown!r}: {exc}") from None
        db = parts.path.removeprefix("/")
        if db and not (db.isascii() and db.isdigit()):
            raise InvalidArgumentError(
                f"the database in a Redis URL is a number (redis://host:6379/0), not {db!r} in {shown!r}"
            )
    for key, _ in parse_qsl(parts.query, keep_blank_values=True):
        if key not in _TLS_OPTIONS:
            raise InvalidArgumentError(
                f"unknown option {key!r} in {shown!r}; pass store options as arguments, "
                f"and only {', '.join(sorted(_TLS_OPTIONS))} in the URL"
            )
        if not scheme.startswith("rediss"):
            raise InvalidArgumentError(f"{key} is a TLS option: use rediss:// in {shown!r}")


_Args = list[str | bytes | int]
_Item = tuple[str | None, int, bytes]


class RedisStore(StoreBase):
    """Dehydrators in Redis 7+ or Valkey (``redis://``, ``rediss://`` for TLS).

    ``url`` is ``redis://[[user]:password@]host[:port][/db]``; ``rediss://`` connects with TLS
    (coredis reads ``ssl_*`` options from the query string). ``cluster=True`` connects to a Redis
    Cluster: all keys of one dehydrator share a hash tag, so every script runs on one node; when a
    master fails or a slot moves, the client refreshes its slot map and the call is retried.
    ``redis+sentinel://[[user]:password@]host:26379[,host2:26380]/service[/db]`` (or
    ``rediss+sentinel://``) asks those sentinels where the primary of ``service`` is, and asks
    again after a failover (the password is the data nodes'; the sentinels are reached without).

    ``min_replicas=n`` makes every script that writes wait (``WAIT``) until ``n`` replicas have
    it, at most ``replica_timeout`` seconds, and raise
    :class:`~rehydrate.errors.StoreUnavailableError` otherwise: a write that returned then
    survives a failover to one of those replicas. The write is not undone on the primary.

    An element is sent to the server as one argument of a script call, which the server takes
    up to its ``proto-max-bulk-len`` (512 MB by default), read at ``open`` (``CONFIG GET``; a
    server that refuses ``CONFIG``, as managed services do, is taken to have the default). A
    larger element, or one larger than ``max_element_bytes`` (bytes; a cap of your own, lower),
    raises :class:`~rehydrate.errors.ElementTooLargeError` before anything is sent.

    Elements are stored as bytes by ``serializer`` (a name or a
    :class:`~rehydrate.abc.Serializer`; JSON by default); a dehydrator remembers which serializer
    wrote it and refuses a client that uses another. Keys start with ``prefix``.

    Every call is one Lua script, atomic on the server. Calls that take, remove or list many
    elements run ``batch_size`` of them per script and loop; each such script is atomic on its own.
    A lost connection or a timeout (``timeout`` seconds) is retried ``retries`` times, from
    ``retry_backoff`` seconds apart and doubling, and then raises
    :class:`~rehydrate.errors.StoreUnavailableError`. Retrying is safe: a push that reached the
    server before its reply was lost is recognised by its id and payload and not repeated. A
    ``poll`` or ``pull`` whose reply is lost has removed its elements all the same (use ``claim``
    for at-least-once delivery), and a repeated ``ack`` or ``update`` reports the state the first
    attempt left.

    Open and close the store in one task (``async with store:``): coredis ties its connections to
    the task that opened them.
    """

    capabilities = Capabilities(claim_ahead=True, workers=True, limits=True)

    def __init__(
        self,
        url: str = "redis://localhost:6379/0",
        *,
        serializer: str | Serializer | None = None,
        prefix: str = "rh",
        cluster: bool = False,
        timeout: float = 10.0,
        connect_timeout: float = 5.0,
        retries: int = 5,
        retry_backoff: float = 0.1,
        batch_size: int = _BATCH,
        min_replicas: int = 0,
        replica_timeout: float = 0.1,
        max_element_bytes: int | None = None,
        client_options: Mapping[str, Any] | None = None,
    ) -> None:
        if not isinstance(url, str):
            raise InvalidTypeError(f"url must be a str, not {type(url).__name__}")
        _check_url(url)
        if not isinstance(prefix, str) or not prefix or "{" in prefix or "}" in prefix:
            raise InvalidArgumentError(f"prefix must be a non-empty str without braces, not {prefix!r}")
        self._set_serializer(serializer)
        self._element_limit_asked = element_bytes(max_element_bytes)
        # JSON payloads joined by commas are a JSON array: one script reply, one json.loads.
        self._join = type(self._serializer) is JSONSerializer
        self._join_flag = "1" if self._join else "0"
        self._prefix = prefix
        self._registry = f"{prefix}:names"
        #: The worker registry: one hash, so one slot on a cluster (see worker.lua).
        self._workers_key = f"{prefix}:workers"
        self._batch = _remote.int_option(batch_size, "batch_size", 1, _MAX_BATCH)
        #: Per name, when its next element is due (this store's clock; ``None``: none) as the
        #: last claim that took fewer than it asked for read it; see :meth:`ttn_after_claim`.
        self._ttn_after: dict[str, float | None] = {}
        retries = _remote.int_option(retries, "retries", 0, 100)
        timeout = _validate.seconds(timeout, "timeout")
        backoff = _validate.seconds(retry_backoff, "retry_backoff")
        connect = _validate.seconds(connect_timeout, "connect_timeout")
        if timeout <= 0 or connect <= 0:
            raise InvalidArgumentError("timeout and connect_timeout must be positive")
        min_replicas = _remote.int_option(min_replicas, "min_replicas", 0, 100)
        replica_wait = _validate.seconds(replica_timeout, "replica_timeout")
        if replica_wait <= 0:
            raise InvalidArgumentError("replica_timeout must be positive")
        _validate.flag(cluster, "cluster")
        sentinel = _sentinel_target(url) if _is_sentinel(url) else None
        if sentinel is not None and cluster:
            raise InvalidArgumentError("a Sentinel URL names one primary: cluster=True does not apply")
        if client_options is not None and not isinstance(client_options, Mapping):
            raise InvalidTypeError(f"client_options must be a mapping, not {type(client_options).__name__}")
        self._backend = Backend(
            url,
            cluster=cluster,
            timeout=timeout,
            connect_timeout=connect,
            retries=retries,
            backoff=backoff,
            options=client_options or {},
            sentinel=sentinel,
            min_replicas=min_replicas,
            replica_timeout=replica_wait,
        )
        self.clock: ServerClock = ServerClock("Redis", local=_remote.local_clock)
        self._keys_cache: dict[str, list[str]] = {}
        self._id_prefix = secrets.token_hex(8)
        self._id_counter = itertools.count()

    @classmethod
    def from_url(cls, url: str, *, create: bool = True, **options: Any) -> RedisStore:
        """``redis://host:port/db`` or ``rediss://...``; ``options`` are the constructor's keywords.

        ``prefix``, ``cluster``, ``serializer``, ``timeout``, ``connect_timeout``, ``retries``,
        ``retry_backoff``, ``batch_size``, ``min_replicas``, ``replica_timeout`` (seconds, or
        ``100ms``) and ``max_element_bytes`` (bytes, or ``10MB``, ``64KiB``) may also be query
        parameters (``redis://host/0?prefix=billing&cluster=1``), so
        a URL alone (``rehydrate --store``) can say everything; not both ways. ``rediss://`` URLs
        may carry the client's TLS options (``ssl_ca_certs``, ``ssl_certfile``, ``ssl_keyfile``,
        ``ssl_cert_reqs``, ``ssl_check_hostname``). Any other option is refused. ``create`` is
        accepted and moot: Redis keys come and go with their elements.
        """
        if not isinstance(url, str):
            raise InvalidTypeError(f"url must be a str, not {type(url).__name__}")
        _validate.flag(create, "create")
        parts = urlsplit(url)
        shown = redact(url)
        found = url_options(url, parts.query, {**_URL_OPTIONS, **_TLS_OPTIONS}, options, shown=shown)
        tls = [(key, value) for key, value in parse_qsl(parts.query) if key in _TLS_OPTIONS]
        for key in _URL_OPTIONS:
            if key in found:
                options[key] = found[key]
        return cls(urlunsplit(parts._replace(query=urlencode(tls))), **options)

    @property
    def serializer(self) -> Serializer:
        """The serializer elements are written with."""
        return self._serializer

    def __repr__(self) -> str:
        return (
            f"RedisStore({redact(self._backend.url)!r}, prefix={self._prefix!r}, "
            f"serializer={self._serializer!r})"
        )

    # -- lifecycle -------------------------------------------------------------------------------

    async def open(self) -> None:
        """Connect, and set :attr:`clock` by the server's ``TIME``. Idempotent.

        Makes one attempt, each connection bounded by ``connect_timeout``: a wrong URL or a
        server that is down fails fast with :class:`~rehydrate.errors.StoreUnavailableError`
        (retry ``open`` to wait for a server to come up).
        """
        if self._backend.is_open:
            return
        await self._backend.open()
        try:
            try:
                await self._set_clock()
            except RedisRefusedError as exc:
                raise StoreRefusedError(
                    f"Redis at {redact(self._backend.url)} refused to open: {exc}"
                ) from exc
            await self._read_element_limit()
        except BaseException:
            # Not shielded: the pool's task group must close in the scope it was opened in.
            await self._backend.aclose()
            raise

    async def _read_element_limit(self) -> None:
        """The element limit: the server's ``proto-max-bulk-len``, or the default where it will
        not say (a managed service that renames ``CONFIG``, a user without ``+config``)."""
        values = await self._backend.config_value("proto-max-bulk-len")
        if values and all(value.isdigit() and int(value) > 0 for value in values):
            # (A cluster's nodes may differ: an element must fit the smallest.)
            self._set_element_limit(min(map(int, values)), "the server's proto-max-bulk-len")
        else:
            self._set_element_limit(
                _BULK_DEFAULT, "the default proto-max-bulk-len: the server would not say its own"
            )

    async def aclose(self) -> None:
        self._ttn_after.clear()  # read from a server this store no longer talks to
        await self._backend.aclose()

    def _check_open(self) -> None:
        self._backend.check_open()

    async def _server_time(self) -> tuple[float, float, int]:
        """One reading of the server's time (µs), between two of the local clock."""
        before = _remote.local_clock()
        micros = int(await self._backend.eval(SCRIPTS["time"], [], [], retries=0))
        return before, _remote.local_clock(), micros

    async def _set_clock(self) -> None:
        _remote.set_offset(self.clock, [await self._server_time() for _ in range(_remote.SAMPLES)])

    # -- plumbing --------------------------------------------------------------------------------

    def _keys(self, name: str) -> list[str]:
        keys = self._keys_cache.get(name)
        if keys is None:
            _validate.element_id(name, "name")
            base = f"{self._prefix}:{{{_escape(name)}}}"
            keys = [f"{base}:h", f"{base}:i", f"{base}:s"]
            if not self._backend.cluster:
                keys.append(self._registry)
            if len(self._keys_cache) > 4096:
                self._keys_cache.clear()
            self._keys_cache[name] = keys
        return keys

    def _channel(self, name: str) -> str:
        return self._keys(name)[0][:-2] + ":wake"

    def _head(self, name: str) -> _Args:
        pinned = self.clock.pinned_us
        return [self.clock.skew_us, "" if pinned is None else pinned, self._serializer.name, name]

    async def _eval(
        self,
        script: str,
        name: str,
        args: Sequence[str | bytes | int],
        *,
        retry: Sequence[str | bytes | int] = (),
    ) -> Any:
        if self.clock.take_sync():  # every ServerClock.resync_every; a failure is the call's to meet
            with suppress(RehydrateError):
                await self._set_clock()
        head = self._head(name)
        converted = False
        while True:
            try:
                return await self._backend.eval(
                    SCRIPTS[script],
                    self._keys(name),
                    [*head, *args],
                    retry_args=[*head, *retry] if retry else None,
                )
            except RedisRefusedError as exc:
                message = str(exc)
                if message.startswith("RHSERIALIZER "):
                    raise self._mismatch(name, message.split()[1]) from None
                if message.startswith("RHFORMAT ") and not converted:
                    # Written by an earlier version: the script refused before writing anything,
                    # so converting the dehydrator and calling again is safe.
                    await self._convert(name)
                    converted = True
                    continue
                raise

    async def _convert(self, name: str) -> None:
        """Bring dehydrator ``name``'s elements to this version's format (``migrate.lua``):
        ``batch_size`` elements per script, so a large dehydrator never holds the server long."""
        keys, head = self._keys(name), self._head(name)
        while not int(await self._backend.eval(SCRIPTS["migrate"], keys, [*head, self._batch])):
            pass

    def _load(self, data: bytes) -> Any:
        """An element the scripts have checked was written by this store's serializer."""
        return self._serializer.loads(data)

    def _loads_joined(self, joined: bytes) -> list[Any]:
        """The elements of a reply whose JSON payloads the script joined with commas."""
        if not joined:
            return []
        elements: list[Any] = json.loads(b"[" + joined + b"]")
        return elements

    def _new_id(self) -> str:
        return f"{self._id_prefix}{next(self._id_counter):x}"

    async def _push(
        self, name: str, items: list[_Item], *, replace: bool = False, start: int | None = None
    ) -> list[str]:
        """File the items in one script. ``None`` ids are generated here, before the first attempt,
        so a retry after a lost reply is recognised (a replace is simply done again). ``start``:
        the time (µs, this store's clock) the ttls count from (push.lua says when it is taken);
        ``None``: when the script runs."""
        while True:
            ids = [id if id is not None else self._new_id() for id, _, _ in items]
            flat: _Args = []
            for id, (_, ttl, payload) in zip(ids, items, strict=True):
                flat += (id, ttl, payload)
            mode, retry = ("r", "r") if replace else ("0", "1")
            # One new element (a single defer) has a leaner script of its own, stamped when it runs.
            if len(items) == 1 and not replace:
                script, args, again = "push1", [mode, *flat], [retry, *flat]
            else:
                since = "" if start is None else start
                script, args, again = "push", [mode, since, *flat], [retry, since, *flat]
            reply = await self._eval(script, name, args, retry=again)
            status = int(reply[0])
            if status == 0:
                dup = _text(reply[1])
                if any(
                    id is None and generated == dup for (id, _, _), generated in zip(items, ids, strict=True)
                ):
                    continue  # a generated id met an existing one: draw new ones
                raise DuplicateIdError(dup)
            if self._backend.cluster and (status == 2 or int(reply[1])):
                # The registry lives in another slot on a cluster: add the name separately.
                await self._backend.eval(SCRIPTS["names"], [self._registry], [name])
            return ids

    # -- ReDe verbs ------------------------------------------------------------------------------

    async def push(
        self, name: str, element: Any, *, ttl: Seconds, id: str | None = None, replace: bool = False
    ) -> str:
        self._keys(name)
        micros = _micros(ttl, "ttl")
        _validate.replace(replace, id)
        if id is not None:
            _validate.element_id(id)
        payload = self._dumps(element, name, id)
        (pushed,) = await self._push(name, [(id, micros, payload)], replace=replace)
        return pushed

    async def _push_many(
        self, name: str, items: list[tuple[Any, float, str | None]], asked: float
    ) -> list[str]:
        """See :meth:`Store.push_many`. One script, so at most 10,000 items per call. The ttls count
        from the call (its time on this store's clock, which the script takes as the start): the
        script runs only once the batch is encoded and sent, milliseconds later for a thousand.
        (``asked``: the store's clock, on which a pinned clock (tests) sees no time pass.)"""
        batch: list[_Item] = []
        for element, seconds, id in items:
            batch.append(
                (id, round(seconds * 1_000_000), self._dumps(element, name, id, "push_many", len(batch)))
            )
        if len(batch) > _PUSH_MANY_MAX:
            raise InvalidArgumentError(
                f"push_many takes at most {_PUSH_MANY_MAX} items per call on Redis (one atomic script); "
                f"got {len(batch)}: split the batch"
            )
        return await self._push(name, batch, start=round(asked * 1_000_000))

    async def pull(self, name: str, id: str) -> Any:
        self._keys(name)
        _validate.element_id(id)
        reply = await self._eval("pull", name, [id])
        return None if reply is None else self._load(reply)

    async def poll(self, name: str, *, limit: int | None = None) -> list[Any]:
        """See :meth:`Store.poll`. Takes ``batch_size`` elements per script and loops; the loop
        takes only elements due when it began and filed before, so a busy producer cannot keep it
        going."""
        self._keys(name)
        n = _validate.limit(limit)
        out: list[Any] = []
        first: list[str | int] = ["", ""]  # the seq and the time of the first page, once known
        while True:
            page = self._batch if n is None else min(self._batch, n - len(out))
            reply = await self._eval("take", name, ["poll", page, 0, first[0], self._join_flag, first[1]])
            if self._join:
                out += self._loads_joined(reply[3])
            else:
                out.extend(self._load(payload) for payload in reply[3:])
            if not int(reply[1]) or (n is not None and len(out) >= n):
                return out
            if first[0] == "":
                first = [int(reply[0]), int(reply[2])]

    async def xpoll(self, name: str, *, limit: int | None = None) -> list[str]:
        """See :meth:`Store.xpoll`. Lists ``batch_size`` ids per script, all due at the time of
        the first; elements removed or filed between two scripts may be missed or included."""
        self._keys(name)
        n = _validate.limit(limit)
        out: list[str] = []
        after: _Args = ["", "", ""]  # the first page's time, the last member's score and seq
        while True:
            page = self._batch if n is None else min(self._batch, n - len(out))
            reply = await self._eval("range", name, [page, *after])
            ids = reply[3:]
            out.extend(_text(id) for id in ids)
            if len(ids) < page or (n is not None and len(out) >= n):
                return out
            after = [reply[0], reply[1], reply[2]]

    async def xack(
        self, name: str, *ids: str, attempt: int | None = None, token: int | None = None
    ) -> list[Any]:
        """See :meth:`Store.xack`. ``batch_size`` ids per script, each script atomic."""
        self._keys(name)
        _validate.ids(ids)
        _validate.attempt(attempt)
        _validate.token(token)
        fence: str | int = "" if attempt is None else attempt
        out: list[Any] = []
        for start in range(0, len(ids), self._batch):
            chunk = ids[start : start + self._batch]
            reply = await self._eval("remove", name, ["xack", fence, _fence_text(token), *chunk])
            out.extend(None if payload is None else self._load(payload) for payload in reply)
        return out

    async def look(self, name: str, id: str) -> Any:
        self._keys(name)
        _validate.element_id(id)
        reply = await self._eval("look", name, ["look", id])
        return None if reply is None else self._load(reply)

    async def _look_many(self, name: str, checked: list[str]) -> list[Any]:
        """See :meth:`Store.look_many`: ``batch_size`` ids per script (one ``HMGET``)."""
        out: list[Any] = []
        for start in range(0, len(checked), self._batch):
            reply = await self._eval("look", name, ["many", *checked[start : start + self._batch]])
            out.extend(None if payload is None else self._load(payload) for payload in reply)
        return out

    async def ttn(self, name: str) -> float | None:
        self._keys(name)
        micros = int(await self._eval("ttn", name, []))
        return None if micros < 0 else micros / 1e6

    async def update(self, name: str, id: str, element: Any, *, token: int | None = None) -> Any:
        self._keys(name)
        _validate.element_id(id)
        _validate.token(token)
        payload = self._dumps(element, name, id, "update")
        fence = "" if token is None else _fence_text(token)
        reply = await self._eval("update", name, [id, payload, fence])
        if not int(reply[0]):
            raise UnknownIdError(id)
        return self._load(reply[1])

    # -- revisions: compare-and-set ---------------------------------------------------------------

    async def read(self, name: str, id: str) -> tuple[Any, ElementInfo] | None:
        """See :meth:`Store.read`: look.lua's "read", one ``HGET``."""
        self._keys(name)
        _validate.element_id(id)
        reply = await self._eval("look", name, ["read", id])
        if reply is None:
            return None
        return self._load(reply[0]), _info(id, reply, 1)

    async def _replace_if(
        self, name: str, batch: list[tuple[str, int, Any, float]], asked: float
    ) -> list[int | None]:
        """See :meth:`Store.replace_if`: one script (replace_if.lua) for the whole batch, so at
        most 10,000 items per call, as push_many. The revision's comparison and the refiling are
        one script per item: what makes a claim's end and its successor's filing fenced (no
        other writer, nor a claimer, between them). The ttls count from the call (its time on
        this store's clock, which the script takes as its start): a schedule's next occurrence is
        due at its nominal time, however long the batch took to encode or waited for a
        connection."""
        if len(batch) > _PUSH_MANY_MAX:
            raise InvalidArgumentError(
                f"replace_if takes at most {_PUSH_MANY_MAX} items per call on Redis (one atomic script); "
                f"got {len(batch)}: split the batch"
            )
        flat: _Args = [round(asked * 1_000_000)]
        for index, (id, revision, element, ttl) in enumerate(batch):
            payload = self._dumps(element, name, id, "replace_if", index)
            flat += (id, _rev_text(revision), round(ttl * 1_000_000), payload)
        # (A retry after a lost reply finds the revisions changed and answers None for them,
        # although the first attempt replaced them.)
        reply = await self._eval("replace_if", name, flat)
        return [None if int(r) < 0 else int(r) for r in reply]

    async def update_if(self, name: str, id: str, revision: int, element: Any) -> int | None:
        """See :meth:`Store.update_if`: update.lua given the revision, which it compares in the
        script that writes."""
        self._keys(name)
        _validate.element_id(id)
        rev = _validate.revision(revision)
        payload = self._dumps(element, name, id, "update_if")
        reply = await self._eval("update", name, [id, payload, "", _rev_text(rev)])
        return int(reply[2]) if int(reply[0]) else None

    async def pull_if(self, name: str, id: str, revision: int) -> bool:
        """See :meth:`Store.pull_if`: pull.lua's "r" mode, the comparison and the removal in one
        script."""
        self._keys(name)
        _validate.element_id(id)
        rev = _validate.revision(revision)
        return bool(await self._eval("pull", name, [id, "r", _rev_text(rev)]) == 1)

    # -- leases ----------------------------------------------------------------------------------

    async def _claim(self, name: str, lease: float, n: int | None, ahead: float) -> list[Claim]:
        """See :meth:`Store.claim`. Takes ``batch_size`` elements per script (each atomic) and
        loops until ``limit``; the loop takes only elements due when it began (or ``ahead`` of
        it) and filed before (so never its own claims with ``lease=0``)."""
        micros, early = round(lease * 1_000_000), round(ahead * 1_000_000)
        self._ttn_after.pop(name, None)  # (what an earlier claim read is older than this one)
        out: list[Claim] = []
        first: list[str | int] = ["", ""]  # the seq and the time of the first page, once known
        while True:
            page = self._batch if n is None else min(self._batch, n - len(out))
            reply = await self._eval(
                "take", name, ["claim", page, micros, first[0], self._join_flag, first[1], early]
            )
            now, until = int(reply[2]) / 1e6, int(reply[3]) / 1e6
            rows = range(6, len(reply), 5)
            if self._join:
                elements = self._loads_joined(reply[4])
            else:
                elements = [self._load(reply[i + 4]) for i in rows]
            for i, element in zip(rows, elements, strict=True):
                id, attempt = _text(reply[i]), int(reply[i + 1])
                token = stamp(int(reply[i + 3]), attempt)
                # (The claim's seq is the element's new revision too: take.lua.)
                out.append(
                    new_claim(
                        id, element, attempt, until, token, int(reply[i + 2]) / 1e6, now, int(reply[i + 3])
                    )
                )
            if not int(reply[1]):
                # It took fewer than it asked for: what TTN says comes with the reply, counted
                # from the script's own time (not this clock's on reading the reply: the loop
                # would wake late by the script and the round trip's way back).
                left = int(reply[5])
                self._ttn_after[name] = None if left < 0 else now + left / 1e6
                return out
            if n is not None and len(out) >= n:
                return out
            if first[0] == "":
                first = [int(reply[0]), int(reply[2])]

    async def _ack(self, name: str, pairs: list[tuple[str, int]]) -> list[bool]:
        """See :meth:`Store.ack`. ``batch_size`` pairs per script, each script atomic."""
        out: list[bool] = []
        for start in range(0, len(pairs), self._batch):
            flat: _Args = []
            for id, token in pairs[start : start + self._batch]:
                flat += (id, _fence_text(token))
            reply = await self._eval("remove", name, ["ack", *flat])
            out.extend(bool(int(r)) for r in reply)
        return out

    async def reschedule(
        self, name: str, id: str, *, ttl: Seconds, attempt: int | None = None, token: int | None = None
    ) -> bool:
        self._keys(name)
        micros = _micros(ttl, "ttl")
        _validate.element_id(id)
        _validate.attempt(attempt)
        _validate.token(token)
        fence = "" if attempt is None else attempt
        reply = await self._eval("move", name, ["reschedule", id, micros, fence, _fence_text(token)])
        return reply is not None

    async def _release(
        self, name: str, batch: list[tuple[str, int, float]], *, hand_back: bool
    ) -> list[bool]:
        """See :meth:`Store.reschedule_many` and :meth:`Store.hand_back`: ``retry.lua``,
        ``batch_size`` items per script, each script atomic."""
        mode = "hand_back" if hand_back else "retry"
        out: list[bool] = []
        for start in range(0, len(batch), self._batch):
            flat: _Args = []
            for id, token, ttl in batch[start : start + self._batch]:
                flat += (id, round(ttl * 1_000_000), _fence_text(token))
            reply = await self._eval("retry", name, [mode, *flat])
            out.extend(bool(int(r)) for r in reply)
        return out

    async def extend(self, name: str, id: str, *, lease: Seconds, token: int) -> float | None:
        self._keys(name)
        micros = _micros(lease, "lease")
        _validate.element_id(id)
        if _validate.token(token) is None:
            raise InvalidArgumentError("extend needs the claim's token")
        reply = await self._eval("move", name, ["extend", id, micros, "", _fence_text(token)])
        return None if reply is None else int(reply) / 1e6

    async def info(self, name: str, id: str) -> ElementInfo | None:
        self._keys(name)
        _validate.element_id(id)
        reply = await self._eval("look", name, ["info", id])
        return None if reply is None else _info(id, reply, 0)

    # -- inspection and waiting ------------------------------------------------------------------

    async def names(self) -> list[str]:
        reply = await self._backend.eval(SCRIPTS["names"], [self._registry], [""])
        names = sorted(_text(name) for name in reply)
        if not self._backend.cluster or not names:
            return names
        # On a cluster the registry is only ever added to: keep the names that hold elements.
        size = SCRIPTS["size"]
        sizes = await self._backend.eval_many([(size, self._keys(name), []) for name in names])
        return [name for name, n in zip(names, sizes, strict=True) if int(n)]

    async def size(self, name: str) -> int:
        self._keys(name)
        return int(await self._eval("size", name, []))

    async def summary(self, name: str) -> Summary:
        """See :meth:`Store.summary`: one script, O(log n) (claims are counted as they happen)."""
        self._keys(name)
        size, due, claimed, left = (int(x) for x in await self._eval("summary", name, []))
        return Summary(size=size, due=due, claimed=claimed, ttn=None if left < 0 else left / 1e6)

    async def ids(self, name: str, *, limit: int | None = None) -> list[str]:
        """See :meth:`Store.ids`: the sorted set read in order, ``batch_size`` ids per script.

        Each page starts after the last member of the one before, so an element filed anew
        between two pages (claimed, say) may come twice: only its first place is kept."""
        self._keys(name)
        n = _validate.limit(limit)
        found: dict[str, None] = {}
        after: _Args = ["+inf", "", ""]
        while True:
            page = self._batch if n is None else min(self._batch, n - len(found))
            reply = await self._eval("range", name, [page, *after])
            ids = reply[3:]
            found.update(dict.fromkeys(_text(id) for id in ids))
            if len(ids) < page or (n is not None and len(found) >= n):
                ordered = list(found)
                return ordered if n is None else ordered[:n]
            after = ["+inf", reply[1], reply[2]]

    # -- workers ---------------------------------------------------------------------------------

    def _worker_head(self) -> _Args:
        pinned = self.clock.pinned_us
        return [self.clock.skew_us, "" if pinned is None else pinned, self._serializer.name, ""]

    async def heartbeat(self, worker: str, data: Mapping[str, Any], *, ttl: Seconds) -> None:
        """See :meth:`Store.heartbeat`: one script on the registry hash (O(workers): it forgets
        the long-expired ones as it goes)."""
        worker = _workers.check_worker(worker)
        text, seconds = _workers.worker_data(data), _workers.worker_ttl(ttl)
        args: _Args = [
            *self._worker_head(),
            "beat",
            worker,
            _micros(seconds, "ttl"),
            _micros(_workers.WORKER_KEEP, "keep"),
            text,
        ]
        await self._backend.eval(SCRIPTS["worker"], [self._workers_key], args)

    async def deregister_worker(self, worker: str) -> bool:
        worker = _workers.check_worker(worker)
        args: _Args = [*self._worker_head(), "drop", worker]
        return bool(await self._backend.eval(SCRIPTS["worker"], [self._workers_key], args))

    async def workers(self) -> list[WorkerRecord]:
        args: _Args = [*self._worker_head(), _micros(_workers.WORKER_KEEP, "keep")]
        reply = await self._backend.eval(SCRIPTS["workers"], [self._workers_key], args)
        now = int(reply[0]) / 1e6
        found = []
        for i in range(1, len(reply), 2):
            value = _text(reply[i + 1])
            found.append(
                _workers.record(
                    _text(reply[i]), value[32:], int(value[:16]) / 1e6, int(value[16:32]) / 1e6, now
                )
            )
        return sorted(found, key=lambda w: w.id)

    # -- limits ----------------------------------------------------------------------------------
    # Each step is one run of limit.lua on the limit key's four keys (one hash tag: one slot); it
    # documents the keys, and why a step's wakes are the client's second step (apply_wakes).

    def _limit_keys(self, limit: str, key: str) -> list[str]:
        base = f"{self._prefix}:limit:{{{_tag(limit)}:{_tag(key)}}}"
        return [f"{base}:h", f"{base}:t", f"{base}:q", f"{base}:m"]

    async def _limit_step(
        self,
        op: str,
        limit: str,
        key: str,
        holder: str | None,
        spec: object,
        waiter: object = None,
        waiters: Sequence[tuple[str, str, int]] = (),
    ) -> Any:
        self._check_open()
        _limits.check_names(limit, key, holder)
        checked = _limits.check_spec(spec)
        own = _limits.check_waiter(waiter)
        if self.clock.take_sync():  # as _eval: every ServerClock.resync_every
            with suppress(RehydrateError):
                await self._set_clock()
        args: _Args = [
            *self._worker_head(),
            op,
            holder or "",
            "" if checked.concurrency is None else checked.concurrency,
            _micros(checked.lease, "lease"),
            _micros(checked.window, "window"),
            _micros(checked.horizon, "horizon"),
            *(("", "", "") if own is None else own),
            len(checked.rates),
        ]
        for n, per in checked.rates:
            args += (n, _micros(per, "per"))
        for name, id, attempt in waiters:
            args += (name, id, attempt)
        return await self._backend.eval(SCRIPTS["limit"], self._limit_keys(limit, key), args)

    @staticmethod
    def _limit_answer(reply: Sequence[Any], parked: int = 0) -> LimitAnswer:
        """A step's reply: granted, retry_in, parked_in, then ``parked`` times (``limit_park``'s
        waiters), then four fields per waiter woken."""
        retry_in, parked_in = int(reply[1]), int(reply[2])
        first = 3 + parked
        wakes = tuple(
            Wake(_text(reply[i]), _text(reply[i + 1]), int(reply[i + 2]), int(reply[i + 3]) / 1e6)
            for i in range(first, len(reply), 4)
        )
        return LimitAnswer(
            granted=bool(int(reply[0])),
            retry_in=None if retry_in < 0 else retry_in / 1e6,
            parked_in=None if parked_in < 0 else parked_in / 1e6,
            wake=wakes,
            parked=tuple(int(t) / 1e6 for t in reply[3:first]),
        )

    async def limit_acquire(
        self,
        limit: str,
        key: str,
        holder: str,
        spec: LimitSpec,
        *,
        waiter: tuple[str, str, int] | None = None,
    ) -> LimitAnswer:
        """See :meth:`Store.limit_acquire`: one script. A retry after a lost reply finds the
        holder's slot taken and grants it again (a rate alone, which keeps no holder, counts a
        second start)."""
        reply = await self._limit_step("acquire", limit, key, holder, spec, waiter)
        return self._limit_answer(reply)

    async def limit_park(
        self, limit: str, key: str, spec: LimitSpec, waiters: Sequence[tuple[str, str, int]]
    ) -> LimitAnswer:
        """See :meth:`Store.limit_park`: one script, the waiters its arguments. A retry after a
        lost reply finds them queued already, and they keep their places."""
        checked = _limits.check_waiters(waiters)
        reply = await self._limit_step("park", limit, key, None, spec, waiters=checked)
        return self._limit_answer(reply, parked=len(checked))

    async def limit_renew(self, limit: str, key: str, holder: str, spec: LimitSpec) -> bool:
        return bool(int(await self._limit_step("renew", limit, key, holder, spec)))

    async def limit_release(self, limit: str, key: str, holder: str, spec: LimitSpec) -> LimitAnswer:
        """See :meth:`Store.limit_release`: one script. A retry after a lost reply answers that
        the holder held nothing, and the wakes of the first run are lost: the waiters are due at
        their own times all the same (limit.lua's header)."""
        return self._limit_answer(await self._limit_step("release", limit, key, holder, spec))

    async def limits(self, limit: str | None = None) -> list[LimitInfo]:
        """See :meth:`Store.limits`: the limit keys found by ``SCAN`` (every primary of a
        cluster), then one script per key in one pipeline, which also deletes the keys gone idle."""
        self._check_open()
        if limit is not None:
            _limits.check_names(limit, "-")
        pattern = _glob(f"{self._prefix}:limit:{{")
        pattern += "*" if limit is None else _glob(_tag(limit)) + ":*"
        found: list[tuple[str, str]] = []
        for name in await self._backend.scan(pattern + "}:m"):
            tag = name[len(self._prefix) + len(":limit:{") : -len("}:m")]
            part, colon, rest = tag.partition(":")
            if colon and ":" not in rest:
                found.append((_untag(part), _untag(rest)))
        found.sort()
        if not found:
            return []
        head = [*self._worker_head(), "list"]
        script = SCRIPTS["limit"]
        replies = await self._backend.eval_many([(script, self._limit_keys(a, b), head) for a, b in found])
        out = []
        for (name, key), reply in zip(found, replies, strict=True):
            if reply:
                holders = {_text(reply[i]): int(reply[i + 1]) / 1e6 for i in range(2, len(reply), 2)}
                starts, waiting = int(reply[0]), int(reply[1])
                out.append(LimitInfo(limit=name, key=key, holders=holders, starts=starts, waiting=waiting))
        return out

    @asynccontextmanager
    async def _subscribe(self, name: str) -> AsyncIterator[Subscription]:
        subscription = EventSubscription(self.clock)
        async with self._backend.listen(self._channel(name), subscription.notify):
            yield subscription

    def subscribe(self, name: str) -> AbstractAsyncContextManager[Subscription]:
        """See :meth:`Store.subscribe`: one pub/sub connection per subscription, woken by the
        scripts' ``PUBLISH`` (no polling)."""
        self._keys(name)
        return self._subscribe(name)
