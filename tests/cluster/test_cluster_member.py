"""Three real brokers in cluster mode on a real ZooKeeper (a chroot per test), driven over the
wire. The test plays the controller where one is needed (it writes the partition states itself),
so these check the broker side alone: registration, the metadata cache, hosting only assigned
partitions, applying states, followers fetching, acks=-1, the leader's ISR writes, topic deletion
and session loss."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from sluice.protocol import errors
from sluice.protocol import messages as m
from sluice.protocol.structs import TopicPartition
from sluice.server.server import Server
from sluice.server.zk.client import ZkClient
from sluice.server.zk.data import PartitionState, partition_state_path
from sluice.server.zk.kafka_zk import ControllerEpoch, KafkaZkClient
from tests.broker.test_follower_fetch import produce_request
from tests.broker.test_server import CREATE_TOPICS, METADATA, PRODUCE, batch, start_server
from tests.broker_util import WireClient

WAIT_S = 20.0
IDS = (1, 2, 3)


async def until(condition: Callable[[], bool], what: str, timeout: float = WAIT_S) -> None:
    async with asyncio.timeout(timeout):
        while not condition():
            await asyncio.sleep(0.01)
    assert condition(), what


class Cluster:
    def __init__(self, tmp_path: Path, connect: str) -> None:
        self.tmp_path = tmp_path
        self.connect = connect
        self.servers: dict[int, Server] = {}

    async def start(self, broker_id: int, *extra: str) -> Server:
        server = await start_server(
            self.tmp_path / f"b{broker_id}",
            f"node.id={broker_id}",
            f"zookeeper.connect={self.connect}",
            "zookeeper.session.timeout.ms=2000",
            "replica.fetch.wait.max.ms=100",
            "replica.fetch.backoff.ms=50",
            "replica.lag.time.max.ms=1000",
            # The test plays the controller (id 99, no listener): no one to ask at shutdown.
            "controlled.shutdown.enable=false",
            *extra,
        )
        self.servers[broker_id] = server
        return server

    async def stop(self, broker_id: int) -> None:
        await self.servers.pop(broker_id).shutdown()

    def partition(self, broker_id: int, topic: str, index: int = 0) -> Any:
        rm = self.servers[broker_id].replica_manager
        assert rm is not None
        return rm.get_partition(topic, index)

    async def client(self, broker_id: int) -> WireClient:
        return await WireClient.connect("127.0.0.1", self.servers[broker_id].port)


@pytest.fixture
async def cluster(tmp_path: Path, sluice_zookeeper_connect: str) -> AsyncIterator[Cluster]:
    c = Cluster(tmp_path, sluice_zookeeper_connect)
    try:
        yield c
    finally:
        for broker_id in list(c.servers):
            await c.stop(broker_id)


@pytest.fixture
async def controller(sluice_zookeeper_connect: str) -> AsyncIterator[tuple[KafkaZkClient, Any]]:
    """The test as the controller: its own session, elected, writing states by hand."""
    zk = ZkClient(sluice_zookeeper_connect, session_timeout=5.0)
    await zk.start()
    kzk = KafkaZkClient(zk)
    await kzk.create_top_level_paths()
    fence = await kzk.elect_controller(99)
    assert isinstance(fence, ControllerEpoch)
    try:
        yield kzk, fence
    finally:
        await zk.close()


async def create(client: WireClient, name: str, partitions: int, rf: int, timeout_ms: int) -> Any:
    req = m.CreateTopicsRequest(
        topics=[m.CreateTopicsRequest.CreatableTopic(
            name=name, num_partitions=partitions, replication_factor=rf, configs=[])],
        timeout_ms=timeout_ms,
        validate_only=False,
    )  # fmt: skip
    resp = await client.request(CREATE_TOPICS, 4, req)
    return resp.topics[0]


async def metadata(client: WireClient, *topics: str) -> Any:
    req = m.MetadataRequest(
        topics=[m.MetadataRequest.MetadataRequestTopic(name=t) for t in topics],
        allow_auto_topic_creation=False,
    )
    return await client.request(METADATA, 9, req)


async def elect(
    controller: tuple[KafkaZkClient, Any], topic: str, states: dict[int, tuple[int, list[int]]]
) -> None:
    kzk, fence = controller
    written = await kzk.create_partition_states(
        topic,
        {
            p: PartitionState(leader, 0, tuple(isr), fence.epoch)
            for p, (leader, isr) in states.items()
        },
        fence,
    )
    assert all(isinstance(s, PartitionState) for s in written.values()), written


async def test_brokers_register_and_serve_the_clusters_metadata(
    cluster: Cluster, controller: tuple[KafkaZkClient, Any]
) -> None:
    for broker_id in IDS:
        await cluster.start(broker_id)
    c = await cluster.client(1)
    try:
        await until(
            lambda: all(
                len(s.cluster.cache.brokers) == 3 for s in cluster.servers.values() if s.cluster
            ),
            "every broker sees three",
        )
        # No leaders yet (the controller has not elected any): REQUEST_TIMED_OUT after the wait.
        result = await create(c, "t", 3, 3, timeout_ms=200)
        assert result.error_code == errors.RequestTimedOut.code
        result = await create(c, "t", 3, 3, timeout_ms=200)
        assert result.error_code == errors.TopicAlreadyExists.code
        result = await create(c, "too-many", 1, 4, timeout_ms=200)
        assert result.error_code == errors.InvalidReplicationFactor.code
        kzk, _ = controller
        assignment = await kzk.get_topic_assignment("t")
        assert assignment is not None
        assert sorted(len(set(a.replicas)) for a in assignment.partitions.values()) == [3, 3, 3]
        leaders = {p: a.replicas[0] for p, a in assignment.partitions.items()}
        assert sorted(leaders.values()) == [1, 2, 3]  # Kafka's spread: one leader each

        await elect(controller, "t", {p: (leaders[p], [1, 2, 3]) for p in leaders})
        await until(
            lambda: all(
                cluster.partition(b, "t", p) is not None
                and cluster.partition(b, "t", p).leader_id == leaders[p]
                for b in IDS
                for p in leaders
            ),
            "every broker applied every state",
        )
        resp = await metadata(c, "t")
        assert sorted(b.node_id for b in resp.brokers) == [1, 2, 3]
        assert resp.controller_id == 99
        (topic,) = resp.topics
        assert topic.error_code == 0
        for part in topic.partitions:
            assert part.error_code == 0
            assert part.leader_id == leaders[part.partition_index]
            assert sorted(part.isr_nodes) == [1, 2, 3] and part.offline_replicas == []
        # Only assigned partitions are hosted (here: all three on each broker, RF 3).
        for b in IDS:
            assert cluster.servers[b].log_manager.hosted_partitions("t") == [0, 1, 2]  # type: ignore[union-attr]
    finally:
        await c.close()


async def test_followers_replicate_and_acks_all_waits_for_the_isr(
    cluster: Cluster, controller: tuple[KafkaZkClient, Any]
) -> None:
    for broker_id in IDS:
        await cluster.start(broker_id)
    c1 = await cluster.client(1)
    c2 = await cluster.client(2)
    try:
        await until(lambda: len(cluster.servers[1].cluster.cache.brokers) == 3, "three brokers")  # type: ignore[union-attr]
        assert (await create(c1, "r", 1, 3, timeout_ms=0)).error_code == 0
        await elect(controller, "r", {0: (1, [1, 2, 3])})
        await until(
            lambda: all(
                cluster.partition(b, "r") is not None
                and cluster.partition(b, "r").leader_epoch == 0
                for b in IDS
            ),
            "states applied",
        )
        # A follower refuses a produce.
        resp = await c2.request(PRODUCE, 8, produce_request("r", batch(1), acks=1))
        assert (
            resp.responses[0].partition_responses[0].error_code == errors.NotLeaderOrFollower.code
        )
        for i in range(3):
            resp = await c1.request(PRODUCE, 8, produce_request("r", batch(5, i * 5), acks=-1))
            result = resp.responses[0].partition_responses[0]
            assert (result.error_code, result.base_offset) == (0, i * 5)
            # acks=-1 answered: every ISR member has the records.
            for b in IDS:
                assert cluster.partition(b, "r").log.log_end_offset >= (i + 1) * 5
        await until(
            lambda: all(cluster.partition(b, "r").log.high_watermark == 15 for b in IDS),
            "followers learn the HW",
        )
        leader_bytes = segment_bytes(cluster, 1, "r")
        assert all(segment_bytes(cluster, b, "r") == leader_bytes for b in (2, 3))

        # A follower stops and the leader moves on: after the lag time the leader shrinks the
        # ISR in ZooKeeper (a follower at the leader's LEO is never out of sync).
        await cluster.stop(3)
        resp = await c1.request(PRODUCE, 8, produce_request("r", batch(1, 15), acks=1))
        assert resp.responses[0].partition_responses[0].error_code == 0
        kzk, _ = controller
        tp = TopicPartition("r", 0)

        async def isr() -> tuple[int, ...]:
            state = await kzk.get_partition_state(tp)
            assert state is not None
            return state.isr

        async with asyncio.timeout(WAIT_S):
            while await isr() != (1, 2):
                await asyncio.sleep(0.05)
        state = await kzk.get_partition_state(tp)
        assert state is not None and state.leader == 1 and state.leader_epoch == 0
        await until(lambda: cluster.partition(1, "r").isr == (1, 2), "leader holds the stored ISR")
        assert cluster.partition(1, "r").partition_epoch == state.zk_version
        resp = await c1.request(PRODUCE, 8, produce_request("r", batch(2, 16), acks=-1))
        result = resp.responses[0].partition_responses[0]
        assert (result.error_code, result.base_offset) == (0, 16)
    finally:
        await c1.close()
        await c2.close()


async def applied(cluster: Cluster, topic: str, brokers: tuple[int, ...], leader: int) -> None:
    """Wait until every one of ``brokers`` has applied a state with ``leader`` for partition 0."""

    def done() -> bool:
        parts = [cluster.partition(b, topic) for b in brokers]
        return all(p is not None and p.leader_id == leader for p in parts)

    await until(done, f"{topic}-0 led by {leader} on {brokers}")


def segment_bytes(cluster: Cluster, broker_id: int, topic: str) -> bytes:
    partition = cluster.partition(broker_id, topic)
    return b"".join(s.log_path.read_bytes() for s in partition.log.segments)


async def test_a_new_leader_takes_over_and_the_old_one_follows(
    cluster: Cluster, controller: tuple[KafkaZkClient, Any]
) -> None:
    for broker_id in (1, 2):
        await cluster.start(broker_id)
    c1 = await cluster.client(1)
    c2 = await cluster.client(2)
    kzk, fence = controller
    try:
        await until(lambda: len(cluster.servers[1].cluster.cache.brokers) == 2, "two brokers")  # type: ignore[union-attr]
        assert (await create(c1, "f", 1, 2, timeout_ms=0)).error_code == 0
        await elect(controller, "f", {0: (1, [1, 2])})
        await applied(cluster, "f", (1, 2), leader=1)
        resp = await c1.request(PRODUCE, 8, produce_request("f", batch(4), acks=-1))
        assert resp.responses[0].partition_responses[0].error_code == 0
        # The controller moves leadership to 2 at epoch 1.
        tp = TopicPartition("f", 0)
        state = await kzk.get_partition_state(tp)
        assert state is not None
        new = PartitionState(2, state.leader_epoch + 1, (2, 1), fence.epoch, state.zk_version)
        written = await kzk.set_partition_states("f", {0: new}, fence)
        assert isinstance(written[0], PartitionState)
        await until(lambda: cluster.partition(2, "f").is_leader, "2 leads")
        await until(lambda: cluster.partition(1, "f").leader_id == 2, "1 follows")
        resp = await c1.request(PRODUCE, 8, produce_request("f", batch(1), acks=1))
        assert (
            resp.responses[0].partition_responses[0].error_code == errors.NotLeaderOrFollower.code
        )
        resp = await c2.request(PRODUCE, 8, produce_request("f", batch(3, 4), acks=-1))
        result = resp.responses[0].partition_responses[0]
        assert (result.error_code, result.base_offset) == (0, 4)
        await until(lambda: cluster.partition(1, "f").log.log_end_offset == 7, "1 copies from 2")
        assert segment_bytes(cluster, 1, "f") == segment_bytes(cluster, 2, "f")
        assert cluster.partition(1, "f").log.latest_epoch == 1
    finally:
        await c1.close()
        await c2.close()


async def test_topic_deletion_removes_the_local_logs(
    cluster: Cluster, controller: tuple[KafkaZkClient, Any]
) -> None:
    for broker_id in (1, 2):
        await cluster.start(broker_id)
    c1 = await cluster.client(1)
    kzk, fence = controller
    try:
        await until(lambda: len(cluster.servers[1].cluster.cache.brokers) == 2, "two brokers")  # type: ignore[union-attr]
        assert (await create(c1, "gone", 2, 1, timeout_ms=0)).error_code == 0
        assignment = await kzk.get_topic_assignment("gone")
        assert assignment is not None
        await elect(
            controller,
            "gone",
            {p: (a.replicas[0], list(a.replicas)) for p, a in assignment.partitions.items()},
        )
        hosts = {a.replicas[0] for a in assignment.partitions.values()}
        await until(
            lambda: all(cluster.servers[b].log_manager.hosted_partitions("gone") for b in hosts),  # type: ignore[union-attr]
            "logs created",
        )
        # RF 1 over two brokers: each hosts only its own partition.
        for b in hosts:
            hosted = cluster.servers[b].log_manager.hosted_partitions("gone")  # type: ignore[union-attr]
            assert hosted == [p for p, a in assignment.partitions.items() if a.replicas == (b,)]
        await kzk.delete_topic("gone", fence)  # what the controller does on a deletion request
        await until(
            lambda: all(
                not cluster.servers[b].log_manager.hosted_partitions("gone") for b in (1, 2)
            ),  # type: ignore[union-attr]
            "logs deleted",
        )
        resp = await metadata(c1, "gone")
        assert resp.topics[0].error_code == errors.UnknownTopicOrPartition.code
    finally:
        await c1.close()


async def test_session_loss_resigns_leadership_and_the_new_session_takes_it_back(
    cluster: Cluster, controller: tuple[KafkaZkClient, Any], sluice_zookeeper: Any
) -> None:
    server = await cluster.start(1)
    c1 = await cluster.client(1)
    try:
        assert (await create(c1, "s", 1, 1, timeout_ms=0)).error_code == 0
        await elect(controller, "s", {0: (1, [1])})
        await until(
            lambda: cluster.partition(1, "s") is not None and cluster.partition(1, "s").is_leader,
            "leads",
        )
        member = server.cluster
        assert member is not None and member.zk is not None
        old_epoch = member.broker_epoch
        resigned = asyncio.Event()
        member.leadership_listeners.append(lambda p: resigned.set() if not p.is_leader else None)
        client_id = member.zk.client_id
        assert client_id is not None
        await asyncio.to_thread(sluice_zookeeper.expire_session, *client_id)
        async with asyncio.timeout(WAIT_S):
            await resigned.wait()
        # Re-registered on a new session (new broker epoch). The state it re-reads was written
        # for its previous registration: it does not lead on it (an earlier incarnation's
        # leadership; after a power loss its log may be shorter than the followers'), until
        # the controller elects again.
        await until(lambda: member.broker_epoch != old_epoch, "re-registered")
        old_state = member.cache.states[("s", 0)]
        assert 0 <= old_state.mzxid < member.broker_epoch
        await member._apply(("s", 0), old_state)
        assert not cluster.partition(1, "s").is_leader
        kzk, fence = controller
        newer = PartitionState(
            1, old_state.leader_epoch + 1, (1,), fence.epoch, old_state.zk_version
        )
        assert isinstance(
            (await kzk.set_partition_states("s", {0: newer}, fence))[0], PartitionState
        )
        await until(lambda: cluster.partition(1, "s").is_leader, "leads again")
        resp = await c1.request(PRODUCE, 8, produce_request("s", batch(1), acks=-1))
        assert resp.responses[0].partition_responses[0].error_code == 0
    finally:
        await c1.close()


async def test_a_controller_write_reaches_the_leader_with_its_partition_epoch(
    cluster: Cluster, controller: tuple[KafkaZkClient, Any]
) -> None:
    """The controller bumps the state behind the leader's back: the leader's watch delivers it,
    and the leader's next ISR write is conditional on the new zkVersion (the conditional write
    itself, and losing its race, are tested in tests/zk and tests/broker)."""
    for broker_id in (1, 2):
        await cluster.start(broker_id)
    c1 = await cluster.client(1)
    kzk, fence = controller
    try:
        await until(lambda: len(cluster.servers[1].cluster.cache.brokers) == 2, "two brokers")  # type: ignore[union-attr]
        assert (await create(c1, "c", 1, 2, timeout_ms=0)).error_code == 0
        await elect(controller, "c", {0: (1, [1, 2])})
        await until(
            lambda: cluster.partition(1, "c") is not None and cluster.partition(1, "c").is_leader,
            "1 leads",
        )
        tp = TopicPartition("c", 0)
        # The controller bumps the state behind the leader's back (its watch will deliver it).
        zk = kzk.zk
        _, stat = await zk.get(partition_state_path(tp))
        newer = PartitionState(1, 1, (1, 2), fence.epoch, stat.version)
        await kzk.set_partition_states("c", {0: newer}, fence)
        await until(
            lambda: cluster.partition(1, "c").leader_epoch == 1, "leader took the new state"
        )
        state = await kzk.get_partition_state(tp)
        assert state is not None and state.leader_epoch == 1
        assert cluster.partition(1, "c").partition_epoch == state.zk_version
    finally:
        await c1.close()


async def test_producer_ids_are_unique_across_brokers(cluster: Cluster) -> None:
    for broker_id in (1, 2):
        await cluster.start(broker_id)
    clients = [await cluster.client(b) for b in (1, 2)]
    try:
        seen: list[int] = []
        for _ in range(3):
            for c in clients:
                resp = await c.request(
                    m.InitProducerId.key,
                    1,
                    m.InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=60_000),
                )
                assert resp.error_code == 0
                seen.append(resp.producer_id)
        assert len(set(seen)) == 6
        # Each broker took its own block from ZooKeeper.
        assert {pid // 1000 for pid in seen} == {0, 1}
    finally:
        for c in clients:
            await c.close()


async def test_topic_configs_live_in_zookeeper_and_reach_every_replica(
    cluster: Cluster, controller: tuple[KafkaZkClient, Any]
) -> None:
    for broker_id in (1, 2):
        await cluster.start(broker_id)
    c1 = await cluster.client(1)
    c2 = await cluster.client(2)
    kzk, _ = controller
    try:
        await until(lambda: len(cluster.servers[1].cluster.cache.brokers) == 2, "two brokers")  # type: ignore[union-attr]
        req = m.CreateTopicsRequest(
            topics=[m.CreateTopicsRequest.CreatableTopic(
                name="cfg", num_partitions=1, replication_factor=2,
                configs=[m.CreateTopicsRequest.CreatableTopicConfig(
                    name="retention.ms", value="5000")])],
            timeout_ms=0,
            validate_only=False,
        )  # fmt: skip
        assert (await c1.request(CREATE_TOPICS, 4, req)).topics[0].error_code == 0
        assert dict((await kzk.get_topic_config("cfg")).config) == {"retention.ms": "5000"}
        await elect(controller, "cfg", {0: (1, [1, 2])})
        await until(lambda: all(cluster.partition(b, "cfg") is not None for b in (1, 2)), "hosted")
        assert all(cluster.partition(b, "cfg").log.config.retention_ms == 5000 for b in (1, 2))
        # IncrementalAlterConfigs through broker 2 writes ZooKeeper; both replicas apply it.
        alter = m.IncrementalAlterConfigsRequest(
            resources=[m.IncrementalAlterConfigsRequest.AlterConfigsResource(
                resource_type=2, resource_name="cfg",
                configs=[m.IncrementalAlterConfigsRequest.AlterableConfig(
                    name="retention.ms", config_operation=0, value="7000")])],
            validate_only=False,
        )  # fmt: skip
        resp = await c2.request(m.IncrementalAlterConfigs.key, 1, alter)
        assert resp.responses[0].error_code == 0
        assert dict((await kzk.get_topic_config("cfg")).config) == {"retention.ms": "7000"}
        await until(
            lambda: all(
                cluster.partition(b, "cfg").log.config.retention_ms == 7000 for b in (1, 2)
            ),
            "both replicas apply the new config",
        )
        describe = m.DescribeConfigsRequest(
            resources=[m.DescribeConfigsRequest.DescribeConfigsResource(
                resource_type=2, resource_name="cfg", configuration_keys=["retention.ms"])],
            include_synonyms=False,
        )  # fmt: skip
        resp = await c1.request(m.DescribeConfigs.key, 1, describe)
        (entry,) = resp.results[0].configs
        assert (entry.name, entry.value) == ("retention.ms", "7000")
        # A bad value is refused before anything is written.
        bad = m.IncrementalAlterConfigsRequest(
            resources=[m.IncrementalAlterConfigsRequest.AlterConfigsResource(
                resource_type=2, resource_name="cfg",
                configs=[m.IncrementalAlterConfigsRequest.AlterableConfig(
                    name="retention.ms", config_operation=0, value="soon")])],
            validate_only=False,
        )  # fmt: skip
        resp = await c2.request(m.IncrementalAlterConfigs.key, 1, bad)
        assert resp.responses[0].error_code == errors.InvalidConfig.code
        assert dict((await kzk.get_topic_config("cfg")).config) == {"retention.ms": "7000"}
    finally:
        await c1.close()
        await c2.close()


async def test_delete_records_on_the_leader_and_the_follower_follows(
    cluster: Cluster, controller: tuple[KafkaZkClient, Any]
) -> None:
    for broker_id in (1, 2):
        await cluster.start(broker_id)
    c1 = await cluster.client(1)
    c2 = await cluster.client(2)
    try:
        await until(lambda: len(cluster.servers[1].cluster.cache.brokers) == 2, "two brokers")  # type: ignore[union-attr]
        assert (await create(c1, "dr", 1, 2, timeout_ms=0)).error_code == 0
        await elect(controller, "dr", {0: (1, [1, 2])})
        await applied(cluster, "dr", (1, 2), leader=1)
        resp = await c1.request(PRODUCE, 8, produce_request("dr", batch(10), acks=-1))
        assert resp.responses[0].partition_responses[0].error_code == 0

        def delete(offset: int) -> Any:
            return m.DeleteRecordsRequest(
                topics=[m.DeleteRecordsRequest.DeleteRecordsTopic(
                    name="dr",
                    partitions=[m.DeleteRecordsRequest.DeleteRecordsPartition(
                        partition_index=0, offset=offset)])],
                timeout_ms=5000,
            )  # fmt: skip

        resp = await c2.request(m.DeleteRecords.key, 1, delete(4))
        assert resp.topics[0].partitions[0].error_code == errors.NotLeaderOrFollower.code
        resp = await c1.request(m.DeleteRecords.key, 1, delete(4))
        result = resp.topics[0].partitions[0]
        assert (result.error_code, result.low_watermark) == (0, 4)
        # The follower learns it from its next fetch (a produce makes one return).
        resp = await c1.request(PRODUCE, 8, produce_request("dr", batch(1, 10), acks=-1))
        assert resp.responses[0].partition_responses[0].error_code == 0
        await until(
            lambda: cluster.partition(2, "dr").log.log_start_offset == 4, "follower's log start"
        )
    finally:
        await c1.close()
        await c2.close()


async def test_an_idempotent_retry_after_a_leader_change_is_written_once(
    cluster: Cluster, controller: tuple[KafkaZkClient, Any]
) -> None:
    """Redpanda's Jepsen finding: the batch reached the old leader and its follower but the ack
    was lost; the producer retries at the new leader, which knows the sequence from replication
    and answers with the batch's own offset, writing nothing."""
    from sluice.protocol.records import build_batch

    for broker_id in (1, 2):
        await cluster.start(broker_id)
    c1 = await cluster.client(1)
    c2 = await cluster.client(2)
    kzk, fence = controller
    try:
        await until(lambda: len(cluster.servers[1].cluster.cache.brokers) == 2, "two brokers")  # type: ignore[union-attr]
        assert (await create(c1, "idem", 1, 2, timeout_ms=0)).error_code == 0
        await elect(controller, "idem", {0: (1, [1, 2])})
        await applied(cluster, "idem", (1, 2), leader=1)
        resp = await c1.request(
            m.InitProducerId.key,
            1,
            m.InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=60_000),
        )
        pid = resp.producer_id

        def idempotent(seq: int, n: int) -> bytes:
            return build_batch(
                [(1_700_000_000_000 + i, None, b"x%d" % (seq + i)) for i in range(n)],
                producer_id=pid,
                producer_epoch=0,
                base_sequence=seq,
            )

        first, second = idempotent(0, 3), idempotent(3, 2)
        for records, base in ((first, 0), (second, 3)):
            resp = await c1.request(PRODUCE, 8, produce_request("idem", records, acks=-1))
            result = resp.responses[0].partition_responses[0]
            assert (result.error_code, result.base_offset) == (0, base)
        state = await kzk.get_partition_state(TopicPartition("idem", 0))
        assert state is not None
        new = PartitionState(2, state.leader_epoch + 1, (2, 1), fence.epoch, state.zk_version)
        await kzk.set_partition_states("idem", {0: new}, fence)
        await applied(cluster, "idem", (1, 2), leader=2)
        leo = cluster.partition(2, "idem").log.log_end_offset
        assert leo == 5
        # Both retried batches: acknowledged with their own offsets, nothing written.
        for records, base in ((first, 0), (second, 3)):
            resp = await c2.request(PRODUCE, 8, produce_request("idem", records, acks=-1))
            result = resp.responses[0].partition_responses[0]
            assert (result.error_code, result.base_offset) == (0, base)
        assert cluster.partition(2, "idem").log.log_end_offset == leo
        # The next sequence continues at the new leader.
        resp = await c2.request(PRODUCE, 8, produce_request("idem", idempotent(5, 1), acks=-1))
        result = resp.responses[0].partition_responses[0]
        assert (result.error_code, result.base_offset) == (0, 5)
    finally:
        await c1.close()
        await c2.close()


async def test_the_group_coordinator_is_the_offsets_partitions_leader(
    cluster: Cluster, controller: tuple[KafkaZkClient, Any]
) -> None:
    """FindCoordinator creates __consumer_offsets once enough brokers live (RF from
    offsets.topic.replication.factor) and answers its leader; committed offsets survive a
    coordinator move (the new leader loads them from its replica)."""
    from tests.group.test_groups import commit, fetch_offsets

    for broker_id in (1, 2):
        # One offsets partition: the test plays the controller and elects its leader by hand.
        await cluster.start(
            broker_id, "offsets.topic.replication.factor=2", "offsets.topic.num.partitions=1"
        )
    c1 = await cluster.client(1)
    kzk, fence = controller
    offsets = "__consumer_offsets"

    async def find() -> Any:
        return await c1.request(
            m.FindCoordinator.key, 2, m.FindCoordinatorRequest(key="g", key_type=0)
        )

    try:
        await until(lambda: len(cluster.servers[1].cluster.cache.brokers) == 2, "two brokers")  # type: ignore[union-attr]
        assert (await create(c1, "data", 1, 2, timeout_ms=0)).error_code == 0
        await elect(controller, "data", {0: (1, [1, 2])})
        assert (await find()).error_code == errors.CoordinatorNotAvailable.code
        await until(lambda: offsets in cluster.servers[1].cluster.cache.assignments, "created")  # type: ignore[union-attr]
        assignment = await kzk.get_topic_assignment(offsets)
        assert assignment is not None and list(assignment.partitions) == [0]
        assert sorted(assignment.replicas(0)) == [1, 2]
        assert dict((await kzk.get_topic_config(offsets)).config)["cleanup.policy"] == "compact"
        await elect(controller, offsets, {0: (1, [1, 2])})
        await applied(cluster, offsets, (1, 2), leader=1)
        resp = await find()
        assert (resp.error_code, resp.node_id, resp.port) == (0, 1, cluster.servers[1].port)

        await until(lambda: 0 in cluster.servers[1].group_coordinator.owned_partitions, "owned")  # type: ignore[union-attr]
        codes = await commit(c1, -1, "", {("data", 0): 42})
        assert codes == {("data", 0): 0}

        # The controller moves the offsets partition's leadership to broker 2.
        state = await kzk.get_partition_state(TopicPartition(offsets, 0))
        assert state is not None
        new = PartitionState(2, state.leader_epoch + 1, (2, 1), fence.epoch, state.zk_version)
        await kzk.set_partition_states(offsets, {0: new}, fence)
        await applied(cluster, offsets, (1, 2), leader=2)
        resp = await find()
        assert (resp.error_code, resp.node_id) == (0, 2)
        await until(lambda: 0 in cluster.servers[2].group_coordinator.owned_partitions, "2 owns")  # type: ignore[union-attr]
        assert 0 not in cluster.servers[1].group_coordinator.owned_partitions  # type: ignore[union-attr]
        c2 = await cluster.client(2)
        try:
            fetched = await fetch_offsets(c2)
            assert fetched[("data", 0)][0] == 42
        finally:
            await c2.close()
    finally:
        await c1.close()


async def test_one_cluster_id_and_auto_creation_with_the_default_replication_factor(
    cluster: Cluster, controller: tuple[KafkaZkClient, Any]
) -> None:
    for broker_id in (1, 2):
        await cluster.start(broker_id, "default.replication.factor=2", "num.partitions=2")
    c1 = await cluster.client(1)
    c2 = await cluster.client(2)
    kzk, _ = controller
    try:
        await until(lambda: len(cluster.servers[1].cluster.cache.brokers) == 2, "two brokers")  # type: ignore[union-attr]
        ids = {(await metadata(c)).cluster_id for c in (c1, c2)}
        assert len(ids) == 1
        (cluster_id,) = ids
        assert len(cluster_id) == 22 and cluster_id != "sluice-single-node"  # Kafka's Uuid form
        data, _ = await kzk.zk.get("/cluster/id")
        assert cluster_id in data.decode()
        # Auto-creation on Metadata: LEADER_NOT_AVAILABLE now, the topic in ZooKeeper with the
        # broker defaults (Kafka's behaviour).
        req = m.MetadataRequest(
            topics=[m.MetadataRequest.MetadataRequestTopic(name="auto")],
            allow_auto_topic_creation=True,
        )
        resp = await c2.request(METADATA, 9, req)
        assert resp.topics[0].error_code == errors.LeaderNotAvailable.code
        async with asyncio.timeout(WAIT_S):
            while (assignment := await kzk.get_topic_assignment("auto")) is None:
                await asyncio.sleep(0.02)
        assert sorted(assignment.partitions) == [0, 1]
        assert all(len(a.replicas) == 2 for a in assignment.partitions.values())
    finally:
        await c1.close()
        await c2.close()


async def test_create_topics_with_explicit_assignments(
    cluster: Cluster, controller: tuple[KafkaZkClient, Any]
) -> None:
    for broker_id in (1, 2, 3):
        await cluster.start(broker_id)
    c1 = await cluster.client(1)
    kzk, _ = controller

    async def create_assigned(name: str, assignment: dict[int, list[int]]) -> Any:
        topic_cls = m.CreateTopicsRequest.CreatableTopic
        req = m.CreateTopicsRequest(
            topics=[topic_cls(
                name=name, num_partitions=-1, replication_factor=-1, configs=[],
                assignments=[topic_cls.CreatableReplicaAssignment(partition_index=p, broker_ids=b)
                             for p, b in assignment.items()],
            )],
            timeout_ms=0,
            validate_only=False,
        )  # fmt: skip
        return (await c1.request(CREATE_TOPICS, 4, req)).topics[0]

    try:
        await until(lambda: len(cluster.servers[1].cluster.cache.brokers) == 3, "three brokers")  # type: ignore[union-attr]
        assert (await create_assigned("placed", {0: [3, 1], 1: [2, 3]})).error_code == 0
        assignment = await kzk.get_topic_assignment("placed")
        assert assignment is not None
        assert {p: a.replicas for p, a in assignment.partitions.items()} == {0: (3, 1), 1: (2, 3)}
        # Kafka's checks: an unknown broker, a repeated one, uneven replication factors.
        for bad in ({0: [1, 9]}, {0: [1, 1]}, {0: [1, 2], 1: [3]}):
            result = await create_assigned("bad", bad)
            assert result.error_code == errors.InvalidReplicaAssignment.code, (bad, result)
        assert await kzk.get_topic_assignment("bad") is None
    finally:
        await c1.close()


async def metadata_views(client: WireClient, topic: str) -> list[tuple[bool, int, list[int]]]:
    """What a client learns of ``topic``, asked three ways (named without and with
    auto-creation, and all topics): (asked by name, topic error, leaders of the partitions)."""
    views = []
    for auto in (False, True):
        req = m.MetadataRequest(
            topics=[m.MetadataRequest.MetadataRequestTopic(name=topic)],
            allow_auto_topic_creation=auto,
        )
        (t,) = (await client.request(METADATA, 9, req)).topics
        views.append((auto, t.error_code, [p.leader_id for p in t.partitions]))
    every = await client.request(METADATA, 9, m.MetadataRequest(topics=None))
    views += [(False, t.error_code, [p.leader_id for p in t.partitions])
              for t in every.topics if t.name == topic]  # fmt: skip
    return views


async def test_a_new_topics_partitions_become_visible_together(
    cluster: Cluster, controller: tuple[KafkaZkClient, Any]
) -> None:
    """The controller (the test) writes a new topic's states one partition at a time: no
    broker's Metadata shows the topic until every partition has its state there -- then all of
    them, each with its leader (Kafka's controller sends them in one UpdateMetadata). Until
    then the topic is LEADER_NOT_AVAILABLE without partitions. CreateTopics waits
    for it; so does CreatePartitions, and the partitions it adds appear together too."""
    for broker_id in IDS:
        await cluster.start(broker_id)
    clients = {b: await cluster.client(b) for b in IDS}
    admin = await cluster.client(1)  # waits for its answers while the others ask Metadata
    servers = cluster.servers
    try:
        await until(
            lambda: all(len(s.cluster.cache.brokers) == 3 for s in servers.values() if s.cluster),
            "every broker sees three",
        )
        creating = asyncio.create_task(create(admin, "t", 4, 3, timeout_ms=20_000))
        await until(
            lambda: all("t" in s.cluster.cache.assignments for s in servers.values() if s.cluster),
            "every broker has the assignment",
        )
        kzk, _ = controller
        assignment = await kzk.get_topic_assignment("t")
        assert assignment is not None
        leaders = {p: a.replicas[0] for p, a in assignment.partitions.items()}

        def led(partitions: range) -> Callable[[], bool]:
            def check() -> bool:
                found = [cluster.partition(b, "t", p) for b in IDS for p in partitions]
                return all(
                    f is not None and f.leader_id == leaders[f.index] for f in found
                ) and all(s.cluster.cache.state("t", p) for s in servers.values() if s.cluster
                          for p in partitions)  # fmt: skip

            return check

        for p in range(3):
            await elect(controller, "t", {p: (leaders[p], [1, 2, 3])})
        await until(led(range(3)), "partitions 0-2 applied everywhere")

        async def everyone_sees(expected: list[tuple[bool, int, list[int]]]) -> None:
            for b, c in clients.items():
                assert await metadata_views(c, "t") == expected, b

        def whole(count: int) -> list[tuple[bool, int, list[int]]]:
            return [(a, 0, [leaders[p] for p in range(count)]) for a in (False, True, False)]

        # Exists, leaders on their way (nothing more is created for the auto-creating ask).
        await everyone_sees([(a, errors.LeaderNotAvailable.code, []) for a in (False, True)])
        assert not creating.done()
        await elect(controller, "t", {3: (leaders[3], [1, 2, 3])})
        assert (await creating).error_code == 0
        await until(led(range(4)), "every partition applied everywhere")
        await everyone_sees(whole(4))

        body = m.CreatePartitionsRequest(
            topics=[
                m.CreatePartitionsRequest.CreatePartitionsTopic(name="t", count=6, assignments=None)
            ],
            timeout_ms=20_000,
            validate_only=False,
        )
        growing = asyncio.create_task(admin.request(m.CreatePartitions.key, 3, body))
        await until(
            lambda: all(
                len(s.cluster.cache.assignments["t"].partitions) == 6
                for s in servers.values()
                if s.cluster
            ),
            "every broker has the grown assignment",
        )
        grown = await kzk.get_topic_assignment("t")
        assert grown is not None
        leaders.update({p: grown.replicas(p)[0] for p in (4, 5)})
        await elect(controller, "t", {4: (leaders[4], [1, 2, 3])})
        await until(led(range(5)), "partition 4 applied everywhere")
        await everyone_sees(whole(4))  # the added partitions not yet
        assert not growing.done()
        await elect(controller, "t", {5: (leaders[5], [1, 2, 3])})
        assert (await growing).results[0].error_code == 0
        await until(led(range(6)), "every partition applied everywhere")
        await everyone_sees(whole(6))
    finally:
        for c in [admin, *clients.values()]:
            await c.close()


async def test_a_restarted_broker_serves_every_topic_from_its_first_request(
    cluster: Cluster, controller: tuple[KafkaZkClient, Any]
) -> None:
    """A broker joining reads every topic's assignment and every partition's state before it
    answers as a cluster member, so its first Metadata answer lists every topic whole (a topic
    is published once every partition has its state there)."""
    for broker_id in (1, 2):
        await cluster.start(broker_id)
    c1 = await cluster.client(1)
    try:
        await until(lambda: len(cluster.servers[1].cluster.cache.brokers) == 2, "two brokers")  # type: ignore[union-attr]
        topics = [f"many-{i}" for i in range(3)]
        for topic in topics:
            assert (await create(c1, topic, 16, 2, timeout_ms=0)).error_code == 0
            assignment = await controller[0].get_topic_assignment(topic)
            assert assignment is not None
            await elect(
                controller,
                topic,
                {p: (a.replicas[0], list(a.replicas)) for p, a in assignment.partitions.items()},
            )
        await until(
            lambda: all(
                cluster.servers[b].cluster.cache.has_leaders(t)  # type: ignore[union-attr]
                for b in (1, 2)
                for t in topics
            ),
            "both brokers show every topic",
        )
        await cluster.stop(2)
        await cluster.start(2)
        c2 = await cluster.client(2)
        try:
            resp = await metadata(c2, *topics)
        finally:
            await c2.close()
        assert [(t.error_code, len(t.partitions)) for t in resp.topics] == [(0, 16)] * 3
    finally:
        await c1.close()


@pytest.mark.slow  # librdkafka's Metadata refresh backs off between the states
@pytest.mark.interop
async def test_offsets_for_times_waits_for_a_topic_being_created(
    cluster: Cluster, controller: tuple[KafkaZkClient, Any]
) -> None:
    """librdkafka's test 0054 against a topic whose leaders arrive one at a time: a new
    consumer's ``offsets_for_times`` asked while the topic has no leaders anywhere, and through
    the controller's (the test's) writes one partition at a time, waits and answers every
    partition. (It fails at once, UNKNOWN_PARTITION, where a broker lists the topic with
    partitions without leaders, or says the topic does not exist.)"""
    from confluent_kafka import Consumer
    from confluent_kafka import TopicPartition as CkTopicPartition

    for broker_id in IDS:
        await cluster.start(broker_id)
    servers = cluster.servers
    c1 = await cluster.client(1)
    try:
        await until(
            lambda: all(len(s.cluster.cache.brokers) == 3 for s in servers.values() if s.cluster),
            "every broker sees three",
        )
        assert (await create(c1, "lazy", 4, 3, timeout_ms=0)).error_code == 0
        await until(
            lambda: all(
                "lazy" in s.cluster.cache.assignments for s in servers.values() if s.cluster
            ),
            "every broker has the assignment",
        )
        assignment = await controller[0].get_topic_assignment("lazy")
        assert assignment is not None

        def asked() -> int:
            return sum(s.metrics.get("requests.Metadata") for s in servers.values())

        def offsets_for_times() -> list[Any]:
            bootstrap = ",".join(f"127.0.0.1:{s.port}" for s in servers.values())
            consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "lazy"})
            try:
                wanted = [CkTopicPartition("lazy", p, 1_700_000_000_000) for p in range(4)]
                return list(consumer.offsets_for_times(wanted, timeout=WAIT_S))
            finally:
                consumer.close()

        def asked_again(querying: asyncio.Future[Any]) -> Callable[[], bool]:
            now = asked()
            return lambda: asked() > now or querying.done()

        def applied_everywhere(p: int) -> Callable[[], bool]:
            return lambda: all(
                s.cluster.cache.state("lazy", p) for s in servers.values() if s.cluster
            )

        before = asked()
        querying = asyncio.ensure_future(asyncio.to_thread(offsets_for_times))
        for p in range(4):
            # librdkafka asks again (its Metadata refresh) between the states
            await until(asked_again(querying), "the client asks again")
            await elect(controller, "lazy", {p: (assignment.replicas(p)[0], [1, 2, 3])})
            await until(applied_everywhere(p), f"lazy-{p} applied everywhere")
        found = await querying
        assert asked() > before + 3
        assert [(tp.partition, tp.error, tp.offset) for tp in found] == [
            (p, None, -1) for p in range(4)
        ]
    finally:
        await c1.close()
