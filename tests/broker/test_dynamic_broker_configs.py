"""Dynamic broker configs (issue 27): IncrementalAlterConfigs / AlterConfigs / DescribeConfigs on
BROKER resources (this broker's id, and ``""`` for the cluster default) through confluent-kafka's
AdminClient, applied live, with Kafka's sources and refusals, kept across a restart."""

from __future__ import annotations

import asyncio
import json
import warnings
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewTopic,
    ResourceType,
)

from sluice.client.admin import Admin
from sluice.protocol.config_resources import ResourceType as SluiceResourceType
from sluice.protocol.errors import KafkaError, error_name
from sluice.protocol.messages import ApiVersionsRequest
from sluice.server.server import ENTITY_CONFIGS_FILE, Server
from tests.broker.test_server import start_server
from tests.broker_util import WireClient

DEADLINE_S = 15.0


@pytest.fixture
async def srv(tmp_path: Path) -> AsyncIterator[Server]:
    server = await start_server(tmp_path, "log.segment.bytes=2000000")
    try:
        yield server
    finally:
        await server.shutdown()


def admin_of(srv: Server) -> AdminClient:
    return AdminClient({"bootstrap.servers": f"127.0.0.1:{srv.port}"})


async def incremental(srv: Server, name: str, **ops: str | None) -> tuple[str, str] | None:
    """SET (a value) / DELETE (None) broker configs; the error's (name, message), if any.
    confluent-kafka for a broker id; Sluice's admin client for the cluster default ``""``
    (librdkafka refuses a BROKER resource that is not a broker id: "Invalid ConfigResource"),
    and for another broker's id (librdkafka would wait for that broker to appear)."""
    configs = {k.replace("_", "."): v for k, v in ops.items()}
    if name != str(srv.config.node_id):
        async with Admin(f"127.0.0.1:{srv.port}") as admin:
            try:
                await admin.incremental_alter_configs(
                    SluiceResourceType.BROKER, name,
                    set_values={k: v for k, v in configs.items() if v is not None},
                    delete=[k for k, v in configs.items() if v is None],
                )  # fmt: skip
            except KafkaError as exc:
                return error_name(exc.code), str(exc.args[0])
        return None
    entries = [
        ConfigEntry(k, v, incremental_operation=AlterConfigOpType.DELETE if v is None
                    else AlterConfigOpType.SET)
        for k, v in configs.items()
    ]  # fmt: skip
    resource = ConfigResource(ResourceType.BROKER, name, incremental_configs=entries)

    def run() -> tuple[str, str] | None:
        try:
            admin = admin_of(srv)  # (referenced until the result: a dropped client cancels)
            admin.incremental_alter_configs([resource])[resource].result(DEADLINE_S)
        except KafkaException as exc:
            return exc.args[0].name(), exc.args[0].str()
        return None

    return await asyncio.to_thread(run)


#: (value, source, read-only, the synonyms' sources) by config name.
Described = dict[str, tuple["str | None", str, bool, list[str]]]


async def described(srv: Server, name: str) -> Described:
    """DescribeConfigs of a BROKER resource: confluent-kafka for a broker id (as
    ``incremental``), and Sluice's admin client for the synonyms (confluent-kafka keys them by
    name, so a key's dynamic, static and default sources collapse into one)."""
    async with Admin(f"127.0.0.1:{srv.port}") as sluice_admin:
        entries = await sluice_admin.describe_configs(SluiceResourceType.BROKER, name)
    ours: Described = {
        e.name: (e.value, e.source, e.read_only, [s.source for s in e.synonyms]) for e in entries
    }
    if not name:
        return ours
    resource = ConfigResource(ResourceType.BROKER, name)

    def run() -> Described:
        admin = admin_of(srv)
        found = admin.describe_configs([resource])[resource].result(DEADLINE_S)
        return {
            k: (e.value, ConfigSource(e.source).name, e.is_read_only, ours[k][3])
            for k, e in found.items()
        }

    theirs = await asyncio.to_thread(run)
    assert {k: v[:3] for k, v in theirs.items()} == {k: v[:3] for k, v in ours.items()}
    return theirs


async def test_per_broker_over_default_over_static_applied_live(srv: Server) -> None:
    assert srv.log_manager is not None
    admin = admin_of(srv)
    topic = ConfigResource(ResourceType.TOPIC, "t")
    await asyncio.to_thread(
        lambda: admin.create_topics([NewTopic("t", 1, 1)])["t"].result(DEADLINE_S)
    )
    log = srv.log_manager.get_log("t", 0)
    assert log is not None and log.config.retention_ms == 7 * 24 * 3_600_000

    assert await incremental(srv, "", log_retention_ms="600000") is None
    every = await described(srv, "0")
    assert every["log.retention.ms"][:3] == ("600000", "DYNAMIC_DEFAULT_BROKER_CONFIG", False)
    assert log.config.retention_ms == 600_000  # applied to the open log
    assert every["num.partitions"][2]  # read-only: not dynamic
    # The topic's own description names where its default comes from.
    topic_entry = (await asyncio.to_thread(
        lambda: admin.describe_configs([topic])[topic].result(DEADLINE_S)
    ))["retention.ms"]  # fmt: skip
    assert topic_entry.value == "600000"
    # (its source is the first synonym's; confluent-kafka keys synonyms by name)
    assert topic_entry.source == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value

    # This broker's own value wins over the default; the default resource lists only itself.
    assert await incremental(srv, "0", log_retention_ms="300000",
                             log_segment_bytes="3000000") is None  # fmt: skip
    every = await described(srv, "0")
    assert every["log.retention.ms"][:2] == ("300000", "DYNAMIC_BROKER_CONFIG")
    assert every["log.retention.ms"][3] == [
        "DYNAMIC_BROKER_CONFIG",
        "DYNAMIC_DEFAULT_BROKER_CONFIG",
    ]  # (Kafka's default is null: no DEFAULT_CONFIG synonym)
    assert every["log.segment.bytes"][3] == [
        "DYNAMIC_BROKER_CONFIG",
        "STATIC_BROKER_CONFIG",
        "DEFAULT_CONFIG",
    ]
    assert log.config.retention_ms == 300_000 and log.config.segment_bytes == 3_000_000
    default = await described(srv, "")
    assert {k: v[:2] for k, v in default.items()} == {
        "log.retention.ms": ("600000", "DYNAMIC_DEFAULT_BROKER_CONFIG")
    }

    # Deleting falls back: per broker -> default -> static.
    assert await incremental(srv, "0", log_retention_ms=None, log_segment_bytes=None) is None
    assert log.config.retention_ms == 600_000 and log.config.segment_bytes == 2_000_000
    assert await incremental(srv, "", log_retention_ms=None) is None
    assert log.config.retention_ms == 7 * 24 * 3_600_000
    assert await described(srv, "") == {}


async def test_refusals_are_kafkas(srv: Server) -> None:
    cases = [
        ("0", {"num_partitions": "3"},
         "Cannot update these configs dynamically: Set(num.partitions)"),
        ("0", {"log_retention_hours": "1"}, "Cannot update these configs dynamically"),
        ("0", {"log_cleaner_threads": "2"}, "Sluice cannot update these configs dynamically"),
        ("", {"no_such_key": "1"}, "Unknown broker configs: Set(no.such.key)"),
        ("0", {"log_retention_ms": "soon"}, "invalid value 'soon' for log.retention.ms"),
        ("7", {"log_retention_ms": "1"}, "Unexpected broker id, expected 0, but received 7"),
    ]  # fmt: skip
    for name, ops, message in cases:
        error = await incremental(srv, name, **ops)
        assert error is not None, ops
        code = "INVALID_REQUEST" if name == "7" else "INVALID_CONFIG"  # (Kafka's wrapping)
        assert error[0] == code and message in error[1], (ops, error)
    assert await described(srv, "") == {}  # nothing written
    assert "num.partitions" not in srv.handlers.config_resources.dynamic.per_broker  # type: ignore[union-attr]


async def test_max_connections_per_ip_changes_live(srv: Server) -> None:
    first = await WireClient.connect("127.0.0.1", srv.port)
    try:
        assert await incremental(srv, "", max_connections_per_ip="1") is None
        # (the admin client's connection is closed; one connection, ``first``, is open)
        refused = await WireClient.connect("127.0.0.1", srv.port)
        assert await refused.read_frame(timeout=DEADLINE_S) is None  # closed when accepted
        await refused.close()
        # Back to no bound (written as the alter would: no admin client could connect now).
        await srv.handlers.config_resources.dynamic.write("", {})  # type: ignore[union-attr]
        again = await WireClient.connect("127.0.0.1", srv.port)
        assert await again.request(18, 0, ApiVersionsRequest()) is not None
        await again.close()
    finally:
        await first.close()


async def test_dynamic_configs_survive_a_restart(tmp_path: Path) -> None:
    srv = await start_server(tmp_path)
    try:
        assert await incremental(srv, "", log_cleaner_delete_retention_ms="1234") is None
        assert await incremental(srv, "0", message_max_bytes="2000000") is None
    finally:
        await srv.shutdown()
    stored = json.loads((tmp_path / "data" / ENTITY_CONFIGS_FILE).read_text())["entities"]
    assert stored == {
        "brokers/<default>": {"log.cleaner.delete.retention.ms": "1234"},
        "brokers/0": {"message.max.bytes": "2000000"},
    }
    srv = await start_server(tmp_path)
    try:
        assert srv.log_manager is not None
        assert srv.log_manager.default_config.max_message_bytes == 2_000_000
        assert srv.log_manager.default_config.delete_retention_ms == 1234
        every = await described(srv, "0")
        assert every["message.max.bytes"][1] == "DYNAMIC_BROKER_CONFIG"
    finally:
        await srv.shutdown()


async def test_alter_configs_replaces_the_whole_dynamic_set(srv: Server) -> None:
    assert await incremental(srv, "0", log_retention_ms="100000",
                             log_segment_bytes="5000000") is None  # fmt: skip
    resource = ConfigResource(ResourceType.BROKER, "0", set_config={"log.retention.ms": "200000"})

    def run() -> None:
        admin = admin_of(srv)
        with warnings.catch_warnings():  # (deprecated in the client; Kafka still serves it)
            warnings.simplefilter("ignore", DeprecationWarning)
            futures = admin.alter_configs([resource])
        futures[resource].result(DEADLINE_S)

    await asyncio.to_thread(run)
    dynamic = srv.handlers.config_resources.dynamic  # type: ignore[union-attr]
    assert dynamic.per_broker == {"log.retention.ms": "200000"}
