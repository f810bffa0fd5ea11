"""A new topic becomes visible at once on a real 3-broker cluster (a real ZooKeeper, the real
controller), as librdkafka's test 0054 (offsetsForTimes right after creation) expects of Kafka:
Metadata shows a new topic either not yet (no partitions) or with a leader for every partition
-- never partitions 0-2 with leaders and partition 3 with -1 -- and a client asking for offsets
right after CreateTopics answered gets no LEADER_NOT_AVAILABLE.

Two ways of looking: brokers in this process, each asked for Metadata after every change of
its cache (so no intermediate view is missed); broker processes polled for Metadata on their own
connections while confluent-kafka's AdminClient creates topics. (States written one at a time
by the test as the controller, with Metadata and librdkafka's offsetsForTimes through them:
``test_cluster_member.py``.)"""

from __future__ import annotations

import asyncio
import functools
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from sluice.protocol import messages as m
from sluice.server.server import Server
from sluice.testing.cluster import EmbeddedCluster
from tests.broker.test_server import CREATE_TOPICS
from tests.cluster.test_cluster_member import IDS, Cluster, metadata, until

pytestmark = pytest.mark.slow

DEADLINE_S = 60.0
PARTITIONS = 8


def partial_views(response: m.MetadataResponse, topic: str, partitions: int) -> list[str]:
    """What is wrong with ``topic`` in a Metadata answer: listed, but not with all
    ``partitions`` each with a leader (an answer without the topic, or with it and an error and
    no partitions, is fine: it is not there yet)."""
    wrong = []
    for t in response.topics:
        if t.name != topic or not t.partitions:
            continue
        leaders = {p.partition_index: p.leader_id for p in t.partitions}
        if sorted(leaders) != list(range(partitions)) or min(leaders.values()) < 0:
            wrong.append(f"error {t.error_code}, leaders {dict(sorted(leaders.items()))}")
    return wrong


@contextmanager
def polling_metadata(ports: list[int], topic: str, partitions: int) -> Iterator[dict[str, Any]]:
    """Poll Metadata for ``topic`` from every port (one connection each) until the block ends;
    yields a dict filled with ``answers`` (count), ``listed`` (the ports whose answers listed
    the topic's partitions) and ``partial`` (what was wrong, per port)."""
    from sluice.net.connection import Connection

    seen: dict[str, Any] = {"answers": 0, "partial": [], "listed": set()}
    stop = threading.Event()
    body = m.MetadataRequest(
        topics=[m.MetadataRequest.MetadataRequestTopic(name=topic)],
        allow_auto_topic_creation=False,
    )

    async def poll(port: int) -> None:
        conn = await Connection.open("127.0.0.1", port, client_id="partial-topic-check")
        try:
            deadline = time.monotonic() + DEADLINE_S
            while not stop.is_set() and time.monotonic() < deadline:
                response = await conn.request(m.Metadata.key, body, timeout_ms=10_000)
                seen["answers"] += 1
                if any(t.name == topic and t.partitions for t in response.topics):
                    seen["listed"].add(port)
                seen["partial"] += [(port, w) for w in partial_views(response, topic, partitions)]
        finally:
            conn.close()

    async def main() -> None:
        await asyncio.gather(*(poll(p) for p in ports))

    thread = threading.Thread(target=lambda: asyncio.run(main()), name="metadata-poll")
    thread.start()
    try:
        yield seen
    finally:
        stop.set()
        thread.join(DEADLINE_S + 5)
        assert not thread.is_alive()


async def test_no_metadata_answer_shows_part_of_a_new_topic(
    tmp_path: Path, sluice_zookeeper_connect: str
) -> None:
    """Three brokers with their own controllers (one elected); after every change of a broker's
    metadata cache, its Metadata answer for the topics being created is taken: each either does
    not list a topic or lists every partition with a leader. Four topics at once in one
    CreateTopics, each answered only once published on the broker asked."""
    cluster = Cluster(tmp_path, sluice_zookeeper_connect)
    topics = [f"whole-{i}" for i in range(4)]
    body = m.MetadataRequest(
        topics=[m.MetadataRequest.MetadataRequestTopic(name=t) for t in topics],
        allow_auto_topic_creation=False,
    )
    answers: list[tuple[int, m.MetadataResponse]] = []

    def observe(server: Server) -> None:
        assert server.cluster is not None and server.handlers is not None
        cache, handlers, node = server.cluster.cache, server.handlers, server.config.node_id
        changed = cache.changed

        def and_answer() -> None:
            changed()
            answers.append((node, handlers.metadata(None, body)))  # type: ignore[arg-type]

        cache.changed = and_answer  # type: ignore[method-assign]

    try:
        for broker_id in IDS:
            observe(await cluster.start(broker_id))
        await until(
            lambda: all(
                s.cluster is not None and len(s.cluster.cache.brokers) == 3
                for s in cluster.servers.values()
            ),
            "every broker sees three",
        )
        req = m.CreateTopicsRequest(
            topics=[m.CreateTopicsRequest.CreatableTopic(
                name=t, num_partitions=PARTITIONS, replication_factor=3, configs=[])
                for t in topics],
            timeout_ms=30_000,
            validate_only=False,
        )  # fmt: skip
        client = await cluster.client(2)
        try:
            resp = await client.request(CREATE_TOPICS, 4, req)
            assert [t.error_code for t in resp.topics] == [0] * len(topics)
            # Answered once published on the broker asked, so at once it lists all of them.
            created = await metadata(client, *topics)
            assert all(len(t.partitions) == PARTITIONS for t in created.topics), created
        finally:
            await client.close()

        def everywhere() -> bool:
            return all(
                s.cluster is not None and all(s.cluster.cache.has_leaders(t) for t in topics)
                for s in cluster.servers.values()
            )

        await until(everywhere, "every broker shows every topic with its leaders")
        wrong = [
            (node, topic, w)
            for node, answer in answers
            for topic in topics
            for w in partial_views(answer, topic, PARTITIONS)
        ]
        assert wrong == [], wrong
        last = {node: answer for node, answer in answers}
        assert sorted(last) == list(IDS)
        for answer in last.values():
            assert [len(t.partitions) for t in answer.topics] == [PARTITIONS] * len(topics)
    finally:
        for broker_id in list(cluster.servers):
            await cluster.stop(broker_id)


@pytest.mark.interop
def test_a_new_topic_appears_with_every_leader_at_once(sluice_cluster: EmbeddedCluster) -> None:
    from confluent_kafka import Consumer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    cluster = sluice_cluster
    addresses = dict(zip(cluster.ids, cluster.bootstrap_servers.split(","), strict=True))
    ports = [int(a.rsplit(":", 1)[1]) for a in addresses.values()]
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    for round_ in range(4):
        topic = f"atonce-{round_}"
        with polling_metadata(ports, topic, PARTITIONS) as seen:
            futures = admin.create_topics(
                [NewTopic(topic, PARTITIONS, 3)], operation_timeout=30, request_timeout=45
            )
            futures[topic].result(DEADLINE_S)
            # Right after CreateTopics answered, as librdkafka's 0054 does: a new client asks
            # every partition's leader for an offset by time -- through the brokers other than
            # the controller (which AdminClient sends CreateTopics to, and which answered once
            # the topic was whole there): they may not have all of it yet.
            others = [a for b, a in addresses.items() if b != cluster.metadata().controller_id]
            consumer = Consumer({"bootstrap.servers": ",".join(others), "group.id": f"g-{topic}"})
            try:
                wanted = [
                    TopicPartition(topic, p, int(time.time() * 1000)) for p in range(PARTITIONS)
                ]
                found = consumer.offsets_for_times(wanted, timeout=DEADLINE_S)
            finally:
                consumer.close()
            assert [tp.error for tp in found] == [None] * PARTITIONS, found
            assert [tp.offset for tp in found] == [-1] * PARTITIONS  # empty: no such offset
            # Each broker shows the whole topic (eventually: each learns of it by itself).
            listed_everywhere = functools.partial(seen["listed"].issuperset, ports)
            cluster.wait_for(listed_everywhere, f"every broker lists {topic}")
        assert seen["partial"] == [], seen["partial"]
        listed = admin.list_topics(topic, timeout=DEADLINE_S).topics[topic]
        assert listed.error is None
        assert sorted(listed.partitions) == list(range(PARTITIONS))
        assert all(p.leader > 0 and len(p.replicas) == 3 for p in listed.partitions.values())
