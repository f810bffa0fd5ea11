"""The fault harness on SASL_SSL (``--security sasl_ssl``, :mod:`tests.jepsen.security`): every
link the faults cut is TLS with SCRAM -- clients' and the brokers' own -- and a random-fault
trial keeps its promise there too."""

from __future__ import annotations

import json
import socket
import ssl
from typing import Any

import pytest

from sluice.testing.zookeeper import ZooKeeperServer
from tests.jepsen.harness import SAFE_TOPIC_CONFIG, FaultCluster
from tests.jepsen.proxy import Mode
from tests.jepsen.runner import TrialConfig, run_trial
from tests.jepsen.test_random_faults import assert_kept_its_promise


def _znode(zookeeper: ZooKeeperServer, path: str) -> dict[str, Any]:
    client = zookeeper.kazoo_client()
    client.start(timeout=10)
    try:
        data, _ = client.get(path)
        return dict(json.loads(data))
    finally:
        client.stop()
        client.close()


@pytest.mark.slow
def test_every_proxied_link_is_sasl_ssl(sluice_zookeeper: ZooKeeperServer) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    with FaultCluster(sluice_zookeeper, security="sasl_ssl") as cluster:
        assert cluster.secured is not None
        for b in cluster.ids:
            proxy = cluster.listener[b]
            registration = _znode(sluice_zookeeper, f"{cluster.chroot}/brokers/ids/{b}")
            # Clients and brokers are sent to the proxy, on SASL_SSL; PLAINTEXT is the
            # harness's own port, around the proxies.
            assert f"SASL_SSL://127.0.0.1:{proxy.port}" in registration["endpoints"]
            assert proxy.upstream[1] != cluster.cluster.broker(b).port
            # TLS through the byte pipe, the broker's certificate checked for 127.0.0.1
            context = ssl.create_default_context(cafile=str(cluster.secured.directory / "ca.pem"))
            with (
                socket.create_connection(("127.0.0.1", proxy.port), timeout=10) as sock,
                context.wrap_socket(sock, server_hostname="127.0.0.1") as tls,
            ):
                assert tls.version() is not None

        config = {**cluster.client_security, "bootstrap.servers": cluster.bootstrap_servers}
        admin = AdminClient(config)
        admin.create_topics([NewTopic("secured", 1, 3, config=SAFE_TOPIC_CONFIG)])[
            "secured"
        ].result(30)
        cluster.wait_fully_replicated("secured")
        producer = Producer({**config, "acks": "all"})
        producer.produce("secured", b"x", partition=0)
        assert producer.flush(30) == 0

        # The followers fetch through the leader's proxy (inter.broker.listener.name=SASL_SSL):
        # cut it while the leader takes writes (acks=1, on its PLAINTEXT port around the
        # proxy) and they fall out of the ISR; pass again and they are back in sync. (The ISR
        # as the leader writes it to ZooKeeper: the brokers' own views come from the
        # controller, through the proxies too.)
        state = f"{cluster.chroot}/brokers/topics/secured/partitions/0/state"
        leader = _znode(sluice_zookeeper, state)["leader"]
        cluster.listener[leader].set_mode(Mode.BLACKHOLE)
        direct = Producer({"bootstrap.servers": cluster.cluster.broker(leader).bootstrap_servers,
                           "acks": "1", "linger.ms": 0})  # fmt: skip

        def shrunk() -> bool:
            direct.produce("secured", b"y", partition=0)
            direct.flush(5)
            return bool(_znode(sluice_zookeeper, state)["isr"] == [leader])

        cluster.cluster.wait_for(shrunk, "the followers out of the ISR")
        cluster.listener[leader].set_mode(Mode.PASS)
        cluster.wait_fully_replicated("secured")


@pytest.mark.slow
def test_random_faults_lose_nothing_acknowledged_over_sasl_ssl(
    sluice_zookeeper: ZooKeeperServer,
) -> None:
    """Seed 24010: the leader's link isolated, then the controller paused, on SASL_SSL."""
    config = TrialConfig(seed=24010, duration=8.0, security="sasl_ssl")
    assert_kept_its_promise(run_trial(sluice_zookeeper, config))
