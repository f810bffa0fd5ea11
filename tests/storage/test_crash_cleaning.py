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
from typing import NamedTuple

import pytest

from sluice.protocol import records as rec
from sluice.server.storage.dump_log import verify_partition
from sluice.server.storage.log import Isolation, Log
from sluice.server.storage.log_cleaner import Cleaner, log_to_clean
from sluice.server.storage.log_config import CleanerConfig, LogConfig
from sluice.server.storage.txn_index import AbortedTxn
from sluice.server.storage.vfs import DEFAULT_VFS
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
        for _, header, view in rec.iter_batches(info.slice.read_bytes()):
            for r in rec.decode_batch(view).records:  # (none in a batch kept empty)
                if r.offset >= position and not header.is_control:
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


# -- the same with transactions: the .txnindex travels with the swap -------------------------

TXN_CONFIG = LogConfig(
    cleanup_policy="compact",
    segment_bytes=500,
    index_interval_bytes=60,
    file_delete_delay_ms=0,
    delete_retention_ms=86_400_000,
)
ABORTED = {1, 4, 10}  # offsets of the aborted records of TXN_BASE


def _txn(pid: int, seq: int, key: bytes, value: bytes | None) -> bytes:
    return rec.build_batch(
        [(NOW, key, value)],
        producer_id=pid,
        producer_epoch=0,
        base_sequence=seq,
        is_transactional=True,
    )


def _write_txn_base(log: Log) -> None:
    """Committed (2, 3), aborted (1: offsets 1, 4 then 10) and open (4, at 17) transactions,
    plain records and a tombstone over small segments; ABORT markers at 5 and 11."""
    plain = [(NOW, b"a", b"v0")]
    steps: list[object] = [
        rec.build_batch(plain),  # 0
        _txn(1, 0, b"a", b"aborted1"),  # 1
        _txn(2, 0, b"b", b"c1"),  # 2
        "roll",
        rec.build_batch([(NOW, b"c", b"v3")]),  # 3
        _txn(1, 1, b"b", b"aborted2"),  # 4
        (1, False),  # 5
        "roll",
        (2, True),  # 6
        rec.build_batch([(NOW, b"a", None)]),  # 7
        _txn(3, 0, b"d", b"x"),  # 8
        "roll",
        (3, True),  # 9
        _txn(1, 2, b"c", b"aborted3"),  # 10
        (1, False),  # 11
        "roll",
        rec.build_batch([(NOW, b"b", b"v12")]),  # 12
        rec.build_batch([(NOW, b"d", b"v13")]),  # 13
        _txn(2, 1, b"e", b"y"),  # 14
        (2, True),  # 15
        "roll",
        rec.build_batch([(NOW, b"z", b"active")]),  # 16, the active segment
        _txn(4, 0, b"a", b"open"),  # 17: still open, the LSO
    ]
    for step in steps:
        if step == "roll":
            log.roll()
        elif isinstance(step, tuple):
            pid, commit = step
            log.append_end_txn_marker(pid, 0, 0, commit=commit, leader_epoch=0, timestamp=NOW)
        else:
            assert isinstance(step, bytes)
            log.append_as_leader(step, leader_epoch=0)
    log.maybe_increment_high_watermark(log.log_end_offset)


TXN_LEO = 18


def read_committed(log: Log) -> list[tuple[int, bytes | None, bytes | None]]:
    """What a read_committed consumer gets: per fetch, the data of the aborted transactions
    the ``.txnindex`` lists for its range dropped, markers skipped."""
    out: list[tuple[int, bytes | None, bytes | None]] = []
    start = log.log_start_offset
    for _ in range(1000):
        info = log.read(start, 1 << 30, Isolation.TXN_COMMITTED)
        if info.slice is None:
            return out
        batches = [(h, v) for _, h, v in rec.iter_batches(info.slice.read_bytes())]
        upper = batches[-1][0].next_offset
        aborted = sorted(
            (t.first_offset, t.producer_id) for t in log.collect_aborted_transactions(start, upper)
        )
        pids: set[int] = set()
        for header, view in batches:
            while aborted and aborted[0][0] <= header.last_offset:
                pids.add(aborted.pop(0)[1])
            if header.is_control:
                marker = rec.end_txn_marker_of(view)
                if marker is not None and not marker.commit:
                    pids.discard(header.producer_id)
            elif not (header.is_transactional and header.producer_id in pids):
                out += [(r.offset, r.key, r.value) for r in rec.decode_batch(view).records]
        start = upper
    raise AssertionError("read loop did not terminate")


def txn_state(log: Log) -> tuple[object, ...]:
    """What cleaning must not change, whatever the crash point: the producer state, the LSO
    and what read_committed gives as each key's latest record."""
    producers = {
        pid: (e.epoch, e.last_seq, e.current_txn_first_offset)
        for pid, e in log.producer_state().producers.items()
    }
    latest = {key: (offset, value) for offset, key, value in read_committed(log)}
    return producers, log.last_stable_offset, latest


@pytest.fixture(scope="module")
def txn_base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("txn-base")
    log = Log.open(root / "t-0", TXN_CONFIG, clock=lambda: NOW)
    _write_txn_base(log)
    log.close()
    return root


def _open_txn_log(directory: Path, vfs: CrashVFS | None = None, clean: bool = True) -> Log:
    return Log.open(
        directory,
        TXN_CONFIG,
        recovery_point=TXN_LEO,
        high_watermark=TXN_LEO,
        had_clean_shutdown=clean,
        clock=lambda: NOW,
        vfs=vfs if vfs is not None else DEFAULT_VFS,
    )


class Reference(NamedTuple):
    """The uninterrupted cleaning of TXN_BASE."""

    before: tuple[object, ...]
    after: tuple[object, ...]
    records: list[tuple[int, bytes | None, bytes | None]]
    aborted: list[AbortedTxn]


@pytest.fixture(scope="module")
def txn_reference(txn_base: Path, tmp_path_factory: pytest.TempPathFactory) -> Reference:
    work = tmp_path_factory.mktemp("txn-reference")
    shutil.copytree(txn_base / "t-0", work / "t-0")
    log = _open_txn_log(work / "t-0")
    before = txn_state(log)
    clean(log)
    result = Reference(
        before, txn_state(log), records(log), [e for s in log.segments for e in s.txn_index]
    )
    log.close()
    return result


def test_the_transactional_reference_cleaning(txn_reference: Reference) -> None:
    """The uninterrupted cleaning removes the aborted data, keeps the ABORT markers' entries in
    the cleaned segments and what read_committed sees."""
    assert txn_reference.after == txn_reference.before
    producers, lso, _ = txn_reference.before
    assert lso == 17 and producers[4] == (0, 0, 17)  # type: ignore[index]
    kept = {offset for offset, _, _ in txn_reference.records}
    assert not kept & ABORTED
    assert [(e.producer_id, e.last_offset) for e in txn_reference.aborted] == [
        (1, 5),
        (1, 11),
    ]


def test_crash_at_every_step_of_a_transactional_cleaning(
    txn_base: Path, tmp_path: Path, txn_reference: Reference
) -> None:
    """Crashed at every step (the ``.txnindex.cleaned`` writes and renames among them):
    reopened after an unclean stop, read_committed gives each key's latest record as before,
    the producer state and LSO are the same, the ``.txnindex`` entries are those of the
    uninterrupted cleaning (which are the original ones) and cover every aborted record left;
    the next cleaning leaves the uninterrupted cleaning's records."""
    dry_dir = tmp_path / "dry"
    shutil.copytree(txn_base, dry_dir)
    vfs = CrashVFS(dry_dir)
    log = _open_txn_log(dry_dir / "t-0", vfs)
    start = len(vfs.steps)
    clean(log)
    vfs.release()
    steps = [(s.kind, s.path.name) for s in vfs.steps]
    names = [name for _, name in steps[start:]]
    assert any(n.endswith(".txnindex.cleaned") for n in names), steps[start:]
    assert any(n.endswith(".txnindex.swap") for n in names), steps[start:]
    runs = 0
    for crash_at in range(start, len(steps)):
        kind = steps[crash_at][0]
        for mode in ("process", "power"):
            for tear in TEARS if kind == "pwrite" and mode == "process" else (0,):
                work = tmp_path / f"run-{runs}"
                runs += 1
                shutil.copytree(txn_base, work)
                run_vfs = CrashVFS(work)
                run_log = _open_txn_log(work / "t-0", run_vfs)
                run_vfs.crash_at, run_vfs.tear = crash_at, tear
                with pytest.raises(Crash):
                    clean(run_log)
                run_vfs.release()
                image = tmp_path / f"image-{runs}"
                if mode == "process":
                    run_vfs.process_crash_image(image)
                else:
                    run_vfs.power_loss_image(image)
                where = f"crash at step {crash_at} {steps[crash_at]}, {mode}, tear {tear}"
                reopened = _open_txn_log(image / "t-0", clean=False)
                try:
                    left = [n.name for n in (image / "t-0").iterdir()]
                    assert not [n for n in left if n.endswith((".cleaned", ".swap"))], where
                    assert txn_state(reopened) == txn_reference.before, where
                    # Both cleanings keep both entries (each met its data): neither lost nor
                    # doubled, whichever segments were swapped in.
                    entries = [e for s in reopened.segments for e in s.txn_index]
                    assert entries == txn_reference.aborted, where
                    for offset, _, _ in records(reopened):
                        if offset in ABORTED:
                            assert any(
                                e.first_offset <= offset <= e.last_offset for e in entries
                            ), (where, offset, entries)
                    clean(reopened)
                    assert records(reopened) == txn_reference.records, where
                    assert txn_state(reopened) == txn_reference.after, where
                    # A group swapped in before the crash is cleaned a second time: its
                    # abort has no data left, the entry may go (with a horizon on its marker).
                    after = [e for s in reopened.segments for e in s.txn_index]
                    assert set(after) <= set(entries), where
                finally:
                    reopened.close()
                assert verify_partition(image / "t-0") == [], where
                shutil.rmtree(work)
                shutil.rmtree(image)
    assert runs >= 2 * (len(steps) - start)
