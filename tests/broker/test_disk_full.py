"""A broker on a full disk (issue 13), in-process with :class:`tests.storage.fullfs.FullDiskVFS`
as its storage's file system: produces get KAFKA_STORAGE_ERROR (56, retriable), not
UNKNOWN_SERVER_ERROR; one log line per partition when its appends start failing and one with
the count when they resume (or at shutdown), no traceback per request; a shutdown on the full
disk raises nothing and the next start is clean, with every acknowledged record.

The same with a real file system that fills up (a small tmpfs, as root) and SIGTERM to a broker
process: ``tests/broker/test_disk_full_tmpfs.py``."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from sluice.protocol import errors
from sluice.server.config import Config
from sluice.server.server import Server
from tests.broker.test_server import batch, create_topic, fetch, produce
from tests.broker_util import WireClient
from tests.storage.fullfs import FullDiskVFS


async def start(tmp_path: Path, vfs: FullDiskVFS | None = None) -> Server:
    config = Config.load(None, ["listeners=PLAINTEXT://127.0.0.1:0", f"log.dirs={tmp_path}"])
    server = Server(config, vfs=vfs)
    await server.start()
    return server


def events(captured: list[dict[str, object]], name: str) -> list[dict[str, object]]:
    return [e for e in captured if e["event"] == name]


@pytest.mark.parametrize("error", [errno.ENOSPC, errno.EIO])
async def test_disk_full_is_a_storage_error_logged_once_per_episode(
    tmp_path: Path, error: int
) -> None:
    vfs = FullDiskVFS(error)
    server = await start(tmp_path, vfs)
    client = await WireClient.connect("127.0.0.1", server.port)
    try:
        assert await create_topic(client, "t", 2) == 0
        for p in (0, 1):
            assert (await produce(client, "t", batch(3), partition=p)).error_code == 0
        vfs.full = True
        with capture_logs() as captured:
            for attempt in range(30):
                part = await produce(client, "t", batch(2), partition=attempt % 2,
                                     acks=(1, -1)[attempt % 2])  # fmt: skip
                assert part.error_code == errors.KafkaStorageError.code
                assert part.error_message == os.strerror(error)
            vfs.full = False
            assert (await produce(client, "t", batch(4), partition=0)).error_code == 0
        failing = events(captured, "appends failing: storage error")
        assert sorted((e["topic"], e["partition"]) for e in failing) == [("t", 0), ("t", 1)]
        assert {e["errno"] for e in failing} == {errno.errorcode[error]}
        (resumed,) = events(captured, "appends resumed")
        assert (resumed["partition"], resumed["failed"]) == (0, 15)
        assert not [e for e in captured if "exc_info" in e or e["log_level"] == "exception"]
        assert events(captured, "append failed") == []
        fetched = await fetch(client, "t", 0)
        assert fetched.high_watermark == 7  # 3 + 4: nothing of the failed appends
        vfs.full = True
        assert (await produce(client, "t", batch(1), partition=1)).error_code == 56
    finally:
        await client.close()
        with capture_logs() as captured:
            await server.shutdown()  # on the full disk: raises nothing
    (still,) = events(captured, "appends still failing at shutdown")
    assert (still["partition"], still["failed"]) == (1, 16)
    assert events(captured, "stopped")
    server = await start(tmp_path)
    try:
        assert server.log_manager is not None and server.log_manager.had_clean_shutdown
        ends = {p: server.log_manager.get_log("t", p).log_end_offset for p in (0, 1)}  # type: ignore[union-attr]
        assert ends == {0: 7, 1: 3}
    finally:
        await server.shutdown()


async def test_a_produce_whose_flush_failed_is_not_duplicated_by_its_retry(tmp_path: Path) -> None:
    """``log.flush.interval.messages=1``: the Produce is written, its flush fails (fsync EIO);
    the client gets KAFKA_STORAGE_ERROR (retriable) and sends it again, and the log holds it
    once (before: twice, the first copy behind the error)."""
    vfs = FullDiskVFS(errno.EIO)
    config = Config.load(
        None,
        [
            "listeners=PLAINTEXT://127.0.0.1:0",
            f"log.dirs={tmp_path}",
            "log.flush.interval.messages=1",
        ],
    )
    server = Server(config, vfs=vfs)
    await server.start()
    client = await WireClient.connect("127.0.0.1", server.port)
    try:
        assert await create_topic(client, "t") == 0
        assert (await produce(client, "t", batch(2))).error_code == 0
        vfs.fail_fsync = True
        part = await produce(client, "t", batch(3, start=2))
        assert part.error_code == errors.KafkaStorageError.code
        vfs.fail_fsync = False
        part = await produce(client, "t", batch(3, start=2))  # the client's retry
        assert (part.error_code, part.base_offset) == (0, 2)
        fetched = await fetch(client, "t", 0)
        assert fetched.high_watermark == 5
    finally:
        await client.close()
        await server.shutdown()
