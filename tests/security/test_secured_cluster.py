"""A 3-broker cluster whose brokers talk to each other over SASL_SSL (SCRAM-SHA-512 as the user
``broker``, credentials in ZooKeeper's ``/config/users`` written by ``python -m
sluice.server.security`` before the first start), with a PLAINTEXT listener beside it: acks=all
produce and consume through SASL_SSL, replicas in sync through the inter-broker listener, and
each listener's Metadata naming that listener's endpoints."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import confluent_kafka
import confluent_kafka.admin
import pytest
import trustme

from sluice.testing.cluster import EmbeddedCluster

ROOT = Path(__file__).resolve().parents[2]


def _add_user(zookeeper: str, user: str, password: str) -> None:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    done = subprocess.run(
        [sys.executable, "-m", "sluice.server.security", "--zookeeper", zookeeper,
         "--entity-type", "users", "--entity-name", user, "--alter",
         "--add-config", f"SCRAM-SHA-512=[password={password}]"],
        capture_output=True, text=True, timeout=60, env=env, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.fixture(scope="module")
def cluster(
    tmp_path_factory: pytest.TempPathFactory, sluice_zookeeper: Any
) -> Iterator[tuple[EmbeddedCluster, Path]]:
    tmp = tmp_path_factory.mktemp("secured-cluster")
    ca = trustme.CA()
    (tmp / "broker.pem").write_bytes(
        ca.issue_cert("127.0.0.1", "localhost").private_key_and_cert_chain_pem.bytes()
    )
    ca.cert_pem.write_to_path(str(tmp / "ca.pem"))
    connect = sluice_zookeeper.connect_string(f"/secured-{tmp.name}")
    _add_user(connect, "broker", "broker-pw")
    _add_user(connect, "alice", "alice-pw")
    jaas = (
        "org.apache.kafka.common.security.scram.ScramLoginModule required "
        'username="broker" password="broker-pw";'
    )
    properties = {
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0",
        "inter.broker.listener.name": "SASL_SSL",
        "sasl.enabled.mechanisms": "SCRAM-SHA-512",
        "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
        "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": jaas,
        "ssl.keystore.location": str(tmp / "broker.pem"),
        "ssl.truststore.location": str(tmp / "ca.pem"),
        "default.replication.factor": "3",
        "offsets.topic.replication.factor": "3",
    }
    with EmbeddedCluster(3, zookeeper_connect=connect, properties=properties) as c:
        yield c, tmp / "ca.pem"


def _sasl_ssl(cluster: EmbeddedCluster, ca: Path) -> dict[str, Any]:
    bootstrap = ",".join(cluster.broker(i).bootstrap("SASL_SSL") for i in cluster.ids)
    return {
        "bootstrap.servers": bootstrap,
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "alice",
        "sasl.password": "alice-pw",
        "ssl.ca.location": str(ca),
        "socket.timeout.ms": 15000,
    }


def test_acks_all_produce_and_consume_over_sasl_ssl_inter_broker(
    cluster: tuple[EmbeddedCluster, Path],
) -> None:
    c, ca = cluster
    config = _sasl_ssl(c, ca)
    admin = confluent_kafka.admin.AdminClient(config)
    futures = admin.create_topics([confluent_kafka.admin.NewTopic("secured", 2, 3)])
    futures["secured"].result(30)
    for partition in (0, 1):
        c.wait_for_leader("secured", partition)
    producer = confluent_kafka.Producer({**config, "acks": "all", "enable.idempotence": False})
    for i in range(20):
        producer.produce("secured", str(i).encode(), partition=i % 2)
    assert producer.flush(30) == 0
    # every follower caught up through the leaders' SASL_SSL listener: all three in the ISR
    c.wait_for(
        lambda: all(
            sorted(p.isr_nodes) == c.ids
            for t in c.metadata(["secured"]).topics
            for p in t.partitions
        ),
        "every replica in sync",
    )
    consumer = confluent_kafka.Consumer(
        {**config, "group.id": "secured-group", "auto.offset.reset": "earliest"}
    )
    got: list[bytes] = []
    try:
        consumer.subscribe(["secured"])
        deadline = time.monotonic() + 60
        while len(got) < 20 and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                got.append(message.value())
    finally:
        consumer.close()
    assert sorted(got, key=int) == [str(i).encode() for i in range(20)]


def test_each_listener_advertises_its_own_endpoints(cluster: tuple[EmbeddedCluster, Path]) -> None:
    c, ca = cluster
    secured = confluent_kafka.admin.AdminClient(_sasl_ssl(c, ca)).list_topics(timeout=15)
    assert {b.id: b.port for b in secured.brokers.values()} == {
        i: c.broker(i).ports["SASL_SSL"] for i in c.ids
    }
    plain = c.metadata()
    assert {b.node_id: b.port for b in plain.brokers} == {
        i: c.broker(i).ports["PLAINTEXT"] for i in c.ids
    }


def test_the_registration_lists_every_endpoint(cluster: tuple[EmbeddedCluster, Path]) -> None:
    from sluice.server.zk.client import ZkClient

    c, _ = cluster

    async def read() -> dict[str, Any]:
        zk = ZkClient(c.zookeeper_connect)
        await zk.start()
        try:
            data, _stat = await zk.get("/brokers/ids/1")
            return dict(json.loads(data))
        finally:
            await zk.close()

    registration = asyncio.run(read())
    ports = c.broker(1).ports
    assert registration["endpoints"] == [
        f"PLAINTEXT://127.0.0.1:{ports['PLAINTEXT']}",
        f"SASL_SSL://127.0.0.1:{ports['SASL_SSL']}",
    ]
    assert registration["listener_security_protocol_map"] == {
        "PLAINTEXT": "PLAINTEXT",
        "SASL_SSL": "SASL_SSL",
    }
    assert (registration["host"], registration["port"]) == ("127.0.0.1", ports["PLAINTEXT"])
