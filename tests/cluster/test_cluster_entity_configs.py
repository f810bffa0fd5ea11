"""Dynamic broker configs and client quotas in a 3-broker cluster on a real ZooKeeper: written
through one broker in Kafka's znodes (``/config/brokers/<default>``, ``/config/users/<u>``,
``/config/clients/<c>``, change notices under ``/config/changes``), applied by every broker
from the notice; a user's quotas and SCRAM credentials share its znode without losing either."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest

from sluice.client.admin import Admin
from sluice.protocol import messages as m
from sluice.protocol.config_resources import ConfigSource, ResourceType
from sluice.testing.cluster import EmbeddedCluster
from tests.broker_util import WireClient

pytestmark = pytest.mark.slow

DEADLINE_S = 30.0


def zk_config(cluster: EmbeddedCluster, path: str) -> dict[str, Any]:
    from sluice.server.zk.client import ZkClient

    async def read() -> dict[str, Any]:
        zk = ZkClient(cluster.zookeeper_connect)
        await zk.start()
        try:
            data, _stat = await zk.get(path)
            return dict(json.loads(data))
        finally:
            await zk.close()

    return asyncio.run(read())


def on_each_broker(cluster: EmbeddedCluster, check: Any, what: str) -> None:
    """Wait (bounded) until ``await check(connection, broker_id)`` is true, asking each broker
    itself (a wire connection to that broker)."""
    for broker_id in cluster.ids:
        host, _, port = cluster.broker(broker_id).bootstrap_servers.partition(":")

        async def ask(host: str = host, port: int = int(port), broker_id: int = broker_id) -> bool:
            c = await WireClient.connect(host, port)
            try:
                return bool(await check(c, broker_id))
            finally:
                await c.close()

        deadline = time.monotonic() + DEADLINE_S
        while not asyncio.run(ask()):
            assert time.monotonic() < deadline, f"broker {broker_id}: {what}"
            time.sleep(0.1)


def test_a_dynamic_default_set_through_one_broker_reaches_every_broker(
    sluice_cluster: EmbeddedCluster,
) -> None:
    cluster = sluice_cluster
    key = "log.cleaner.delete.retention.ms"

    async def alter() -> None:
        async with Admin(cluster.broker(1).bootstrap_servers) as admin:
            await admin.incremental_alter_configs(ResourceType.BROKER, "", set_values={key: "4321"})
            await admin.incremental_alter_configs(ResourceType.BROKER, "2",
                                                  set_values={key: "8765"})  # fmt: skip

    asyncio.run(alter())
    assert zk_config(cluster, "/config/brokers/<default>") == {
        "version": 1, "config": {key: "4321"}
    }  # fmt: skip
    assert zk_config(cluster, "/config/brokers/2")["config"] == {key: "8765"}
    expected = {1: ("4321", "DYNAMIC_DEFAULT_BROKER_CONFIG"), 2: ("8765", "DYNAMIC_BROKER_CONFIG"),
                3: ("4321", "DYNAMIC_DEFAULT_BROKER_CONFIG")}  # fmt: skip

    async def applied(c: WireClient, broker_id: int) -> bool:
        D = m.DescribeConfigsRequest
        resource = D.DescribeConfigsResource(
            resource_type=int(ResourceType.BROKER), resource_name=str(broker_id),
            configuration_keys=[key],
        )  # fmt: skip
        body = D(resources=[resource], include_synonyms=False, include_documentation=False)
        (result,) = (await c.request(m.DescribeConfigs.key, 4, body)).results
        (entry,) = result.configs
        source = ConfigSource(entry.config_source).name
        return (entry.value, source) == expected[broker_id]

    on_each_broker(cluster, applied, f"{key} not applied")


def test_client_quotas_and_scram_credentials_share_the_user_znode(
    sluice_cluster: EmbeddedCluster,
) -> None:
    cluster = sluice_cluster

    async def alter() -> None:
        async with Admin(cluster.broker(1).bootstrap_servers) as admin:
            errors = await admin.alter_user_scram_credentials(
                [("alice", "SCRAM-SHA-256", "alice-secret", 4096)]
            )
            assert errors == {"alice": None}
            await admin.alter_client_quotas({"user": "alice"}, {"producer_byte_rate": 1024})
            await admin.alter_client_quotas({"client-id": "app"}, {"consumer_byte_rate": 2048})

    asyncio.run(alter())
    config = zk_config(cluster, "/config/users/alice")["config"]
    assert config["producer_byte_rate"] == "1024" and "SCRAM-SHA-256" in config
    assert zk_config(cluster, "/config/clients/app")["config"] == {"consumer_byte_rate": "2048"}

    async def seen(c: WireClient, broker_id: int) -> bool:
        D = m.DescribeClientQuotasRequest
        resp = await c.request(m.DescribeClientQuotas.key, 1, D(components=[], strict=False))
        quotas = sorted(
            ([(e.entity_type, e.entity_name) for e in entry.entity],
             [(v.key, v.value) for v in entry.values])
            for entry in resp.entries
        )  # fmt: skip
        S = m.DescribeUserScramCredentialsRequest
        creds = await c.request(
            m.DescribeUserScramCredentials.key, 0, S(users=[S.UserName(name="alice")])
        )
        return quotas == [
            ([("client-id", "app")], [("consumer_byte_rate", 2048.0)]),
            ([("user", "alice")], [("producer_byte_rate", 1024.0)]),
        ] and [r.error_code for r in creds.results] == [0]  # fmt: skip

    on_each_broker(cluster, seen, "quotas or credentials not seen")

    # Removing the quota keeps the credential (and the other way round).
    async def remove() -> None:
        async with Admin(cluster.broker(2).bootstrap_servers) as admin:
            await admin.alter_client_quotas({"user": "alice"}, remove=["producer_byte_rate"])

    asyncio.run(remove())
    assert set(zk_config(cluster, "/config/users/alice")["config"]) == {"SCRAM-SHA-256"}


@pytest.mark.sluice_cluster(mode="inprocess")
def test_the_controller_takes_a_dynamic_unclean_election_default(
    sluice_cluster: EmbeddedCluster,
) -> None:
    """``unclean.leader.election.enable`` set as the cluster's dynamic default reaches every
    broker's controller (the one elected decides elections for topics without an override)."""
    cluster = sluice_cluster

    def controllers_unclean() -> set[bool]:
        out = set()
        for broker_id in cluster.ids:
            server = cluster.broker(broker_id).server
            assert server is not None and server.cluster is not None
            controller = server.cluster.controller
            assert controller is not None
            out.add(controller.settings.unclean_leader_election_enable)
        return out

    assert controllers_unclean() == {False}

    async def alter() -> None:
        async with Admin(cluster.broker(2).bootstrap_servers) as admin:
            await admin.incremental_alter_configs(
                ResourceType.BROKER, "", set_values={"unclean.leader.election.enable": "true"}
            )

    asyncio.run(alter())
    cluster.wait_for(lambda: controllers_unclean() == {True}, "unclean default not applied")
