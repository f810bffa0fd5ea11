"""A real replicated Sluice cluster for tests: N brokers on one ZooKeeper, no JVM broker, no Docker.

Usage::

    from sluice.testing.cluster import EmbeddedCluster

    with EmbeddedCluster(3) as cluster:            # its own ZooKeeper, three broker processes
        producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all"})
        cluster.kill(cluster.leader_of("t", 0))    # kill -9 the partition's leader
        cluster.restart(1)                         # same id, same data dir, same port

    with EmbeddedCluster(3, zookeeper_connect="127.0.0.1:2181/my-test") as cluster: ...

Each broker is an :class:`~sluice.testing.embedded.EmbeddedBroker` (``mode="subprocess"`` by
default: a ``python -m sluice.server`` process of its own, which is what kill -9 and
SIGSTOP need; ``mode="inprocess"`` runs each on a thread of this process) with ``node.id`` 1..N,
its own data directory under one temporary root, and cluster settings short enough for tests
(``zookeeper.session.timeout.ms`` 2000, ``replica.lag.time.max.ms`` 2000, fetch waits 100 ms,
``replica.socket.timeout.ms`` 3000, ``controlled.shutdown.retry.backoff.ms`` 500, 3 partitions
of ``__consumer_offsets`` instead of Kafka's 50: a cluster's first group creates and its shutdown
moves fewer of them); ``properties`` override them (a None value leaves the key unset: the
broker's own default), and ``broker_properties[id]`` override those for one broker.
Without ``zookeeper_connect`` the cluster starts (and stops) a ZooKeeper of its own
(:class:`~sluice.testing.zookeeper.ZooKeeperServer`).

A secured cluster is ``properties`` too (``tests/security/test_secured_cluster.py``): keep a
PLAINTEXT listener first, which :meth:`metadata` and :attr:`bootstrap_servers` use, and put the
brokers' own traffic on ``inter.broker.listener.name``; each broker's :attr:`EmbeddedBroker.ports`
names the others. ``secured=SaslSsl.create()`` (:mod:`sluice.testing.security`) does all of
that for SASL_SSL with SCRAM-SHA-512 between the brokers, the SCRAM users written before the
first start; :meth:`client_config` is a client's way in (over SASL_SSL when secured).

:meth:`start` returns when every broker has registered, a controller is elected and every
broker's Metadata lists all of them. Faults: :meth:`kill` (SIGKILL), :meth:`pause` /
:meth:`resume` (SIGSTOP / SIGCONT), :meth:`stop_broker` (SIGTERM: a controlled shutdown),
:meth:`restart`. Every wait is bounded; every process is stopped by its PID.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from .embedded import EmbeddedBroker, Mode

if TYPE_CHECKING:
    from sluice.protocol import messages as m
    from sluice.testing.security import SaslSsl
    from sluice.testing.zookeeper import ZooKeeperServer

__all__ = ["EmbeddedCluster"]

T = TypeVar("T")

#: Cluster settings for tests: failures are noticed in about two seconds.
TEST_PROPERTIES = {
    "zookeeper.session.timeout.ms": "2000",
    "replica.lag.time.max.ms": "2000",
    "replica.fetch.wait.max.ms": "100",
    "replica.fetch.backoff.ms": "100",
    # A fetch whose answer was lost (a black-holed link) is given up after 3 s, not 30.
    "replica.socket.timeout.ms": "3000",
    "leader.imbalance.check.interval.seconds": "5",
    # The last broker to stop leads what nobody else can take: Kafka's three attempts 5 s
    # apart made every cluster's teardown take 10 s (11 such in a full test run).
    "controlled.shutdown.retry.backoff.ms": "500",
    "offsets.topic.replication.factor": "3",
    # Kafka's 50 (the broker's cluster default) made a test cluster's first group commit take
    # 2.2-3.6 s instead of 1.0 s and its shutdown 8-10 s instead of 4 (3 brokers, loaded
    # machine); 3 still spreads the coordinators over the brokers.
    "offsets.topic.num.partitions": "3",
    "group.initial.rebalance.delay.ms": "0",
}


def _run(coro_fn: Callable[[], Awaitable[T]], timeout: float) -> T:
    """Run a coroutine on a private loop in a private thread (callable from sync code and from
    inside a running loop alike), bounded by ``timeout``."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:

        def main() -> T:
            async def bounded() -> T:
                async with asyncio.timeout(timeout):
                    return await coro_fn()

            return asyncio.run(bounded())

        return pool.submit(main).result(timeout + 5)


class EmbeddedCluster:
    """N brokers and (unless given) a ZooKeeper; see the module docstring."""

    def __init__(
        self,
        size: int = 3,
        *,
        zookeeper_connect: str | None = None,
        mode: Mode = "subprocess",
        properties: Mapping[str, str | None] | None = None,
        broker_properties: Mapping[int, Mapping[str, str]] | None = None,
        broker_env: Mapping[int, Mapping[str, str]] | None = None,
        data_root: str | Path | None = None,
        ports: Sequence[int] | None = None,
        startup_timeout: float = 60.0,
        shutdown_timeout: float = 30.0,
        secured: SaslSsl | None = None,
    ) -> None:
        if size < 1:
            raise ValueError(f"a cluster needs at least one broker, not {size}")
        if ports is not None and len(ports) != size:
            raise ValueError(f"{size} brokers need {size} ports, not {list(ports)}")
        self.size = size
        self.mode: Mode = mode
        #: SASL_SSL between the brokers (:mod:`sluice.testing.security`); the caller owns it.
        self.secured = secured
        merged = {
            **TEST_PROPERTIES,
            **(secured.broker_properties() if secured is not None else {}),
            **(properties or {}),
        }
        self.properties = {k: v for k, v in merged.items() if v is not None}
        #: Per broker id, applied last (over ``zookeeper.connect`` too): e.g. a broker's
        #: ``advertised.listeners`` and ``zookeeper.connect`` through fault proxies.
        self.broker_properties = {b: dict(p) for b, p in (broker_properties or {}).items()}
        #: The SASL_SSL listener's port of each broker (kept across restarts), when secured.
        self.secure_ports: dict[int, int] = {}
        if secured is not None:
            from .security import free_ports

            picked = free_ports(2 * size)
            ports = list(ports) if ports is not None else picked[:size]
            self.secure_ports = dict(zip(self.ids, picked[size:], strict=True))
            for b, port in zip(self.ids, ports, strict=True):
                self.broker_properties[b] = {
                    "listeners": secured.listeners(port, self.secure_ports[b]),
                    **self.broker_properties.get(b, {}),
                }
        #: Per broker id, extra environment of its process (subprocess mode).
        self.broker_env = {b: dict(e) for b, e in (broker_env or {}).items()}
        if unknown := (set(self.broker_properties) | set(self.broker_env)) - set(self.ids):
            raise ValueError(f"broker settings for unknown broker ids {sorted(unknown)}")
        self.startup_timeout = startup_timeout
        self.shutdown_timeout = shutdown_timeout
        self._connect = zookeeper_connect
        self.zookeeper: ZooKeeperServer | None = None
        self.brokers: dict[int, EmbeddedBroker] = {}
        self._ports: dict[int, int] = dict(zip(self.ids, ports, strict=True)) if ports else {}
        #: Kept after stop when given (with ZooKeeper's data in it when the cluster starts
        #: its own); a temporary directory otherwise. Absolute, so that it means the same to
        #: every process started here whatever its working directory.
        self._given_root = Path(data_root).resolve() if data_root is not None else None
        self._root: Path | None = None
        self._lock = threading.Lock()
        self._state = "new"

    # --- what tests use ----------------------------------------------------------------------

    @property
    def ids(self) -> list[int]:
        return list(range(1, self.size + 1))

    @property
    def zookeeper_connect(self) -> str:
        if self._connect is None:
            raise RuntimeError("the cluster has not been started")
        return self._connect

    @property
    def bootstrap_servers(self) -> str:
        """``host:port,...`` of every broker (running or not: clients skip dead ones)."""
        return ",".join(f"127.0.0.1:{self._ports[i]}" for i in self.ids if i in self._ports)

    def client_config(self) -> dict[str, Any]:
        """librdkafka's way in: ``bootstrap.servers`` and, for a ``secured`` cluster, its
        SASL_SSL listeners with the ``client`` user's login (else the PLAINTEXT listeners)."""
        if self.secured is None:
            return {"bootstrap.servers": self.bootstrap_servers}
        servers = ",".join(f"127.0.0.1:{self.secure_ports[i]}" for i in self.ids)
        return {"bootstrap.servers": servers, **self.secured.client_properties()}

    def data_dir(self, broker_id: int) -> Path:
        assert self._root is not None
        return self._root / f"broker-{broker_id}"

    def broker(self, broker_id: int) -> EmbeddedBroker:
        return self.brokers[broker_id]

    def running(self, broker_id: int) -> bool:
        broker = self.brokers.get(broker_id)
        return broker is not None and broker.running and self._alive(broker)

    def metadata(
        self, topics: list[str] | None = None, via: int | None = None
    ) -> m.MetadataResponse:
        """A Metadata response (v9) from ``via`` (default: the first running broker)."""
        from sluice.protocol import messages as m

        broker_id = via if via is not None else self._any_running()
        port = self._ports[broker_id]
        body = m.MetadataRequest(
            topics=None
            if topics is None
            else [m.MetadataRequest.MetadataRequestTopic(name=t) for t in topics],
            allow_auto_topic_creation=False,
        )
        response: m.MetadataResponse = _run(lambda: _request(port, m.Metadata.key, body), 15.0)
        return response

    def leader_of(self, topic: str, partition: int = 0, via: int | None = None) -> int:
        """The partition's leader as ``via`` sees it (-1: none)."""
        for t in self.metadata([topic], via).topics:
            for p in t.partitions:
                if p.partition_index == partition:
                    return int(p.leader_id)
        return -1

    def wait_for(self, condition: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
        """Poll ``condition`` until it holds (bounded): for conditions on Metadata."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                if condition():
                    return
            except (OSError, ConnectionError, TimeoutError, RuntimeError):
                pass  # a broker mid-restart
            if time.monotonic() > deadline:
                raise TimeoutError(f"{what}: not after {timeout}s")
            time.sleep(0.05)

    def wait_for_leader(self, topic: str, partition: int = 0, timeout: float = 30.0) -> int:
        """Wait until a running broker leads the partition, as every running broker sees it."""
        found: list[int] = []

        def agreed() -> bool:
            views = {self.leader_of(topic, partition, via=b) for b in self.ids if self.running(b)}
            if len(views) == 1:
                leader = views.pop()
                if leader > 0 and self.running(leader):
                    found[:] = [leader]
                    return True
            return False

        self.wait_for(agreed, f"a leader for {topic}-{partition}", timeout)
        return found[0]

    # --- faults ------------------------------------------------------------------------------

    def kill(self, broker_id: int) -> None:
        """kill -9 (subprocess mode): no shutdown, unflushed page cache kept by the OS."""
        broker = self._subprocess(broker_id)
        assert broker.process is not None
        broker.process.send_signal(signal.SIGKILL)
        broker.process.wait(self.shutdown_timeout)
        broker.stop_sync()  # marks it stopped; the process is already gone

    def pause(self, broker_id: int) -> None:
        """SIGSTOP: the broker freezes (its ZooKeeper session expires if paused long enough)."""
        proc = self._subprocess(broker_id).process
        assert proc is not None
        proc.send_signal(signal.SIGSTOP)

    def resume(self, broker_id: int) -> None:
        proc = self._subprocess(broker_id).process
        assert proc is not None
        proc.send_signal(signal.SIGCONT)

    def stop_broker(self, broker_id: int) -> None:
        """Graceful stop (SIGTERM / shutdown): a controlled shutdown in cluster mode."""
        self.brokers[broker_id].stop_sync()

    def restart(self, broker_id: int) -> EmbeddedBroker:
        """Start ``broker_id`` again on its data dir and port (stopping it first if running)."""
        old = self.brokers.get(broker_id)
        if old is not None and old.running:
            old.stop_sync()
        return self._start_broker(broker_id)

    # --- lifecycle ---------------------------------------------------------------------------

    def start_sync(self) -> EmbeddedCluster:
        if self._state != "new":
            raise RuntimeError(f"an EmbeddedCluster cannot be started twice (it is {self._state})")
        self._state = "running"
        if self._given_root is not None:
            self._given_root.mkdir(parents=True, exist_ok=True)
            self._root = self._given_root
        else:
            self._root = Path(tempfile.mkdtemp(prefix="sluice-cluster-"))
        try:
            if self._connect is None:
                from sluice.testing.zookeeper import ZooKeeperServer

                zk_data = self._root / "zookeeper" if self._given_root is not None else None
                self.zookeeper = ZooKeeperServer(zk_data)
                self.zookeeper.start()
                self._connect = self.zookeeper.connect_string("/sluice")
            if self.secured is not None:  # the brokers' own login exists before they start
                self.secured.create_users(self._connect)
            with concurrent.futures.ThreadPoolExecutor(self.size) as pool:
                for future in [pool.submit(self._start_broker, i) for i in self.ids]:
                    future.result()
            self.wait_for(self._formed, "every broker registered and a controller elected",
                          self.startup_timeout)  # fmt: skip
        except BaseException:
            self.stop_sync()
            raise
        return self

    def _formed(self) -> bool:
        for broker_id in self.ids:
            meta = self.metadata(via=broker_id)
            if sorted(b.node_id for b in meta.brokers) != self.ids or meta.controller_id < 0:
                return False
        return True

    def stop_sync(self) -> None:
        with self._lock:
            if self._state == "stopped":
                return
            self._state = "stopped"
        errors: list[BaseException] = []
        for _, broker in sorted(self.brokers.items()):
            try:
                if broker.mode == "subprocess" and broker.process is not None:
                    broker.process.send_signal(signal.SIGCONT)  # a paused one cannot stop
                broker.stop_sync()
            except BaseException as exc:
                errors.append(exc)
                if broker.process is not None and broker.process.poll() is None:
                    broker.process.kill()
                    broker.process.wait(10)
        if self.zookeeper is not None:
            self.zookeeper.stop()
        if self._root is not None and self._given_root is None:
            shutil.rmtree(self._root, ignore_errors=True)
        if errors:
            raise errors[0]

    def __enter__(self) -> EmbeddedCluster:
        return self.start_sync()

    def __exit__(self, *exc: object) -> None:
        self.stop_sync()

    async def __aenter__(self) -> EmbeddedCluster:
        return await asyncio.to_thread(self.start_sync)

    async def __aexit__(self, *exc: object) -> None:
        await asyncio.to_thread(self.stop_sync)

    # --- plumbing ----------------------------------------------------------------------------

    def _start_broker(self, broker_id: int) -> EmbeddedBroker:
        props = {
            **self.properties,
            "node.id": str(broker_id),
            "zookeeper.connect": self.zookeeper_connect,
            **self.broker_properties.get(broker_id, {}),
        }
        broker = EmbeddedBroker(
            self.data_dir(broker_id),
            mode=self.mode,
            port=self._ports.get(broker_id, 0),
            properties=props,
            startup_timeout=self.startup_timeout,
            shutdown_timeout=self.shutdown_timeout,
            env=self.broker_env.get(broker_id),
        )
        broker.start_sync()
        with self._lock:
            stopped = self._state == "stopped"
            if not stopped:
                self.brokers[broker_id] = broker
                self._ports[broker_id] = broker.port
        if stopped:  # the cluster stopped meanwhile (a fault thread's restart): no orphan
            broker.stop_sync()
            raise RuntimeError(f"the cluster stopped while broker {broker_id} started")
        return broker

    def _subprocess(self, broker_id: int) -> EmbeddedBroker:
        broker = self.brokers[broker_id]
        if broker.mode != "subprocess" or broker.process is None:
            raise RuntimeError("signals need mode='subprocess'")
        return broker

    @staticmethod
    def _alive(broker: EmbeddedBroker) -> bool:
        return broker.process is None or broker.process.poll() is None

    def _any_running(self) -> int:
        for broker_id in self.ids:
            if self.running(broker_id):
                return broker_id
        raise RuntimeError("no broker is running")


async def _request(port: int, api_key: int, body: Any) -> Any:
    from sluice.net.connection import Connection

    conn = await Connection.open("127.0.0.1", port, client_id="sluice-cluster")
    try:
        return await conn.request(api_key, body, timeout_ms=10_000)
    finally:
        conn.close()


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m sluice.testing.cluster``: a local replicated cluster until Ctrl-C."""
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m sluice.testing.cluster",
        description="Run N Sluice brokers and a ZooKeeper on 127.0.0.1 until interrupted.",
    )
    parser.add_argument("--brokers", type=int, default=3)
    parser.add_argument("--port", type=int, default=9092, help="first broker's port (then +1...)")
    parser.add_argument("--data", default="./cluster-data", help="data root (kept)")
    parser.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                        help="a broker config key for every broker")  # fmt: skip
    parser.add_argument("--metrics-port", type=int, default=None,
                        help="the first /metrics port (then +1...; default: off)")  # fmt: skip
    args = parser.parse_args(argv)
    props = dict(item.split("=", 1) for item in args.override)
    metrics = {}
    if args.metrics_port is not None:  # sluice.metrics.listener, one port per broker
        metrics = {
            b: {"sluice.metrics.listener": f"http://127.0.0.1:{args.metrics_port + b - 1}/metrics"}
            for b in range(1, args.brokers + 1)
        }
    # A local cluster to try things with: Kafka's production timings, not the test ones.
    defaults = {"zookeeper.session.timeout.ms": "6000", "replica.lag.time.max.ms": "10000"}
    cluster = EmbeddedCluster(
        args.brokers,
        properties={**defaults, **props},
        broker_properties=metrics,
        data_root=args.data,
        ports=[args.port + i for i in range(args.brokers)],
        # A controlled shutdown takes about a second; one stuck longer is killed.
        shutdown_timeout=10.0,
    )
    ids = ", ".join(map(str, cluster.ids))
    interrupt_on_signals(
        f"stopping the cluster: brokers {ids} in turn (controlled shutdown), then ZooKeeper"
    )
    try:
        with cluster:
            print(f"bootstrap.servers={cluster.bootstrap_servers}", flush=True)
            print(f"zookeeper.connect={cluster.zookeeper_connect}", flush=True)
            print(f"data: {Path(args.data).resolve()}  (Ctrl-C stops the cluster)", flush=True)
            for props_of in metrics.values():
                print(f"metrics: {props_of['sluice.metrics.listener']}", flush=True)
            threading.Event().wait()  # until a signal raises KeyboardInterrupt
    except KeyboardInterrupt:
        print("stopped", flush=True)
        return 0
    except TimeoutError as exc:  # a broker that did not stop in time was killed
        print(f"stopped, not cleanly: {exc}", file=sys.stderr, flush=True)
        return 1
    return 0


def interrupt_on_signals(message: str) -> None:
    """The first SIGINT or SIGTERM prints ``message`` and raises ``KeyboardInterrupt`` in the
    main thread, so the ``with`` blocks around it stop what they started, in order (brokers
    before the ZooKeeper they need for a controlled shutdown); a later one only says a stop is
    under way. Every child runs in its own session (:class:`EmbeddedBroker`,
    :class:`~sluice.testing.zookeeper.ZooKeeperServer`): a terminal's Ctrl-C reaches this
    process alone, and each child is stopped by its PID, bounded, then killed (stop times:
    ``bench/NOTES.md``)."""
    fired = False

    def handler(signum: int, frame: object) -> None:
        nonlocal fired
        if fired:
            print("already stopping (every step is bounded)", file=sys.stderr, flush=True)
            return
        fired = True
        print(message, file=sys.stderr, flush=True)
        raise KeyboardInterrupt

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, handler)


if __name__ == "__main__":
    raise SystemExit(main())
