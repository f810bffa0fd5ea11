"""The log cleaner and transactions (Kafka's ``CleanedTransactionMetadata``): aborted data
never enters the offset map and leaves the log, markers stay while their transaction has data
and then until their delete horizon, the cleaned segments keep the ``.txnindex`` entries of the
aborts whose markers they keep, every producer's last batch stays.

The model test writes committed, aborted and open transactions of three producers interleaved
with non-transactional records and tombstones, and cleans the log several times (small offset
maps: several passes) with the clock moving. After each cleaning a read_committed reader (as in
``test_log_transactions``: ``collect_aborted_transactions`` on the cleaned log) sees, for every
key, the model's latest committed value; no aborted record is left below the cleaned offset,
and the ``.txnindex`` covers every aborted record left; a marker is gone only past a horizon a
previous cleaning stamped on it, and never while its transaction has a batch left; the producer
state rebuilt from the cleaned files (no snapshot) is the live one and reads the same;
``dump-log --verify`` finds nothing. Then, every transaction decided and a few cleanings past
the horizons, no aborted record and no marker whose transaction has no batch left remain.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from sluice.protocol import records as rec
from sluice.server.storage import dump_log
from sluice.server.storage.log import Isolation, Log
from sluice.server.storage.log_cleaner import Cleaner, log_to_clean
from sluice.server.storage.log_config import CleanerConfig, LogConfig
from sluice.server.storage.txn_index import AbortedTxn

NOW = 1_700_000_000_000
RETENTION = 10_000  # delete.retention.ms


class Clock:
    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> int:
        return self.now


def config(**overrides: object) -> LogConfig:
    values: dict[str, object] = {
        "cleanup_policy": "compact",
        "segment_bytes": 400,
        "index_interval_bytes": 100,
        "delete_retention_ms": RETENTION,
        "min_cleanable_dirty_ratio": 0.0,
        "file_delete_delay_ms": 0,
    }
    values.update(overrides)
    return LogConfig(**values)  # type: ignore[arg-type]


Pair = tuple[bytes, bytes | None]


def batch(pairs: list[Pair], pid: int = -1, seq: int = -1, txn: bool = False) -> bytes:
    return rec.build_batch(
        [(NOW, k, v) for k, v in pairs],
        producer_id=pid,
        producer_epoch=0 if pid >= 0 else -1,
        base_sequence=seq,
        is_transactional=txn,
    )


def read_committed(log: Log) -> list[tuple[int, bytes | None, bytes | None]]:
    """``(offset, key, value)`` a read_committed consumer gets from the log start: below the
    LSO, without the data of the aborted transactions Fetch would list, markers skipped."""
    out: list[tuple[int, bytes | None, bytes | None]] = []
    start = log.log_start_offset
    for _ in range(10_000):
        info = log.read(start, 250, Isolation.TXN_COMMITTED)
        if info.slice is None:
            return out
        batches = [
            (h, v) for _, h, v in rec.iter_batches(info.slice.read_bytes(), allow_partial_tail=True)
        ]
        upper = batches[-1][0].next_offset
        aborted = sorted(
            (t.first_offset, t.producer_id) for t in log.collect_aborted_transactions(start, upper)
        )
        aborted_pids: set[int] = set()
        for header, view in batches:
            while aborted and aborted[0][0] <= header.last_offset:
                aborted_pids.add(aborted.pop(0)[1])
            if header.is_control:
                marker = rec.end_txn_marker_of(view)
                if marker is not None and not marker.commit:
                    aborted_pids.discard(header.producer_id)
                continue
            if header.is_transactional and header.producer_id in aborted_pids:
                continue
            out += [(r.offset, r.key, r.value) for r in rec.decode_batch(view).records]
        start = upper
    raise AssertionError("read loop did not terminate")


def all_records(log: Log) -> dict[int, tuple[bytes | None, bytes | None]]:
    """Every data record in the files, read as a follower reads (to LEO)."""
    out = {}
    for segment in log.segments:
        for position, header in segment.batches():
            if not header.is_control:
                view = segment.read_batch(position, header)
                for r in rec.decode_batch(view).records:
                    out[r.offset] = (r.key, r.value)
    return out


def batch_headers(log: Log) -> list[rec.BatchHeader]:
    return [h for segment in log.segments for _, h in segment.batches()]


def markers_in(log: Log) -> dict[int, int | None]:
    """Offset -> delete horizon of every control batch still holding its marker."""
    return {
        h.base_offset: rec.delete_horizon_ms(h)
        for h in batch_headers(log)
        if h.is_control and h.record_count > 0
    }


def all_aborted(log: Log) -> list[AbortedTxn]:
    return [entry for segment in log.segments for entry in segment.txn_index]


def producer_view(log: Log) -> tuple[dict[int, tuple[int, int, int]], int | None, int]:
    state = log.producer_state()
    producers = {
        pid: (e.epoch, e.last_seq, e.current_txn_first_offset)
        for pid, e in state.producers.items()
        if e.batches or e.current_txn_first_offset >= 0
    }
    return producers, log.first_unstable_offset, log.last_stable_offset


# ---------------------------------------------------------------- the model


@dataclass
class Txn:
    pid: int
    first: int
    marker: int | None = None
    commit: bool = False


@dataclass
class Model:
    # offset -> (key, value, pid or None); pid: the record belongs to that producer's txn
    data: dict[int, tuple[bytes, bytes | None, int | None]] = field(default_factory=dict)
    txns: list[Txn] = field(default_factory=list)
    markers: dict[int, Txn | None] = field(default_factory=dict)
    seqs: dict[int, int] = field(default_factory=dict)

    def open_txn(self, pid: int) -> Txn | None:
        return next((t for t in self.txns if t.pid == pid and t.marker is None), None)

    def txn_of(self, offset: int) -> Txn | None:
        pid = self.data[offset][2]
        if pid is None:
            return None
        return next(
            t
            for t in self.txns
            if t.pid == pid and t.first <= offset and (t.marker is None or offset < t.marker)
        )

    def aborted(self, offset: int) -> bool:
        txn = self.txn_of(offset)
        return txn is not None and txn.marker is not None and not txn.commit

    def committed(self, offset: int) -> bool:
        txn = self.txn_of(offset)
        return txn is None or (txn.marker is not None and txn.commit)

    def latest_committed(self, below: int) -> dict[bytes, tuple[int, bytes | None]]:
        latest: dict[bytes, tuple[int, bytes | None]] = {}
        for offset in sorted(self.data):
            if offset < below and self.committed(offset):
                key, value, _ = self.data[offset]
                latest[key] = (offset, value)
        return latest


KEYS = [b"a", b"b", b"c", b"d", b"e"]
pairs = st.lists(
    st.tuples(st.sampled_from(KEYS), st.one_of(st.none(), st.binary(min_size=1, max_size=8))),
    min_size=1,
    max_size=3,
)
PIDS = (1, 2, 3)
operation = st.one_of(
    st.tuples(st.just("txn"), st.sampled_from(PIDS), pairs),
    st.tuples(st.just("txn"), st.sampled_from(PIDS), pairs),
    st.tuples(st.just("end"), st.sampled_from(PIDS), st.booleans()),
    st.tuples(st.just("end"), st.sampled_from(PIDS), st.booleans()),
    st.tuples(st.just("plain"), pairs),
    st.tuples(st.just("roll")),
    st.tuples(st.just("clean"), st.sampled_from([0, RETENTION // 2, RETENTION + 1])),
)


class Checker:
    """Runs the operations on a log and the model, and checks after each cleaning."""

    def __init__(self, directory: Path, map_keys: int) -> None:
        self.directory = directory
        self.clock = Clock()
        self.log = Log.open(directory, config(), clock=self.clock)
        self.model = Model()
        self.cleaner = Cleaner(
            CleanerConfig(dedupe_buffer_size=24 * map_keys, dedupe_buffer_load_factor=1.0)
        )
        self.checkpoint: int | None = None
        self.horizons: dict[int, int | None] = {}  # marker offset -> horizon seen last
        self.removed: set[int] = set()  # markers removed (past their horizon)
        self.reopened = 0

    def apply(self, op: tuple[object, ...]) -> None:
        log, model = self.log, self.model
        kind = op[0]
        if kind == "txn":
            pid, kv = op[1], op[2]
            assert isinstance(pid, int) and isinstance(kv, list)
            seq = model.seqs.get(pid, 0)
            first = log.append_as_leader(batch(kv, pid, seq, txn=True)).first_offset
            model.seqs[pid] = seq + len(kv)
            if model.open_txn(pid) is None:
                model.txns.append(Txn(pid, first))
            for i, (key, value) in enumerate(kv):
                model.data[first + i] = (key, value, pid)
        elif kind == "plain":
            kv = op[1]
            assert isinstance(kv, list)
            first = log.append_as_leader(batch(kv)).first_offset
            for i, (key, value) in enumerate(kv):
                model.data[first + i] = (key, value, None)
        elif kind == "end":
            pid, commit = op[1], op[2]
            assert isinstance(pid, int) and isinstance(commit, bool)
            offset = log.append_end_txn_marker(pid, 0, 0, commit=commit, leader_epoch=0)
            txn = model.open_txn(pid)
            if txn is not None:
                txn.marker, txn.commit = offset.first_offset, commit
            model.markers[offset.first_offset] = txn
        elif kind == "roll":
            log.roll()
        else:
            advance = op[1]
            assert isinstance(advance, int)
            self.clean(advance)
        log.update_high_watermark(log.log_end_offset)

    def clean(self, advance: int) -> None:
        log = self.log
        self.clock.now += advance
        log.update_high_watermark(log.log_end_offset)
        ltc = log_to_clean(log, self.checkpoint, self.clock.now)
        before = producer_view(log)
        self.checkpoint = end = self.cleaner.clean(
            log, ltc.first_dirty, ltc.first_uncleanable, self.clock.now
        )
        assert producer_view(log) == before
        self.check(end)

    def check(self, end: int) -> None:
        log, model = self.log, self.model
        now = self.clock.now
        lso = log.last_stable_offset
        # read_committed: the model's latest committed record of every key, nothing else.
        seen = read_committed(log)
        offsets = [o for o, _, _ in seen]
        assert offsets == sorted(set(offsets))
        latest_seen: dict[bytes, tuple[int, bytes | None]] = {}
        for offset, key, value in seen:
            assert offset < lso
            assert model.committed(offset), f"read_committed got {offset}, not committed"
            assert model.data[offset][:2] == (key, value)
            assert key is not None
            latest_seen[key] = (offset, value)
        for key, (offset, value) in model.latest_committed(lso).items():
            if value is not None:
                assert latest_seen.get(key) == (offset, value), key
            else:  # a tombstone: there until its horizon, never an older value instead
                assert latest_seen.get(key, (offset, None)) == (offset, None), key
        # Aborted data is gone below the cleaned offset; what is left is in the .txnindex.
        entries = all_aborted(log)
        present = all_records(log)
        for offset in present:
            if model.aborted(offset):
                assert offset >= end, f"aborted record {offset} left below {end}"
                txn = model.txn_of(offset)
                assert txn is not None
                assert any(
                    e.producer_id == txn.pid and e.first_offset <= offset <= e.last_offset
                    for e in entries
                ), f"aborted record {offset} not covered by {entries}"
        # Markers: gone only past the horizon a previous cleaning stamped on them, and never
        # while a batch of their transaction is left (the producer state replays to the same).
        markers = markers_in(log)
        for offset in model.markers:
            if offset not in markers and offset not in self.removed:
                horizon = self.horizons.get(offset)
                assert horizon is not None and now >= horizon, f"marker {offset} gone early"
                self.removed.add(offset)
        self.horizons = dict(markers)
        for header in batch_headers(log):
            if header.is_transactional and not header.is_control:
                txn = model.txn_of(header.base_offset)
                assert txn is not None
                if txn.marker is not None:
                    assert txn.marker in markers, f"batch {header.base_offset} lost its marker"
        for entry in entries:  # the entries are the originals, of markers still there
            assert entry.last_offset in markers
            txn = model.markers[entry.last_offset]
            assert txn is not None and not txn.commit and entry.first_offset == txn.first
        assert dump_log.verify_partition(self.directory) == []
        self.reopen_without_snapshot()

    def reopen_without_snapshot(self) -> None:
        """The cleaned files alone (no snapshot, an unclean stop) replay to the same producer
        state, stable offsets and read_committed view."""
        self.reopened += 1
        copy = self.directory.parent / f"copy{self.reopened}" / self.directory.name
        shutil.copytree(self.directory, copy)
        for snapshot in copy.glob("*.snapshot"):
            snapshot.unlink()
        log = self.log
        other = Log.open(
            copy,
            config(),
            clock=self.clock,
            had_clean_shutdown=False,
            high_watermark=log.high_watermark,
        )
        try:
            assert producer_view(other) == producer_view(log)
            # (Its rebuilt .txnindex may differ: an entry's first offset is then the first
            # batch of the transaction left, or no entry when none is; same reads.)
            assert read_committed(other) == read_committed(log)
        finally:
            other.close()
        shutil.rmtree(copy.parent)


@settings(
    max_examples=int(os.environ.get("TXN_MODEL_EXAMPLES", "25")),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(ops=st.lists(operation, min_size=3, max_size=30), map_keys=st.sampled_from([2, 4, 1000]))
@example(
    ops=[
        ("plain", [(b"a", b"1")]),
        ("txn", 1, [(b"a", b"aborted")]),
        ("end", 1, False),
        ("roll",),
        ("clean", 0),
    ],
    map_keys=1000,
)
def test_cleaning_transactions_matches_the_model(
    tmp_path_factory: pytest.TempPathFactory, ops: list[tuple[object, ...]], map_keys: int
) -> None:
    checker = Checker(tmp_path_factory.mktemp("model") / "t-0", map_keys)
    for op in ops:
        checker.apply(op)
    # Every transaction decided, then cleanings past the horizon: a marker whose transaction
    # has no batch left goes, and so does every aborted record.
    for pid in PIDS:
        if checker.model.open_txn(pid) is not None:
            checker.apply(("end", pid, False))
    checker.apply(("plain", [(b"z", b"last")]))
    checker.apply(("roll",))
    checker.apply(("plain", [(b"z", b"active")]))
    # A tombstone's batch needs two passes (stamp, remove), then its marker two more; each
    # over the whole log (a map that holds every key, from the log start).
    checker.cleaner = Cleaner(CleanerConfig())
    for _ in range(5):
        checker.clean(RETENTION + 1)
        checker.checkpoint = None  # each pass over the whole log, as after a restart
    log, model = checker.log, checker.model
    assert not [o for o in all_records(log) if model.aborted(o)]
    data_txns = {
        id(model.txn_of(h.base_offset))
        for h in batch_headers(log)
        if h.is_transactional and not h.is_control
    }
    for offset in markers_in(log):
        txn = model.markers[offset]
        assert txn is not None and id(txn) in data_txns, f"marker {offset} kept for nothing"
    log.close()
    assert dump_log.verify_partition(checker.directory) == []


# ---------------------------------------------------------------- pieces


def test_an_aborted_value_never_supersedes_a_committed_one(tmp_path: Path) -> None:
    """The aborted record is the key's last one, yet the committed value stays and the
    aborted one goes (without the fix the map took the aborted offset: the committed value
    was removed and the aborted one kept)."""
    clock = Clock()
    log = Log.open(tmp_path / "t-0", config(), clock=clock)
    log.append_as_leader(batch([(b"k", b"committed")]))  # 0
    log.append_as_leader(batch([(b"k", b"aborted")], pid=5, seq=0, txn=True))  # 1
    log.append_end_txn_marker(5, 0, 0, commit=False, leader_epoch=0)  # 2
    log.roll()
    log.append_as_leader(batch([(b"other", b"x")]))  # 3, active
    log.update_high_watermark(log.log_end_offset)
    Cleaner(CleanerConfig()).clean(log, 0, 3, NOW)
    assert {o: kv for o, kv in all_records(log).items() if kv[0] == b"k"} == {
        0: (b"k", b"committed")
    }
    assert read_committed(log) == [(0, b"k", b"committed"), (3, b"other", b"x")]
    log.close()


def test_the_cleaned_segments_keep_the_txn_index_entries(tmp_path: Path) -> None:
    """An abort whose data the cleaning removes keeps its marker and its ``.txnindex`` entry
    (the original, written to ``<base>.txnindex.cleaned`` and swapped in); dump-log shows the
    cleaned index; after a restart the entry is read back. A later cleaning past the horizon
    removes the marker and the entry. (Without the fix: the entry was lost at the swap while
    the aborted data stayed, visible to read_committed.)"""
    directory = tmp_path / "t-0"
    clock = Clock()
    log = Log.open(directory, config(), clock=clock)
    log.append_as_leader(batch([(b"k", b"1")]))  # 0
    log.append_as_leader(batch([(b"a", b"x1")], pid=7, seq=0, txn=True))  # 1
    log.append_as_leader(batch([(b"b", b"y1")], pid=8, seq=0, txn=True))  # 2
    log.roll()
    log.append_as_leader(batch([(b"a", b"x2")], pid=7, seq=1, txn=True))  # 3
    log.append_end_txn_marker(7, 0, 0, commit=False, leader_epoch=0)  # 4: ABORT of 1, 3
    log.append_end_txn_marker(8, 0, 0, commit=True, leader_epoch=0)  # 5: COMMIT of 2
    log.append_as_leader(batch([(b"k", b"2")]))  # 6
    log.roll()
    log.append_as_leader(batch([(b"z", b"active")]))  # 7
    log.update_high_watermark(log.log_end_offset)
    entry = AbortedTxn(7, 1, 4, 2)  # the LSO then: 8's transaction open from 2
    assert all_aborted(log) == [entry]

    cleaner = Cleaner(CleanerConfig())
    assert cleaner.clean(log, 0, 7, NOW) == 7
    assert [s.base_offset for s in log.segments] == [0, 3, 7]
    assert list(log.segments[0].txn_index) == []
    assert list(log.segments[1].txn_index) == [entry]  # the segment of the marker
    index_file = directory / f"{3:020d}.txnindex"
    assert index_file.read_bytes() == entry.encode()
    assert not list(directory.glob("*.cleaned")) and not list(directory.glob("*.swap"))
    assert read_committed(log) == [(2, b"b", b"y1"), (6, b"k", b"2"), (7, b"z", b"active")]
    # Markers: the ABORT stays (its data was there), the COMMIT too (its data is).
    assert markers_in(log) == {4: None, 5: None}
    # The producers' last batches stay, emptied: 7's (aborted, 3) and 8's (committed, 2).
    kept = [(h.base_offset, h.record_count, h.producer_id) for h in batch_headers(log)]
    assert kept == [(2, 1, 8), (3, 0, 7), (4, 1, 7), (5, 1, 8), (6, 1, -1), (7, 1, -1)]
    lines = list(dump_log.dump_file(index_file))
    assert lines[1:] == [
        "version: 0 producerId: 7 firstOffset: 1 lastOffset: 4 lastStableOffset: 2"
    ]
    assert dump_log.verify_partition(directory) == []
    log.close()

    log = Log.open(directory, config(), clock=clock, high_watermark=8)
    assert all_aborted(log) == [entry]
    # The emptied batch of 7 is met again: marker and entry stay.
    cleaner.clean(log, 0, 7, NOW)
    assert all_aborted(log) == [entry] and markers_in(log) == {4: None, 5: None}
    # 7's producer moves on: its aborted batch is not its last any more and goes.
    log.append_as_leader(batch([(b"c", b"c")], pid=7, seq=2))  # 8 (idempotent, no txn)
    log.roll()
    log.append_as_leader(batch([(b"z", b"active2")]))  # 9
    log.update_high_watermark(log.log_end_offset)
    cleaner.clean(log, 0, 9, NOW)
    # This cleaning still met the batch (and removed it): marker and entry stay once more.
    assert [h.base_offset for h in batch_headers(log)] == [2, 4, 5, 6, 7, 8, 9]
    assert all_aborted(log) == [entry] and markers_in(log) == {4: None, 5: None}
    cleaner.clean(log, 0, 9, NOW)
    # No data of the abort left: its marker is stamped with the horizon, its entry dropped.
    assert markers_in(log) == {4: NOW + RETENTION, 5: None}
    assert all_aborted(log) == []
    clock.now = NOW + RETENTION - 1
    cleaner.clean(log, 0, 9, clock.now)
    assert markers_in(log) == {4: NOW + RETENTION, 5: None}
    clock.now = NOW + RETENTION
    cleaner.clean(log, 0, 9, clock.now)
    assert markers_in(log) == {5: None}
    assert read_committed(log) == [
        (2, b"b", b"y1"),
        (6, b"k", b"2"),
        (7, b"z", b"active"),
        (8, b"c", b"c"),
        (9, b"z", b"active2"),
    ]
    log.close()
    assert dump_log.verify_partition(directory) == []


def test_a_commit_marker_stays_while_its_data_does(tmp_path: Path) -> None:
    """A COMMIT marker stays while a batch of its transaction is left; once its data is
    superseded and gone it is stamped, then removed past the horizon; dump-log shows the
    marker line of the stamped batch unchanged."""
    directory = tmp_path / "t-0"
    clock = Clock()
    log = Log.open(directory, config(), clock=clock)
    log.append_as_leader(batch([(b"k", b"txn")], pid=3, seq=0, txn=True))  # 0
    log.append_end_txn_marker(3, 0, 0, commit=True, leader_epoch=0, timestamp=NOW)  # 1
    log.append_as_leader(batch([(b"k", b"plain")], pid=3, seq=1))  # 2: 3's last batch
    log.roll()
    log.append_as_leader(batch([(b"z", b"active")]))  # 3
    log.update_high_watermark(log.log_end_offset)
    cleaner = Cleaner(CleanerConfig())
    cleaner.clean(log, 0, 3, NOW)  # the txn's record superseded: traversed, gone
    assert markers_in(log) == {1: None}
    assert [h.base_offset for h in batch_headers(log)] == [1, 2, 3]
    cleaner.clean(log, 0, 3, NOW)  # nothing of the transaction left: the horizon
    assert markers_in(log) == {1: NOW + RETENTION}
    lines = [line for line in dump_log.dump_file(log.segments[0].log_path, print_data_log=True)]
    assert any(
        line.startswith(f"| offset: 1 CreateTime: {NOW} keySize: 4 valueSize: 6 ")
        and line.endswith("endTxnMarker: COMMIT coordinatorEpoch: 0")
        for line in lines
    ), lines
    clock.now = NOW + RETENTION
    cleaner.clean(log, 0, 3, clock.now)
    assert markers_in(log) == {}
    assert read_committed(log) == [(2, b"k", b"plain"), (3, b"z", b"active")]
    log.close()
    assert dump_log.verify_partition(directory) == []


def test_a_producer_with_only_markers_keeps_its_last_epoch(tmp_path: Path) -> None:
    """A producer whose current epoch wrote only a marker (the coordinator aborted after an
    epoch bump): that marker stays, emptied past its horizon (Kafka's case 3 of
    ``isBatchLastRecordOfProducer``), so the epoch survives a rebuild from the log."""
    directory = tmp_path / "t-0"
    clock = Clock()
    log = Log.open(directory, config(), clock=clock)
    log.append_as_leader(batch([(b"k", b"v")], pid=4, seq=0, txn=True))  # 0
    log.append_end_txn_marker(4, 1, 0, commit=False, leader_epoch=0)  # 1: epoch 1, aborts 0
    log.roll()
    log.append_as_leader(batch([(b"z", b"active")]))  # 2
    log.update_high_watermark(log.log_end_offset)
    assert log.producer_state().producers[4].epoch == 1
    cleaner = Cleaner(CleanerConfig())
    for now in (NOW, NOW, NOW + RETENTION):
        clock.now = now
        cleaner.clean(log, 0, 2, now)
    headers = [(h.base_offset, h.record_count, h.producer_epoch) for h in batch_headers(log)]
    assert headers == [(1, 0, 1), (2, 1, -1)]  # the marker's batch, emptied, epoch kept
    log.close()
    for snapshot in directory.glob("*.snapshot"):
        snapshot.unlink()
    log = Log.open(directory, config(), clock=clock, had_clean_shutdown=False, high_watermark=3)
    assert all_aborted(log) == []
    log.close()


def test_delete_retention_long_max_keeps_markers_and_tombstones(tmp_path: Path) -> None:
    """``delete.retention.ms`` = Long.MAX_VALUE (allowed): the horizon saturates at the int64
    maximum instead of failing the cleaning (the partition left uncleanable) or wrapping."""
    directory = tmp_path / "t-0"
    clock = Clock()
    log = Log.open(directory, config(delete_retention_ms=2**63 - 1), clock=clock)
    log.append_as_leader(batch([(b"k", None)]))  # 0: a tombstone
    log.append_end_txn_marker(6, 0, 0, commit=False, leader_epoch=0)  # 1: no data: discardable
    log.append_as_leader(batch([(b"x", b"y")]))  # 2
    log.roll()
    log.append_as_leader(batch([(b"z", b"active")]))  # 3
    log.update_high_watermark(log.log_end_offset)
    cleaner = Cleaner(CleanerConfig())
    cleaner.clean(log, 0, 3, NOW)
    assert markers_in(log) == {1: 2**63 - 1}
    (tombstone,) = (h for h in batch_headers(log) if h.base_offset == 0)
    assert rec.delete_horizon_ms(tombstone) == 2**63 - 1
    clock.now = 2**62
    cleaner.clean(log, 0, 3, clock.now)
    assert markers_in(log) == {1: 2**63 - 1} and all_records(log)[0] == (b"k", None)
    log.close()
    assert dump_log.verify_partition(directory) == []
