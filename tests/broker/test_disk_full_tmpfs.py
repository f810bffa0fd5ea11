"""A broker process on a real file system that fills up (issue 13): a small tmpfs, so root only
(skipped otherwise, or where mounting is not allowed).

A ballast file leaves the broker about a megabyte; produces run until the broker answers
KAFKA_STORAGE_ERROR, and keep failing while the disk stays full, with one log line for the
partition and no traceback; removing the ballast lets appends resume (the resumed line counts
the failures); the disk is filled again and SIGTERM stops the broker with exit code 0; the
next start is clean and holds every acknowledged record, in order."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from sluice.protocol import errors
from sluice.protocol.records import iter_records
from tests.broker.test_server import batch, create_topic, fetch, produce
from tests.broker_util import BrokerProcess, WireClient, start_broker

pytestmark = pytest.mark.slow  # two broker processes

SIZE = 8 << 20
LEFT = 1 << 20


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Path]:
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    mount = tmp_path / "mnt"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={SIZE}", "tmpfs", str(mount)],
        capture_output=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def fill(mount: Path, leave: int) -> Path:
    """A ballast file that leaves ``leave`` bytes free on ``mount``."""
    ballast = mount / "ballast"
    free = os.statvfs(mount).f_bavail * os.statvfs(mount).f_frsize
    with open(ballast, "ab") as f:
        f.write(b"\0" * max(free - leave, 0))
    return ballast


def events(broker: BrokerProcess) -> list[dict[str, object]]:
    out = []
    for line in broker.log_text().splitlines():
        with contextlib.suppress(ValueError):
            out.append(json.loads(line))
    return out


async def produce_until_full(client: WireClient, start: int) -> int:
    """Produce 16 KiB batches until one fails; returns how many records were acknowledged."""
    acked = start
    for _ in range(10_000):
        part = await produce(client, "t", batch(16, start=acked, size=1000))
        if part.error_code:
            assert part.error_code == errors.KafkaStorageError.code, part
            return acked
        assert part.base_offset == acked
        acked += 16
    raise AssertionError("the disk never filled")


async def scenario(broker: BrokerProcess, mount: Path) -> int:
    client = await WireClient.connect("127.0.0.1", broker.port)
    try:
        assert await create_topic(client, "t") == 0
        ballast = fill(mount, LEFT)
        acked = await produce_until_full(client, 0)
        assert acked > 0
        for i in range(50):  # the disk stays full: every retry fails the same way
            part = await produce(
                client, "t", batch(16, start=acked, size=1000), acks=(1, -1)[i % 2]
            )
            assert part.error_code == errors.KafkaStorageError.code
        ballast.unlink()
        part = await produce(client, "t", batch(16, start=acked, size=1000))
        assert (part.error_code, part.base_offset) == (0, acked)
        acked += 16
        fill(mount, LEFT)
        return await produce_until_full(client, acked)
    finally:
        await client.close()


async def read_all(broker: BrokerProcess) -> list[bytes | None]:
    client = await WireClient.connect("127.0.0.1", broker.port)
    try:
        values: list[bytes | None] = []
        offset = 0
        while True:
            part = await fetch(client, "t", offset, partition_max_bytes=1 << 20)
            assert part.error_code == 0
            records = [r for _, r in iter_records(bytes(part.records or b""))]
            if not records:
                return values
            values.extend(r.key for r in records if r.offset >= offset)
            offset = records[-1].offset + 1
    finally:
        await client.close()


def test_disk_full_on_a_real_file_system(tmpfs: Path, tmp_path: Path) -> None:
    data = tmpfs / "data"
    overrides = ["log.flush.interval.ms=100"]
    broker = start_broker(data, overrides=overrides, log_path=tmp_path / "broker.log")
    try:
        acked = asyncio.run(scenario(broker, tmpfs))
        assert broker.stop() == 0, broker.log_text()[-3000:]
    finally:
        if broker.proc.poll() is None:
            broker.kill()
    logged = events(broker)
    failing = [e for e in logged if e["event"] == "appends failing: storage error"]
    assert [(e["topic"], e["partition"], e["errno"]) for e in failing] == [("t", 0, "ENOSPC")] * 2
    (resumed,) = [e for e in logged if e["event"] == "appends resumed"]
    assert resumed["failed"] == 51
    assert not [e for e in logged if "exception" in e or e["level"] == "critical"]
    assert [e for e in logged if e["event"] == "stopped"]
    (tmpfs / "ballast").unlink()
    broker = start_broker(data, overrides=overrides, log_path=tmp_path / "again.log")
    try:
        loaded = [e for e in events(broker) if e["event"] == "logs loaded"]
        assert loaded and loaded[0]["clean_shutdown"] is True
        assert asyncio.run(read_all(broker)) == [b"k%d" % i for i in range(acked)]
    finally:
        assert broker.stop() == 0
