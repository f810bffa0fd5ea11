"""EmbeddedBroker in its three forms (on the caller's loop, in a thread, as a subprocess), used by
real clients: ours, kafka-python (blocking) and confluent-kafka (librdkafka)."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from sluice.client import Consumer, Producer, TopicPartition
from sluice.testing import EmbeddedBroker

with warnings.catch_warnings():  # kafka-python's legacy importlib.resources use (3.11)
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka import KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as KpTP

BOUND = 20.0


async def roundtrip(bootstrap: str, topic: str, values: list[bytes]) -> list[bytes]:
    async with Producer(bootstrap) as p:
        for v in values:
            await p.send_and_wait(topic, v, partition=0)
    async with Consumer(bootstrap, auto_offset_reset="earliest") as c:
        c.assign([TopicPartition(topic, 0)])
        got = await asyncio.wait_for(c.getmany(timeout_ms=5_000, max_records=len(values)), BOUND)
    return [r.value for r in got.get(TopicPartition(topic, 0), [])]


async def test_async_form_on_the_callers_loop() -> None:
    broker = EmbeddedBroker(properties={"num.partitions": "2"})
    with pytest.raises(RuntimeError):
        _ = broker.bootstrap_servers
    async with broker as b:
        assert b.running and b.server is not None and b.port > 0
        assert b.bootstrap_servers == f"127.0.0.1:{b.port}"
        assert await roundtrip(b.bootstrap_servers, "t", [b"a", b"b"]) == [b"a", b"b"]
        async with Producer(b.bootstrap_servers) as p:
            assert await p.partitions_for("two") == [0, 1]  # properties reach the broker
        data_dir = b.data_dir
        assert (data_dir / "t-0").is_dir()
    assert not broker.running
    assert not data_dir.exists()  # the temporary data dir is removed
    with pytest.raises(RuntimeError, match="twice"):
        await broker.start()


def test_sync_form_with_a_blocking_client() -> None:
    with EmbeddedBroker() as b:
        producer = KafkaProducer(bootstrap_servers=b.bootstrap_servers)
        try:
            meta = producer.send("kp", b"hello", key=b"k").get(timeout=BOUND)
        finally:
            producer.close(timeout=5)
        consumer = KafkaConsumer(
            bootstrap_servers=b.bootstrap_servers, auto_offset_reset="earliest",
            consumer_timeout_ms=5_000,
        )  # fmt: skip
        try:
            consumer.assign([KpTP("kp", meta.partition)])
            got = next(iter(consumer))
        finally:
            consumer.close()
        assert (got.offset, got.key, got.value) == (meta.offset, b"k", b"hello")
        data_dir = b.data_dir
    assert not data_dir.exists()


async def test_sync_form_also_serves_async_tests() -> None:
    with EmbeddedBroker() as b:
        assert await roundtrip(b.bootstrap_servers, "t", [b"x"]) == [b"x"]


@pytest.mark.interop
def test_subprocess_form_with_confluent_kafka() -> None:
    from confluent_kafka import Consumer as CkConsumer
    from confluent_kafka import Producer as CkProducer
    from confluent_kafka import TopicPartition as CkTP

    with EmbeddedBroker(mode="subprocess") as b:
        assert b.process is not None and b.process.poll() is None
        producer = CkProducer({"bootstrap.servers": b.bootstrap_servers})
        producer.produce("ck", b"from-librdkafka", partition=0)
        assert producer.flush(BOUND) == 0
        consumer = CkConsumer({"bootstrap.servers": b.bootstrap_servers, "group.id": "unused",
                               "enable.auto.commit": False})  # fmt: skip
        try:
            consumer.assign([CkTP("ck", 0, 0)])
            msg = None
            for _ in range(50):
                msg = consumer.poll(0.2)
                if msg is not None:
                    break
            assert msg is not None and msg.error() is None and msg.value() == b"from-librdkafka"
        finally:
            consumer.close()
        proc = b.process
    assert proc.returncode == 0  # SIGTERM: graceful shutdown


async def test_given_data_dir_is_kept_and_reopened(tmp_path: Path) -> None:
    data = tmp_path / "keep"
    async with EmbeddedBroker(data) as b:
        await roundtrip(b.bootstrap_servers, "durable", [b"1", b"2"])
    assert (data / "durable-0").is_dir()
    async with EmbeddedBroker(data) as b:
        async with Consumer(b.bootstrap_servers, auto_offset_reset="earliest") as c:
            c.assign([TopicPartition("durable", 0)])
            got = await c.getmany(timeout_ms=5_000)
        assert [r.value for r in got[TopicPartition("durable", 0)]] == [b"1", b"2"]


@pytest.mark.parametrize("sync", [False, True])
async def test_port_in_use_fails_cleanly(sync: bool) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        broker = EmbeddedBroker(port=taken.getsockname()[1])
        with pytest.raises(OSError):
            if sync:
                broker.start_sync()
            else:
                await broker.start()
    assert not broker.running


def test_importing_sluice_stays_light() -> None:
    code = (
        "import sys, sluice, sluice.server; from sluice.testing import EmbeddedBroker; "
        "from sluice import EmbeddedBroker as E; assert E is EmbeddedBroker; "
        "heavy = {'sluice.server.server', 'sluice.server.storage.log', 'sluice.client'}; "
        "assert not heavy & set(sys.modules), heavy & set(sys.modules)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=60)
    assert result.returncode == 0, result.stderr.decode()


def test_set_leader_epoch_from_another_thread() -> None:
    """The ``with`` form: the epoch change runs on the broker's thread; Metadata and the
    request counters show it."""
    with EmbeddedBroker() as b:
        producer = KafkaProducer(bootstrap_servers=b.bootstrap_servers)
        try:
            producer.send("ep", b"x", partition=0).get(timeout=BOUND)
        finally:
            producer.close(timeout=5)
        assert b.set_leader_epoch("ep") == 1
        assert b.set_leader_epoch("ep", 0, epoch=5) == 5
        with pytest.raises(ValueError, match="not newer"):
            b.set_leader_epoch("ep", 0, epoch=5)
        from sluice.protocol.errors import UnknownTopicOrPartition

        with pytest.raises(UnknownTopicOrPartition):
            b.set_leader_epoch("ep", 3)
        assert b.call(lambda server: server.replica_manager.leader_epoch("ep", 0)) == 5  # type: ignore[union-attr]
        metrics = b.metrics()
        assert metrics["requests.Produce"] == 1  # the one Produce
        assert metrics.get("requests.OffsetForLeaderEpoch", 0) == 0


async def test_set_leader_epoch_on_the_callers_loop() -> None:
    async with EmbeddedBroker() as b:
        async with Producer(b.bootstrap_servers) as p:
            await p.send_and_wait("ep", b"x", partition=0)
            assert b.set_leader_epoch("ep") == 1
            await p.send_and_wait("ep", b"y", partition=0)
        log_ = b.call(lambda server: server.log_manager.get_log("ep", 0))  # type: ignore[union-attr]
        assert log_ is not None
        assert log_.end_offset_for_epoch(0) == (0, 1)  # epoch 1 began at offset 1
        assert log_.epoch_for_offset(1) == 1


def test_set_leader_epoch_needs_a_running_in_process_broker() -> None:
    b = EmbeddedBroker(mode="subprocess")
    with pytest.raises(RuntimeError, match="in-process"):
        b.set_leader_epoch("t")


def broker_config(bootstrap: str, key: str) -> tuple[str, bool]:
    """``(value, is_default)`` of a broker key as the broker reports it (DescribeConfigs, by
    confluent-kafka's AdminClient)."""
    from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType

    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource(ResourceType.BROKER, "0")
    configs = admin.describe_configs([resource])[resource].result(BOUND)
    entry = configs[key]
    return entry.value, entry.is_default


@pytest.mark.parametrize("mode", ["inprocess", "subprocess"])
def test_groups_rebalance_without_the_initial_delay(mode: str) -> None:
    """A test's consumer group does not wait Kafka's 3 s for more members (the effective
    value, as the broker reports it, in both forms)."""
    with EmbeddedBroker(mode=mode) as b:  # type: ignore[arg-type]
        value, _ = broker_config(b.bootstrap_servers, "group.initial.rebalance.delay.ms")
        assert value == "0"
        if mode == "inprocess":
            coordinator = b.call(lambda server: server.group_coordinator)
            assert coordinator is not None
            assert coordinator.config.initial_rebalance_delay_ms == 0


def test_an_explicit_rebalance_delay_wins() -> None:
    props = {"group.initial.rebalance.delay.ms": "250"}
    with EmbeddedBroker(properties=props) as b:
        value, _ = broker_config(b.bootstrap_servers, "group.initial.rebalance.delay.ms")
        assert value == "250"
        coordinator = b.call(lambda server: server.group_coordinator)
        assert coordinator is not None and coordinator.config.initial_rebalance_delay_ms == 250


APP = """
import io, json, logging, sys
import structlog
from sluice import EmbeddedBroker
if sys.argv[1] == "logging":
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(name)s: %(message)s")
if sys.argv[1] == "structlog":
    structlog.configure(processors=[structlog.processors.JSONRenderer()],
                        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr))
with EmbeddedBroker() as broker:
    print("app:", broker.bootstrap_servers)
"""


def run_app(setup: str) -> subprocess.CompletedProcess[str]:
    """A fresh interpreter (structlog's global configuration untouched) embedding a broker."""
    return subprocess.run(
        [sys.executable, "-c", APP, setup], capture_output=True, text=True, timeout=60, check=True
    )


@pytest.mark.slow
def test_an_in_process_broker_logs_through_the_applications_logging() -> None:
    # Nothing configured: the application's stdout is its own, and nothing below a warning.
    quiet = run_app("none")
    assert quiet.stdout.splitlines() == [f"app: {quiet.stdout.split()[-1]}"]
    assert quiet.stderr == ""
    # The standard library's logging configured: the broker's events go there.
    logged = run_app("logging")
    assert logged.stdout.startswith("app: ")
    (listening,) = [line for line in logged.stderr.splitlines() if " listening " in line]
    assert listening.startswith("sluice.server") and "port=" in listening, logged.stderr
    # structlog configured: left as the application set it.
    own = run_app("structlog")
    events = [json.loads(line)["event"] for line in own.stderr.splitlines()]
    assert "listening" in events and "stopped" in events
    assert own.stdout.startswith("app: ") and len(own.stdout.splitlines()) == 1


def test_ctrl_c_during_a_subprocess_start_stops_the_broker(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The broker runs in a session of its own (a terminal's Ctrl-C does not reach it): a start
    # interrupted while waiting for it to listen must stop it, or it outlives the program.
    broker = EmbeddedBroker(mode="subprocess")
    started: list[Path] = []

    def interrupted() -> int | None:
        assert broker.process is not None and broker.log_path is not None
        started.append(broker.log_path.parent)
        raise KeyboardInterrupt

    monkeypatch.setattr(broker, "_listening_port", interrupted)
    with pytest.raises(KeyboardInterrupt):
        broker.start_sync()
    assert broker.process is not None and broker.process.poll() is not None
    assert started and not started[0].exists()  # the scratch dir is gone
