"""Partition reassignment and leader election on a real 3-broker cluster (subprocesses, a real
ZooKeeper, the real controller), driven by real clients (kafka-python's
``alter_partition_reassignments`` / ``list_partition_reassignments``, confluent-kafka's
``elect_leaders``; confluent-kafka 2.16 has no reassignment call) and by ``sluice
reassign-partitions`` / ``sluice leader-election``, while confluent-kafka produces with
acks=all: every acknowledged record is read back, the new replica holds the leader's bytes, and
the broker that lost its replica deleted the partition's directory.
"""

from __future__ import annotations

import json
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest

from sluice.testing.cluster import EmbeddedCluster
from tests.cluster.test_cluster_failover import ConfluentWriter, check, read_all

pytestmark = pytest.mark.slow

DEADLINE_S = 60.0
PROPS = {"min.insync.replicas": "2", "auto.leader.rebalance.enable": "false"}


def kafka_python_admin(cluster: EmbeddedCluster) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from kafka import KafkaAdminClient

        return KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers)


def sluice(
    cluster: EmbeddedCluster, *args: str, via: int | None = None
) -> subprocess.CompletedProcess[str]:
    """The CLI, bootstrapped from every broker or only ``via``."""
    servers = cluster.bootstrap_servers.split(",")
    bootstrap = servers[via - 1] if via is not None else ",".join(servers)
    return subprocess.run(
        [sys.executable, "-m", "sluice.cli.main", *args, "--bootstrap-server", bootstrap],
        capture_output=True, text=True, timeout=DEADLINE_S,
    )  # fmt: skip


def create(cluster: EmbeddedCluster, topic: str, replicas: list[int]) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    new = NewTopic(topic, 1, replica_assignment=[replicas])
    admin.create_topics([new], operation_timeout=30)[topic].result(DEADLINE_S)
    cluster.wait_for_leader(topic)


def replicas_and_isr(cluster: EmbeddedCluster, topic: str) -> tuple[list[int], list[int]]:
    (t,) = cluster.metadata([topic]).topics
    (p,) = t.partitions
    return list(p.replica_nodes), list(p.isr_nodes)


def partition_dir(cluster: EmbeddedCluster, broker: int, topic: str) -> Path:
    return cluster.data_dir(broker) / f"{topic}-0"


def same_bytes(cluster: EmbeddedCluster, topic: str, brokers: list[int]) -> None:
    """The replicas' segment bytes agree below the shortest (HW after a quiet spell)."""

    def data(broker: int) -> bytes:
        d = partition_dir(cluster, broker, topic)
        return b"".join(p.read_bytes() for p in sorted(d.glob("*.log")))

    logs = {b: data(b) for b in brokers}
    shortest = min(len(v) for v in logs.values())
    assert shortest > 0
    assert len({v[:shortest] for v in logs.values()}) == 1


def reassignment_file(tmp_path: Path, topic: str, replicas: list[int]) -> str:
    path = tmp_path / f"{topic}.json"
    entry = {"topic": topic, "partition": 0, "replicas": replicas}
    path.write_text(json.dumps({"version": 1, "partitions": [entry]}))
    return str(path)


@pytest.mark.sluice_cluster(properties=PROPS)
def test_move_a_partition_while_producing(sluice_cluster: EmbeddedCluster, tmp_path: Path) -> None:
    """[1, 2] -> [2, 3] under acks=all load (``sluice reassign-partitions --execute``): broker 3
    catches up and joins the ISR, the leader moves off broker 1, broker 1's directory goes;
    kafka-python lists the move until it completes, ``--verify`` then says so."""
    from kafka import TopicPartition as KTopicPartition

    cluster = sluice_cluster
    create(cluster, "moved", [1, 2])
    assert cluster.leader_of("moved") == 1
    writer = ConfluentWriter(cluster, "moved", idempotent=True).start()
    writer.wait_acked(300)
    admin = kafka_python_admin(cluster)
    try:
        tp = KTopicPartition("moved", 0)
        file = reassignment_file(tmp_path, "moved", [2, 3])
        started = sluice(
            cluster, "reassign-partitions", "--reassignment-json-file", file, "--execute"
        )
        assert started.returncode == 0, started.stderr
        assert "Successfully started partition reassignments for moved-0" in started.stdout
        rollback = started.stdout.split("\n\n")[1]
        assert json.loads(rollback)["partitions"] == [
            {"topic": "moved", "partition": 0, "replicas": [1, 2], "log_dirs": ["any", "any"]}
        ]

        def completed() -> bool:
            return not admin.list_partition_reassignments([tp]) and replicas_and_isr(
                cluster, "moved"
            ) == ([2, 3], [2, 3])

        cluster.wait_for(completed, "the reassignment completed", DEADLINE_S)
        writer.wait_acked(len(writer.acked) + 200)  # still producing to the new leader
    finally:
        writer.stop()
        admin.close()
    assert cluster.wait_for_leader("moved") == 2
    verify = sluice(cluster, "reassign-partitions", "--reassignment-json-file", file, "--verify")
    assert verify.returncode == 0, verify.stderr
    assert "Reassignment of partition moved-0 is completed." in verify.stdout
    records = read_all(cluster, "moved")
    check(writer, records)
    assert not writer.failed
    cluster.wait_for(
        lambda: not partition_dir(cluster, 1, "moved").exists(), "broker 1's replica deleted"
    )
    same_bytes(cluster, "moved", [2, 3])


#: Broker 3, the new replica, is paused (SIGSTOP) to hold the move in phase A; a long session
#: keeps it registered meanwhile, so that it may be named a new replica.
SLOW_3 = {3: {"zookeeper.session.timeout.ms": "30000"}}


@pytest.mark.sluice_cluster(properties=PROPS, broker_properties=SLOW_3)
def test_cancel_and_controller_failover_mid_reassignment(
    sluice_cluster: EmbeddedCluster, tmp_path: Path
) -> None:
    """Broker 3 (the new replica) is paused, so the move stays in phase A: ``--cancel`` puts
    the original replicas back; moved again, the controller is killed; the next controller
    resumes from ZooKeeper and completes once broker 3 caught up."""
    from kafka import TopicPartition as KTopicPartition

    cluster = sluice_cluster
    new = 3
    if cluster.metadata().controller_id == new:  # move the controller off broker 3
        cluster.restart(new)
    cluster.wait_for(lambda: cluster.metadata().controller_id in (1, 2), "a controller on 1 or 2")
    controller = cluster.metadata().controller_id
    other = 3 - controller
    create(cluster, "resumed", [controller, other])
    writer = ConfluentWriter(cluster, "resumed", idempotent=True).start()
    writer.wait_acked(200)
    file = reassignment_file(tmp_path, "resumed", [other, new])
    admin = kafka_python_admin(cluster)
    tp = KTopicPartition("resumed", 0)
    assert admin.list_partition_reassignments() == {}  # it learns the controller now
    cluster.pause(new)
    try:
        # kafka-python and the CLI ask the controller only: the paused broker would not answer.
        assert admin.alter_partition_reassignments({tp: [other, new]}) == {tp: None}
        listed = sluice(cluster, "reassign-partitions", "--list", via=controller)
        assert f"resumed-0: replicas: {other},{new},{controller}. adding: {new}." in (
            listed.stdout
        ), listed
        cancelled = sluice(
            cluster, "reassign-partitions", "--reassignment-json-file", file, "--cancel",
            via=controller,
        )  # fmt: skip
        assert cancelled.returncode == 0, cancelled.stderr
        assert "Successfully cancelled partition reassignments for resumed-0" in cancelled.stdout
        assert admin.list_partition_reassignments([tp]) == {}
        again = sluice(
            cluster, "reassign-partitions", "--reassignment-json-file", file, "--cancel",
            via=controller,
        )  # fmt: skip
        assert "None of the specified partition reassignments are active." in again.stdout

        assert admin.alter_partition_reassignments({tp: [other, new]}) == {tp: None}
        cluster.kill(controller)
        cluster.wait_for(
            lambda: cluster.metadata().controller_id == other, "the next controller", DEADLINE_S
        )
        # (kafka-python keeps asking the dead controller: ask the new one with the CLI)
        listed = sluice(cluster, "reassign-partitions", "--list", via=other)
        assert (
            f"resumed-0: replicas: {other},{new},{controller}. adding: {new}. "
            f"removing: {controller}." in listed.stdout
        ), listed
        cluster.resume(new)
        cluster.wait_for(
            lambda: replicas_and_isr(cluster, "resumed") == ([other, new], [other, new]),
            "the reassignment completed after the failover",
            DEADLINE_S,
        )
        writer.wait_acked(len(writer.acked) + 200)
    finally:
        cluster.resume(new)
        writer.stop()
        admin.close()
    verify = sluice(cluster, "reassign-partitions", "--reassignment-json-file", file, "--verify")
    assert verify.returncode == 0, verify.stdout
    check(writer, read_all(cluster, "resumed"))
    same_bytes(cluster, "resumed", [other, new])
    # The removed replica's broker was down; back, it finds it is no longer a replica.
    assert partition_dir(cluster, controller, "resumed").exists()
    cluster.restart(controller)
    cluster.wait_for(
        lambda: not partition_dir(cluster, controller, "resumed").exists(),
        "the old replica deleted when its broker returned",
    )


@pytest.mark.sluice_cluster(properties=PROPS)
def test_elect_preferred_leaders_after_a_failover(sluice_cluster: EmbeddedCluster) -> None:
    """Leadership moved away by a broker's restart comes back with ElectLeaders: confluent-kafka
    ``elect_leaders``, then ``sluice leader-election``; ELECTION_NOT_NEEDED where it leads."""
    from confluent_kafka import ElectionType, KafkaError, TopicPartition
    from confluent_kafka.admin import AdminClient

    cluster = sluice_cluster
    create(cluster, "pref", [1, 2, 3])
    create(cluster, "pref2", [1, 3, 2])
    cluster.kill(1)
    for topic in ("pref", "pref2"):
        cluster.wait_for(lambda t=topic: cluster.leader_of(t) not in (-1, 1), f"{topic} moved")
    cluster.restart(1)
    for topic in ("pref", "pref2"):
        cluster.wait_for(lambda t=topic: 1 in replicas_and_isr(cluster, t)[1], f"1 back in {topic}")
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    future = admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition("pref", 0)])
    result = future.result(DEADLINE_S)
    assert list(result) == [TopicPartition("pref", 0)] and result[TopicPartition("pref", 0)] is None
    cluster.wait_for(lambda: cluster.leader_of("pref") == 1, "pref led by 1 again")
    again = admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition("pref", 0)])
    error = again.result(DEADLINE_S)[TopicPartition("pref", 0)]
    assert error is not None and error.name() == "ELECTION_NOT_NEEDED"
    nope = TopicPartition("nope", 0)
    unknown = admin.elect_leaders(ElectionType.PREFERRED, [nope]).result(DEADLINE_S)[nope]
    assert unknown is not None and unknown.code() == KafkaError.UNKNOWN_TOPIC_OR_PART

    elected = sluice(
        cluster, "leader-election", "--election-type", "preferred", "--all-topic-partitions"
    )
    assert elected.returncode == 0, elected.stderr
    assert "Successfully completed leader election (PREFERRED) for partitions pref2-0" in (
        elected.stdout
    )
    cluster.wait_for(lambda: cluster.leader_of("pref2") == 1, "pref2 led by 1 again")
    one = sluice(
        cluster, "leader-election", "--election-type", "unclean", "--topic", "pref",
        "--partition", "0",
    )  # fmt: skip
    assert one.returncode == 0 and "Valid replica already elected for partitions pref-0" in (
        one.stdout
    ), one
