"""A cluster wired for faults: three broker processes, each behind a :class:`FaultProxy` on its
listener and another on its ZooKeeper connection.

Every broker advertises its listener proxy's port (``advertised.listeners``), so clients *and*
the other brokers' replica fetchers reach it through that proxy, and it reaches ZooKeeper
through its own ZooKeeper proxy (``zookeeper.connect``). The harness itself observes the
brokers on their real ports (``EmbeddedCluster.metadata``), around the proxies. Faults, each on
one broker and each undone by :meth:`FaultCluster.heal`:

* ``kill`` (SIGKILL; the page cache survives) and ``restart`` on the same data dir and port;
* ``pause`` / ``resume`` (SIGSTOP / SIGCONT: a process stall, GC-pause style);
* ``isolate`` -- the listener proxy black-holes: nobody reaches the broker (clients, followers
  fetching from it), while its own outgoing fetches and its ZooKeeper session go on;
* ``isolate_zk`` -- the ZooKeeper proxy black-holes: its session expires after the timeout while
  clients and followers still reach it (the zombie leader of spec §6);
* ``reset`` -- every connection to the broker is aborted with an RST (the link stays usable);
* ``lose_unflushed`` -- a power loss: kill -9, then every segment file cut back to what was
  fsynced (``tests/jepsen/powerloss/sitecustomize.py`` journals each broker's fsyncs through
  the VFS seam) and a new boot id for the broker (as a real power loss brings: the broker tells
  a crash that lost its page cache from one that did not by it); undone by a restart.

Ports are chosen up front (bind to 0, close, reuse) so a restarted broker comes back on the
same port behind the same proxy.

``security="sasl_ssl"`` runs the same cluster with SASL_SSL on every proxied link, clients and
inter-broker alike (:mod:`sluice.testing.security`: the PLAINTEXT listener stays, unproxied,
for the harness's own observation); clients add
:attr:`FaultCluster.client_security` to their settings.
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import socket
import tempfile
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sluice.testing.cluster import EmbeddedCluster
from sluice.testing.security import SECURITY, SaslSsl
from sluice.testing.zookeeper import ZooKeeperServer
from tests.jepsen.proxy import FaultProxy, Mode

POWERLOSS_HOOK = Path(__file__).resolve().parent / "powerloss"

#: RF 3, min ISR 2, unclean election off: the configuration whose promise the suite checks.
SAFE_TOPIC_CONFIG = {"min.insync.replicas": "2", "unclean.leader.election.enable": "false"}

#: Broker settings for fault runs: the test timings, no preferred-leader moves of our own.
FAULT_PROPERTIES = {
    "auto.leader.rebalance.enable": "false",
    "unclean.leader.election.enable": "false",
    "min.insync.replicas": "2",
    "default.replication.factor": "3",
    "auto.create.topics.enable": "false",
}


def free_port(rng: random.Random | None = None) -> int:
    """A free port for a broker to keep across restarts, chosen **below** the kernel's
    ephemeral range: a port from that range, free while its broker is down, can be taken by
    any outgoing connection meanwhile (the proxies' own, ZooKeeper clients'), and the restart
    then fails with EADDRINUSE (seen in the fault suite)."""
    rng = rng or random.Random()
    low = 32768
    with contextlib.suppress(OSError, ValueError):
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    for _ in range(1000):
        port = rng.randrange(10_000, max(low, 10_001))
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in [10000, {low})")


def _distinct_free_ports(count: int) -> list[int]:
    ports: list[int] = []
    for _ in range(100 * count):
        if len(ports) == count:
            break
        if (port := free_port()) not in ports:
            ports.append(port)
    if len(ports) < count:
        raise RuntimeError(f"no {count} distinct free ports")
    return ports


@dataclass
class FaultCluster:
    """An :class:`EmbeddedCluster` of ``size`` brokers behind proxies, in ``chroot`` of ``zk``."""

    zookeeper: ZooKeeperServer
    size: int = 3
    properties: Mapping[str, str] = field(default_factory=dict)
    #: ``plaintext`` or ``sasl_ssl`` (:mod:`sluice.testing.security`).
    security: str = "plaintext"
    chroot: str = field(default_factory=lambda: f"/jepsen/{uuid.uuid4().hex}")
    cluster: EmbeddedCluster = field(init=False)
    listener: dict[int, FaultProxy] = field(init=False, default_factory=dict)
    zk: dict[int, FaultProxy] = field(init=False, default_factory=dict)
    killed: set[int] = field(init=False, default_factory=set)
    paused: set[int] = field(init=False, default_factory=set)
    journals: Path = field(init=False)
    secured: SaslSsl | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        if self.security not in SECURITY:
            raise ValueError(f"security {self.security!r}: one of {', '.join(SECURITY)}")
        ids = list(range(1, self.size + 1))
        self.journals = Path(tempfile.mkdtemp(prefix="sluice-sync-journals-"))
        if self.security == "sasl_ssl":
            self.secured = SaslSsl.create()
        ports = _distinct_free_ports(len(ids) * (2 if self.secured else 1))
        # The proxied listener: SASL_SSL's own port when secured (PLAINTEXT's is then only
        # the harness's, around the proxies), else the one PLAINTEXT listener's.
        plain, proxied = ports[: len(ids)], ports[len(ids) :] or ports
        zk_host, zk_port = self.zookeeper.hosts.rsplit(":", 1)
        per_broker: dict[int, dict[str, str]] = {}
        try:
            for broker_id, port, upstream in zip(ids, plain, proxied, strict=True):
                self.listener[broker_id] = proxy = FaultProxy("127.0.0.1", upstream)
                self.zk[broker_id] = FaultProxy(zk_host, int(zk_port))
                per_broker[broker_id] = {
                    "advertised.listeners": f"PLAINTEXT://127.0.0.1:{proxy.port}",
                    "zookeeper.connect": f"127.0.0.1:{self.zk[broker_id].port}{self.chroot}",
                }
                if self.secured is not None:
                    per_broker[broker_id] = {
                        **per_broker[broker_id],
                        "listeners": self.secured.listeners(port, upstream),
                        "advertised.listeners": self.secured.advertised_listeners(port, proxy.port),
                    }
        except BaseException:
            self._close_proxies()
            raise
        secured = self.secured.broker_properties() if self.secured is not None else {}
        self.cluster = EmbeddedCluster(
            self.size,
            zookeeper_connect=self.zookeeper.connect_string(self.chroot),
            properties={**FAULT_PROPERTIES, **secured, **self.properties},
            broker_properties=per_broker,
            broker_env={
                b: {
                    "SLUICE_SYNC_JOURNAL": str(self.journals / f"broker-{b}.journal"),
                    "PYTHONPATH": str(POWERLOSS_HOOK),
                }
                for b in ids
            },
            ports=plain,
        )

    # --- lifecycle ---------------------------------------------------------------------------

    def start(self) -> FaultCluster:
        try:
            if self.secured is not None:
                self.secured.create_users(self.zookeeper.connect_string(self.chroot))
            self.cluster.start_sync()
        except BaseException:  # also Ctrl-C: nothing of this trial may outlive it
            self.stop()
            raise
        return self

    def stop(self) -> None:
        try:
            for broker_id in self.paused:
                self.cluster.resume(broker_id)
            self.paused.clear()
            # Nothing is kept: kill -9 rather than three controlled shutdowns in turn (each
            # handing leadership over, ~3 s apiece).
            for broker_id in self.ids:
                if self.cluster.running(broker_id):
                    self.cluster.kill(broker_id)
            self.cluster.stop_sync()
        finally:
            self._close_proxies()
            shutil.rmtree(self.journals, ignore_errors=True)
            if self.secured is not None:
                self.secured.close()
            self.zookeeper.delete_tree(self.chroot)

    def __enter__(self) -> FaultCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _close_proxies(self) -> None:
        for proxy in [*self.listener.values(), *self.zk.values()]:
            proxy.close()
        if getattr(self, "cluster", None) is None:  # __post_init__ failed before it existed
            shutil.rmtree(self.journals, ignore_errors=True)
            if self.secured is not None:
                self.secured.close()

    # --- what clients use ----------------------------------------------------------------------

    @property
    def ids(self) -> list[int]:
        return self.cluster.ids

    @property
    def bootstrap_servers(self) -> str:
        """The proxies: a client's every connection goes through a link the faults can cut."""
        return ",".join(f"127.0.0.1:{self.listener[b].port}" for b in self.ids)

    @property
    def client_security(self) -> dict[str, Any]:
        """The security settings a librdkafka client of the proxies needs (none: PLAINTEXT)."""
        return self.secured.client_properties() if self.secured is not None else {}

    # --- faults --------------------------------------------------------------------------------

    def apply(self, fault: str, broker_id: int) -> None:
        """Start ``fault`` on ``broker_id`` (names as in the module docstring)."""
        if fault == "kill":
            self.cluster.kill(broker_id)
            self.killed.add(broker_id)
        elif fault == "lose_unflushed":
            self.cluster.kill(broker_id)
            self.killed.add(broker_id)
            self.cut_to_durable(broker_id)
        elif fault == "pause":
            self.cluster.pause(broker_id)
            self.paused.add(broker_id)
        elif fault == "isolate":
            self.listener[broker_id].set_mode(Mode.BLACKHOLE)
        elif fault == "isolate_zk":
            self.zk[broker_id].set_mode(Mode.BLACKHOLE)
        elif fault == "reset":
            self.listener[broker_id].set_mode(Mode.RESET)
        else:
            raise ValueError(f"unknown fault {fault!r}")

    def undo(self, fault: str, broker_id: int) -> None:
        """End ``fault`` on ``broker_id``: restart, resume or pass again."""
        if fault in ("kill", "lose_unflushed"):
            self.cluster.restart(broker_id)
            self.killed.discard(broker_id)
        elif fault == "pause":
            self.cluster.resume(broker_id)
            self.paused.discard(broker_id)
        elif fault in ("isolate", "reset"):
            self.listener[broker_id].set_mode(Mode.PASS)
        elif fault == "isolate_zk":
            self.zk[broker_id].set_mode(Mode.PASS)
        else:
            raise ValueError(f"unknown fault {fault!r}")

    def heal(self) -> None:
        """Undo every fault: every proxy passes, paused brokers resume, killed ones restart."""
        for proxy in [*self.listener.values(), *self.zk.values()]:
            proxy.set_mode(Mode.PASS)
        for broker_id in sorted(self.paused):
            self.cluster.resume(broker_id)
        self.paused.clear()
        for broker_id in sorted(self.killed):
            self.cluster.restart(broker_id)
        self.killed.clear()

    def durable_sizes(self, broker_id: int) -> dict[str, int]:
        """Path -> bytes made durable by an fsync, from the broker's journal (module docstring
        of ``tests/jepsen/powerloss/sitecustomize.py``)."""
        durable: dict[str, int] = {}
        journal = self.journals / f"broker-{broker_id}.journal"
        if not journal.exists():
            return durable
        for line in journal.read_text().splitlines():
            kind, a, b = line.split("\t")
            if kind == "sync":
                durable[a] = int(b)
            elif kind == "rename":
                durable[b] = durable.pop(a, 0)
        return durable

    def cut_to_durable(self, broker_id: int) -> dict[str, tuple[int, int]]:
        """Cut every segment file of a killed broker back to its durable size (never fsynced:
        empty); returns path -> (size before, size after) for the files cut."""
        assert not self.cluster.running(broker_id), "cut the files of a stopped broker only"
        boot = self.journals / f"broker-{broker_id}.journal.boot"
        boot.write_text(uuid.uuid4().hex)
        durable = self.durable_sizes(broker_id)
        cut: dict[str, tuple[int, int]] = {}
        for path in sorted(self.cluster.data_dir(broker_id).rglob("*.log")):
            size = path.stat().st_size
            keep = min(size, durable.get(str(path), 0))
            if keep < size:
                os.truncate(path, keep)
                cut[str(path)] = (size, keep)
        return cut

    # --- observation (around the proxies) ------------------------------------------------------

    def partitions(self, topic: str) -> dict[int, Any]:
        """Partition index -> the Metadata partition entry, as the controller's broker sees it."""
        meta = self.cluster.metadata([topic], via=self._observer())
        return {int(p.partition_index): p for t in meta.topics for p in t.partitions}

    def wait_fully_replicated(self, topic: str, timeout: float = 60.0) -> None:
        """Every partition led by a live broker with every replica in the ISR, as every broker
        sees it."""

        def full() -> bool:
            for via in self.ids:
                meta = self.cluster.metadata([topic], via=via)
                for t in meta.topics:
                    if t.error_code:
                        return False
                    for p in t.partitions:
                        if p.error_code or p.leader_id < 0 or sorted(p.isr_nodes) != self.ids:
                            return False
            return True

        self.cluster.wait_for(full, f"{topic} fully replicated", timeout)

    def _observer(self) -> int:
        for broker_id in self.ids:
            if self.cluster.running(broker_id) and broker_id not in self.paused:
                return broker_id
        raise RuntimeError("no broker can answer")

    def zookeeper_children(self, path: str) -> list[str]:
        """The children of ``path`` in the cluster's chroot (absent: none), read directly."""
        from kazoo.client import KazooClient

        client = KazooClient(hosts=self.zookeeper.connect_string(self.chroot))
        client.start(timeout=10)
        try:
            return list(client.get_children(path)) if client.exists(path) else []
        finally:
            client.stop()
            client.close()

    def log_bytes(self, broker_id: int, topic: str, partition: int) -> bytes:
        d = self.cluster.data_dir(broker_id) / f"{topic}-{partition}"
        return b"".join(p.read_bytes() for p in sorted(d.glob("*.log")))

    def epoch_checkpoint(self, broker_id: int, topic: str, partition: int) -> str:
        path = self.cluster.data_dir(broker_id) / f"{topic}-{partition}" / "leader-epoch-checkpoint"
        return path.read_text() if path.exists() else ""
