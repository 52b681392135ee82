"""Redis URLs for Sentinel and replica durability, and what ``min_replicas`` promises, against a
real primary/replica pair (started once for this module) and the session's Sentinel set."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import anyio
import pytest

from rehydrate import InvalidArgumentError, StoreUnavailableError, open_store
from rehydrate.stores._redis import RedisStore
from rehydrate.stores._redis_client import redact
from tests.redis_cluster import SentinelSet, admin, shared_sentinel
from tests.redis_server import RedisServer, drop_prefix

pytestmark = pytest.mark.anyio


def test_sentinel_urls_are_read() -> None:
    store = open_store("redis+sentinel://:pw@10.0.0.1:26379,h2:26380/mymaster/3?prefix=p&retries=1")
    assert isinstance(store, RedisStore)
    target = store._backend.sentinel
    assert target is not None
    assert target.sentinels == (("10.0.0.1", 26379), ("h2", 26380))
    assert (target.service, target.db) == ("mymaster", 3)
    assert "pw" not in repr(store)
    default = RedisStore.from_url("rediss+sentinel://h/svc")._backend.sentinel
    assert default is not None
    assert (default.sentinels, default.db) == ((("h", 26379),), 0)


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("redis+sentinel://h:26379", "names the service"),
        ("redis+sentinel://h:26379/svc/0/extra", "names the service"),
        ("redis+sentinel://h:26379/svc/zero", "the database in a Sentinel URL is a number"),
        ("redis+sentinel://h:port/svc", "bad sentinel address 'h:port'"),
        ("redis+sentinel://h:1,/svc", "bad sentinel address ''"),
        ("redis+sentinel://h/svc?cluster=1", "cluster=True does not apply"),
        ("redis+sentinel://h/svc?ssl_ca_certs=x", "ssl_ca_certs is a TLS option"),
        ("redis://h/0?min_replicas=-1", "min_replicas must be between 0 and 100"),
        ("redis://h/0?replica_timeout=0", "replica_timeout must be positive"),
        ("redis://h/0?replica_timeout=soon", "expected seconds (0.1, 0.1s) or milliseconds (100ms)"),
    ],
)
def test_bad_urls_say_what_is_wrong(url: str, says: str) -> None:
    with pytest.raises(InvalidArgumentError) as info:
        open_store(url)
    assert says in str(info.value)


def test_replica_timeout_units() -> None:
    for text, ms in (("100ms", 100), ("0.25", 250), ("2s", 2000)):
        store = RedisStore.from_url(f"redis://h/0?min_replicas=1&replica_timeout={text}")
        assert store._backend._replica_ms == ms


def test_redact_hides_passwords_with_several_hosts() -> None:
    assert redact("redis+sentinel://:pw@a:1,b:2/s") == "redis+sentinel://:***@a:1,b:2/s"
    assert redact("redis://u:pw@a:1/0") == "redis://u:***@a:1/0"
    assert redact("redis://a:1/0") == "redis://a:1/0"


# -- against servers -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pair() -> Iterator[tuple[RedisServer, RedisServer]]:
    try:
        primary, replica = RedisServer().start(), RedisServer().start()
    except RuntimeError as exc:
        pytest.skip(f"no Redis/Valkey server: {exc}")
    try:
        admin(replica.port, "REPLICAOF", "127.0.0.1", primary.port)
        deadline = time.monotonic() + 20
        while "state=online" not in str(admin(primary.port, "INFO", "replication")):
            assert time.monotonic() < deadline, "the replica did not catch up"
            time.sleep(0.05)
        yield primary, replica
    finally:
        primary.cleanup()
        replica.cleanup()


async def test_min_replicas_waits_for_a_replica_and_says_when_none_confirms(
    pair: tuple[RedisServer, RedisServer],
) -> None:
    primary, replica = pair
    prefix = f"rhrep-{uuid.uuid4().hex[:8]}"
    url = f"{primary.url}?prefix={prefix}&min_replicas=1&retries=0"
    try:
        # The writes a replica confirms get time to spare (a loaded machine can take 200 ms to
        # answer); the write it cannot confirm gets a short timeout.
        async with (
            RedisStore.from_url(f"{url}&replica_timeout=5s") as patient,
            RedisStore.from_url(f"{url}&replica_timeout=200ms") as store,
        ):
            await patient.push("d", {"n": 1}, ttl=0, id="a")  # the replica confirms it
            assert await store.look("d", "a") == {"n": 1}
            # A replica that cannot answer: the write is not confirmed in time.
            admin(replica.port, "CLIENT", "PAUSE", 1500, "ALL")
            began = time.monotonic()
            with pytest.raises(StoreUnavailableError, match="fewer than 1 replica"):
                await store.push("d", {"n": 2}, ttl=0, id="b")
            assert time.monotonic() - began < 1.2
            # Reads do not wait for replicas.
            assert await store.size("d") == 2
            await anyio.sleep(1.6)
            await patient.push("d", {"n": 3}, ttl=0, id="c")
        async with RedisStore.from_url(f"{primary.url}?min_replicas=2&replica_timeout=50ms") as two:
            with pytest.raises(StoreUnavailableError, match="fewer than 2 replica"):
                await two.push("d", {}, ttl=0)
    finally:
        await drop_prefix(primary.url, prefix)


@pytest.fixture
def sentinel(pytestconfig: pytest.Config) -> SentinelSet:
    return shared_sentinel(pytestconfig)


async def test_sentinel_store_finds_the_primary(sentinel: SentinelSet) -> None:
    prefix = f"rhsen-{uuid.uuid4().hex[:8]}"
    async with open_store(f"{sentinel.url}?prefix={prefix}&min_replicas=1") as store:
        assert isinstance(store, RedisStore)
        await store.push("d", "x", ttl=0, id="a")
        assert await store.poll("d") == ["x"]
        async with store.subscribe("d") as subscription:
            await store.push("d", "y", ttl=0)
            with anyio.fail_after(5):
                await subscription.wait(None)
    await drop_prefix(f"redis://127.0.0.1:{sentinel.current_primary().port}/0", prefix)


async def test_a_sentinel_that_knows_no_such_service_is_unavailable(sentinel: SentinelSet) -> None:
    port = sentinel.sentinel_ports[0]
    store = open_store(f"redis+sentinel://127.0.0.1:{port}/nosuchservice?connect_timeout=1")
    with pytest.raises(StoreUnavailableError, match=r"No primary found for 'nosuchservice'"):
        async with store:
            pass


async def test_sentinel_store_follows_a_graceful_failover(sentinel: SentinelSet) -> None:
    """``SENTINEL FAILOVER`` demotes a live primary: connections to it must not stay."""
    prefix = f"rhsen-{uuid.uuid4().hex[:8]}"
    url = f"{sentinel.url}?prefix={prefix}&retries=8&retry_backoff=0.1"
    async with open_store(url) as store:
        await store.push("d", "before", ttl=0, id="a")
        old = sentinel.current_primary()
        assert admin(sentinel.sentinel_ports[0], "SENTINEL", "FAILOVER", "rhservice") == "OK"

        def promoted() -> None:  # the sentinels are watched from outside: a thread may poll
            deadline = time.monotonic() + 20
            while sentinel.current_primary() is old:
                assert time.monotonic() < deadline, "no failover within 20 s"
                time.sleep(0.05)

        await anyio.to_thread.run_sync(promoted)
        for i in range(20):  # every write lands on the new primary, none fails for good
            await store.push("d", i, ttl=0, id=f"after-{i}")
            await anyio.sleep(0.05)
        assert await store.size("d") == 21
    await anyio.to_thread.run_sync(sentinel.wait_healthy)
    await drop_prefix(f"redis://127.0.0.1:{sentinel.current_primary().port}/0", prefix)
