"""Transaction markers in a replicated 3-broker cluster (issue 26): WriteTxnMarkers on the
partition leader appends the COMMIT/ABORT markers with acks=-1, the followers replicate them
(and build the same ``.txnindex`` entry from them), and after the leader stops, a read_committed
reader of the new leader (librdkafka, whose default is read_committed) sees exactly the
committed records.

In-process brokers (``mode="inprocess"``): the transactional data is written through the
leader's own replica manager on its event loop (``EmbeddedBroker.call``), as Produce will once
the transaction coordinator lets it accept transactional batches.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import pytest

from sluice.protocol import messages as m
from sluice.server.server import Server
from sluice.testing.cluster import EmbeddedCluster
from tests.broker.test_server import fetch_request
from tests.broker.test_txn_partitions import marker, plain_batch, txn_batch, write_markers
from tests.broker_util import WireClient
from tests.cluster.test_cluster_failover import create_topic

pytestmark = pytest.mark.slow

RF3 = {"min.insync.replicas": "2", "auto.leader.rebalance.enable": "false"}
DEADLINE_S = 30.0


def _leader_append(data: bytes) -> Callable[[Server], int]:
    def run(server: Server) -> int:
        results, _ = server.replica_manager.append_records([("tx", 0, data)], 1, 1000)
        assert results[0].error == 0, results
        return 0

    return run


def _state(server: Server) -> tuple[int, int, int, list[tuple[int, int, int]]]:
    """(LEO, HW, LSO, aborted transactions as (producer, first, last offset)) of tx-0 here."""
    partition = server.replica_manager.get_partition("tx", 0)
    assert partition is not None
    log_ = partition.log
    aborted = [
        (t.producer_id, t.first_offset, t.last_offset)
        for t in log_.collect_aborted_transactions(0, log_.log_end_offset)
    ]
    return log_.log_end_offset, log_.high_watermark, log_.last_stable_offset, aborted


@pytest.mark.sluice_cluster(properties=RF3, mode="inprocess")
def test_markers_replicate_and_a_new_leader_serves_read_committed(
    sluice_cluster: EmbeddedCluster,
) -> None:
    from confluent_kafka import Consumer, TopicPartition

    cluster = sluice_cluster
    create_topic(cluster, "tx")
    leader = cluster.wait_for_leader("tx")
    broker = cluster.broker(leader)
    broker.call(_leader_append(txn_batch(1, 0, [b"aborted"])))  # 0
    broker.call(_leader_append(txn_batch(2, 0, [b"committed"])))  # 1
    broker.call(_leader_append(plain_batch([b"plain"])))  # 2
    cluster.wait_for(lambda: broker.call(_state)[1] == 3, "HW past the data", DEADLINE_S)
    assert broker.call(_state)[2] == 0  # both transactions open

    async def end_both() -> dict[Any, int]:
        c = await WireClient.connect("127.0.0.1", broker.port)
        try:
            return await write_markers(c, marker(1, False, {"tx": [0]}),
                                       marker(2, True, {"tx": [0]}))  # fmt: skip
        finally:
            await c.close()

    # acks=-1: answered once the ISR has the markers.
    assert asyncio.run(end_both()) == {(1, "tx", 0): 0, (2, "tx", 0): 0}
    assert broker.call(_state) == (5, 5, 5, [(1, 0, 3)])
    for b in cluster.ids:
        cluster.wait_for(
            lambda b=b: cluster.broker(b).call(_state)[0] == 5, f"broker {b} has the markers"
        )
        # each follower rebuilt the same aborted-transaction entry from the replicated marker
        assert cluster.broker(b).call(_state)[3] == [(1, 0, 3)]

    cluster.stop_broker(leader)
    new = cluster.wait_for_leader("tx", timeout=DEADLINE_S)
    assert new != leader
    cluster.wait_for(
        lambda: cluster.broker(new).call(_state)[1:3] == (5, 5), "the new leader's HW and LSO"
    )
    bootstrap = ",".join(f"127.0.0.1:{cluster.broker(b).port}" for b in cluster.ids if b != leader)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "rc",
                         "enable.auto.commit": False})  # fmt: skip
    got: list[bytes] = []
    try:
        consumer.assign([TopicPartition("tx", 0, 0)])
        deadline = time.monotonic() + DEADLINE_S
        while len(got) < 2 and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                value = msg.value()
                assert value is not None
                got.append(value)
        # nothing more arrives (an aborted record would)
        extra = consumer.poll(1.0)
        assert extra is None or extra.error() is not None
    finally:
        consumer.close()
    assert got == [b"committed", b"plain"]

    async def fetch_new_leader() -> Any:
        c = await WireClient.connect("127.0.0.1", cluster.broker(new).port)
        try:
            req = fetch_request("tx", 0)
            req.isolation_level = 1
            resp = await c.request(m.Fetch.key, 11, req)
            return resp.responses[0].partitions[0]
        finally:
            await c.close()

    part = asyncio.run(fetch_new_leader())
    assert part.error_code == 0
    assert part.last_stable_offset == 5
    assert [(a.producer_id, a.first_offset) for a in part.aborted_transactions] == [(1, 0)]
