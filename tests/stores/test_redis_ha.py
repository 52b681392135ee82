"""The Redis store across failures of real topologies: a master of a 3-master/3-replica Cluster
SIGKILLed under load, a Sentinel-managed primary SIGKILLed under load, and a slot moved
(``CLUSTER SETSLOT`` + ``MIGRATE``) while its dehydrator is being delivered.

Two ``rehydrate worker`` processes (one on asyncio, one on trio) serve dehydrators spread over
every master; this process pushes elements due 0.2 s later at a steady rate. A killed node stays
dead until the test ends (then it comes back as a replica, for the next test). Each delivery appends
``<name> <id> <attempt> <pid> <lateness>`` to a log. Checked: every element whose push returned is
delivered (nothing lost); no worker dies; the longest lateness, on the dehydrators of the failed
node, is within the promotion time + 2 s. The figures (promotion, stall, duplicates) are printed
for the docs (``pytest -s``). The topologies are started once per session (``tests/redis_cluster.py``).
"""

from __future__ import annotations

import gc
import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import anyio
import coredis
import pytest
from coredis.connection import TCPLocation

from rehydrate.errors import DuplicateIdError, RehydrateError, StoreUnavailableError
from rehydrate.stores._redis import RedisStore
from tests.logfiles import complete_lines
from tests.redis_cluster import (
    Cluster,
    SentinelSet,
    admin,
    drop_prefix_everywhere,
    key_slot,
    shared_cluster,
    shared_sentinel,
)
from tests.redis_server import RedisServer, drop_prefix
from tests.stores.test_redis import check_invariants

ROOT = Path(__file__).resolve().parent.parent.parent

#: coredis 6.9 leaks the memory streams of a connection that cannot connect: the store closes
#: those of its own connections (``_closing`` in ``_redis_client.py``), but the cluster layout's
#: discovery builds its own clients (``ClusterNodeLocation.as_client``) to every known node, and
#: with a node dead each attempt leaves six streams to the garbage collector. Only in these tests,
#: where nodes die, and only that warning; ``_collect`` makes it surface here, not later.
pytestmark = pytest.mark.filterwarnings(
    r"ignore:Exception ignored in. <function MemoryObject(Send|Receive)Stream.__del__"
    ":pytest.PytestUnraisableExceptionWarning"
)


@pytest.fixture(autouse=True)
def _collect() -> Iterator[None]:
    yield
    gc.collect()


APP = """
import os, time
from rehydrate import Scheduler, current_delivery

scheduler = Scheduler("memory://", grace=1.0)
LOG = {log!r}

def make_handler(name):
    async def handle(element):
        d = current_delivery()
        with open(LOG, "a") as out:
            out.write(f"{{name}} {{d.id}} {{d.attempt}} {{os.getpid()}} {{time.time() - d.due:.3f}}\\n")
    return handle

for name in {names!r}:
    scheduler.handler(name, lease=2.0, concurrency=20)(make_handler(name))
"""

#: Elements are due this long after their push.
TTL = 0.2
#: One push per dehydrator this often.
PERIOD = 0.05


def _names_on(prefix: str, want: dict[int, int], owner: Callable[[int], int]) -> list[str]:
    """Dehydrator names whose slots belong to each node ``owner`` maps to: ``want[node]`` of each."""
    names: list[str] = []
    left = dict(want)
    i = 0
    while any(left.values()):
        name = f"d{i}"
        node = owner(key_slot(f"{prefix}:{{{name}}}:e"))
        if left.get(node, 0):
            left[node] -= 1
            names.append(name)
        i += 1
    return names


def _start_worker(cwd: Path, url: str, backend: str, stderr: Path) -> subprocess.Popen[bytes]:
    argv = [sys.executable, "-m", "rehydrate", "--log-format", "json", "worker", "--store", url]
    with stderr.open("wb") as err:
        return subprocess.Popen(
            [*argv, "--backend", backend, "ha_app:scheduler"],
            cwd=cwd,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=err,
        )


class Load:
    """Workers serving ``names``, a producer pushing to each, and what was delivered."""

    def __init__(self, tmp: Path, worker_url: str, producer_url: str, names: list[str]) -> None:
        self.tmp = tmp
        self.log = tmp / "deliveries.log"
        self.names = names
        self.worker_url = worker_url
        self.producer_url = producer_url
        (tmp / "ha_app.py").write_text(textwrap.dedent(APP.format(log=str(self.log), names=names)))
        self.workers: list[subprocess.Popen[bytes]] = []
        #: id -> (name, wall time its push returned)
        self.acked: dict[str, tuple[str, float]] = {}
        #: the longest a push took, successes after retries included
        self.push_stall = 0.0
        self.push_errors = 0

    def start(self) -> None:
        for i, backend in enumerate(("asyncio", "trio")):
            self.workers.append(
                _start_worker(self.tmp, self.worker_url, backend, self.tmp / f"worker{i}.err")
            )

    def deliveries(self) -> list[list[str]]:
        return [line.split() for line in complete_lines(self.log)]

    async def produce(self, store: RedisStore, stop: anyio.Event) -> None:
        async def one(name: str) -> None:
            n = 0
            while not stop.is_set():
                id = f"{name}-{n}"
                began = time.monotonic()
                landed = False
                while not landed and not stop.is_set():  # the same id until a push returns
                    try:
                        await store.push(name, {"n": n}, ttl=TTL, id=id)
                        landed = True
                    except DuplicateIdError:
                        landed = True  # an earlier attempt did land
                    except RehydrateError:
                        self.push_errors += 1
                        await anyio.sleep(0.05)
                self.push_stall = max(self.push_stall, time.monotonic() - began)
                if not landed:
                    return
                self.acked[id] = (name, time.time())
                n += 1
                await anyio.sleep(PERIOD)

        async with anyio.create_task_group() as tg:
            for name in self.names:
                tg.start_soon(one, name)

    def wait_delivered(self, timeout: float = 40) -> set[str]:
        deadline = time.monotonic() + timeout
        while True:
            delivered = {entry[1] for entry in self.deliveries()}
            missing = set(self.acked) - delivered
            if not missing or time.monotonic() > deadline:
                return missing
            for worker in self.workers:
                assert worker.poll() is None, self.stderr()
            time.sleep(0.1)

    def stderr(self) -> str:
        return "\n".join((self.tmp / f"worker{i}.err").read_text()[-3000:] for i in range(2))

    def stop(self) -> list[int | None]:
        for worker in self.workers:
            if worker.poll() is None:
                worker.send_signal(signal.SIGTERM)
        codes: list[int | None] = []
        for worker in self.workers:
            try:
                codes.append(worker.wait(15))
            except subprocess.TimeoutExpired:
                worker.kill()
                codes.append(worker.wait())
        return codes


def _run(
    load: Load, fault: Callable[[], float], *, before: float = 1.5, after: float = 3.0
) -> tuple[float, float]:
    """Push for ``before`` s, run ``fault`` (in a thread; it returns when the topology has
    recovered and gives the promotion time), push ``after`` s more; (fault start, promotion)."""
    result: list[float] = []

    async def main() -> None:
        store = RedisStore.from_url(load.producer_url)
        async with store:
            stop = anyio.Event()
            async with anyio.create_task_group() as tg:
                tg.start_soon(load.produce, store, stop)
                await anyio.sleep(before)
                result.append(time.time())
                result.append(await anyio.to_thread.run_sync(fault))
                await anyio.sleep(after)
                stop.set()

    anyio.run(main)
    return result[0], result[1]


def _wait_ready(load: Load) -> None:
    """Until both workers delivered something (they are up and serving)."""

    async def prime() -> None:
        async with RedisStore.from_url(load.producer_url) as store:
            for name in load.names:
                for k in range(2):
                    id = f"prime-{name}-{k}"
                    await store.push(name, {}, ttl=0, id=id)
                    load.acked[id] = (name, time.time())

    anyio.run(prime)
    assert not load.wait_delivered(30), load.stderr()


def _report(what: str, load: Load, fault_at: float, promotion: float, names: set[str]) -> float:
    entries = load.deliveries()
    counts = Counter(entry[1] for entry in entries)
    duplicates = sum(n - 1 for n in counts.values())
    stall = max(
        (float(entry[4]) for entry in entries if entry[0] in names and entry[1] in load.acked),
        default=0.0,
    )
    print(
        f"\n{what}: {'migration' if 'migrated' in what else 'promotion'} {promotion:.2f} s, "
        f"longest lateness on its dehydrators {stall:.2f} s, "
        f"longest push {load.push_stall:.2f} s ({load.push_errors} failed attempts), "
        f"{len(load.acked)} pushed, {len(counts)} delivered, 0 lost, {duplicates} duplicates"
    )
    return stall


@pytest.fixture
def cluster(pytestconfig: pytest.Config) -> Cluster:
    return shared_cluster(pytestconfig)


@pytest.fixture
def sentinel(pytestconfig: pytest.Config) -> SentinelSet:
    return shared_sentinel(pytestconfig)


def test_cluster_master_killed_under_load(cluster: Cluster, tmp_path: Path) -> None:
    prefix = f"rhha-{uuid.uuid4().hex[:8]}"
    masters = cluster.masters()
    index = {node.port: i for i, node in enumerate(masters)}
    names = _names_on(prefix, dict.fromkeys(range(3), 2), lambda s: index[cluster.master_of(s).port])
    url = f"{cluster.seed_url}&prefix={prefix}&retry_backoff=0.05"
    load = Load(tmp_path, url, url, names)
    victim_slot = key_slot(f"{prefix}:{{{names[0]}}}:e")
    victim = cluster.master_of(victim_slot)
    victims = {n for n in names if cluster.master_of(key_slot(f"{prefix}:{{{n}}}:e")) is victim}
    load.start()
    try:
        _wait_ready(load)

        def kill() -> float:
            began = time.monotonic()
            victim.stop(kill=True)
            while True:
                try:
                    if cluster.master_of(victim_slot) is not victim:
                        break
                except RuntimeError:
                    pass
                time.sleep(0.02)
            return time.monotonic() - began

        fault_at, promotion = _run(load, kill)
        missing = load.wait_delivered()
        assert not missing, f"{len(missing)} acknowledged elements never delivered\n{load.stderr()}"
        assert all(w.poll() is None for w in load.workers), load.stderr()
        stall = _report("Cluster master SIGKILLed", load, fault_at, promotion, victims)
        assert stall <= promotion + 2.0, load.stderr()
    finally:
        codes = load.stop()
        cluster.restart(victim)
        anyio.run(drop_prefix_everywhere, cluster, prefix)
    assert codes == [0, 0], load.stderr()


def test_sentinel_primary_killed_under_load(sentinel: SentinelSet, tmp_path: Path) -> None:
    prefix = f"rhha-{uuid.uuid4().hex[:8]}"
    names = ["a", "b", "c"]
    url = f"{sentinel.url}?prefix={prefix}&retry_backoff=0.05"
    load = Load(tmp_path, url, url, names)
    victim = sentinel.current_primary()
    load.start()
    try:
        _wait_ready(load)

        def kill() -> float:
            began = time.monotonic()
            victim.stop(kill=True)
            while sentinel.current_primary() is victim:
                time.sleep(0.02)
            return time.monotonic() - began

        fault_at, promotion = _run(load, kill)
        missing = load.wait_delivered()
        assert not missing, f"{len(missing)} acknowledged elements never delivered\n{load.stderr()}"
        assert all(w.poll() is None for w in load.workers), load.stderr()
        stall = _report("Sentinel primary SIGKILLed", load, fault_at, promotion, set(names))
        assert stall <= promotion + 2.0, load.stderr()
    finally:
        codes = load.stop()
        sentinel.restart(victim)
        primary = sentinel.current_primary()
        anyio.run(drop_prefix, f"redis://127.0.0.1:{primary.port}/0", prefix)
    assert codes == [0, 0], load.stderr()


def _node_id(port: int) -> str:
    return str(admin(port, "CLUSTER", "MYID"))


def test_cluster_slot_migrated_during_delivery(cluster: Cluster, tmp_path: Path) -> None:
    prefix = f"rhha-{uuid.uuid4().hex[:8]}"
    masters = cluster.masters()
    index = {node.port: i for i, node in enumerate(masters)}
    names = _names_on(prefix, {0: 1, 1: 1, 2: 1}, lambda s: index[cluster.master_of(s).port])
    url = f"{cluster.seed_url}&prefix={prefix}&retry_backoff=0.05"
    load = Load(tmp_path, url, url, names)
    slot = key_slot(f"{prefix}:{{{names[0]}}}:e")
    source = cluster.master_of(slot)
    target = next(m for m in masters if m is not source)
    load.start()
    try:
        _wait_ready(load)

        def migrate() -> float:
            began = time.monotonic()
            source_id, target_id = _node_id(source.port), _node_id(target.port)
            assert admin(target.port, "CLUSTER", "SETSLOT", slot, "IMPORTING", source_id) == "OK"
            assert admin(source.port, "CLUSTER", "SETSLOT", slot, "MIGRATING", target_id) == "OK"
            while True:  # key by key, so that scripts meet a half-moved dehydrator (TRYAGAIN, ASK)
                keys = admin(source.port, "CLUSTER", "GETKEYSINSLOT", slot, 1)
                assert isinstance(keys, list)
                if not keys:
                    break
                reply = admin(source.port, "MIGRATE", "127.0.0.1", target.port, "", 0, 5000, "KEYS", *keys)
                assert not isinstance(reply, RuntimeError), reply
                # Longer than coredis's own TRYAGAIN retries (16 within about 0.4 s), so the
                # store meets "ClusterError: Maximum retries exhausted." and must retry it.
                time.sleep(1.0)
            for node in cluster.masters():
                admin(node.port, "CLUSTER", "SETSLOT", slot, "NODE", target_id)
            return time.monotonic() - began

        fault_at, took = _run(load, migrate, after=1.5)
        missing = load.wait_delivered()
        assert not missing, f"{len(missing)} acknowledged elements never delivered\n{load.stderr()}"
        assert all(w.poll() is None for w in load.workers), load.stderr()
        assert cluster.master_of(slot) is target
        _report("Cluster slot migrated", load, fault_at, took, {names[0]})
    finally:
        codes = load.stop()
        anyio.run(drop_prefix_everywhere, cluster, prefix)
    assert codes == [0, 0], load.stderr()


def _raw(node: RedisServer) -> coredis.RedisCluster[bytes]:
    """A plain cluster client, bytes in and out, seeded with ``node``."""
    seed = [TCPLocation("127.0.0.1", node.port)]
    client: coredis.RedisCluster[bytes] = coredis.RedisCluster(startup_nodes=seed, decode_responses=False)
    return client


def _move(source: RedisServer, target: RedisServer, keys: list[str]) -> None:
    if not keys:
        return
    reply = admin(source.port, "MIGRATE", "127.0.0.1", target.port, "", 0, 5000, "KEYS", *keys)
    assert reply == "OK", reply


@pytest.mark.parametrize("moved", ["the first bucket", "all but the first bucket"])
def test_a_dehydrator_split_between_nodes_is_left_alone(cluster: Cluster, moved: str) -> None:
    """Halfway through a slot's move, some of a dehydrator's keys are on each node. Its time
    buckets are not in a script's KEYS, so Redis's own TRYAGAIN and ASK cannot see the split: a
    script that went on would meet a bucket missing after it had written, and Redis would stop it
    there, half done (on either node). Every script refuses before writing until the slot has its
    new owner (retried, then a transient error), and then everything is where it was."""
    prefix = f"rhsplit-{uuid.uuid4().hex[:8]}"
    name = "d"
    base = f"{prefix}:{{{name}}}"
    slot = key_slot(f"{base}:h")
    source = cluster.master_of(slot)
    target = next(m for m in cluster.masters() if m is not source)
    url = f"{cluster.seed_url}&prefix={prefix}&retries=1&retry_backoff=0.01"

    async def main() -> None:
        async with RedisStore.from_url(url) as store:
            # Due times of their own, spread: several buckets, none of them due.
            pushed = await store.push_many(name, [(i, 3600 + i, f"e{i:03}") for i in range(300)])
            keys = admin(source.port, "CLUSTER", "GETKEYSINSLOT", slot, 1000)
            assert isinstance(keys, list)
            starts = admin(source.port, "ZRANGE", f"{base}:i", 0, -1)
            assert isinstance(starts, list)
            assert len(starts) >= 3
            first = f"{base}:b:{starts[0]}"
            assert first in keys
            rest = [k for k in keys if k != first]
            source_id, target_id = _node_id(source.port), _node_id(target.port)
            assert admin(target.port, "CLUSTER", "SETSLOT", slot, "IMPORTING", source_id) == "OK"
            assert admin(source.port, "CLUSTER", "SETSLOT", slot, "MIGRATING", target_id) == "OK"
            _move(source, target, [first] if moved == "the first bucket" else rest)

            # Each files into, renames or reads the first bucket.
            with pytest.raises(StoreUnavailableError, match="moving between cluster nodes"):
                await store.push(name, "early", ttl=0, id="early")
            with pytest.raises(StoreUnavailableError, match="moving between cluster nodes"):
                await store.push_many(name, [("late", 7200, "late"), ("mid", 3600.5, "mid")])
            with pytest.raises(StoreUnavailableError, match="moving between cluster nodes"):
                await store.claim(name, lease=10, ahead=3601)

            _move(source, target, rest if moved == "the first bucket" else [first])
            for node in cluster.masters():
                assert admin(node.port, "CLUSTER", "SETSLOT", slot, "NODE", target_id) == "OK"
            assert admin(source.port, "CLUSTER", "COUNTKEYSINSLOT", slot) == 0

            assert await store.size(name) == 300
            assert await store.ids(name) == pushed
            async with _raw(target) as raw:
                await check_invariants(raw, prefix, name, cluster=True)
            await store.push(name, "early", ttl=0, id="early")
            claims = await store.claim(name, lease=10, ahead=3601, limit=3)
            assert [c.id for c in claims] == ["early", "e000", "e001"]
            async with _raw(target) as raw:
                await check_invariants(raw, prefix, name, cluster=True)

    try:
        anyio.run(main)
    finally:
        # Whatever happened, the slot ends on the target, whole, for the tests after this one.
        _move(source, target, admin(source.port, "CLUSTER", "GETKEYSINSLOT", slot, 1000))  # type: ignore[arg-type]
        target_id = _node_id(target.port)
        for node in cluster.masters():
            admin(node.port, "CLUSTER", "SETSLOT", slot, "NODE", target_id)
        anyio.run(drop_prefix_everywhere, cluster, prefix)
