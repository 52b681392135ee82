"""The Redis client seam: the Lua scripts, and the few things the store asks of a client.

:class:`Backend` runs scripts (one by one or pipelined, loading them on ``NOSCRIPT``) and listens
on a pub/sub channel, retrying lost connections and translating the client's failures into
rehydrate's errors. coredis is imported here, when a store opens, and used nowhere else: another
client would change this module alone.
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from importlib.resources import files
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import urlsplit, urlunsplit

import anyio

from rehydrate.errors import RehydrateError, StoreNotOpenError, StoreUnavailableError

if TYPE_CHECKING:
    import coredis

__all__ = ["SCRIPTS", "Backend", "RedisRefusedError", "Script", "redact"]

_SCRIPT_NAMES: Final = (
    "look",
    "move",
    "names",
    "pull",
    "push",
    "range",
    "remove",
    "size",
    "summary",
    "take",
    "time",
    "ttn",
    "update",
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


def _load_scripts() -> dict[str, Script]:
    folder = files("rehydrate.stores").joinpath("_redis_scripts")
    lib = folder.joinpath("_lib.lua").read_text(encoding="utf-8")
    return {
        name: Script(name, lib + "\n" + folder.joinpath(f"{name}.lua").read_text(encoding="utf-8"))
        for name in _SCRIPT_NAMES
    }


#: Every script, read when this module is imported (the Redis store is imported only when asked
#: for): never from disk on the event loop, as reading them at the first ``open`` did.
SCRIPTS: Final = _load_scripts()


class RedisRefusedError(RehydrateError):
    """The Redis server refused a call for a reason retrying will not change (a key of the wrong
    type, a server-side limit...): the message is the server's. ``RHSERIALIZER ...`` comes from
    our scripts and becomes a :class:`~rehydrate.errors.SerializerMismatchError`."""


#: Replies that mean "not now" rather than "never": retried like a lost connection.
_BUSY_REPLIES: Final = ("BUSY", "MASTERDOWN", "NOREPLICAS", "OOM")


# -- the client seam -------------------------------------------------------------------------------


def redact(url: str) -> str:
    """The URL without its password, for messages."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    user = f"{parts.username}:***@" if parts.username else ":***@"
    return urlunsplit(parts._replace(netloc=user + host))


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
    ) -> None:
        self.url = url
        self.cluster = cluster
        self._timeout = timeout
        self._connect_timeout = connect_timeout
        self._retries = retries
        self._backoff = backoff
        self._options = dict(options)
        self._client: coredis.Redis[bytes] | coredis.RedisCluster[bytes] | None = None
        self._stack: AsyncExitStack | None = None
        self._transient: tuple[type[BaseException], ...] = ()
        self._no_script: type[BaseException] = Exception
        self._response_error: type[BaseException] = Exception
        self._refused: tuple[type[BaseException], ...] = ()
        self._garbled: type[BaseException] = Exception

    @property
    def is_open(self) -> bool:
        return self._client is not None

    async def open(self) -> None:
        try:
            import coredis
            import coredis.exceptions as ce
            from coredis.retry import NoRetryPolicy
        except ImportError as exc:  # pragma: no cover - depends on the environment
            from rehydrate.errors import UnsupportedStoreError

            raise UnsupportedStoreError(
                "the Redis store needs coredis: pip install 'rehydrate[redis]'"
            ) from exc
        self._transient = (
            ce.ConnectionError,
            ce.ReadOnlyError,
            ce.ClusterDownError,
            ce.TryAgainError,
            TimeoutError,
            OSError,
            anyio.BrokenResourceError,
            anyio.ClosedResourceError,
            anyio.EndOfStream,
        )
        self._no_script = ce.NoScriptError
        self._response_error = ce.ResponseError
        self._refused = (ce.AuthenticationError, ce.AuthorizationError)
        self._garbled = ce.InvalidResponse
        options: dict[str, Any] = {
            "decode_responses": False,
            "retry_policy": NoRetryPolicy(),
            "stream_timeout": self._timeout,
            "connect_timeout": self._connect_timeout,
            **self._options,
        }
        client: coredis.Redis[bytes] | coredis.RedisCluster[bytes]
        if self.cluster:
            from coredis.connection import TCPLocation

            # Given as a TCPLocation: coredis 6.9's from_url would warn about its own dict form.
            parts = urlsplit(self.url)
            options.setdefault(
                "startup_nodes", [TCPLocation(parts.hostname or "localhost", parts.port or 6379)]
            )
            client = coredis.RedisCluster.from_url(self.url, **options)
        else:
            client = coredis.Redis.from_url(self.url, **options)
        stack = AsyncExitStack()
        try:
            await stack.enter_async_context(client)
        except (ce.RedisError, OSError, TimeoutError) as exc:
            hint = " (cluster=1 needs a Redis Cluster)" if isinstance(exc, ce.RedisClusterError) else ""
            raise StoreUnavailableError(
                f"Redis at {redact(self.url)} could not be opened{hint}: {type(exc).__name__}: {exc}"
            ) from exc
        self._client, self._stack = client, stack

    async def aclose(self) -> None:
        stack, self._stack, self._client = self._stack, None, None
        if stack is not None:
            await stack.aclose()

    def check_open(self) -> None:
        self._get()

    def _get(self) -> coredis.Redis[bytes] | coredis.RedisCluster[bytes]:
        if self._client is None:
            raise StoreNotOpenError(
                f"the Redis store at {redact(self.url)} is not open: use it as `async with store:` "
                "(or `await store.open()` first)"
            )
        return self._client

    def _delay(self, attempt: int) -> float:
        return float(min(self._backoff * 2 ** (attempt - 1), 2.0))

    def _unavailable(self, exc: BaseException, attempts: int) -> StoreUnavailableError:
        tries = "after 1 attempt" if attempts == 1 else f"after {attempts} attempts"
        return StoreUnavailableError(
            f"Redis at {redact(self.url)} is unavailable {tries}: {type(exc).__name__}: {exc}"
        )

    async def _retry(self, exc: BaseException, attempt: int, retries: int | None = None) -> int:
        """After a failed attempt: raise if it cannot or may not be retried, else wait; the next attempt.

        ``retries`` overrides the store's (``open`` makes one attempt: a wrong URL fails fast).
        """
        if isinstance(exc, self._refused):
            raise StoreUnavailableError(f"Redis at {redact(self.url)} refused this client: {exc}") from exc
        if isinstance(exc, self._garbled):
            raise StoreUnavailableError(
                f"{redact(self.url)} does not answer as a Redis server: {exc}"
            ) from exc
        transient = isinstance(exc, self._transient) or (
            isinstance(exc, self._response_error) and str(exc).startswith(_BUSY_REPLIES)
        )
        if not transient:
            raise RedisRefusedError(str(exc)) from exc
        if attempt > (self._retries if retries is None else retries):
            raise self._unavailable(exc, attempt) from exc
        await anyio.sleep(self._delay(attempt))
        return attempt + 1

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

        ``retries`` overrides the store's number of retries.
        """
        client = self._get()
        attempt = 1
        while True:
            try:
                try:
                    return await client.evalsha(script.sha, keys=keys, args=args)
                except self._no_script:
                    await client.script_load(script.source)
                    return await client.evalsha(script.sha, keys=keys, args=args)
            except (*self._transient, self._response_error, self._garbled) as exc:
                attempt = await self._retry(exc, attempt, retries)
                if retry_args is not None:
                    args = retry_args

    async def eval_many(
        self, calls: Sequence[tuple[Script, Sequence[str], Sequence[str | bytes | int]]]
    ) -> list[Any]:
        """Run several scripts in one round trip (a pipeline, not a transaction); their replies in order.

        Calls the server answered NOSCRIPT did not run: their scripts are loaded and they run again.
        """
        client = self._get()
        results: list[Any] = [None] * len(calls)
        todo = list(range(len(calls)))
        attempt = 1
        while todo:
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
            except (*self._transient, self._response_error, self._garbled) as exc:
                attempt = await self._retry(exc, attempt)
                continue
            missing: list[int] = []
            for i, reply in zip(todo, replies, strict=True):
                if isinstance(reply, self._no_script):
                    missing.append(i)
                elif isinstance(reply, BaseException):
                    raise RedisRefusedError(str(reply)) from reply
                else:
                    results[i] = reply
            for source in {calls[i][0].source for i in missing}:
                await client.script_load(source)
            todo = missing
        return results

    @asynccontextmanager
    async def listen(self, channel: str, notify: Callable[[], None]) -> AsyncIterator[None]:
        """Call ``notify`` for every message on ``channel`` while the block runs.

        The subscription is confirmed on entry. A dropped connection is re-established by coredis;
        the new subscription's confirmation also calls ``notify``, since messages may have been
        missed meanwhile (a spurious wake-up is allowed, a missed one is not).
        """
        client = self._get()
        async with client.pubsub(channels=[channel]) as pubsub, anyio.create_task_group() as tg:

            async def read() -> None:
                confirmed = False
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

            tg.start_soon(read)
            try:
                yield
            finally:
                tg.cancel_scope.cancel()
