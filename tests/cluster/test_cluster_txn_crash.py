"""kill -9 at a step of a commit or an abort in a 3-broker cluster, the transaction coordinator
and the partitions' leaders on different brokers (issue 26), compared against a model once the
dead broker is back.

The cluster serves the module; every broker is armed alike with each test's
:mod:`sluice.server.crash_points` point (scoped to the test's transactional id or topic, each
firing once across the cluster: ``SLUICE_CRASH_ONCE_DIR``), so the broker that dies is the one
the step belongs to -- the coordinator (the leader of the id's ``__transaction_state``
partition) or a partition leader. Each test's topic has 2 partitions with 3 replicas, led by the
two brokers that are not the coordinator, so every marker crosses the network. The transaction
ends on the survivors (the coordinator's or the leader's partitions fail over; the producer
retries), the dead broker is restarted and catches up, and then, on all three replicas, the log
is the same and its ``.txnindex`` is what Kafka's producer-state rules give for it (a truncated
marker's entry gone with it); the leader's LSO (ListOffsets read_committed, Fetch) too; the
outcome is the one asked for, everywhere or nowhere (:mod:`tests.transaction.crash_model`).

The group coordinator's step is in the standalone test only: killed here, librdkafka's
``send_offsets_to_transaction`` waited past its timeout on the coordinator the metadata had
dropped (2 runs of 3, whether the dead broker was restarted at once or not), as
confluentinc/librdkafka issues 5511 and 5456 describe.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from sluice.server.crash_points import ENV, ONCE_DIR_ENV
from sluice.server.group.offsets_store import partition_for
from sluice.testing.cluster import EmbeddedCluster
from tests.transaction.crash_model import (
    CLIENT,
    WAIT,
    Batch,
    Names,
    Offsets,
    Victim,
    check_after_recovery,
    check_log,
    committed_offset,
    kafka_model,
    log_batches,
    offsets,
    read_txn_index,
    txn_state,
    wait_for,
)

pytestmark = pytest.mark.interop

TXN_PARTITIONS = 3
PARTITIONS = [0, 1]

#: case -> (crash point, its scope, who dies, commit). ``{end}``: Commit or Abort.
CASES: dict[str, tuple[str, str, str, bool]] = {
    # PrepareCommit replicated, no marker sent: the new coordinator sends them
    "coordinator_after_prepare": ("txn.after.Prepare{end}", "txn", "coordinator", True),
    # one leader acknowledged its marker, the other's answer not yet in
    "coordinator_after_one_leader": ("txn.markers.acknowledged", "topic", "coordinator", False),
    # every marker acknowledged, CompleteAbort not written
    "coordinator_before_complete": ("txn.before.Complete{end}", "txn", "coordinator", False),
    # a leader appended its marker, not replicated: truncated when it comes back
    "leader_after_marker_append": ("partition.marker.appended", "topic", "leader", False),
    # a leader's marker replicated, WriteTxnMarkers not answered
    "leader_before_markers_answer": ("partition.markers.written", "topic", "leader", True),
}


def names_of(case: str) -> Names:
    point, scope_kind, _who, commit = CASES[case]
    return Names.of(case.replace("_", "-"), point, scope_kind, commit)


@pytest.fixture(scope="module")
def cluster(
    tmp_path_factory: pytest.TempPathFactory, sluice_zookeeper: Any
) -> Iterator[EmbeddedCluster]:
    root = tmp_path_factory.mktemp("txn-crash-cluster")
    (root / "once").mkdir()
    env = {ENV: ",".join(names_of(c).armed for c in CASES), ONCE_DIR_ENV: str(root / "once")}
    chroot = f"/sluice-tests/txn-crash-{root.name}"
    cluster = EmbeddedCluster(
        3,
        zookeeper_connect=sluice_zookeeper.connect_string(chroot),
        properties={
            "transaction.state.log.num.partitions": str(TXN_PARTITIONS),
            "transaction.state.log.replication.factor": "3",
            "transaction.state.log.min.isr": "2",
            # leaders stay where a failover put them: each test finds its coordinators once
            "auto.leader.rebalance.enable": "false",
        },
        broker_env={b: env for b in (1, 2, 3)},
        data_root=root / "data",
    )
    try:
        with cluster:
            yield cluster
    finally:
        sluice_zookeeper.delete_tree(chroot)


def leader_offsets(cluster: EmbeddedCluster, topic: str, partition: int) -> Offsets | None:
    """HW and LSO of the partition from whichever running broker leads it."""
    for b in cluster.ids:
        if cluster.running(b):
            got = offsets(cluster.broker(b).port, topic, [partition])
            if got is not None:
                return got[partition]
    return None


def ended(cluster: EmbeddedCluster, txn_id: str) -> bool:
    """Whether the coordinator of ``txn_id`` has written its CompleteCommit/CompleteAbort (no
    marker of it is sent after that)."""
    states = {txn_state(cluster.broker(b).port, txn_id) for b in cluster.ids if cluster.running(b)}
    return bool(states & {"CompleteCommit", "CompleteAbort"})


def replicas_agree(
    cluster: EmbeddedCluster, topic: str
) -> tuple[dict[int, list[Batch]], dict[int, Offsets]] | None:
    """The batches and the leader's offsets of each partition once every replica holds the
    same batches and the leader's high watermark covers them (None until then)."""
    out: dict[int, list[Batch]] = {}
    answers: dict[int, Offsets] = {}
    for p in PARTITIONS:
        logs = [log_batches(cluster.data_dir(b) / f"{topic}-{p}") for b in cluster.ids]
        got = leader_offsets(cluster, topic, p)
        if any(log != logs[0] for log in logs) or not logs[0] or got is None:
            return None
        if got.high_watermark != logs[0][-1].last + 1:
            return None
        out[p], answers[p] = logs[0], got
    return out, answers


def check_replicas(
    cluster: EmbeddedCluster, topic: str, txn_ids: list[str]
) -> dict[int, list[Batch]]:
    """Once the transactions of ``txn_ids`` ended and the replicas agree: every replica's
    ``.txnindex`` and the leader's LSO are the model's; the batches by partition."""
    for txn_id in txn_ids:
        wait_for(lambda: ended(cluster, txn_id), f"the end of {txn_id}")  # noqa: B023
    batches, answers = wait_for(lambda: replicas_agree(cluster, topic), f"the replicas of {topic}")
    for p in PARTITIONS:
        got = answers[p]
        entries, lso = kafka_model(batches[p], got.high_watermark)
        where = f"partition {p}: {batches[p]}"
        for b in cluster.ids:
            assert read_txn_index(cluster.data_dir(b) / f"{topic}-{p}") == entries, (b, where)
        assert (got.lso, got.fetch_lso) == (lso, lso), where
    return batches


def dead_broker(cluster: EmbeddedCluster) -> int:
    """The broker whose process exited (bounded wait; exactly one)."""

    def dead() -> list[int]:
        return [b for b in cluster.ids if cluster.broker(b).process.poll() is not None]  # type: ignore[union-attr]

    found = wait_for(dead, "a broker to die")
    assert len(found) == 1, found
    return found[0]


@pytest.mark.parametrize("case", list(CASES))
def test_kill_9_in_a_cluster(cluster: EmbeddedCluster, case: str) -> None:
    _point, _scope, who, commit = CASES[case]
    names = names_of(case)
    topic = names.topic
    for b in cluster.ids:  # an earlier test that failed may have left one dead
        if not cluster.running(b):
            cluster.restart(b)
    bootstrap = cluster.bootstrap_servers
    bystander = Producer(
        {**CLIENT, "bootstrap.servers": bootstrap, "transactional.id": names.bystander}
    )
    bystander.init_transactions(WAIT)  # __transaction_state exists from here on
    group_consumer = Consumer({**CLIENT, "bootstrap.servers": bootstrap, "group.id": names.group,
                               "enable.auto.commit": False})  # fmt: skip
    assert committed_offset(group_consumer, topic) < 0  # __consumer_offsets exists from here on
    coordinator = cluster.wait_for_leader(
        "__transaction_state", partition_for(names.txn_id, TXN_PARTITIONS)
    )
    first, second = [b for b in cluster.ids if b != coordinator]
    assignment = [[first, second, coordinator], [second, first, coordinator]]
    admin = AdminClient({**CLIENT, "bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, len(PARTITIONS), replica_assignment=assignment)])[
        topic
    ].result(WAIT)
    leaders = [cluster.wait_for_leader(topic, p) for p in PARTITIONS]
    assert leaders == [first, second]
    bystander.begin_transaction()
    bystander.produce(topic, value=b"bystander", partition=0)
    bystander.flush(WAIT)
    expected_victims = {"coordinator": {coordinator}, "leader": set(leaders)}[who]
    victim = Victim(bootstrap, names, PARTITIONS, group_consumer.consumer_group_metadata(), commit)
    try:
        # --- the crash; the transaction ends on the survivors; the dead broker comes back
        dead = dead_broker(cluster)
        assert dead in expected_victims, (who, dead, expected_victims)
        log_path = cluster.broker(dead).log_path
        assert log_path is not None and names.crash_line in log_path.read_text()
        cluster.broker(dead).stop_sync()  # its process is gone: mark it stopped
        victim.finished()
        cluster.restart(dead)
    finally:
        victim.thread.join(WAIT)

    # --- every replica: the same log, its .txnindex the model's; the leader's LSO
    batches = check_replicas(cluster, topic, [names.txn_id])
    # a second marker only where one was written before the crash and sent again after it
    pid, epoch = check_log(batches, victim, lambda _p, n: n in (1, 2))
    still_open = leader_offsets(cluster, topic, 0)
    assert still_open is not None and still_open.lso == 0  # the bystander's record

    # --- the bystander commits; then the clients' view
    bystander.commit_transaction(WAIT)
    batches = check_replicas(cluster, topic, [names.txn_id, names.bystander])
    assert batches[0][-1].commit is True and batches[0][-1].producer_id != pid
    check_after_recovery(
        bootstrap,
        victim,
        pid,
        epoch,
        group_consumer,
        lambda p: log_batches(cluster.data_dir(cluster.wait_for_leader(topic, p)) / f"{topic}-{p}"),
    )
    group_consumer.close()
