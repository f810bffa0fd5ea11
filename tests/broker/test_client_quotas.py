"""Client quotas (issue 27): DescribeClientQuotas / AlterClientQuotas over the wire, stored as
entity configs, and ``producer_byte_rate`` / ``consumer_byte_rate`` / ``request_percentage``
enforced with Kafka's sampled-rate throttling (KIP-219). Throttling is checked through the
``throttle_time_ms`` the broker answers (and the client library reports), not by timing."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import structlog.testing
from confluent_kafka import Producer

from sluice.protocol import errors
from sluice.protocol import messages as m
from sluice.protocol.framing import encode_request
from sluice.server.network.quotas import FETCH, PRODUCE, REQUEST, ClientQuotas
from sluice.server.server import ENTITY_CONFIGS_FILE, Server
from tests.broker.test_server import batch, create_topic, start_server
from tests.broker_util import WireClient

R = m.AlterClientQuotasRequest
D = m.DescribeClientQuotasRequest


@pytest.fixture
async def srv(tmp_path: Path) -> AsyncIterator[Server]:
    server = await start_server(tmp_path)
    try:
        yield server
    finally:
        await server.shutdown()


async def request(c: WireClient, api: Any, version: int, body: Any, client_id: str) -> Any:
    correlation = await c.send(api.key, version, body, client_id=client_id)
    return await c.receive(api.key, version, correlation)


def entity(**names: str | None) -> list[Any]:
    return [R.EntityData(entity_type=t.replace("_", "-"), entity_name=n) for t, n in names.items()]


async def alter(
    c: WireClient, ents: list[Any], ops: dict[str, float | None], version: int = 1
) -> Any:
    body = R(entries=[R.EntryData(entity=ents, ops=[
        R.OpData(key=k, value=0.0 if v is None else v, remove=v is None) for k, v in ops.items()
    ])], validate_only=False)  # fmt: skip
    resp = await request(c, m.AlterClientQuotas, version, body, "admin")
    return resp.entries[0]


async def describe(c: WireClient, components: list[tuple[str, int, str | None]],
                   strict: bool = False, version: int = 1) -> Any:  # fmt: skip
    body = D(components=[D.ComponentData(entity_type=t, match_type=mt, match=n)
                         for t, mt, n in components], strict=strict)  # fmt: skip
    return await request(c, m.DescribeClientQuotas, version, body, "admin")


def produce_request(topic: str) -> Any:
    """~20 KB for partition 0 of ``topic``."""
    P = m.ProduceRequest
    data = P.PartitionProduceData(index=0, records=batch(20, size=1000))
    return P(acks=1, timeout_ms=1000, topic_data=[
        P.TopicProduceData(name=topic, partition_data=[data])
    ])  # fmt: skip


def described(resp: Any) -> dict[tuple[tuple[str, str | None], ...], dict[str, float]]:
    assert resp.error_code == 0, resp.error_message
    return {
        tuple(sorted((e.entity_type, e.entity_name) for e in entry.entity)): {
            v.key: v.value for v in entry.values
        }
        for entry in resp.entries
    }


# ------------------------------------------------------------------------------- precedence


def test_precedence_is_kafkas_and_decides_who_shares_a_rate() -> None:
    q = ClientQuotas(samples=2, window_s=1.0)
    assert not q.active and q.bound(PRODUCE, "alice", "app") is None
    q.update("clients/<default>", {"producer_byte_rate": "1"})
    assert q.active
    steps = [
        ("clients/app", 2),
        ("users/<default>", 3),
        ("users/<default>/clients/<default>", 4),
        ("users/<default>/clients/app", 5),
        ("users/alice", 6),
        ("users/alice/clients/<default>", 7),
        ("users/alice/clients/app", 8),
    ]
    assert q.bound(PRODUCE, "alice", "app") == 1
    for path, value in steps:  # each more specific entity takes over
        q.update(path, {"producer_byte_rate": str(value), "SCRAM-SHA-256": "ignored"})
        assert q.bound(PRODUCE, "alice", "app") == value, path
    assert q.bound(FETCH, "alice", "app") is None  # each key has its own precedence
    for path, value in reversed(steps):  # removing each falls back to the next
        assert q.bound(PRODUCE, "alice", "app") == value
        q.update(path, {})
    assert q.bound(PRODUCE, "alice", "app") == 1
    q.update("clients/<default>", {})
    assert not q.active
    # A user quota is shared by all its client ids: one rate for both.
    q.update("users/bob", {"producer_byte_rate": "1000"})
    assert q.record(PRODUCE, "bob", "c1", 1000, now=100.0) == 0
    assert q.record(PRODUCE, "bob", "c2", 1000, now=100.0) > 0  # the pair went over
    assert q.record(PRODUCE, "carol", "c2", 1000, now=100.0) == 0  # no quota applies


def test_throttle_time_is_kafkas_formula() -> None:
    q = ClientQuotas(samples=11, window_s=1.0)
    q.update("clients/app", {"producer_byte_rate": "1000", "request_percentage": "10"})
    # 20,000 bytes at once against 1,000 B/s over the minimum window of 10 s: rate 2,000,
    # throttle (2000 - 1000) / 1000 x 10 s = 10 s (uncapped for byte rates).
    assert q.record(PRODUCE, "u", "app", 20_000, now=50.0) == 10_000
    # request_percentage: 2 s of loop time = 200 percent-seconds over 10 s = 20 %; twice the
    # bound; the throttle is capped at one window.
    assert q.record(REQUEST, "u", "app", 2.0, now=50.0) == 1_000
    assert q.record(PRODUCE, "u", "other", 20_000, now=50.0) == 0  # no quota for it


def test_unknown_clients_do_not_grow_state_without_bound() -> None:
    q = ClientQuotas(samples=2, window_s=1.0)
    q.update("users/u", {"producer_byte_rate": "1000000"})
    for i in range(30_000):
        q.record(PRODUCE, "u", f"c{i}", 1, now=1.0)
    assert len(q._types[PRODUCE].resolved) <= 10_000
    assert len(q._types[PRODUCE].rates) == 1  # every client of the user shares one rate


# ------------------------------------------------------------------------------- admin APIs


@pytest.mark.parametrize("version", [0, 1])
async def test_alter_and_describe_over_the_wire(srv: Server, tmp_path: Path, version: int) -> None:
    c = await WireClient.connect("127.0.0.1", srv.port)
    try:
        for ents, ops in [
            (entity(user="alice"), {"producer_byte_rate": 1024.0}),
            (entity(user="alice", client_id="app"), {"consumer_byte_rate": 2048.0}),
            (entity(client_id=None), {"request_percentage": 25.5}),
            (entity(user=None), {"producer_byte_rate": 10.0, "consumer_byte_rate": 20.0}),
            (entity(user="a b*"), {"producer_byte_rate": 1.0}),
        ]:
            res = await alter(c, ents, ops, version)
            assert res.error_code == 0, res.error_message
        every = described(await describe(c, [], version=version))
        assert every == {
            (("user", "alice"),): {"producer_byte_rate": 1024.0},
            (("client-id", "app"), ("user", "alice")): {"consumer_byte_rate": 2048.0},
            (("client-id", None),): {"request_percentage": 25.5},
            (("user", None),): {"producer_byte_rate": 10.0, "consumer_byte_rate": 20.0},
            (("user", "a b*"),): {"producer_byte_rate": 1.0},
        }
        # Filters: exact user, strict (no client-id entities); default user; any client-id.
        assert set(described(await describe(c, [("user", 0, "alice")], strict=True))) == {
            (("user", "alice"),)
        }
        assert set(described(await describe(c, [("user", 0, "alice")]))) == {
            (("user", "alice"),),
            (("client-id", "app"), ("user", "alice")),
        }
        assert set(described(await describe(c, [("user", 1, None)]))) == {(("user", None),)}
        assert set(described(await describe(c, [("client-id", 2, None)]))) == {
            (("client-id", None),),
            (("client-id", "app"), ("user", "alice")),
        }
        # Removing the last key drops the entity.
        assert (await alter(c, entity(user="a b*"), {"producer_byte_rate": None})).error_code == 0
        assert (("user", "a b*"),) not in described(await describe(c, []))
    finally:
        await c.close()
    # Stored as Kafka's entity paths (sanitized names, <default>), in the data directory.
    stored = json.loads((tmp_path / "data" / ENTITY_CONFIGS_FILE).read_text())["entities"]
    assert stored["users/alice"] == {"producer_byte_rate": "1024"}
    assert stored["users/alice/clients/app"] == {"consumer_byte_rate": "2048"}
    assert stored["clients/<default>"] == {"request_percentage": "25.5"}
    assert "users/a%20b%2A" not in stored


async def test_quotas_survive_a_restart(tmp_path: Path) -> None:
    srv = await start_server(tmp_path)
    try:
        c = await WireClient.connect("127.0.0.1", srv.port)
        res = await alter(c, entity(client_id="app"), {"producer_byte_rate": 4096.0})
        assert res.error_code == 0
        await c.close()
    finally:
        await srv.shutdown()
    srv = await start_server(tmp_path)
    try:
        assert srv.client_quotas is not None
        assert srv.client_quotas.bound(PRODUCE, "ANONYMOUS", "app") == 4096
        c = await WireClient.connect("127.0.0.1", srv.port)
        assert described(await describe(c, [("client-id", 0, "app")])) == {
            (("client-id", "app"),): {"producer_byte_rate": 4096.0}
        }
        await c.close()
    finally:
        await srv.shutdown()


async def test_bad_alterations_are_refused_with_kafkas_errors(srv: Server) -> None:
    c = await WireClient.connect("127.0.0.1", srv.port)
    try:
        cases = [
            (entity(user="u"), {"producer_byte_rate": 1.5}, "must be a LONG value"),
            (entity(user="u"), {"no_such_key": 1.0}, "Invalid configuration key no_such_key"),
            ([], {"producer_byte_rate": 1.0}, "Invalid empty client quota entity"),
            (entity(user=""), {"producer_byte_rate": 1.0}, "Empty user not supported"),
            (entity(ip="1.2.3.4"), {"producer_byte_rate": 1.0}, "not supported by Sluice"),
            ([R.EntityData(entity_type="group", entity_name="g")], {"producer_byte_rate": 1.0},
             "Unhandled client quota entity type: group"),
        ]  # fmt: skip
        for ents, ops, message in cases:
            res = await alter(c, ents, ops)
            assert res.error_code == errors.InvalidRequest.code
            assert message in res.error_message
        assert described(await describe(c, [])) == {}  # nothing written
        resp = await describe(c, [("user", 0, "a"), ("user", 0, "b")])
        assert resp.error_code == errors.InvalidRequest.code
        assert resp.error_message == "Duplicate user filter component entity type"
        resp = await describe(c, [("group", 0, "a")])
        assert resp.error_code == errors.UnsupportedVersion.code
    finally:
        await c.close()


async def test_kafka_python_protocol_classes_alter_and_describe(srv: Server) -> None:
    """kafka-python (3.0) has the messages but no admin method: its admin client sends them
    (the version it picks from our ApiVersions)."""
    from kafka.admin import KafkaAdminClient
    from kafka.protocol.admin import AlterClientQuotasRequest, DescribeClientQuotasRequest

    def run() -> tuple[Any, Any]:
        admin = KafkaAdminClient(bootstrap_servers=f"127.0.0.1:{srv.port}", client_id="kp")
        try:

            async def calls() -> tuple[Any, Any]:
                altered = await admin._manager.send(AlterClientQuotasRequest(
                    entries=[([("user", "kp-user")], [("consumer_byte_rate", 5000.0, False)])],
                    validate_only=False,
                ))  # fmt: skip
                desc = await admin._manager.send(
                    DescribeClientQuotasRequest(components=[], strict=False)
                )
                return altered, desc

            return admin._manager.run(calls)  # type: ignore[no-any-return]
        finally:
            admin.close()

    altered, desc = await asyncio.to_thread(run)
    assert altered.entries[0].error_code == 0
    assert desc.error_code == 0
    (entry,) = desc.entries
    assert [(e.entity_type, e.entity_name) for e in entry.entity] == [("user", "kp-user")]
    assert [(v.key, v.value) for v in entry.values] == [("consumer_byte_rate", 5000.0)]


# ------------------------------------------------------------------------------- throttling


async def test_producer_byte_rate_throttles_with_throttle_time(srv: Server) -> None:
    c = await WireClient.connect("127.0.0.1", srv.port)
    other = await WireClient.connect("127.0.0.1", srv.port)
    try:
        assert await create_topic(c, "q") == 0
        res = await alter(c, entity(client_id="slow"), {"producer_byte_rate": 5_000.0})
        assert res.error_code == 0
        req = produce_request("q")
        size = len(encode_request(m.Produce.key, 8, 1, "slow", req)) - 4  # the frame, ~20 KB
        throttles = []
        for _ in range(3):
            resp = await request(c, m.Produce, 8, req, "slow")
            assert resp.responses[0].partition_responses[0].error_code == 0  # still appended
            throttles.append(resp.throttle_time_ms)
            # Another client id is not held back by "slow"'s quota.
            resp = await request(other, m.Produce, 8, req, "fast")
            assert resp.throttle_time_ms == 0
        # Kafka's formula on the sampled window (at least 10 s of 11 one-second samples): after
        # n requests of s bytes, (n*s/10 - 5,000) / 5,000 x 10 s: 0, 0, then ~2 s.
        for n, got in enumerate(throttles, 1):
            expected = round((n * size / 10.0 - 5_000) / 5_000 * 10.0 * 1000)
            assert got == max(expected, 0), (n, throttles)
        assert throttles[-1] > 0
    finally:
        await c.close()
        await other.close()


async def test_throttled_fetch_is_sent_counted_then_muted(srv: Server) -> None:
    """A consumer Fetch over its quota still carries its records and the throttle time they
    earned; the bytes count, so the next fetch earns more (ClientQuotas' docstring: answered
    empty, a 1 MiB-fetch consumer got 0.7 x its quota)."""
    c = await WireClient.connect("127.0.0.1", srv.port)
    try:
        assert await create_topic(c, "f") == 0
        for _ in range(5):
            await request(c, m.Produce, 8, produce_request("f"), "writer")
        res = await alter(c, entity(client_id="reader"), {"consumer_byte_rate": 9_000.0})
        assert res.error_code == 0

        def fetch() -> Any:
            return m.FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=10_000_000,
                isolation_level=0, session_id=0, session_epoch=-1, topics=[
                    m.FetchRequest.FetchTopic(topic="f", partitions=[
                        m.FetchRequest.FetchPartition(partition=0, current_leader_epoch=-1,
                            fetch_offset=0, log_start_offset=-1, partition_max_bytes=10_000_000)])],
                forgotten_topics_data=[], rack_id="")  # fmt: skip

        first = await request(c, m.Fetch, 11, fetch(), "reader")
        # ~100 KB at once against 9 KB/s over 10 s: over the bound, sent with the throttle.
        assert first.throttle_time_ms > 0
        records = first.responses[0].partitions[0].records
        assert records and first.error_code == 0
        # Its bytes were counted: the same fetch again earns about as much again.
        muted_from = time.monotonic()
        again = await request(c, m.Fetch, 11, fetch(), "reader")
        # (the connection was muted for the first throttle before the second was read)
        assert time.monotonic() - muted_from >= first.throttle_time_ms / 1000 * 0.9
        assert again.responses[0].partitions[0].records == records
        size = len(records)
        assert again.throttle_time_ms - first.throttle_time_ms == pytest.approx(
            size / 9_000 * 1000, rel=0.05
        )
        # The quota raised: no throttle (another connection: this one is muted for ~12 s).
        other = await WireClient.connect("127.0.0.1", srv.port)
        try:
            res = await alter(other, entity(client_id="reader"), {"consumer_byte_rate": 1e9})
            assert res.error_code == 0
            ok = await request(other, m.Fetch, 11, fetch(), "reader")
            assert ok.throttle_time_ms == 0 and ok.responses[0].partitions[0].records
        finally:
            await other.close()
    finally:
        await c.close()


async def test_confluent_kafka_producer_reports_the_throttle(srv: Server) -> None:
    """librdkafka reads throttle_time_ms and reports it to ``throttle_cb`` (and backs off)."""
    c = await WireClient.connect("127.0.0.1", srv.port)
    try:
        assert await create_topic(c, "cq") == 0
        res = await alter(c, entity(client_id="rd"), {"producer_byte_rate": 25_000.0})
        assert res.error_code == 0
    finally:
        await c.close()

    def run() -> list[int]:
        seen: list[int] = []
        producer = Producer({
            "bootstrap.servers": f"127.0.0.1:{srv.port}", "client.id": "rd",
            "linger.ms": 5, "throttle_cb": lambda event: seen.append(event.throttle_time),
        })  # fmt: skip
        payload = b"x" * 10_000
        for _ in range(30):  # 300 KB: 12 s' worth at 25 KB/s, over a window of 10 s
            producer.produce("cq", payload)
            producer.poll(0)
        assert producer.flush(60) == 0
        for _ in range(50):  # throttle events are served by poll
            if seen:
                break
            producer.poll(0.1)
        return seen

    seen = await asyncio.to_thread(run)
    assert seen and max(seen) > 0


async def test_request_percentage_throttles_capped_at_one_window(srv: Server) -> None:
    """request_percentage: a share of the event loop's time; over it, the throttle is capped
    at one quota window (quota.window.size.seconds, 1 s), as ClientRequestQuotaManager caps."""
    c = await WireClient.connect("127.0.0.1", srv.port)
    try:
        res = await alter(c, entity(client_id="busy"), {"request_percentage": 0.00001})
        assert res.error_code == 0
        body = m.MetadataRequest(topics=None, allow_auto_topic_creation=False)
        # Any request's loop time (> 0.01 us) is over 0.00001 % of 10 s: throttled, capped.
        resp = await request(c, m.Metadata, 9, body, "busy")
        assert resp.throttle_time_ms == 1000
        resp = await request(c, m.Metadata, 9, body, "idle")  # (after the mute, unthrottled)
        assert resp.throttle_time_ms == 0
    finally:
        await c.close()


async def test_quota_apis_need_the_cluster_configs_acls(tmp_path: Path) -> None:
    """Describe needs DescribeConfigs on the cluster, Alter AlterConfigs (Kafka's table); an
    authorizer with no ACL for the caller refuses both, writing nothing."""
    srv = await start_server(
        tmp_path, "authorizer.class.name=kafka.security.authorizer.AclAuthorizer"
    )
    try:
        c = await WireClient.connect("127.0.0.1", srv.port)
        try:
            res = await alter(c, entity(user="u"), {"producer_byte_rate": 1.0})
            assert res.error_code == errors.ClusterAuthorizationFailed.code
            resp = await describe(c, [])
            assert resp.error_code == errors.ClusterAuthorizationFailed.code
            assert srv.client_quotas is not None and not srv.client_quotas.active
        finally:
            await c.close()
    finally:
        await srv.shutdown()


@pytest.mark.parametrize("ends", ["shutdown", "client_close"])
async def test_a_muted_connection_ends_at_once_when_it_closes(tmp_path: Path, ends: str) -> None:
    """A connection muted for its throttle (KIP-219) closes without waiting the throttle out:
    Kafka's shutdown closes muted channels at once. Before, the mute held the worker, so the
    broker's shutdown waited its whole bound (sluice.shutdown.timeout.ms) and warned."""
    srv = await start_server(tmp_path, "sluice.shutdown.timeout.ms=120000")
    stopped = False
    c = await WireClient.connect("127.0.0.1", srv.port)
    try:
        assert await create_topic(c, "m") == 0
        res = await alter(c, entity(client_id="muted"), {"producer_byte_rate": 1.0})
        assert res.error_code == 0
        resp = await request(c, m.Produce, 8, produce_request("m"), "muted")
        # ~20 KB against 1 B/s: muted for days.
        assert resp.throttle_time_ms > 3_600_000
        (conn,) = [x for x in srv._connections if x._busy]  # the muted one
        worker = conn._worker
        assert worker is not None and not worker.done()
        with structlog.testing.capture_logs() as logs:
            if ends == "client_close":
                await c.close()
                await asyncio.wait_for(asyncio.shield(worker), 30)
            await asyncio.wait_for(srv.shutdown(), 30)  # far below the 120 s bound
            stopped = True
        assert worker.done()
        assert not [e for e in logs if "did not finish" in e["event"]], logs
    finally:
        await c.close()
        if not stopped:
            await srv.shutdown()
