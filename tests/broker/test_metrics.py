"""The Prometheus endpoint (``sluice.metrics.listener``): real HTTP scrapes on 127.0.0.1 of a
broker that confluent-kafka produces to and consumes from; the figures must move by exactly what
was sent. Also the config key (off by default, bad values refused) and the small pieces
(histogram buckets, error-code walk)."""

from __future__ import annotations

import asyncio
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from sluice.protocol import messages as m
from sluice.protocol.errors import error_name
from sluice.server.config import Config, ConfigError, MetricsListener
from sluice.server.metrics.metrics import METRICS, Histogram, error_codes
from sluice.testing import EmbeddedBroker
from tests.broker_util import WireClient

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(url: str) -> tuple[Samples, set[str]]:
    """``({(sample name, labels): value}, family names)`` of one GET of ``url``."""
    with urllib.request.urlopen(url, timeout=10) as response:
        assert response.status == 200
        text = response.read().decode()
    samples: Samples = {}
    families = set()
    for family in text_string_to_metric_families(text):
        families.add(family.name)
        for s in family.samples:
            samples[(s.name, frozenset(s.labels.items()))] = s.value
    return samples, families


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def endpoint_url(broker: EmbeddedBroker) -> str:
    return broker.call(lambda server: server.metrics_endpoint.url)  # type: ignore[union-attr]


def log_bytes(data_dir: Path, topic: str) -> int:
    return sum(p.stat().st_size for p in (data_dir / f"{topic}-0").glob("*.log"))


@pytest.fixture
def broker() -> Iterator[EmbeddedBroker]:
    props = {
        "sluice.metrics.listener": "http://127.0.0.1:0",
        "log.flush.interval.messages": "1",  # every append fsyncs: the flush histogram moves
    }
    with EmbeddedBroker(properties=props) as b:
        yield b


def test_scrape_while_producing_and_consuming(broker: EmbeddedBroker) -> None:
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import AdminClient

    url = endpoint_url(broker)
    before, families = scrape(url)
    assert {d.name for d in METRICS} <= families, "a declared family is not exported"
    topic, sent = "metered", 50
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "linger.ms": 5})
    for i in range(sent):
        producer.produce(topic, key=b"k%d" % i, value=b"v" * (i + 1))
    assert producer.flush(30) == 0
    stored = log_bytes(broker.data_dir, topic)
    assert stored > 0

    after_produce, _ = scrape(url)
    bytes_in = "kafka_server_brokertopicmetrics_bytesin_total"
    messages_in = "kafka_server_brokertopicmetrics_messagesin_total"
    assert value(after_produce, messages_in, topic=topic) == sent
    assert value(after_produce, bytes_in, topic=topic) == stored  # the batches, byte for byte
    requests = "kafka_network_requestmetrics_requests_total"
    produced = value(after_produce, requests, request="Produce")
    assert produced >= 1
    assert value(before, requests, request="Produce") == 0
    assert not any(
        name == requests and dict(labels)["request"].isdigit() for name, labels in after_produce
    ), "requests labelled by number"
    latency = "kafka_network_requestmetrics_totaltime_seconds"
    assert value(after_produce, f"{latency}_count", request="Produce") == produced
    assert value(after_produce, f"{latency}_bucket", request="Produce", le="+Inf") == produced
    assert value(after_produce, f"{latency}_sum", request="Produce") > 0
    flushes = "kafka_log_logflushstats_logflushrateandtime_seconds_count"
    assert value(after_produce, flushes) > value(before, flushes)

    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap_servers,
            "group.id": "metered-readers",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    got = []
    deadline = time.monotonic() + 30
    try:
        while len(got) < sent and time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is not None and msg.error() is None:
                got.append(msg)
        committed = 30
        consumer.commit(offsets=[_tp(topic, 0, committed)], asynchronous=False)
        while_connected, _ = scrape(url)
    finally:
        consumer.close()
    assert len(got) == sent
    bytes_out = "kafka_server_brokertopicmetrics_bytesout_total"
    assert value(while_connected, bytes_out, topic=topic) == stored  # every batch sent once
    assert value(while_connected, requests, request="Fetch") >= 1
    assert value(while_connected, requests, request="JoinGroup") >= 1
    assert value(while_connected, requests, request="OffsetCommit") >= 1
    group = {"consumergroup": "metered-readers", "topic": topic, "partition": "0"}
    assert value(while_connected, "kafka_consumergroup_current_offset", **group) == committed
    assert value(while_connected, "kafka_consumergroup_lag", **group) == sent - committed
    assert value(while_connected, "kafka_server_socket_server_metrics_connection_count",
                 listener="PLAINTEXT") >= 1  # fmt: skip
    assert value(while_connected, "kafka_server_replicamanager_leadercount") >= 2  # + offsets
    assert value(while_connected, "kafka_server_replicamanager_partitioncount") == value(
        while_connected, "kafka_server_replicamanager_leadercount"
    )
    assert value(while_connected, "kafka_server_replicamanager_underreplicatedpartitions") == 0
    assert value(while_connected, "kafka_controller_kafkacontroller_activecontrollercount") == 1
    assert value(while_connected, "kafka_controller_kafkacontroller_offlinepartitionscount") == 0

    # Errors by API and Kafka's error name: deleting a topic that does not exist.
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    with pytest.raises(Exception, match="UNKNOWN_TOPIC"):
        admin.delete_topics(["no-such-topic"], operation_timeout=10)["no-such-topic"].result(10)
    errors_, _ = scrape(url)
    error = {"request": "DeleteTopics", "error": "UNKNOWN_TOPIC_OR_PARTITION"}
    assert value(errors_, "kafka_network_requestmetrics_errors_total", **error) == 1


def test_request_counts_are_exact(broker: EmbeddedBroker) -> None:
    """Our own wire client alone on the broker: three Metadata requests count three."""
    url = endpoint_url(broker)
    host, port = broker.bootstrap_servers.rsplit(":", 1)
    metadata = "kafka_network_requestmetrics_requests_total"
    before, _ = scrape(url)

    async def three() -> None:
        client = await WireClient.connect(host, int(port))
        try:
            for _ in range(3):
                await client.request(m.Metadata.key, 1, m.MetadataRequest(topics=[]))
        finally:
            await client.close()

    asyncio.run(three())
    after, _ = scrape(url)
    assert (
        value(after, metadata, request="Metadata") - value(before, metadata, request="Metadata")
        == 3
    )
    count = "kafka_network_requestmetrics_totaltime_seconds_count"
    assert value(after, count, request="Metadata") - value(before, count, request="Metadata") == 3
    created = "kafka_server_socket_server_metrics_connection_creation_total"
    assert (
        value(after, created, listener="PLAINTEXT") - value(before, created, listener="PLAINTEXT")
        == 1
    )


def test_transaction_coordinator_states(broker: EmbeddedBroker) -> None:
    """``kafka_transactions`` counts the coordinated ids by state, as kafka-transactions list
    would show them."""
    from confluent_kafka import Producer

    url = endpoint_url(broker)
    producer = Producer(
        {"bootstrap.servers": broker.bootstrap_servers, "transactional.id": "metered-txn"}
    )
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce("metered-txn-topic", b"v")
    producer.flush(30)
    samples, _ = scrape(url)
    assert value(samples, "kafka_transactions", state="Ongoing") == 1
    producer.commit_transaction(30)
    deadline = time.monotonic() + 30
    while value(scrape(url)[0], "kafka_transactions", state="CompleteCommit") != 1:
        assert time.monotonic() < deadline, "CompleteCommit never counted"
        time.sleep(0.05)
    samples, _ = scrape(url)
    assert value(samples, "kafka_transactions", state="Ongoing") == 0
    load = "kafka_server_transaction_coordinator_metrics_partition_load_time_max"
    assert (load, frozenset()) in samples


def test_only_the_metrics_path_is_served(broker: EmbeddedBroker) -> None:
    url = endpoint_url(broker)
    assert url.endswith("/metrics")
    with pytest.raises(urllib.error.HTTPError) as failed:
        urllib.request.urlopen(url.removesuffix("/metrics") + "/other", timeout=10)
    failed.value.close()
    assert failed.value.code == 404


def test_endpoint_is_off_by_default() -> None:
    assert Config().metrics_listener is None
    assert Config.load(None, ["sluice.metrics.listener="]).metrics_listener is None
    with EmbeddedBroker() as b:
        assert b.call(lambda server: server.metrics_endpoint) is None


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("http://127.0.0.1:9644", MetricsListener("127.0.0.1", 9644, "/metrics")),
        ("http://0.0.0.0:0/prom", MetricsListener("0.0.0.0", 0, "/prom")),
        ("http://[::1]:9644", MetricsListener("::1", 9644, "/metrics")),
    ],
)
def test_listener_values(text: str, expected: MetricsListener) -> None:
    assert Config.load(None, [f"sluice.metrics.listener={text}"]).metrics_listener == expected


@pytest.mark.parametrize(
    "text",
    [
        "127.0.0.1:9644",
        "https://127.0.0.1:9644",
        "http://127.0.0.1",
        "http://127.0.0.1:port",
        "http://127.0.0.1:70000",
        "http://:9644",
        "http://127.0.0.1:9644/metrics?x=1",
    ],
)
def test_bad_listener_is_a_config_error(text: str) -> None:
    with pytest.raises(ConfigError, match=r"sluice\.metrics\.listener"):
        Config.load(None, [f"sluice.metrics.listener={text}"])


def test_listener_port_taken_fails_startup_cleanly(tmp_path: Path) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        props = {"sluice.metrics.listener": f"http://127.0.0.1:{port}"}
        with pytest.raises(OSError), EmbeddedBroker(tmp_path / "data", properties=props):
            pass
    # The data dir was left as a stopped broker leaves it: the next start is clean.
    with EmbeddedBroker(tmp_path / "data") as b:
        assert b.call(lambda server: server.log_manager.had_clean_shutdown)  # type: ignore[union-attr]


def test_histogram_buckets_are_cumulative_and_inclusive() -> None:
    h = Histogram((0.1, 1.0))
    for v in (0.05, 0.1, 0.5, 1.0, 7.0):
        h.observe(v)
    assert h.cumulative() == [("0.1", 2.0), ("1.0", 4.0), ("+Inf", 5.0)]
    assert (h.count, h.sum) == (5, pytest.approx(8.65))


def test_error_codes_walk_nested_structs() -> None:
    r = m.DeleteTopicsResponse
    body = r(
        throttle_time_ms=0,
        responses=[
            r.DeletableTopicResult(name="a", error_code=3),
            r.DeletableTopicResult(name="b", error_code=0),
            r.DeletableTopicResult(name="c", error_code=41),
        ],
    )
    assert sorted(error_codes(body)) == [3, 41]
    assert error_name(3) == "UNKNOWN_TOPIC_OR_PARTITION"
    assert error_name(6) == "NOT_LEADER_OR_FOLLOWER"
    assert error_name(-1) == "UNKNOWN_SERVER_ERROR"


def _tp(topic: str, partition: int, offset: int) -> Any:
    from confluent_kafka import TopicPartition

    return TopicPartition(topic, partition, offset)


def test_log_cleaner_gauges_after_a_cleaning(tmp_path: Path) -> None:
    """Kafka's LogCleaner / LogCleanerManager gauges move once a compacted topic is cleaned."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    props = {"sluice.metrics.listener": "http://127.0.0.1:0", "log.cleaner.backoff.ms": "50"}
    with EmbeddedBroker(data_dir=tmp_path / "data", properties=props) as broker:
        url = endpoint_url(broker)
        before, _ = scrape(url)
        log_dir = str((tmp_path / "data").absolute())
        uncleanable = "kafka_log_logcleanermanager_uncleanable_partitions_count"
        assert (uncleanable, frozenset({("logDirectory", log_dir)})) in before
        assert value(before, "kafka_log_logcleaner_cleaner_recopy_percent") == 0
        admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
        config = {"cleanup.policy": "compact", "segment.bytes": "1024",
                  "min.cleanable.dirty.ratio": "0.01"}  # fmt: skip
        admin.create_topics([NewTopic("squashed", 1, 1, config=config)])["squashed"].result(30)
        producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "linger.ms": 0})
        for i in range(200):  # 4 keys: most records are superseded
            producer.produce("squashed", key=b"k%d" % (i % 4), value=b"v" * 40)
            producer.flush(30)
        deadline = time.monotonic() + 30
        samples = before
        while time.monotonic() < deadline:
            samples, _ = scrape(url)
            if value(samples, "sluice_log_cleaner_bytes_read_total") > 0:
                break
            time.sleep(0.05)
        read = value(samples, "sluice_log_cleaner_bytes_read_total")
        written = value(samples, "sluice_log_cleaner_bytes_written_total")
        assert read > written > 0, "not cleaned within 30 s"
        recopy = value(samples, "kafka_log_logcleaner_cleaner_recopy_percent")
        assert 0 < recopy < 50  # a few records of 200 kept
        assert value(samples, "kafka_log_logcleaner_max_buffer_utilization_percent") >= 0
        assert value(samples, "kafka_log_logcleaner_deadthreadcount") == 0
        assert value(samples, "kafka_log_logcleanermanager_time_since_last_run_ms") < 30_000
        assert value(samples, uncleanable, logDirectory=log_dir) == 0
