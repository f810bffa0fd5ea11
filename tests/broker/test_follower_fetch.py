"""The leader's side of a follower's Fetch over a real socket (replica_id = the follower's id).

The second replica is played by a WireClient sending what a follower's fetcher sends; the
partition state is applied by hand, as the ZooKeeper watcher will apply it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sluice.protocol import errors
from sluice.protocol import messages as m
from sluice.server.server import Server
from tests.broker.test_server import FETCH, PRODUCE, batch, create_topic, fetch, start_server
from tests.broker_util import WireClient

LOCAL, FOLLOWER = 0, 1
WAIT_S = 10.0


def follower_fetch(
    topic: str, offset: int, epoch: int, replica_id: int = FOLLOWER, max_wait_ms: int = 0
) -> Any:
    return m.FetchRequest(
        replica_id=replica_id,
        max_wait_ms=max_wait_ms,
        min_bytes=1,
        max_bytes=10 * 1024 * 1024,
        isolation_level=0,
        topics=[m.FetchRequest.FetchTopic(
            topic=topic,
            partitions=[m.FetchRequest.FetchPartition(
                partition=0, current_leader_epoch=epoch, fetch_offset=offset,
                log_start_offset=0, partition_max_bytes=1024 * 1024,
            )],
        )],
    )  # fmt: skip


def produce_request(topic: str, records: bytes, acks: int, timeout_ms: int = 30_000) -> Any:
    return m.ProduceRequest(
        acks=acks,
        timeout_ms=timeout_ms,
        topic_data=[m.ProduceRequest.TopicProduceData(
            name=topic,
            partition_data=[m.ProduceRequest.PartitionProduceData(index=0, records=records)],
        )],
    )  # fmt: skip


async def replicated_topic(server: Server, client: WireClient, topic: str) -> None:
    assert await create_topic(client, topic) == 0
    assert server.replica_manager is not None
    assert server.replica_manager.apply_partition_state(
        topic, 0, LOCAL, 1, [LOCAL, FOLLOWER], [LOCAL, FOLLOWER], 1
    )


async def test_acks_all_completes_when_the_follower_fetches_past_it(tmp_path: Path) -> None:
    server = await start_server(tmp_path)
    producer = await WireClient.connect("127.0.0.1", server.port)
    follower = await WireClient.connect("127.0.0.1", server.port)
    try:
        await replicated_topic(server, producer, "r")
        sent = batch(2)
        correlation = await producer.send(PRODUCE, 8, produce_request("r", sent, acks=-1))
        # The follower copies the batch; HW stays 0 until it fetches from past it.
        resp = await follower.request(FETCH, 11, follower_fetch("r", 0, epoch=1))
        part = resp.responses[0].partitions[0]
        assert part.error_code == 0
        assert bytes(part.records)[61:] == sent[61:]  # header differs: offsets/epoch stamped
        assert part.high_watermark == 0
        assert (await fetch(follower, "r", 0)).records == b""  # consumers see nothing yet
        # Its next fetch, from LEO 2, is its acknowledgement.
        resp = await follower.request(FETCH, 11, follower_fetch("r", 2, epoch=1))
        assert resp.responses[0].partitions[0].high_watermark == 2
        answer = await producer.receive(PRODUCE, 8, correlation, timeout=WAIT_S)
        result = answer.responses[0].partition_responses[0]
        assert (result.error_code, result.base_offset) == (0, 0)
        assert len(bytes((await fetch(producer, "r", 0)).records)) == len(sent)
    finally:
        await producer.close()
        await follower.close()
        await server.shutdown()


async def test_a_follower_fetch_at_leo_parks_until_an_append(tmp_path: Path) -> None:
    server = await start_server(tmp_path)
    producer = await WireClient.connect("127.0.0.1", server.port)
    follower = await WireClient.connect("127.0.0.1", server.port)
    try:
        await replicated_topic(server, producer, "r")
        correlation = await follower.send(
            FETCH, 11, follower_fetch("r", 0, epoch=1, max_wait_ms=30_000)
        )
        assert server.replica_manager is not None
        purgatory = server.replica_manager.fetch_purgatory
        # Parked: the only thing the follower waits for is the append below.
        await asyncio.wait_for(_until(lambda: len(purgatory) == 1), WAIT_S)
        resp = await producer.request(PRODUCE, 8, produce_request("r", batch(3), acks=1))
        assert resp.responses[0].partition_responses[0].error_code == 0
        answer = await follower.receive(FETCH, 11, correlation, timeout=WAIT_S)
        assert len(bytes(answer.responses[0].partitions[0].records)) > 0
    finally:
        await producer.close()
        await follower.close()
        await server.shutdown()


async def test_a_long_poll_records_the_follower_once_not_on_its_re_read(tmp_path: Path) -> None:
    """The follower's fetch is its report, taken when the request is read: the re-read after the
    append woke it must not record it again (with the leader's new LEO as the LEO it fetched
    against, the caught-up rule would be judged against a fetch that never happened)."""
    server = await start_server(tmp_path)
    producer = await WireClient.connect("127.0.0.1", server.port)
    follower = await WireClient.connect("127.0.0.1", server.port)
    try:
        await replicated_topic(server, producer, "r")
        replicas = server.replica_manager
        assert replicas is not None
        partition = replicas.get_partition("r", 0)
        assert partition is not None
        correlation = await follower.send(
            FETCH, 11, follower_fetch("r", 0, epoch=1, max_wait_ms=30_000)
        )
        await asyncio.wait_for(_until(lambda: len(replicas.fetch_purgatory) == 1), WAIT_S)
        state = partition._followers[FOLLOWER]
        assert (state.leo, state.last_fetch_leader_leo) == (0, 0)
        fetched_at = state.last_fetch_ms
        resp = await producer.request(PRODUCE, 8, produce_request("r", batch(3), acks=1))
        assert resp.responses[0].partition_responses[0].error_code == 0
        answer = await follower.receive(FETCH, 11, correlation, timeout=WAIT_S)
        assert len(bytes(answer.responses[0].partitions[0].records)) > 0  # the re-read happened
        assert (state.leo, state.last_fetch_leader_leo, state.last_fetch_ms) == (0, 0, fetched_at)
    finally:
        await producer.close()
        await follower.close()
        await server.shutdown()


async def test_fetches_from_non_replicas_and_non_leaders_are_refused(tmp_path: Path) -> None:
    server = await start_server(tmp_path)
    client = await WireClient.connect("127.0.0.1", server.port)
    try:
        await replicated_topic(server, client, "r")
        resp = await client.request(FETCH, 11, follower_fetch("r", 0, epoch=1, replica_id=7))
        part = resp.responses[0].partitions[0]
        assert part.error_code == errors.NotLeaderOrFollower.code
        assert server.replica_manager is not None
        assert server.replica_manager.apply_partition_state(
            "r", 0, FOLLOWER, 2, [LOCAL, FOLLOWER], [FOLLOWER, LOCAL], 2
        )
        resp = await client.request(FETCH, 11, follower_fetch("r", 0, epoch=2))
        assert resp.responses[0].partitions[0].error_code == errors.NotLeaderOrFollower.code
    finally:
        await client.close()
        await server.shutdown()


async def _until(condition: Callable[[], bool]) -> None:
    while not condition():
        await asyncio.sleep(0.005)
