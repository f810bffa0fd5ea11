"""Limits a client could otherwise exhaust (issue 13): topics and partitions, connections per
address and in all, the request rate. Each bound is set on a real broker (in-process, real
sockets on 127.0.0.1) and hit with our wire client and with confluent-kafka; with the defaults
none of them refuses anything (the rest of the suite runs on the defaults)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

from sluice.protocol import errors
from sluice.protocol import messages as m
from sluice.server.config_def import parse_ip_overrides
from sluice.server.network.quotas import ConnectionQuotas, RequestQuota
from sluice.server.server import Server
from tests.broker.test_server import create_topic, metadata, start_server
from tests.broker_util import WireClient

DEADLINE_S = 10.0


@pytest.fixture
async def servers() -> AsyncIterator[list[Server]]:
    """Servers a test starts (``servers.append(await start_server(...))``), shut down after."""
    started: list[Server] = []
    try:
        yield started
    finally:
        for srv in started:
            await srv.shutdown()


async def admin_error(call: object) -> KafkaError | None:
    """Run a confluent-kafka admin future's ``result`` off the loop; its error or None."""

    def wait() -> KafkaError | None:
        try:
            call.result(DEADLINE_S)  # type: ignore[attr-defined]
        except KafkaException as exc:
            return exc.args[0]  # type: ignore[no-any-return]
        return None

    return await asyncio.to_thread(wait)


# --------------------------------------------------------------------------- topics, partitions


async def test_partitions_per_topic_bound(tmp_path: Path, servers: list[Server]) -> None:
    srv = await start_server(tmp_path, "sluice.max.partitions.per.topic=4")
    servers.append(srv)
    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{srv.port}"})
    error = await admin_error(admin.create_topics([NewTopic("big", 5, 1)])["big"])
    assert error is not None and error.code() == errors.InvalidPartitions.code
    assert "sluice.max.partitions.per.topic" in error.str() and "4" in error.str()
    assert "big" not in srv.log_manager.topics()  # type: ignore[union-attr]
    assert not (tmp_path / "data" / "big-0").exists()

    assert await admin_error(admin.create_topics([NewTopic("ok", 4, 1)])["ok"]) is None
    error = await admin_error(admin.create_partitions([NewPartitions("ok", 5)])["ok"])
    assert error is not None and error.code() == errors.InvalidPartitions.code
    assert srv.log_manager.topics()["ok"] == 4  # type: ignore[union-attr]


async def test_topic_count_bound_covers_create_and_auto_create(
    tmp_path: Path, servers: list[Server]
) -> None:
    srv = await start_server(tmp_path, "sluice.max.topics=3")
    servers.append(srv)
    c = await WireClient.connect("127.0.0.1", srv.port)
    try:
        assert await create_topic(c, "a") == 0
        (auto,) = (await metadata(c, ["b"])).topics  # auto-created: topic 2 of 3
        assert auto.error_code == 0
        # validate_only creates nothing, but counts the request's earlier topics.
        req = m.CreateTopicsRequest(
            topics=[
                m.CreateTopicsRequest.CreatableTopic(
                    name=n, num_partitions=1, replication_factor=1, configs=[]
                )
                for n in ("c", "d")
            ],
            timeout_ms=1000,
            validate_only=True,
        )
        resp = await c.request(m.CreateTopics.key, 4, req)
        assert [t.error_code for t in resp.topics] == [0, errors.PolicyViolation.code]
        assert "sluice.max.topics" in resp.topics[1].error_message
        assert await create_topic(c, "c") == 0
        assert await create_topic(c, "d") == errors.PolicyViolation.code
        (refused,) = (await metadata(c, ["e"])).topics
        assert refused.error_code == errors.PolicyViolation.code
        assert set(srv.log_manager.topics()) == {"a", "b", "c"}  # type: ignore[union-attr]
    finally:
        await c.close()


async def test_one_request_creating_several_topics_counts_each_once(
    tmp_path: Path, servers: list[Server]
) -> None:
    """A topic the request has created is counted by the broker, not again as granted."""
    srv = await start_server(tmp_path, "sluice.max.topics=2")
    servers.append(srv)
    c = await WireClient.connect("127.0.0.1", srv.port)
    try:
        req = m.CreateTopicsRequest(
            topics=[
                m.CreateTopicsRequest.CreatableTopic(
                    name=n, num_partitions=1, replication_factor=1, configs=[]
                )
                for n in ("a", "b", "c")
            ],
            timeout_ms=1000,
            validate_only=False,
        )
        resp = await c.request(m.CreateTopics.key, 4, req)
        assert [t.error_code for t in resp.topics] == [0, 0, errors.PolicyViolation.code]
        assert set(srv.log_manager.topics()) == {"a", "b"}  # type: ignore[union-attr]
    finally:
        await c.close()


async def test_total_partitions_bound(tmp_path: Path, servers: list[Server]) -> None:
    srv = await start_server(tmp_path, "sluice.max.partitions=6")
    servers.append(srv)
    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{srv.port}"})
    assert await admin_error(admin.create_topics([NewTopic("x", 4, 1)])["x"]) is None
    error = await admin_error(admin.create_topics([NewTopic("y", 3, 1)])["y"])
    assert error is not None and error.code() == errors.PolicyViolation.code
    assert "sluice.max.partitions" in error.str()
    error = await admin_error(admin.create_partitions([NewPartitions("x", 7)])["x"])
    assert error is not None and error.code() == errors.PolicyViolation.code
    assert await admin_error(admin.create_partitions([NewPartitions("x", 6)])["x"]) is None
    # Deleting a topic gives its partitions back.
    assert await admin_error(admin.delete_topics(["x"])["x"]) is None
    assert await admin_error(admin.create_topics([NewTopic("y", 3, 1)])["y"]) is None


# --------------------------------------------------------------------------------- connections


async def api_versions(c: WireClient) -> m.ApiVersionsResponse:
    body = m.ApiVersionsRequest(client_software_name="t", client_software_version="1")
    return await c.request(m.ApiVersions.key, 3, body, timeout=DEADLINE_S)  # type: ignore[no-any-return]


async def assert_refused(port: int) -> None:
    """A new connection is accepted by the kernel, then closed before its request is read."""
    c = await WireClient.connect("127.0.0.1", port)
    try:
        await c.send(m.ApiVersions.key, 0, m.ApiVersionsRequest())
        assert await c.read_frame(DEADLINE_S) is None
    except (ConnectionResetError, BrokenPipeError):
        pass
    finally:
        await c.close()


async def wait_connections(srv: Server, count: int) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while len(srv.connections) != count:
        assert time.monotonic() < deadline, f"{len(srv.connections)} connections, not {count}"
        await asyncio.sleep(0.01)


@pytest.mark.parametrize(
    "overrides",
    [
        ("max.connections.per.ip=3",),
        ("max.connections.per.ip=0", "max.connections.per.ip.overrides=localhost:3"),
        ("max.connections=3",),
    ],
    ids=["per_ip", "override_by_host_name", "total"],
)
async def test_connections_over_the_bound_are_closed(
    tmp_path: Path, servers: list[Server], overrides: tuple[str, ...]
) -> None:
    srv = await start_server(tmp_path, *overrides)
    servers.append(srv)
    clients = [await WireClient.connect("127.0.0.1", srv.port) for _ in range(3)]
    try:
        for c in clients:
            assert (await api_versions(c)).error_code == 0
        await assert_refused(srv.port)
        await assert_refused(srv.port)
        reason = "total" if overrides[0].startswith("max.connections=") else "per_ip"
        assert srv.metrics.get(f"connections.refused.{reason}") == 2
        assert len(srv.connections) == 3  # the refused ones never counted
        await clients.pop().close()
        await wait_connections(srv, 2)
        clients.append(await WireClient.connect("127.0.0.1", srv.port))
        assert (await api_versions(clients[-1])).error_code == 0
    finally:
        for c in clients:
            await c.close()


async def test_idle_connections_are_closed_after_connections_max_idle_ms(
    tmp_path: Path, servers: list[Server]
) -> None:
    """Kafka's ``connections.max.idle.ms`` (default ten minutes): a connection with nothing
    read or written that long is closed by the broker; one in use is kept."""
    srv = await start_server(tmp_path, "connections.max.idle.ms=400")
    servers.append(srv)
    idle = await WireClient.connect("127.0.0.1", srv.port)
    busy = await WireClient.connect("127.0.0.1", srv.port)
    try:
        assert (await api_versions(idle)).error_code == 0
        answered = time.monotonic()
        # the busy one asks every 100 ms until the idle one is closed (bounded)
        closing = asyncio.create_task(idle.read_frame(timeout=DEADLINE_S))
        while not closing.done() and time.monotonic() - answered < DEADLINE_S:
            assert (await api_versions(busy)).error_code == 0
            await asyncio.wait({closing}, timeout=0.1)
        assert await closing is None  # closed by the broker, nothing sent
        assert time.monotonic() - answered >= 0.4
        assert srv.metrics.get("connections.closed.idle") == 1
        assert (await api_versions(busy)).error_code == 0
    finally:
        await idle.close()
        await busy.close()


def test_idle_connections_are_closed_after_ten_minutes_by_default() -> None:
    from sluice.server.config import Config

    assert Config().connections_max_idle_ms == 600_000


def test_zero_per_ip_needs_overrides() -> None:
    from sluice.server.config import Config, ConfigError

    with pytest.raises(ConfigError, match=r"max\.connections\.per\.ip\.overrides"):
        Config.load(None, ["max.connections.per.ip=0"])
    Config.load(None, ["max.connections.per.ip=0", "max.connections.per.ip.overrides=a:1"])


def test_ip_overrides_parse_kafkas_format() -> None:
    assert parse_ip_overrides("") == ()
    assert parse_ip_overrides("hostName:100, 127.0.0.1:200,[::1]:5") == (
        ("hostName", 100),
        ("127.0.0.1", 200),
        ("::1", 5),
    )
    for bad in ("127.0.0.1", "a:b", ":3", "a:-1"):
        with pytest.raises(ValueError):
            parse_ip_overrides(bad)
    quotas = ConnectionQuotas(1, (("127.0.0.2", 0),))
    assert quotas.acquire("127.0.0.2") == "per_ip"
    assert quotas.acquire("127.0.0.1") is None
    assert quotas.acquire("127.0.0.1") == "per_ip"
    quotas.release("127.0.0.1")
    assert quotas.acquire("127.0.0.1") is None


# -------------------------------------------------------------------------------- request rate


def test_request_quota_is_kafkas_sampled_rate() -> None:
    """10 requests/s over 11 one-second samples: a new client may send 100 at once (the rate
    is measured over at least 10 s), then each extra request earns 100 ms, capped at one
    window; once the whole window has passed the client starts afresh."""
    quota = RequestQuota(10, samples=11, window_s=1.0)
    assert [quota.record("a", 0.0) for _ in range(100)] == [0] * 100
    assert quota.record("a", 0.0) == 100
    assert quota.record("a", 0.0) == 200
    assert [quota.record("a", 0.0) for _ in range(20)][-1] == 1000  # capped
    assert quota.record("b", 0.0) == 0  # per client id
    assert quota.record("a", 30.0) == 0
    for i in range(1000):  # random client ids do not pile up
        quota.record(f"c{i}", 31.0)
    assert quota.clients == 1001  # "b", idle since 0.0, went at the first prune
    quota.record("d", 50.0)
    assert quota.clients == 1


async def test_throttled_responses_carry_the_time_and_the_connection_waits(
    tmp_path: Path, servers: list[Server]
) -> None:
    srv = await start_server(
        tmp_path,
        "sluice.quota.requests.per.second=5",
        "quota.window.num=2",
        "quota.window.size.seconds=1",
    )
    servers.append(srv)
    c = await WireClient.connect("127.0.0.1", srv.port)
    other = await WireClient.connect("127.0.0.1", srv.port)
    try:
        throttles = []
        for _ in range(6):
            throttles.append((await api_versions(c)).throttle_time_ms)
        # 5/s over at least one second: 5 free, the 6th is 1/5 s over.
        assert throttles[:5] == [0] * 5
        assert 150 <= throttles[5] <= 200
        # Muted for that long: the next request is answered no sooner (a lower bound only).
        sent = time.monotonic()
        await api_versions(c)
        assert time.monotonic() - sent >= throttles[5] / 1000 * 0.9
        # Another client id on another connection is not throttled; the same one is.
        correlation = await other.send(m.ApiVersions.key, 0, m.ApiVersionsRequest(), "other")
        assert (await other.receive(m.ApiVersions.key, 0, correlation)).throttle_time_ms == 0
        correlation = await other.send(m.ApiVersions.key, 3, m.ApiVersionsRequest(), "test")
        assert (await other.receive(m.ApiVersions.key, 3, correlation)).throttle_time_ms > 0
        assert srv.metrics.get("requests.throttled") >= 3
    finally:
        await c.close()
        await other.close()


async def test_a_real_producer_is_told_it_is_throttled(
    tmp_path: Path, servers: list[Server]
) -> None:
    srv = await start_server(tmp_path, "sluice.quota.requests.per.second=5", "quota.window.num=2")
    servers.append(srv)
    throttled: list[int] = []

    def run() -> None:
        producer = Producer(
            {
                "bootstrap.servers": f"127.0.0.1:{srv.port}",
                "linger.ms": 0,
                "throttle_cb": lambda event: throttled.append(event.throttle_time),
            }
        )
        for i in range(15):  # one Produce request each
            producer.produce("quota", f"v{i}".encode())
            assert producer.flush(DEADLINE_S) == 0
            if throttled:
                break

    await asyncio.to_thread(run)
    assert throttled and max(throttled) > 0
