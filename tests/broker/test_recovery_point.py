"""Restart after kill -9 reads only what was written since the last flush (issue 13).

A broker process with periodic flushes (``log.flush.interval.ms``): write ~8 MB, wait until a
flush moved the partition's recovery point to the log end and it is in the
``recovery-point-offset-checkpoint`` file, write a few small batches more, kill -9, restart.
The restart's "recovering unflushed segment" line must show it scanned about those few batches
(before: the whole 8 MB active segment, and the checkpoint lagged by up to a minute), and every
record is still there.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest

from sluice.protocol.records import iter_batches
from sluice.server.storage.checkpoint import OffsetCheckpointFile
from sluice.server.storage.layout import RECOVERY_POINT_CHECKPOINT
from tests.broker.test_server import batch, create_topic, fetch, produce
from tests.broker_util import WireClient, start_broker

pytestmark = pytest.mark.slow  # two broker processes, 8 MB

BATCHES_PER_REQUEST = 500  # ~2 KB each: ~1 MB per Produce
REQUESTS = 8
INDEX_INTERVAL = 4096  # Kafka's index.interval.bytes default


async def write(port: int, requests: int, per_request: int, size: int, first: int) -> int:
    """Produce ``requests`` requests of ``per_request`` 2-record batches; returns records."""
    client = await WireClient.connect("127.0.0.1", port)
    try:
        if first == 0:
            assert await create_topic(client, "rp") == 0
        n = first
        for _ in range(requests):
            records = b"".join(batch(2, start=n + 2 * k, size=size) for k in range(per_request))
            assert (await produce(client, "rp", records)).error_code == 0
            n += 2 * per_request
        return n - first
    finally:
        await client.close()


async def count_records(port: int) -> int:
    client = await WireClient.connect("127.0.0.1", port)
    try:
        offset = 0
        for _ in range(1000):  # bounded paging
            part = await fetch(client, "rp", offset)
            assert part.error_code == 0
            if not part.records:
                return offset
            for _pos, header, _b in iter_batches(bytes(part.records)):
                offset = header.next_offset
        raise AssertionError("paging did not end")
    finally:
        await client.close()


def checkpointed_recovery_point(data: Path) -> int:
    try:
        return OffsetCheckpointFile(data / RECOVERY_POINT_CHECKPOINT).read().get(("rp", 0), 0)
    except FileNotFoundError:
        return 0


def test_restart_after_kill_scans_only_what_came_after_the_flush(tmp_path: Path) -> None:
    data = tmp_path / "data"
    overrides = ["log.flush.interval.ms=200", "log.flush.scheduler.interval.ms=100"]
    broker = start_broker(data, overrides=overrides)
    try:
        flushed = asyncio.run(write(broker.port, REQUESTS, BATCHES_PER_REQUEST, 1000, 0))
        deadline = time.monotonic() + 30  # bounded: until a flush's recovery point is on disk
        while checkpointed_recovery_point(data) < flushed and time.monotonic() < deadline:
            time.sleep(0.05)
        assert checkpointed_recovery_point(data) == flushed
        segment = next((data / "rp-0").glob("*.log"))
        size_at_flush = segment.stat().st_size
        added = asyncio.run(write(broker.port, 3, 1, 10, flushed))
        tail = segment.stat().st_size - size_at_flush
    finally:
        broker.kill()
    assert size_at_flush > 8_000_000 and tail < 500
    broker = start_broker(data, overrides=overrides, log_path=tmp_path / "restart.log")
    try:
        lines = [json.loads(line) for line in broker.log_text().splitlines() if "{" in line]
        recovering = [x for x in lines if x.get("event") == "recovering unflushed segment"]
        assert recovering and all("rp-0" in x["dir"] for x in recovering), lines[:30]
        scanned = sum(x["scanned_bytes"] for x in recovering)
        # the tail, from the last index entry before it (at most an index interval + a batch)
        assert tail <= scanned < tail + INDEX_INTERVAL + 2100, (scanned, tail, size_at_flush)
        assert asyncio.run(count_records(broker.port)) == flushed + added
    finally:
        assert broker.stop() == 0
