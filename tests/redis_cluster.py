"""Throwaway Redis topologies that fail over: a 3-master/3-replica Cluster and a Sentinel-managed
primary/replica pair, for the tests and the benchmarks.

Every node is a :class:`~tests.redis_server.RedisServer` on a free loopback port in its own
temporary directory. Each topology is started at most once per test session
(:func:`shared_cluster`, :func:`shared_sentinel`) and shared; a test that kills a node brings it
back (:meth:`Cluster.restart`) so that the next test finds the same shape again. The binary is
the one :func:`~tests.redis_server.pick_server` picks; a missing one makes the tests skip.
"""

from __future__ import annotations

import socket
import tempfile
import time
from pathlib import Path
from typing import BinaryIO, Final

import pytest

from tests.redis_server import RedisServer, _free_port, pick_server

__all__ = [
    "NODE_TIMEOUT_MS",
    "Cluster",
    "SentinelSet",
    "admin",
    "drop_prefix_everywhere",
    "key_slot",
    "shared_cluster",
    "shared_sentinel",
]

#: ``cluster-node-timeout``: a master that stops answering is failed over a few times this later.
NODE_TIMEOUT_MS: Final = 1000
#: Sentinel's ``down-after-milliseconds`` for the pair's primary.
SENTINEL_DOWN_MS: Final = 1000
SERVICE: Final = "rhservice"


# -- a little RESP, enough for admin commands ------------------------------------------------------


def _read_reply(f: BinaryIO) -> object:
    line = f.readline()
    if not line:
        raise ConnectionError("connection closed")
    kind, rest = line[:1], line[1:-2]
    if kind == b"+":
        return rest.decode()
    if kind == b"-":
        return RuntimeError(rest.decode())
    if kind == b":":
        return int(rest)
    if kind == b"$":
        n = int(rest)
        if n < 0:
            return None
        data = f.read(n + 2)
        return data[:-2].decode("utf-8", "surrogateescape")
    if kind == b"*":
        n = int(rest)
        return None if n < 0 else [_read_reply(f) for _ in range(n)]
    raise ValueError(f"unexpected reply {line!r}")


def admin(port: int, *args: str | int, timeout: float = 5.0) -> object:
    """Send one command to the node on ``port``; its reply (an error comes back as a RuntimeError
    instance, not raised). Bulk strings that are not UTF-8 (the Redis store's time-bucket keys end
    in a binary seq) come back with surrogate escapes, which this function sends back unchanged."""
    words = [str(a).encode("utf-8", "surrogateescape") for a in args]
    payload = f"*{len(words)}\r\n".encode() + b"".join(f"${len(w)}\r\n".encode() + w + b"\r\n" for w in words)
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(payload)
        with s.makefile("rb") as f:
            return _read_reply(f)


def _crc16(data: bytes) -> int:
    crc = 0
    for byte in data:
        crc ^= byte << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) if crc & 0x8000 else crc << 1
            crc &= 0xFFFF
    return crc


def key_slot(key: str) -> int:
    """The cluster slot of ``key`` (its hash tag's, if it has one)."""
    raw = key.encode()
    start = raw.find(b"{")
    if start >= 0:
        end = raw.find(b"}", start + 1)
        if end > start + 1:
            raw = raw[start + 1 : end]
    return _crc16(raw) % 16384


def _wait(predicate: object, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if predicate():  # type: ignore[operator]
                return
        except (OSError, ConnectionError):
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.05)


# -- the cluster -----------------------------------------------------------------------------------


class Cluster:
    """Three masters, each with one replica, sharing the 16384 slots evenly."""

    def __init__(self, kind: str | None = None) -> None:
        self.kind, _ = pick_server(kind)
        self.nodes: list[RedisServer] = []
        args = ("--cluster-node-timeout", str(NODE_TIMEOUT_MS), "--cluster-require-full-coverage", "no")
        for _ in range(6):
            self.nodes.append(RedisServer(self.kind, cluster=True, own_all_slots=False, extra_args=args))

    @property
    def seed_url(self) -> str:
        return f"redis://127.0.0.1:{self.nodes[0].port}/0?cluster=1"

    def url(self, node: int = 0) -> str:
        return f"redis://127.0.0.1:{self.nodes[node].port}/0?cluster=1"

    def start(self) -> Cluster:
        for node in self.nodes:
            node.start()
        masters, replicas = self.nodes[:3], self.nodes[3:]
        bounds = [0, 5461, 10923, 16384]
        for i, node in enumerate(masters):
            admin(node.port, "CLUSTER", "ADDSLOTSRANGE", bounds[i], bounds[i + 1] - 1)
        for node in self.nodes[1:]:
            admin(node.port, "CLUSTER", "MEET", "127.0.0.1", self.nodes[0].port)
        _wait(
            lambda: all(str(admin(n.port, "CLUSTER", "NODES")).count("\n") >= 6 for n in self.nodes),
            20,
            "six nodes to meet",
        )
        for master, replica in zip(masters, replicas, strict=True):
            master_id = str(admin(master.port, "CLUSTER", "MYID"))
            _wait(
                lambda r=replica, m=master_id: admin(r.port, "CLUSTER", "REPLICATE", m) == "OK",
                20,
                "a replica to attach",
            )
        self.wait_healthy()
        return self

    def wait_healthy(self, timeout: float = 30) -> None:
        """Until every node says the cluster is ok, with three masters each with a synced replica."""

        def healthy() -> bool:
            for node in self.nodes:
                if node.process is None or "cluster_state:ok" not in str(admin(node.port, "CLUSTER", "INFO")):
                    return False
            masters = [n for n in self.nodes if self.role(n.port) == "master"]
            if len(masters) != 3:
                return False
            for master in masters:
                info = str(admin(master.port, "INFO", "replication"))
                if "connected_slaves:1" not in info or "state=online" not in info:
                    return False
            return True

        _wait(healthy, timeout, "the cluster to be healthy")

    @staticmethod
    def role(port: int) -> str:
        reply = admin(port, "ROLE")
        assert isinstance(reply, list)
        return str(reply[0])

    def master_of(self, slot: int) -> RedisServer:
        """The node serving ``slot`` now, by a live node's slot map."""
        for node in self.nodes:
            if node.process is None:
                continue
            try:
                reply = admin(node.port, "CLUSTER", "SHARDS")
            except OSError:
                continue
            if isinstance(reply, list):
                return self._from_shards(reply, slot)
        raise RuntimeError("no live node")

    def _from_shards(self, shards: list[object], slot: int) -> RedisServer:
        for shard in shards:
            assert isinstance(shard, list)
            fields = dict(zip(shard[::2], shard[1::2], strict=True))
            ranges = fields["slots"]
            assert isinstance(ranges, list)
            if any(int(a) <= slot <= int(b) for a, b in zip(ranges[::2], ranges[1::2], strict=True)):
                for entry in fields["nodes"]:
                    node = dict(zip(entry[::2], entry[1::2], strict=True))
                    if node["role"] == "master" and node["health"] == "online":
                        return self.by_port(int(node["port"]))
        raise RuntimeError(f"no online master serves slot {slot}")

    def by_port(self, port: int) -> RedisServer:
        return next(n for n in self.nodes if n.port == port)

    def masters(self) -> list[RedisServer]:
        return [n for n in self.nodes if n.process is not None and self.role(n.port) == "master"]

    def restart(self, node: RedisServer) -> None:
        """Start a killed node again on its port and directory (its nodes.conf brings it back in)."""
        node.start()
        self.wait_healthy()

    def stop(self) -> None:
        for node in self.nodes:
            node.cleanup()


# -- Sentinel --------------------------------------------------------------------------------------


class SentinelSet:
    """A primary, its replica, and three sentinels watching them (quorum 2)."""

    def __init__(self, kind: str | None = None) -> None:
        self.kind, self.binary = pick_server(kind)
        self.primary = RedisServer(self.kind)
        self.replica = RedisServer(self.kind)
        self._tmp = tempfile.TemporaryDirectory(prefix="rehydrate-sentinel-")
        self.sentinel_ports = [_free_port() for _ in range(3)]
        self.sentinels: list[RedisServer] = []

    @property
    def url(self) -> str:
        hosts = ",".join(f"127.0.0.1:{port}" for port in self.sentinel_ports)
        return f"redis+sentinel://{hosts}/{SERVICE}/0"

    def servers(self) -> list[RedisServer]:
        return [self.primary, self.replica]

    def start(self) -> SentinelSet:
        self.primary.start()
        self.replica.start()
        admin(self.replica.port, "REPLICAOF", "127.0.0.1", self.primary.port)
        for port in self.sentinel_ports:
            conf = Path(self._tmp.name) / f"sentinel-{port}.conf"
            conf.write_text(
                f"port {port}\nbind 127.0.0.1\ndir {self._tmp.name}\n"
                f"sentinel monitor {SERVICE} 127.0.0.1 {self.primary.port} 2\n"
                f"sentinel down-after-milliseconds {SERVICE} {SENTINEL_DOWN_MS}\n"
                f"sentinel failover-timeout {SERVICE} 10000\n"
                f"sentinel parallel-syncs {SERVICE} 1\n"
            )
            server = _SentinelProcess(self.kind, port=port, conf=conf)
            self.sentinels.append(server)
            server.start()
        self.wait_healthy()
        return self

    def current_primary(self) -> RedisServer:
        reply = admin(self.sentinel_ports[0], "SENTINEL", "GET-MASTER-ADDR-BY-NAME", SERVICE)
        assert isinstance(reply, list)
        port = int(str(reply[1]))
        return self.primary if port == self.primary.port else self.replica

    def wait_healthy(self, timeout: float = 30) -> None:
        """Until the sentinels agree on a live primary whose replica is in sync, and see each other."""

        def healthy() -> bool:
            primary = self.current_primary()
            if primary.process is None or Cluster.role(primary.port) != "master":
                return False
            info = str(admin(primary.port, "INFO", "replication"))
            if "connected_slaves:1" not in info or "state=online" not in info:
                return False
            for port in self.sentinel_ports:
                state = admin(port, "SENTINEL", "MASTER", SERVICE)
                assert isinstance(state, list)
                fields = dict(zip(state[::2], state[1::2], strict=True))
                if int(str(fields["num-other-sentinels"])) < 2 or "s_down" in str(fields["flags"]):
                    return False
                if int(str(fields["port"])) != primary.port:
                    return False
            return True

        _wait(healthy, timeout, "the sentinels to agree on a healthy primary")

    def restart(self, node: RedisServer) -> None:
        """Start a killed node again; the sentinels turn it into the new primary's replica."""
        node.start()
        self.wait_healthy()

    def stop(self) -> None:
        for server in self.sentinels:
            server.cleanup()
        self.primary.cleanup()
        self.replica.cleanup()
        self._tmp.cleanup()


class _SentinelProcess(RedisServer):
    """``redis-server CONF --sentinel``: a sentinel is the server binary in sentinel mode."""

    def __init__(self, kind: str, *, port: int, conf: Path) -> None:
        super().__init__(kind, port=port)
        self.conf = conf

    def command(self) -> list[str]:
        return [self.binary, str(self.conf), "--sentinel"]


# -- shared per session ----------------------------------------------------------------------------

_shared: dict[str, Cluster | SentinelSet] = {}


def _start_or_skip(config: pytest.Config, key: str, make: type[Cluster] | type[SentinelSet]) -> object:
    topology = _shared.get(key)
    if topology is None:
        try:
            topology = make()
        except RuntimeError as exc:  # no server binary at all
            pytest.skip(f"no Redis/Valkey server to build a {key} from: {exc}")
        try:
            topology.start()
        except Exception:
            topology.stop()
            raise
        _shared[key] = topology

        def stop() -> None:
            _shared.pop(key, None)
            topology.stop()

        config.add_cleanup(stop)
    return topology


def shared_cluster(config: pytest.Config) -> Cluster:
    """This session's 3-master/3-replica cluster, started on first use."""
    cluster = _start_or_skip(config, "cluster", Cluster)
    assert isinstance(cluster, Cluster)
    return cluster


def shared_sentinel(config: pytest.Config) -> SentinelSet:
    """This session's Sentinel-managed primary/replica pair, started on first use."""
    sentinel = _start_or_skip(config, "sentinel", SentinelSet)
    assert isinstance(sentinel, SentinelSet)
    return sentinel


async def drop_prefix_everywhere(cluster: Cluster, prefix: str) -> None:
    """Delete every key under ``prefix`` on every master (a test's keys live on all of them)."""
    from tests.redis_server import drop_prefix

    for node in cluster.masters():
        await drop_prefix(f"redis://127.0.0.1:{node.port}/0", prefix)
