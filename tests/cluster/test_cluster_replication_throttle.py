"""Replication throttles on a real 3-broker cluster (``sluice.server.replication.throttle``):
``sluice reassign-partitions --execute --throttle`` sets Kafka's four throttle configs, the new
replica catches up no faster than the throttle allows (measured from the bytes it holds over
time, not from how long it took), ends byte-identical, and ``--verify`` removes the throttles;
an in-sync follower of a throttled partition is never held back (acks=all keeps up at a rate
the throttle would never allow).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource

from sluice.testing.cluster import EmbeddedCluster
from tests.cluster.test_cluster_reassignment import (
    DEADLINE_S,
    create,
    partition_dir,
    reassignment_file,
    replicas_and_isr,
    same_bytes,
    sluice,
)

pytestmark = pytest.mark.slow

RATE = 200_000  # bytes/s
FETCH = 32_768  # replica.fetch.max.bytes: the most one follower fetch may take over
#: A short quota window (2 samples of 1 s), so that a new quota's first burst (Kafka's Rate
#: measures over at least samples - 1 windows) is one second's bytes, not ten.
PROPS = {
    "auto.leader.rebalance.enable": "false",
    "replica.fetch.max.bytes": str(FETCH),
    "replication.quota.window.num": "2",
    "replication.quota.window.size.seconds": "1",
}
#: A leader or follower may take one window's bytes plus one fetch beyond the rate at any
#: moment (the quota is checked before a read, counted after), and both sides have a window.
SLACK = 2 * RATE + 2 * FETCH


def fill(cluster: EmbeddedCluster, topic: str, total: int) -> None:
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all",
                         "linger.ms": 5, "batch.size": 16_384})  # fmt: skip
    payload = bytes(range(256)) * 4  # 1 KiB
    for i in range(total // len(payload)):
        producer.produce(topic, payload, key=str(i).encode())
        if i % 500 == 0:
            producer.poll(0)
    assert producer.flush(DEADLINE_S) == 0


def log_bytes(cluster: EmbeddedCluster, broker: int, topic: str) -> int:
    d = partition_dir(cluster, broker, topic)
    try:
        return sum(p.stat().st_size for p in d.glob("*.log"))
    except FileNotFoundError:  # (a segment rolled between the listing and the stat)
        return -1


def configs(admin: AdminClient, kind: ConfigResource.Type, name: str) -> dict[str, str]:
    """A topic's overrides, or a broker's own dynamic configs."""
    (future,) = admin.describe_configs([ConfigResource(kind, name)]).values()
    wanted = {ConfigSource.DYNAMIC_TOPIC_CONFIG.value, ConfigSource.DYNAMIC_BROKER_CONFIG.value}
    return {k: e.value for k, e in future.result(DEADLINE_S).items() if e.source in wanted}


@pytest.mark.sluice_cluster(properties=PROPS)
def test_throttled_reassignment_is_held_to_the_rate(
    sluice_cluster: EmbeddedCluster, tmp_path: Path
) -> None:
    cluster = sluice_cluster
    create(cluster, "slow", [1])
    total = 1_600_000
    fill(cluster, "slow", total)
    data = log_bytes(cluster, 1, "slow")
    assert data >= total
    file = reassignment_file(tmp_path, "slow", [1, 2])
    # The new replica's bytes over time (none before the move), until it joined the ISR.
    samples: list[tuple[float, int]] = [(time.monotonic(), 0)]
    started = sluice(cluster, "reassign-partitions", "--reassignment-json-file", file,
                     "--execute", "--throttle", str(RATE))  # fmt: skip
    assert started.returncode == 0, started.stderr
    out = started.stdout
    assert (
        "Warning: You must run --verify periodically, until the reassignment completes, "
        "to ensure the throttle is removed.\n"
        f"The inter-broker throttle limit was set to {RATE} B/s\n"
        "Successfully started partition reassignments for slow-0"
    ) in out, out
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    # Kafka's layout: the current replicas leader-throttled, the new one follower-throttled.
    assert configs(admin, ConfigResource.Type.TOPIC, "slow") == {
        "leader.replication.throttled.replicas": "0:1",
        "follower.replication.throttled.replicas": "0:2",
    }
    rates = dict.fromkeys(
        ("leader.replication.throttled.rate", "follower.replication.throttled.rate"), str(RATE)
    )
    for broker in (1, 2):
        assert configs(admin, ConfigResource.Type.BROKER, str(broker)) == rates
    assert configs(admin, ConfigResource.Type.BROKER, "3") == {}

    deadline = time.monotonic() + DEADLINE_S
    while replicas_and_isr(cluster, "slow")[1] != [1, 2]:
        assert time.monotonic() < deadline, f"not caught up: {samples[-1:]}"
        held = log_bytes(cluster, 2, "slow")
        if held >= 0:
            samples.append((time.monotonic(), held))
        time.sleep(0.05)
    samples.append((time.monotonic(), log_bytes(cluster, 2, "slow")))
    # Over any span, no more than the rate allows (plus the window's burst); unthrottled, the
    # 1.6 MB would come in well under a second.
    worst = max(
        (b1 - b0) - RATE * (t1 - t0)
        for i, (t0, b0) in enumerate(samples)
        for t1, b1 in samples[i + 1 :]
    )
    assert worst <= SLACK, (worst, SLACK)
    moved = samples[-1][1] - samples[0][1]
    assert samples[-1][0] - samples[0][0] >= (moved - SLACK) / RATE
    assert samples[-1][1] == data
    same_bytes(cluster, "slow", [1, 2])

    verify = sluice(cluster, "reassign-partitions", "--reassignment-json-file", file, "--verify")
    assert verify.returncode == 0, verify.stderr
    assert verify.stdout.splitlines()[1:] == [
        "Reassignment of partition slow-0 is completed.",
        "Clearing broker-level throttles on brokers 1,2,3",
        "Clearing topic-level throttles on topic slow",
    ], verify.stdout
    assert configs(admin, ConfigResource.Type.TOPIC, "slow") == {}
    for broker in (1, 2, 3):
        assert configs(admin, ConfigResource.Type.BROKER, str(broker)) == {}


@pytest.mark.sluice_cluster(properties=PROPS)
def test_in_sync_followers_are_not_throttled(sluice_cluster: EmbeddedCluster) -> None:
    """Every replica of the partition throttled at 2 kB/s on both sides: the leader's quota is
    soon exceeded, yet its in-sync follower keeps fetching at full speed (Kafka's
    shouldLeaderThrottle / shouldFollowerThrottle exempt the ISR), so 400 kB with acks=all go
    through long before 2 kB/s could carry them (200 s)."""
    cluster = sluice_cluster
    create(cluster, "insync", [1, 3])
    cluster.wait_for(lambda: replicas_and_isr(cluster, "insync")[1] == [1, 3], "ISR [1, 3]")
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry

    def set_configs(kind: ConfigResource.Type, name: str, values: dict[str, str]) -> None:
        entries = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET)
                   for k, v in values.items()]  # fmt: skip
        (future,) = admin.incremental_alter_configs(
            [ConfigResource(kind, name, incremental_configs=entries)]
        ).values()
        future.result(DEADLINE_S)

    set_configs(ConfigResource.Type.TOPIC, "insync", {
        "leader.replication.throttled.replicas": "*",
        "follower.replication.throttled.replicas": "*",
    })  # fmt: skip
    for broker in (1, 3):
        set_configs(ConfigResource.Type.BROKER, str(broker), {
            "leader.replication.throttled.rate": "2000",
            "follower.replication.throttled.rate": "2000",
        })  # fmt: skip
    fill(cluster, "insync", 400_000)  # acks=all: the follower had it all before each ack
    assert replicas_and_isr(cluster, "insync")[1] == [1, 3]
    same_bytes(cluster, "insync", [1, 3])
    assert log_bytes(cluster, 3, "insync") == log_bytes(cluster, 1, "insync")
