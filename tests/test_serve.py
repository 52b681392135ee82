# redis-py's sync client is untyped.
# mypy: disable-error-code="no-untyped-call"
"""``rehydrate serve`` with real clients: redis-py (sync and async, RESP2 and RESP3), coredis,
redis-cli and raw sockets; ReDe's documented examples reply for reply; its errors' texts; bad
protocol, slow readers, AUTH; and the cross-language path to a ``@scheduler.handler``."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
import redis

from rehydrate import Scheduler
from rehydrate._serve._commands import elements_for
from rehydrate._serve._server import Server, tcp_listener, tls_listener, unix_listener
from rehydrate.stores import MemoryStore, open_store
from rehydrate.testing import FakeClock

pytestmark = pytest.mark.anyio
ROOT = Path(__file__).resolve().parent.parent


@asynccontextmanager
async def serving(
    url: str = "memory://",
    *,
    clock: FakeClock | None = None,
    unix: str | None = None,
    tls: ssl.SSLContext | None = None,
    **options: Any,
) -> AsyncIterator[tuple[int, Server]]:
    """A server on a free loopback port over the store of ``url``, stopped on the way out."""
    store = open_store(url, clock=clock) if clock is not None else open_store(url)
    async with store:
        server = Server(
            store,
            elements=elements_for(url, options.pop("elements", None)),
            shared=url != "memory://",
            local=options.pop("local", url == "memory://"),
            **options,
        )
        listener = await tcp_listener("127.0.0.1", 0)
        port = listener.extra(anyio.abc.SocketAttribute.local_port)
        listeners = [tls_listener(listener, tls) if tls is not None else listener]
        if unix is not None:
            listeners.append(await unix_listener(unix))
        async with anyio.create_task_group() as tg:
            started = anyio.Event()
            tg.start_soon(lambda: server.serve(listeners, started=started))
            await started.wait()
            yield port, server
            server.stop()


async def in_thread(function: Callable[[], Any]) -> Any:
    with anyio.fail_after(30):
        return await anyio.to_thread.run_sync(function)


def once(port: int, *args: Any) -> Any:
    """One command on a connection of its own, closed after."""
    client = redis.Redis(port=port)
    try:
        return client.execute_command(*args)
    finally:
        client.close()


def execute(client: Any, *args: Any) -> Any:
    try:
        return client.execute_command(*args)
    except redis.RedisError as exc:  # AUTH's errors are AuthenticationError
        return f"error: {exc}"


# -- ReDe's documented examples, reply for reply ------------------------------------------------------


@pytest.mark.parametrize(("protocol", "local"), [(2, True), (3, True), (2, False)])
async def test_rede_examples_reply_for_reply(protocol: int, local: bool) -> None:
    """Every example of ReDe's command reference (000_rede_docs.txt), on a fake clock moved where
    the docs say "wait"; on memory://'s dehydrators held by the server (local) and through the
    store's API."""
    clock = FakeClock(1_000_000.0)
    async with serving(clock=clock, local=local) as (port, _):

        def examples() -> None:
            r = redis.Redis(port=port, protocol=protocol)
            run = lambda *a: execute(r, *a)  # noqa: E731
            # PUSH
            assert run("REDE.PUSH", "push", 3000, "Dehydrate this", 101) == b"OK"
            assert run("REDE.LOOK", "push", 101) == b"Dehydrate this"
            assert run("REDE.POLL", "push") == []
            clock.advance(3)
            assert run("REDE.POLL", "push") == [b"Dehydrate this"]
            # GIDPUSH
            gid = run("REDE.GIDPUSH", "gid", 3000, "Dehydrate this")
            assert isinstance(gid, bytes)
            assert gid
            assert run("REDE.LOOK", "gid", gid) == b"Dehydrate this"
            assert run("REDE.POLL", "gid") == []
            clock.advance(3)
            assert run("REDE.POLL", "gid") == [b"Dehydrate this"]
            # PULL
            assert run("REDE.PUSH", "pull", 3000, "Dehydrate this", 101) == b"OK"
            assert run("REDE.PULL", "pull", 101) == b"Dehydrate this"
            assert run("REDE.PULL", "pull", 101) is None
            # POLL
            assert run("REDE.PUSH", "poll", 3000, "Dehydrate this", 101) == b"OK"
            assert run("REDE.PUSH", "poll", 1000, "Dehydrate that", 102) == b"OK"
            assert run("REDE.POLL", "poll") == []
            clock.advance(1)
            assert run("REDE.POLL", "poll") == [b"Dehydrate that"]
            clock.advance(2)
            assert run("REDE.POLL", "poll") == [b"Dehydrate this"]
            # XPOLL (due order: 102 was due first; ReDe lists 101 first)
            run("REDE.PUSH", "xpoll", 3000, "Dehydrate this", 101)
            run("REDE.PUSH", "xpoll", 1000, "Dehydrate that", 102)
            assert run("REDE.XPOLL", "xpoll") == []
            clock.advance(1)
            assert run("REDE.XPOLL", "xpoll") == [b"102"]
            clock.advance(2)
            assert run("REDE.XPOLL", "xpoll") == [b"102", b"101"]
            # XACK
            run("REDE.PUSH", "xack", 3000, "Dehydrate this", 101)
            run("REDE.PUSH", "xack", 1000, "Dehydrate that", 102)
            clock.advance(1)
            assert run("REDE.POLL", "xack") == [b"Dehydrate that"]
            clock.advance(2)
            assert run("REDE.XPOLL", "xack") == [b"101"]
            assert run("REDE.XACK", "xack", 101, 102, 103) == [b"Dehydrate this", None, None]
            assert run("REDE.XACK", "no-such-key", 101) == []
            # LOOK
            run("REDE.PUSH", "look", 3000, "Dehydrate this", 101)
            run("REDE.PUSH", "look", 3000, "Dehydrate that", 102)
            assert run("REDE.LOOK", "look", 101) == b"Dehydrate this"
            assert run("REDE.LOOK", "look", 102) == b"Dehydrate that"
            assert run("REDE.LOOK", "look", 103) is None
            # TTN
            run("REDE.PUSH", "ttn", 3000, "Dehydrate this", 101)
            run("REDE.PUSH", "ttn", 1000, "Dehydrate that", 102)
            assert run("REDE.TTN", "ttn") == 1000
            clock.advance(1)
            assert run("REDE.TTN", "ttn") == 0
            assert run("REDE.POLL", "ttn") == [b"Dehydrate that"]
            assert run("REDE.TTN", "ttn") == 2000
            clock.advance(2)
            run("REDE.POLL", "ttn")
            assert run("REDE.TTN", "ttn") == -1  # the key exists, empty
            assert run("REDE.TTN", "no-such-key") is None
            # UPDATE: the old element back, the due time kept
            run("REDE.PUSH", "update", 3000, "Dehydrate this", 101)
            assert run("REDE.UPDATE", "update", 101, "Dehydrate that") == b"Dehydrate this"
            assert run("REDE.LOOK", "update", 101) == b"Dehydrate that"
            assert run("REDE.TTN", "update") == 3000
            # The keys commands ReDe's tests use around each scenario
            assert run("EXISTS", "ttn", "nope") == 1
            assert run("TYPE", "ttn") == b"dehy-type"
            assert run("DEL", "ttn", "update", "nope") == 2
            assert run("TTN" if False else "REDE.TTN", "ttn") is None
            assert run("REDE.TEST") == b"PASS"
            r.close()

        await in_thread(examples)


async def test_errors_have_redis_and_rede_texts() -> None:
    async with serving() as (port, _):

        def errors() -> None:
            r = redis.Redis(port=port, protocol=2)
            run = lambda *a: execute(r, *a)  # noqa: E731
            assert (
                run("REDE.PUSH", "d", 1000, "x") == "error: wrong number of arguments for 'REDE.PUSH' command"
            )
            assert run("rede.pull", "d") == "error: wrong number of arguments for 'REDE.PULL' command"
            assert run("FOO", "a", "b") == "error: unknown command 'FOO', with args beginning with: 'a' 'b' "
            assert run("rede.push", "d", 1000, "x", 1) == b"OK"  # case-insensitive names
            assert run("REDE.PUSH", "d", 1000, "x", 1) == "error: ERROR: Element already dehydrating."
            assert run("REDE.PUSH", "d", "soon", "x", 2) == "error: value is not an integer or out of range"
            assert run("REDE.UPDATE", "none", 1, "y") == "error: ERROR: No Such dehydrator."
            assert run("REDE.UPDATE", "d", 9, "y") == "error: ERROR: No Such Element."
            assert run("SELECT", 0) in (b"OK", True)  # redis-py turns it into True
            assert run("SELECT", 1) == "error: DB index is out of range"
            assert run("REDE.PUSH", "d", -5, "late", 3) == b"OK"  # a negative TTL: due at once
            assert run("REDE.POLL", "d") == [b"late"]
            assert run("AUTH", "pw").startswith("error: AUTH <password> called without any password")
            r.close()

        await in_thread(errors)


async def test_text_store_refuses_bytes_that_are_not_utf8(tmp_path: Path) -> None:
    async with serving(f"sqlite:///{tmp_path / 's.db'}") as (port, _):

        def run() -> None:
            r = redis.Redis(port=port)
            assert execute(r, "REDE.PUSH", "d", 1, b"\xff\xfe", 1).startswith("error: element is not UTF-8")
            assert execute(r, "REDE.PUSH", "d", 1, "é", 1) == b"OK"
            assert execute(r, "REDE.LOOK", "d", 1) == "é".encode()
            r.close()

        await in_thread(run)


# -- clients ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("protocol", [2, 3])
async def test_auth_before_anything_else(protocol: int) -> None:
    async with serving(password="s3cret") as (port, _):

        def run() -> None:
            refused = redis.Redis(port=port, protocol=2)
            with pytest.raises(redis.AuthenticationError):
                refused.ping()
            refused.close()
            anonymous = socket.create_connection(("127.0.0.1", port))
            anonymous.sendall(b"REDE.LOOK d 1\r\nAUTH wrong\r\nAUTH default s3cret\r\nPING\r\n")
            expected = (
                b"-NOAUTH Authentication required.\r\n"
                b"-WRONGPASS invalid username-password pair or user is disabled.\r\n+OK\r\n+PONG\r\n"
            )
            got = b""
            while len(got) < len(expected):
                got += anonymous.recv(4096)
            assert got == expected
            anonymous.close()
            r = redis.Redis(port=port, protocol=protocol, password="s3cret")
            assert r.execute_command("REDE.PUSH", "d", 1000, "x", 1) == b"OK"
            r.close()

        await in_thread(run)


async def test_redis_py_asyncio_and_coredis(anyio_backend_name: str) -> None:
    """The asyncio clients (redis.asyncio in RESP2 and RESP3, coredis)."""
    if anyio_backend_name != "asyncio":
        pytest.skip("redis.asyncio and coredis run on asyncio")
    import coredis
    import redis.asyncio

    async with serving() as (port, _):
        for protocol in (2, 3):
            r = redis.asyncio.Redis(port=port, protocol=protocol)
            assert await r.execute_command("REDE.PUSH", "a", 0, f"p{protocol}", protocol) == b"OK"
            assert await r.execute_command("REDE.LOOK", "a", 99) is None
            await r.aclose()
        r = redis.asyncio.Redis(port=port)
        assert await r.execute_command("REDE.POLL", "a") == [b"p2", b"p3"]
        await r.aclose()
        c = coredis.Redis(port=port)
        async with c:
            assert await c.ping() in (b"PONG", "PONG")
            assert await c.echo(b"rede") == b"rede"


@pytest.mark.loop_may_block  # anyio's create_unix_listener stats the path on the loop's thread
async def test_redis_cli_and_unix_socket(tmp_path: Path) -> None:
    sock = str(tmp_path / "rede.sock")
    async with serving(unix=sock) as (port, _):

        def run() -> None:
            def cli(*args: str) -> str:
                done = subprocess.run(["redis-cli", *args], capture_output=True, text=True, timeout=10)
                return done.stdout.strip()

            assert cli("-p", str(port), "REDE.PUSH", "my", "3000", "Dehydrate this", "101") == "OK"
            assert cli("-s", sock, "REDE.LOOK", "my", "101") == "Dehydrate this"
            assert cli("-p", str(port), "-n", "0", "REDE.TTN", "my").isdigit()
            assert cli("-p", str(port), "REDE.TEST") == "PASS"
            # interactive mode: COMMAND DOCS first, then the lines typed
            done = subprocess.run(
                ["redis-cli", "-p", str(port)], input="PING\nREDE.XPOLL my\n", capture_output=True, text=True
            )
            assert done.stdout.split() == ["PONG"] or "PONG" in done.stdout

        import shutil

        if shutil.which("redis-cli") is None:
            pytest.skip("redis-cli is not installed")
        await in_thread(run)


async def test_tls(tmp_path: Path) -> None:
    """TLS clients go through anyio's TLS streams (plain ones are served on their sockets): the
    same replies, pipelined batches included, and a stop that closes them."""
    from tests.redis_server import _self_signed

    cert, key = await in_thread(lambda: _self_signed(tmp_path))
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    async with serving(tls=context) as (port, _):

        def run() -> None:
            r = redis.Redis(host="127.0.0.1", port=port, ssl=True, ssl_ca_certs=str(cert), protocol=3)
            assert r.execute_command("REDE.PUSH", "d", 0, "secret", 1) == b"OK"
            pipe = r.pipeline(transaction=False)
            for _ in range(50):
                pipe.execute_command("REDE.LOOK", "d", 1)
            assert pipe.execute() == [b"secret"] * 50
            assert r.execute_command("REDE.POLL", "d") == [b"secret"]
            r.close()

        await in_thread(run)


# -- a hostile or broken client does not hurt the others -------------------------------------------


async def test_bad_protocol_drops_that_client_only() -> None:
    async with serving() as (port, _):

        def run() -> None:
            good = redis.Redis(port=port)
            assert good.execute_command("REDE.PUSH", "d", 1000, "kept", 1) == b"OK"
            for garbage in (b"*1\r\n+PING\r\n", b"*-x\r\n", b'SET "a\r\n', b"*1\r\n$99999999999\r\n"):
                bad = socket.create_connection(("127.0.0.1", port))
                bad.sendall(garbage)
                reply = b""
                while chunk := bad.recv(4096):  # the error, then the connection closes
                    reply += chunk
                assert reply.startswith(b"-ERR Protocol error: "), reply
                bad.close()
            assert good.execute_command("REDE.LOOK", "d", 1) == b"kept"
            good.close()

        await in_thread(run)


async def test_stop_closes_the_listeners_and_finishes_replies_in_flight() -> None:
    """What SIGTERM does: no new connection is taken, an idle client is closed, and a request
    already running (a LOOK held inside the store) gets its reply before its connection closes."""
    entered, release = anyio.Event(), anyio.Event()

    class HeldStore(MemoryStore):
        async def look(self, name: str, id: str) -> Any:
            entered.set()
            await release.wait()
            return await super().look(name, id)

    store = HeldStore()
    async with store:
        await store.push("d", "kept", ttl=60, id="1")
        server = Server(store, elements=elements_for("memory://", None), shared=False, grace=10)
        listener = await tcp_listener("127.0.0.1", 0)
        port = listener.extra(anyio.abc.SocketAttribute.local_port)
        replies: list[Any] = []
        async with anyio.create_task_group() as tg:
            started = anyio.Event()
            tg.start_soon(lambda: server.serve([listener], started=started))
            await started.wait()
            idle = await anyio.connect_tcp("127.0.0.1", port)
            await idle.send(b"PING\r\n")
            assert await idle.receive() == b"+PONG\r\n"

            async def in_flight() -> None:
                replies.append(await in_thread(lambda: once(port, "REDE.LOOK", "d", "1")))

            tg.start_soon(in_flight)
            with anyio.fail_after(10):
                await entered.wait()
            server.stop()
            with anyio.fail_after(10):
                with pytest.raises(anyio.EndOfStream):  # the idle client is closed
                    await idle.receive()
                while True:  # the listener closes
                    try:
                        late = await anyio.connect_tcp("127.0.0.1", port)
                    except OSError:
                        break
                    await late.aclose()
                    await anyio.sleep(0.01)
            await idle.aclose()
            release.set()
    assert replies == [b"kept"]


FLOOD = """
import socket, sys, time
hog = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
chunk = b"\\r\\n" * 500_000  # empty inline lines: no reply, so no send for the server to wait on
stop = time.monotonic() + float(sys.argv[2])
while time.monotonic() < stop:
    hog.sendall(chunk)
"""


async def test_a_client_that_pipelines_without_end_does_not_keep_the_server() -> None:
    """A client whose requests never stop coming (a process of its own, so every read fills the
    buffer) is served in turns with the others: a second client's command is answered meanwhile."""
    async with serving() as (port, _):

        def run() -> None:
            hog = subprocess.Popen([sys.executable, "-c", FLOOD, str(port), "6"])
            try:
                time.sleep(1)  # the flood is on
                started = time.monotonic()
                assert once(port, "REDE.PUSH", "d", 0, "answered", 1) == b"OK"
                assert time.monotonic() - started < 3
            finally:
                hog.kill()
                hog.wait()

        await in_thread(run)


async def test_a_client_that_stops_reading_is_dropped() -> None:
    async with serving(send_timeout=0.5) as (port, _server):
        await in_thread(lambda: once(port, "REDE.PUSH", "d", 0, "x" * 20_000, 1))

        def run() -> None:
            stuck = socket.create_connection(("127.0.0.1", port))
            stuck.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            request = b"*3\r\n$9\r\nREDE.LOOK\r\n$1\r\nd\r\n$1\r\n1\r\n" * 50  # 1 MB of replies a batch
            stuck.settimeout(10)
            try:
                for _ in range(100):
                    stuck.sendall(request)
            except OSError:
                pass  # dropped while sending
            good = redis.Redis(port=port)
            deadline = time.monotonic() + 10
            while good.info().get("rejected_slow_clients") != 1:
                assert time.monotonic() < deadline
                time.sleep(0.05)
            assert good.execute_command("REDE.LOOK", "d", 1) == b"x" * 20_000
            good.close()
            stuck.close()

        await in_thread(run)


# -- the cross-language path ------------------------------------------------------------------------


async def test_a_client_push_reaches_a_python_handler(tmp_path: Path) -> None:
    """A Redis client pushes into "emails" on a SQLite store; a Python @scheduler.handler of that
    name gets the element as text. And what Python defers reads back as its JSON text."""
    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    got: list[Any] = []
    done = anyio.Event()
    scheduler = Scheduler(url)

    @scheduler.handler("emails")
    async def send(element: Any) -> None:
        got.append(element)
        done.set()

    async with serving(url) as (port, _), scheduler:
        await scheduler.defer("reports", {"user": 7, "kind": "weekly"}, delay=3600, id="r1")
        pushed = await in_thread(lambda: once(port, "REDE.PUSH", "emails", 0, '{"to":"a@b.c"}', "e1"))
        assert pushed == b"OK"
        with anyio.fail_after(20):
            await done.wait()
        looked = await in_thread(lambda: once(port, "REDE.LOOK", "reports", "r1"))
    assert got == ['{"to":"a@b.c"}']
    assert looked == b'{"user":7,"kind":"weekly"}'


# -- the command -------------------------------------------------------------------------------------


SERVE = [sys.executable, "-m", "rehydrate", "serve"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT)}


def test_refuses_a_public_address_without_a_password() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "rehydrate", "serve", "--store", "memory://", "--bind", "0.0.0.0"],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=30,
    )
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1
    assert "without a password" in done.stderr


def test_serve_command_answers_and_stops_on_sigterm(tmp_path: Path) -> None:
    port = _free_port()
    secret = tmp_path / "pw"
    secret.write_text("s3cret\n")
    server = subprocess.Popen(
        [*SERVE, "--store", "memory://", "--port", str(port), "--requirepass-file", str(secret)],
        env=_env(),
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                client = redis.Redis(port=port, password="s3cret", protocol=3)
                assert client.ping()
                break
            except redis.ConnectionError:
                assert time.monotonic() < deadline, "the server did not start"
                time.sleep(0.1)
        assert client.execute_command("REDE.PUSH", "d", 1000, "x", 1) == b"OK"
        server.send_signal(signal.SIGTERM)
        assert server.wait(timeout=20) == 0
        assert server.stderr is not None
        assert "stopped" in server.stderr.read()
        client.close()
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
        if server.stderr is not None:
            server.stderr.close()  # (an unclosed pipe is an unraisable warning in a later test)


def test_serve_command_with_tls_and_a_password_from_the_environment(tmp_path: Path) -> None:
    from tests.redis_server import _self_signed

    cert, key = _self_signed(tmp_path)
    port = _free_port()
    server = subprocess.Popen(
        [*SERVE, "--store", "memory://", "--port", str(port), "--tls-cert", str(cert), "--tls-key", str(key)],
        env={**_env(), "REHYDRATE_SERVE_PASSWORD": "from-env"},
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 20
        while True:
            client = redis.Redis(
                host="127.0.0.1", port=port, ssl=True, ssl_ca_certs=str(cert), password="from-env"
            )
            try:
                assert client.execute_command("REDE.PUSH", "d", 0, "tls", 1) == b"OK"
                break
            except redis.ConnectionError:
                assert time.monotonic() < deadline, "the server did not start"
                time.sleep(0.1)
            finally:
                client.close()
        plain = socket.create_connection(("127.0.0.1", port))
        plain.sendall(b"PING\r\n")  # not TLS: the handshake fails, that connection only
        plain.settimeout(10)
        with contextlib.suppress(OSError):
            while plain.recv(4096):
                pass
        plain.close()
        client = redis.Redis(
            host="127.0.0.1", port=port, ssl=True, ssl_ca_certs=str(cert), password="from-env"
        )
        assert client.execute_command("REDE.POLL", "d") == [b"tls"]
        client.close()
        server.send_signal(signal.SIGTERM)
        assert server.wait(timeout=20) == 0
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
