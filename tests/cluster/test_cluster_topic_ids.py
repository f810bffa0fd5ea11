"""Topic ids in a cluster: the id in the topic znode (Kafka's ``TopicZNode``), the same on every
broker and in every replica's ``partition.metadata``, kept across restarts; the controller gives
one to a topic an older Sluice created without; a replica whose directory holds another id is
neither led nor followed. Real brokers in this process on the session's ZooKeeper."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient
from structlog.testing import capture_logs

from sluice.protocol import messages as m
from sluice.protocol.types import ZERO_UUID, random_uuid, uuid_from_str
from sluice.server.storage.meta_properties import read_meta_properties
from sluice.server.storage.partition_metadata import (
    read_partition_metadata,
    write_partition_metadata,
)
from tests.broker.test_server import METADATA
from tests.cluster.test_cluster_member import create, until
from tests.cluster.test_stray_partitions import Brokers


@pytest.fixture
async def brokers(tmp_path: Path, sluice_zookeeper_connect: str) -> AsyncIterator[Brokers]:
    """(Set up after the test's chroot, so its brokers stop before the chroot is removed.)"""
    b = Brokers(tmp_path)
    try:
        yield b
    finally:
        for broker_id in list(b.servers):
            await b.stop(broker_id)


BROKERS = (1, 2, 3)


def znode(connect: str, path: str) -> dict[str, object]:
    client = KazooClient(hosts=connect)
    client.start(timeout=10)
    try:
        data, _ = client.get(path)
        return dict(json.loads(data))
    finally:
        client.stop()
        client.close()


async def ids_seen(brokers: Brokers, topic: str) -> dict[int, uuid.UUID]:
    """Each broker's Metadata v12 answer for ``topic``'s id."""
    seen = {}
    for broker_id in brokers.servers:
        c = await brokers.client(broker_id)
        try:
            req = m.MetadataRequest(
                topics=[m.MetadataRequest.MetadataRequestTopic(name=topic)],
                allow_auto_topic_creation=False,
            )
            resp = await c.request(METADATA, 12, req)
            seen[broker_id] = resp.topics[0].topic_id
        finally:
            await c.close()
    return seen


async def start_all(brokers: Brokers, connect: str) -> None:
    for broker_id in BROKERS:
        await brokers.start(broker_id, connect)
    member = brokers.servers[1].cluster
    assert member is not None
    await until(lambda: len(member.cache.brokers) == len(BROKERS), "every broker registered")


def hosts_everywhere(brokers: Brokers, topic: str, partitions: list[int]) -> bool:
    return all(brokers.hosted(b, topic) == partitions for b in brokers.servers)


async def test_the_topic_id_is_the_znodes_on_every_broker_and_survives_restarts(
    brokers: Brokers, sluice_zookeeper_connect: str
) -> None:
    await start_all(brokers, sluice_zookeeper_connect)
    c = await brokers.client(1)
    try:
        assert (await create(c, "shared", 2, 3, timeout_ms=10_000)).error_code == 0
    finally:
        await c.close()
    await until(lambda: hosts_everywhere(brokers, "shared", [0, 1]), "every replica hosted")
    stored = znode(sluice_zookeeper_connect, "/brokers/topics/shared")
    topic_id = uuid_from_str(str(stored["topic_id"]))
    assert topic_id != ZERO_UUID
    assert await ids_seen(brokers, "shared") == {b: topic_id for b in BROKERS}
    cluster_id = str(znode(sluice_zookeeper_connect, "/cluster/id")["id"])
    for b in BROKERS:
        for p in (0, 1):
            assert read_partition_metadata(brokers.data(b) / f"shared-{p}") == topic_id
        meta = read_meta_properties(brokers.data(b))
        assert meta is not None and (meta.cluster_id, meta.broker_id) == (cluster_id, b)
    for b in BROKERS:
        await brokers.stop(b)
    await start_all(brokers, sluice_zookeeper_connect)
    await until(lambda: hosts_everywhere(brokers, "shared", [0, 1]), "hosted again")
    assert await ids_seen(brokers, "shared") == {b: topic_id for b in BROKERS}
    assert (
        uuid_from_str(str(znode(sluice_zookeeper_connect, "/brokers/topics/shared")["topic_id"]))
        == topic_id
    )


async def test_the_controller_gives_an_id_to_a_topic_created_without_one(
    brokers: Brokers, sluice_zookeeper_connect: str
) -> None:
    await start_all(brokers, sluice_zookeeper_connect)
    client = KazooClient(hosts=sluice_zookeeper_connect)
    client.start(timeout=10)
    try:  # as an older Sluice (or Kafka 2.7) wrote it: no topic_id
        client.create("/config/topics/old", b'{"version":1,"config":{}}', makepath=True)
        client.create("/brokers/topics/old", b'{"version":2,"partitions":{"0":[1,2],"1":[2,3]}}')
    finally:
        client.stop()
        client.close()

    member = brokers.servers[1].cluster
    assert member is not None

    def given() -> bool:  # (the znode as broker 1's watch delivered it)
        held = member.cache.assignments.get("old")
        return held is not None and held.topic_id is not None

    await until(given, "the controller wrote a topic id")
    topic_id = uuid_from_str(
        str(znode(sluice_zookeeper_connect, "/brokers/topics/old")["topic_id"])
    )
    await until(
        lambda: (
            all(
                read_partition_metadata(brokers.data(b) / f"old-{p}") == topic_id
                for b, p in ((1, 0), (2, 0), (2, 1), (3, 1))
                if (brokers.data(b) / f"old-{p}").is_dir()
            )
            and brokers.hosted(2, "old") == [0, 1]
        ),
        "every replica recorded the id",
    )
    assert await ids_seen(brokers, "old") == {b: topic_id for b in BROKERS}


async def test_a_replica_holding_another_topic_id_is_not_led_or_followed(
    brokers: Brokers, sluice_zookeeper_connect: str
) -> None:
    await start_all(brokers, sluice_zookeeper_connect)
    c = await brokers.client(1)
    try:
        resp = await create(c, "mixed", 1, 3, timeout_ms=10_000)
        assert resp.error_code == 0
    finally:
        await c.close()
    await until(lambda: hosts_everywhere(brokers, "mixed", [0]), "every replica hosted")
    await brokers.stop(3)
    stale = random_uuid()  # broker 3's directory now belongs to an earlier "mixed"
    (brokers.data(3) / "mixed-0" / "partition.metadata").unlink()
    write_partition_metadata(brokers.data(3) / "mixed-0", stale)
    with capture_logs() as logs:
        await brokers.start(3, sluice_zookeeper_connect)
        await until(
            lambda: any("another topic id" in e["event"] or "earlier topic" in e["event"]
                        for e in logs),
            "the mismatch reported",
        )  # fmt: skip
    rm = brokers.servers[3].replica_manager
    assert rm is not None and rm.get_partition("mixed", 0) is None
    assert read_partition_metadata(brokers.data(3) / "mixed-0") == stale  # left as it was
    members = [brokers.servers[b].cluster for b in (1, 2)]
    assert all(mb is not None for mb in members)
    c = await brokers.client(1)
    try:  # the topic is still served by the others
        assert (await ids_seen(brokers, "mixed"))[1] != stale
    finally:
        await c.close()
