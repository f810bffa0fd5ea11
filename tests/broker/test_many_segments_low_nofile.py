"""More segments than open files (issue 13): a broker whose partitions hold far more segment
files than its ``RLIMIT_NOFILE`` allows open at once starts, says what bound it keeps, and
serves every old segment of every partition, byte for byte.

The data (30 partitions of 10 segments each, every segment with both indexes mapped: about 900
descriptors if all were open) is written by the storage layer in this process; the broker runs
as a subprocess limited to 256 descriptors and is read by confluent-kafka with zero copy on
(sendfile from segments the open-file cache opens and closes under it) and off.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sluice.protocol import records as rec
from sluice.server.storage.log_config import LogConfig
from sluice.server.storage.log_manager import LogManager
from tests.broker_util import start_broker

pytestmark = pytest.mark.slow  # a broker process reading ~1 MB through a client

NOFILE = 256
PARTITIONS = 30
BATCHES = 100  # per partition: ~10 segments of 4 KiB
RECORDS_PER_BATCH = 3
TOPIC_CONFIG = {"segment.bytes": "4096", "index.interval.bytes": "128"}


def value(partition: int, offset: int) -> bytes:
    return f"p{partition}-o{offset}-".encode().ljust(100, b"x")


def write_data(data: Path) -> int:
    """The topic, written and closed cleanly; returns the number of segments."""
    manager = LogManager(data, LogConfig())
    manager.open()
    try:
        logs = manager.create_topic("wide", PARTITIONS, TOPIC_CONFIG)
        for partition, log in enumerate(logs):
            for b in range(BATCHES):
                first = b * RECORDS_PER_BATCH
                records = [
                    (1_000 + first + i, None, value(partition, first + i))
                    for i in range(RECORDS_PER_BATCH)
                ]
                log.append_as_leader(rec.build_batch(records))
            log.maybe_increment_high_watermark(log.log_end_offset)
        return sum(len(log.segments) for log in logs)
    finally:
        manager.close()


def consume_all(bootstrap: str, zero_copy_note: str) -> dict[int, list[tuple[int, bytes]]]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{zero_copy_note}",
            "enable.auto.commit": False,
            # Small fetches: many reads, each from an old segment of some partition.
            "max.partition.fetch.bytes": 1024,
        }
    )
    try:
        consumer.assign([TopicPartition("wide", p, 0) for p in range(PARTITIONS)])
        got: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(PARTITIONS)}
        wanted = PARTITIONS * BATCHES * RECORDS_PER_BATCH
        seen = 0
        for _ in range(20_000):  # bounded: each poll waits at most 1 s
            if seen == wanted:
                break
            msg = consumer.poll(1.0)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            partition, offset, data = msg.partition(), msg.offset(), msg.value()
            assert partition is not None and offset is not None and data is not None
            got[partition].append((offset, data))
            seen += 1
        return got
    finally:
        consumer.close()


def test_broker_starts_and_serves_old_segments_beyond_the_open_file_limit(tmp_path: Path) -> None:
    data = tmp_path / "data"
    segments = write_data(data)
    assert segments * 3 > 3 * NOFILE  # every segment open would take ~3x the limit

    broker = start_broker(data, nofile=NOFILE)
    try:
        for zero_copy in ("true", "false"):
            if zero_copy == "false":
                assert broker.stop() == 0, broker.log_text()[-3000:]
                broker = start_broker(
                    data,
                    nofile=NOFILE,
                    overrides=["sluice.fetch.zero.copy=false"],
                    log_path=tmp_path / "copying.log",
                )
            got = consume_all(broker.bootstrap, zero_copy)
            for partition in range(PARTITIONS):
                expected = [(o, value(partition, o)) for o in range(BATCHES * RECORDS_PER_BATCH)]
                assert got[partition] == expected, f"partition {partition} (zero copy {zero_copy})"
        assert broker.stop() == 0, broker.log_text()[-3000:]
    finally:
        if broker.proc.poll() is None:
            broker.kill()
    text = broker.log_text()
    assert '"exception"' not in text, text[-3000:]
    events = [json.loads(line) for line in text.splitlines() if line.startswith("{")]
    bound = [e for e in events if e.get("event") == "segment files bounded"]
    assert bound, text[-3000:]
    assert bound[0]["nofile"] == NOFILE
    assert 0 < bound[0]["max_open_files"] < NOFILE
    loaded = next(e for e in events if e.get("event") == "logs loaded")
    assert loaded["segments"] >= segments  # (and __consumer_offsets)
    assert loaded["evictions"] > 0 and loaded["open_files"] <= loaded["max_open_files"]
    print(bound[0], loaded)
