"""An I/O error in the middle of a segment swap (``Log.replace_segments``) takes the log
offline instead of leaving a hole in its segment list (Kafka's ``LogDirFailureChannel``):
reads and writes answer KAFKA_STORAGE_ERROR until a restart, the rest of the broker keeps
serving, and the next start completes or rolls back the swap with nothing lost.

The storage tests' fault-injecting VFS (:class:`tests.storage.crashfs.CrashVFS`, ``fail_at``)
fails each step of the swap in turn with EIO; a broker in this process runs its cleaner on a
VFS that fails a ``.swap`` rename.
"""

from __future__ import annotations

import asyncio
import errno
import os
import shutil
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from sluice.protocol import errors
from sluice.protocol import messages as m
from sluice.protocol import records as rec
from sluice.server.config import Config
from sluice.server.server import Server
from sluice.server.storage.layout import CLEANER_OFFSET_CHECKPOINT
from sluice.server.storage.log import Isolation
from sluice.server.storage.vfs import OSVFS
from tests.broker.test_server import fetch, produce
from tests.broker_util import WireClient
from tests.storage import test_crash_cleaning as crash_cleaning
from tests.storage.test_crash_cleaning import NOW, Run, check_reopened, clean

# The crash tests' fixtures: their partition, and the result of an uninterrupted cleaning.
base = crash_cleaning.base
cleaned_once = crash_cleaning.cleaned_once


def test_an_io_error_at_every_step_of_a_swap_takes_the_log_offline(
    base: Path, tmp_path: Path, cleaned_once: list[tuple]
) -> None:
    dry = Run(base, tmp_path / "dry")
    clean(dry.log)
    dry.vfs.release()
    steps = [(s.kind, s.path.name) for s in dry.vfs.steps]
    # The swap: from the first rename of a cleaned file to the directory fsync after it.
    first = next(i for i, (k, n) in enumerate(steps) if k == "rename" and n.endswith(".cleaned"))
    last = max(i for i, (k, _n) in enumerate(steps) if k == "fsync_dir")
    swap_steps = range(first, last)
    assert {k for k, _n in steps[first:last]} >= {"rename", "remove"}, steps[first:last]
    for fail_at in swap_steps:
        kind, name = steps[fail_at]
        work = tmp_path / f"run-{fail_at}"
        run = Run(base, work)
        run.vfs.fail_at = fail_at
        with capture_logs() as logs, pytest.raises(OSError) as raised:
            clean(run.log)
        assert raised.value.errno == errno.EIO, (fail_at, kind, name)
        log = run.log
        assert log.offline and log.closed, (fail_at, kind, name)
        assert [e["event"] for e in logs if e["log_level"] == "error"] == [
            "log taken offline until restart: the next start completes or rolls back"
        ]
        with pytest.raises(errors.KafkaStorageError):
            log.read(0, 1 << 20, Isolation.LOG_END)
        with pytest.raises(errors.KafkaStorageError):
            log.append_as_leader(rec.build_batch([(NOW, b"a", b"after")]))
        with pytest.raises(errors.KafkaStorageError):
            log.fetch_offset_by_timestamp(NOW)
        log.close()  # closes nothing more, raises nothing
        run.vfs.release()
        try:
            # As the process left the disk: the next start completes or rolls back the swap.
            check_reopened(work / "t-0", cleaned_once)
        except AssertionError as exc:
            raise AssertionError(f"I/O error at step {fail_at} ({kind} {name}): {exc}") from exc
        shutil.rmtree(work)


class FailingSwapVFS(OSVFS):
    """The OS file system, but renaming a ``.swap`` file into place fails with EIO (once)."""

    def __init__(self) -> None:
        self.armed = True

    def rename(self, src: Path, dst: Path) -> None:
        if self.armed and str(src).endswith(".log.swap"):
            self.armed = False
            raise OSError(errno.EIO, os.strerror(errno.EIO), str(src))
        super().rename(src, dst)


async def test_an_offline_partition_answers_storage_error_and_the_broker_keeps_serving(
    tmp_path: Path,
) -> None:
    def config() -> Config:
        return Config.load(
            None,
            [
                "listeners=PLAINTEXT://127.0.0.1:0",
                f"log.dirs={tmp_path / 'data'}",
                "log.cleaner.backoff.ms=20",
                "log.cleaner.min.cleanable.ratio=0.01",
            ],
        )

    vfs = FailingSwapVFS()
    server = Server(config(), vfs=vfs)
    await server.start()
    latest: dict[bytes, bytes] = {}
    try:
        logs = server.log_manager
        assert logs is not None
        logs.create_topic("compacted", 1, {"cleanup.policy": "compact", "segment.bytes": "300"})
        logs.create_topic("plain", 1)
        client = await WireClient.connect("127.0.0.1", server.port)
        compacted = logs.get_log("compacted", 0)
        assert compacted is not None
        storage_error = errors.KafkaStorageError.code
        with capture_logs() as captured:
            async with asyncio.timeout(30):
                i = 0
                while not compacted.offline:
                    key, value = b"k%d" % (i % 4), b"v%d" % i
                    records = rec.build_batch([(NOW + i, key, value)])
                    code = (await produce(client, "compacted", records)).error_code
                    if code == 0:  # acknowledged: must survive
                        latest[key] = value
                    else:  # refused only once the log went offline
                        assert code == storage_error and compacted.offline
                    i += 1
                    await asyncio.sleep(0.005)
        assert not vfs.armed
        assert any(e["event"].startswith("log taken offline") for e in captured)
        assert (await fetch(client, "compacted", 0)).error_code == storage_error
        records = rec.build_batch([(NOW, b"k0", b"refused")])
        assert (await produce(client, "compacted", records)).error_code == storage_error
        # The rest of the broker serves on.
        assert (
            await produce(client, "plain", rec.build_batch([(NOW, b"x", b"y")]))
        ).error_code == 0
        plain = await fetch(client, "plain", 0)
        assert plain.error_code == 0 and plain.records
        # DescribeLogDirs lists the offline log in no dir (Kafka lists only online dirs'
        # logs); the dir itself, with its other logs, answers no error.
        dirs = await client.request(m.DescribeLogDirs.key, 4, m.DescribeLogDirsRequest(topics=[
            m.DescribeLogDirsRequest.DescribableLogDirTopic(topic=t, partitions=[0])
            for t in ("compacted", "plain")
        ]))  # fmt: skip
        (result,) = dirs.results
        assert result.error_code == 0
        assert [(t.name, [p.partition_index for p in t.partitions]) for t in result.topics] == [
            ("plain", [0])
        ]
        await client.close()
    finally:
        await server.shutdown()
    assert not (tmp_path / "data" / ".kafka_cleanshutdown").exists()
    # The next start (a healthy disk) completes the swap; every key's latest value is there.
    server = Server(config())
    await server.start()
    try:
        logs = server.log_manager
        assert logs is not None
        log = logs.get_log("compacted", 0)
        assert log is not None and not log.offline
        seen: dict[bytes, bytes] = {}
        position = log.log_start_offset
        while position < log.high_watermark:
            info = log.read(position, 1 << 20, Isolation.HIGH_WATERMARK)
            assert info.slice is not None
            for header, record in rec.iter_records(info.slice.read_bytes()):
                if record.offset >= position and record.key is not None:
                    assert record.value is not None
                    seen[record.key] = record.value
                position = header.last_offset + 1
        assert seen == latest
        assert not [p for p in log.directory.iterdir() if p.name.endswith((".swap", ".cleaned"))]
        # and the cleaner takes it up again: the next cleaning completes
        assert logs.cleaner is not None
        cleaner = logs.cleaner
        async with asyncio.timeout(30):
            while ("compacted", 0) not in cleaner.checkpoints:
                await asyncio.sleep(0.02)
        assert (tmp_path / "data" / CLEANER_OFFSET_CHECKPOINT).exists()
    finally:
        await server.shutdown()
