"""Crashes in the middle of a log cleaning (kill -9 and power loss at every step).

A compacted partition (keyed updates and tombstones over several segments, cleanly closed) is
cleaned through :class:`tests.storage.crashfs.CrashVFS`: once to learn the steps (creating and
writing the ``.cleaned`` files, fsyncing them, the renames to ``.swap``, to ``.deleted`` and
into place, the removals, the directory fsync), then once per step crashed there (a ``pwrite``
torn at several byte counts), the disk taken as a killed process or a power loss leaves it,
and reopened with the real OS VFS as after an unclean stop. Whatever the crash point:

* the log opens and nothing is lost: every key's latest record is there, and every record is
  one the partition had (no duplicate, no foreign one), offsets strictly increasing;
* no ``.cleaned`` / ``.swap`` file is left and ``dump-log --verify`` finds nothing;
* the next cleaning completes and leaves exactly the compacted log an uninterrupted one does.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from sluice.protocol import records as rec
from sluice.server.storage.dump_log import verify_partition
from sluice.server.storage.log import Isolation, Log
from sluice.server.storage.log_cleaner import Cleaner, log_to_clean
from sluice.server.storage.log_config import CleanerConfig, LogConfig
from tests.storage.crashfs import Crash, CrashVFS

NOW = 1_700_000_000_000
CONFIG = LogConfig(
    cleanup_policy="compact",
    segment_bytes=500,
    index_interval_bytes=60,
    file_delete_delay_ms=0,
    delete_retention_ms=86_400_000,
)
TEARS = (0, 9)
KEYS = [b"a", b"b", b"c", b"d"]


def writes() -> list[tuple[bytes, bytes | None]]:
    out: list[tuple[bytes, bytes | None]] = []
    for i in range(16):
        key = KEYS[i % len(KEYS)] if i % 5 else KEYS[(i // 5) % len(KEYS)]
        out.append((key, None if i % 7 == 6 else b"value-%d" % i))
    return out


WRITES = writes()
ORIGINAL = [(offset, key, value) for offset, (key, value) in enumerate(WRITES)]
LATEST = {key: (offset, key, value) for offset, key, value in ORIGINAL}
# The active segment (never cleaned) holds the last write; the rest is cleanable.
LEO = len(WRITES)


def records(log: Log) -> list[tuple[int, bytes | None, bytes | None]]:
    """Every record, read segment by segment as a follower reads (to LEO)."""
    out: list[tuple[int, bytes | None, bytes | None]] = []
    position = log.log_start_offset
    for _ in range(1000):
        info = log.read(position, 1 << 30, Isolation.LOG_END)
        if info.slice is None:
            return out
        for header, r in rec.iter_records(info.slice.read_bytes()):
            if r.offset >= position:
                out.append((r.offset, r.key, r.value))
            last = header.last_offset
        position = last + 1
    raise AssertionError("read loop did not terminate")


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("base")
    log = Log.open(root / "t-0", CONFIG, clock=lambda: NOW)
    for i, (key, value) in enumerate(WRITES[:-1]):
        log.append_as_leader(rec.build_batch([(NOW, key, value)]))
        if i % 3 == 2:  # small segments: a cleaning merges them, several into one
            log.roll()
    log.roll()
    log.append_as_leader(rec.build_batch([(NOW, *WRITES[-1])]))
    log.maybe_increment_high_watermark(log.log_end_offset)
    log.close()
    assert len(log.segments) >= 6
    return root


def clean(log: Log) -> int:
    ltc = log_to_clean(log, None, NOW)
    cleaner = Cleaner(CleanerConfig(dedupe_buffer_size=24 * 100))
    return cleaner.clean(log, ltc.first_dirty, ltc.first_uncleanable, NOW)


@pytest.fixture(scope="module")
def cleaned_once(base: Path, tmp_path_factory: pytest.TempPathFactory) -> list[tuple]:
    work = tmp_path_factory.mktemp("reference")
    shutil.copytree(base / "t-0", work / "t-0")
    log = Log.open(work / "t-0", CONFIG, recovery_point=LEO, high_watermark=LEO, clock=lambda: NOW)
    clean(log)
    result = records(log)
    log.close()
    return result


class Run:
    def __init__(self, base: Path, work: Path) -> None:
        shutil.copytree(base, work)
        self.vfs = CrashVFS(work)
        self.log = Log.open(
            work / "t-0",
            CONFIG,
            recovery_point=LEO,
            high_watermark=LEO,
            vfs=self.vfs,
            clock=lambda: NOW,
        )
        self.start = len(self.vfs.steps)


def check_reopened(directory: Path, reference: list[tuple]) -> None:
    log = Log.open(
        directory,
        CONFIG,
        recovery_point=LEO,
        high_watermark=LEO,
        had_clean_shutdown=False,
        clock=lambda: NOW,
    )
    try:
        assert not [p.name for p in directory.iterdir() if p.name.endswith((".cleaned", ".swap"))]
        got = records(log)
        offsets = [o for o, _, _ in got]
        assert offsets == sorted(set(offsets))
        assert set(got) <= set(ORIGINAL), "a record the partition never had"
        present = set(got)
        for key, latest in LATEST.items():
            if latest[2] is not None:
                assert latest in present, f"latest record of {key!r} lost"
        assert log.log_end_offset == LEO
        # The next cleaning completes, with the result of an uninterrupted one.
        clean(log)
        assert records(log) == reference
    finally:
        log.close()
    assert verify_partition(directory) == []


def test_crash_at_every_step_of_a_cleaning(
    base: Path, tmp_path: Path, cleaned_once: list[tuple]
) -> None:
    dry = Run(base, tmp_path / "dry")
    clean(dry.log)
    dry.vfs.release()
    steps = [(s.kind, s.path.name) for s in dry.vfs.steps]
    kinds = {kind for kind, _ in steps[dry.start :]}
    assert {"create", "pwrite", "fsync", "rename", "fsync_dir"} <= kinds, steps[dry.start :]
    assert any(name.endswith(".swap") for kind, name in steps if kind == "rename")
    # Groups of several segments: a swap replaces segments of other base offsets too.
    deleted = [name for kind, name in steps if kind == "rename" and name.endswith(".log")]
    swapped = [name for kind, name in steps if kind == "rename" and name.endswith(".log.swap")]
    assert len(deleted) > len(swapped) >= 2, steps[dry.start :]
    runs = 0
    for crash_at in range(dry.start, len(steps)):
        kind, file_name = steps[crash_at]
        for mode in ("process", "power"):
            for tear in TEARS if kind == "pwrite" and mode == "process" else (0,):
                work = tmp_path / f"run-{runs}"
                runs += 1
                run = Run(base, work)
                run.vfs.crash_at, run.vfs.tear = crash_at, tear
                with pytest.raises(Crash):
                    clean(run.log)
                assert (run.vfs.steps[crash_at].kind, run.vfs.steps[crash_at].path.name) == (
                    kind,
                    file_name,
                )
                run.vfs.release()
                image = tmp_path / f"image-{runs}"
                if mode == "process":
                    run.vfs.process_crash_image(image)
                else:
                    run.vfs.power_loss_image(image)
                try:
                    check_reopened(image / "t-0", cleaned_once)
                except AssertionError as exc:
                    raise AssertionError(
                        f"crash at step {crash_at} ({kind} {file_name}), {mode} image, "
                        f"tear {tear}: {exc}"
                    ) from exc
                shutil.rmtree(work)
                shutil.rmtree(image)
    assert runs >= 2 * (len(steps) - dry.start)


def test_the_uninterrupted_cleaning_compacts(cleaned_once: list[tuple]) -> None:
    below_active = [key for offset, key, _ in cleaned_once if offset < LEO - 1]
    assert len(below_active) == len(set(below_active))  # one record per key below the active
    assert len(cleaned_once) < len(ORIGINAL)
