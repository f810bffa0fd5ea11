"""Replication throttles (``sluice.server.replication.throttle``): the throttled-replica lists,
the quota's measure, and Kafka's leader-side rule on a real ReplicaManager and LogManager (the
cluster-level behaviour: ``tests/cluster/test_cluster_replication_throttle.py``)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sluice.protocol.records import build_batch
from sluice.server.replication.replica_manager import ReplicaManager
from sluice.server.replication.throttle import (
    UNTHROTTLED,
    ReplicationQuota,
    is_throttled,
    parse_throttled_replicas,
)
from sluice.server.storage.log import Isolation
from sluice.server.storage.log_config import LogConfig
from sluice.server.storage.log_manager import LogManager

LOCAL, IN_SYNC, NEW = 0, 1, 2


@pytest.mark.parametrize(
    ("text", "partition", "broker", "expected"),
    [
        ("", 0, 0, False),
        ("*", 7, 3, True),
        ("0:1,1:2", 0, 1, True),
        ("0:1,1:2", 0, 2, False),
        (" 0:1 , 1:2 ", 1, 2, True),
        ("10:1", 1, 1, False),  # not a prefix match
    ],
)
def test_throttled_replica_lists(text: str, partition: int, broker: int, expected: bool) -> None:
    assert is_throttled(parse_throttled_replicas(text), partition, broker) is expected


@pytest.mark.parametrize("text", ["0", "a:1", "*,0:1", "0:1,", "0:1;1:2", "**"])
def test_kafkas_list_validator_refuses(text: str) -> None:
    with pytest.raises(ValueError, match=r"literal '\*' or a list of replicas"):
        parse_throttled_replicas(text)


def test_quota_is_exceeded_over_its_rate_across_the_window() -> None:
    quota = ReplicationQuota(samples=3, window_s=1.0)
    assert not quota.throttling and not quota.exceeded(0.0)
    quota.record(10_000, 0.0)
    assert not quota.exceeded(0.0)  # no bound
    quota.set_bound(4_000)
    # 10,000 bytes over at least (samples - 1) windows = 2 s: 5,000/s > 4,000/s
    assert quota.byte_rate(0.5) == 5_000 and quota.exceeded(0.5)
    assert not quota.exceeded(2.6)  # 10,000 over 2.6 s
    assert not quota.exceeded(3.1)  # the sample aged out of the window
    quota.set_bound(UNTHROTTLED)
    quota.record(10**9, 3.2)
    assert not quota.exceeded(3.2)
    assert quota.total == 10_000 + 10**9


@pytest.fixture
def rm(tmp_path: Path) -> Iterator[ReplicaManager]:
    logs = LogManager(tmp_path, LogConfig.from_properties({}))
    logs.open()
    logs.create_topic("t", 2, {"leader.replication.throttled.replicas": f"0:{LOCAL}"})
    replicas = ReplicaManager(logs, LOCAL)
    replicas.startup()
    for index in (0, 1):
        partition = replicas.get_partition("t", index)
        assert partition is not None
        assert partition.make_leader(1, [LOCAL, IN_SYNC, NEW], [LOCAL, IN_SYNC])
    batch = build_batch([(1_700_000_000_000 + i, None, b"v" * 100) for i in range(10)])
    replicas.append_records([("t", 0, batch), ("t", 1, batch)], 1, 1000)
    for index in (0, 1):  # HW 10: the new replica, fetching from 0, stays out of the ISR
        replicas.update_follower_end_offset("t", index, IN_SYNC, 10)
    yield replicas
    logs.close()


def records(rm: ReplicaManager, replica_id: int) -> list[int]:
    """Bytes each partition of ``t`` returns to ``replica_id`` fetching from offset 0."""
    reads = rm.fetch_messages(
        [("t", 0, 0, 1 << 20, 1), ("t", 1, 0, 1 << 20, 1)], 1 << 22, Isolation.LOG_END, replica_id
    )
    out = []
    for read in reads:
        assert read.info is not None, read.error
        out.append(read.info.slice.size if read.info.slice is not None else 0)
    return out


def test_leader_throttles_only_throttled_partitions_of_out_of_sync_followers(
    rm: ReplicaManager,
) -> None:
    full = records(rm, NEW)
    assert full[0] > 0 and full[1] > 0  # no bound yet
    assert NEW not in rm.get_partition("t", 0).isr  # type: ignore[union-attr]
    rm.leader_quota.set_bound(1_000)
    rm.leader_quota.record(1_000_000, time.monotonic())
    # Over the quota: t-0 (throttled here) answers the new replica without records...
    assert records(rm, NEW) == [0, full[1]]
    # ...but never an in-sync one (Kafka's shouldLeaderThrottle).
    assert records(rm, IN_SYNC) == full
    # The bytes sent for throttled partitions count, to any follower (here: the ISR's).
    before = rm.leader_quota.total
    rm.record_leader_throttled([("t", 0, 500), ("t", 1, 700)])
    assert rm.leader_quota.total == before + 500  # t-1 is not throttled here
    rm.leader_quota.set_bound(UNTHROTTLED)
    assert records(rm, NEW) == full
