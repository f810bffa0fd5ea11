"""Transactions on the partition log: LSO, ``.txnindex``, read_committed, recovery.

A read_committed reader here does what Kafka's consumer does with a Fetch response
(``CompletedFetch``): it reads below the LSO (``Isolation.TXN_COMMITTED``), asks for the aborted
transactions of the range it got (``collect_aborted_transactions``), drops the transactional
batches of a producer from the first offset of its aborted transaction until that
transaction's ABORT marker, and skips control batches. The model test checks the log against
a model that knows which transaction every record belongs to.
"""

from __future__ import annotations

import heapq
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from sluice.protocol import records as rec
from sluice.protocol.errors import (
    InvalidProducerEpoch,
    InvalidTxnState,
    TransactionCoordinatorFenced,
)
from sluice.server.storage.log import Isolation, Log
from sluice.server.storage.log_config import LogConfig
from sluice.server.storage.txn_index import AbortedTxn
from tests.storage.crashfs import Crash, CrashVFS

CONFIG = LogConfig(segment_bytes=700, index_interval_bytes=100, file_delete_delay_ms=0)
NOW = int(time.time() * 1000)  # record timestamps near the markers' (no time-based rolls)


def txn_batch(pid: int, seq: int, values: list[bytes], epoch: int = 0) -> bytes:
    return rec.build_batch(
        [(NOW, None, v) for v in values],
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        is_transactional=True,
    )


def plain_batch(values: list[bytes]) -> bytes:
    return rec.build_batch([(NOW, None, v) for v in values])


def read_committed(log: Log, max_bytes: int = 300) -> list[bytes | None]:
    """What a read_committed consumer polling from the log start sees (see the module
    docstring), fetching ``max_bytes`` at a time."""
    out: list[bytes | None] = []
    start = log.log_start_offset
    for _ in range(10_000):
        info = log.read(start, max_bytes, Isolation.TXN_COMMITTED)
        if info.slice is None:
            return out
        data = info.slice.read_bytes()
        batches = [(h, v) for _, h, v in rec.iter_batches(data, allow_partial_tail=True)]
        upper = batches[-1][0].next_offset
        aborted = [
            (t.first_offset, t.producer_id) for t in log.collect_aborted_transactions(start, upper)
        ]
        heapq.heapify(aborted)
        aborted_pids: set[int] = set()
        for header, view in batches:
            while aborted and aborted[0][0] <= header.last_offset:
                aborted_pids.add(heapq.heappop(aborted)[1])
            if header.is_control:
                marker = rec.end_txn_marker_of(view)
                if marker is not None and not marker.commit:
                    aborted_pids.discard(header.producer_id)
                continue
            if header.is_transactional and header.producer_id in aborted_pids:
                continue
            out.extend(r.value for r in rec.decode_batch(view).records if r.offset >= start)
        start = upper
    raise AssertionError("read loop did not terminate")


def all_aborted(log: Log) -> list[AbortedTxn]:
    return [entry for segment in log.segments for entry in segment.txn_index]


def test_commit_abort_and_the_last_stable_offset(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "t-0", CONFIG)
    log.append_as_leader(txn_batch(1, 0, [b"a1", b"a2"]), leader_epoch=0)  # 0-1, txn of 1
    log.append_as_leader(plain_batch([b"p"]), leader_epoch=0)  # 2
    log.append_as_leader(txn_batch(2, 0, [b"b1"]), leader_epoch=0)  # 3, txn of 2
    log.maybe_increment_high_watermark(log.log_end_offset)
    assert log.first_unstable_offset == 0 and log.last_stable_offset == 0
    assert read_committed(log) == []
    info = log.append_end_txn_marker(1, 0, 0, commit=False, leader_epoch=0)  # ABORT at 4
    assert (info.first_offset, info.last_offset) == (4, 4)
    # Marker above HW: the transaction still counts as unstable.
    assert log.last_stable_offset == 0
    assert all_aborted(log) == [AbortedTxn(1, 0, 4, 3)]  # LSO = 2's open txn at 3
    log.maybe_increment_high_watermark(log.log_end_offset)
    assert log.first_unstable_offset == 3 and log.last_stable_offset == 3
    assert read_committed(log) == [b"p"]
    # ListOffsets for read_committed: latest is the LSO.
    assert log.fetch_offset_by_timestamp(-1, Isolation.TXN_COMMITTED) == (-1, 3)
    assert log.fetch_offset_by_timestamp(-1, Isolation.HIGH_WATERMARK) == (-1, 5)
    log.append_end_txn_marker(2, 0, 0, commit=True, leader_epoch=0)  # COMMIT at 5
    assert log.last_stable_offset == 3  # HW still 5
    log.update_high_watermark(6)
    assert log.first_unstable_offset is None and log.last_stable_offset == 6
    assert read_committed(log) == [b"p", b"b1"]
    # A read_uncommitted reader sees everything below HW, markers aside.
    values = [
        r.value
        for h, r in rec.iter_records(log.read(0, 1 << 20).slice.read_bytes())
        if not h.is_control
    ]  # type: ignore[union-attr]
    assert values == [b"a1", b"a2", b"p", b"b1"]


def test_first_unstable_offset_is_not_below_the_log_start(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "t-0", CONFIG)
    log.append_as_leader(txn_batch(1, 0, [b"a", b"b"]), leader_epoch=0)  # 0-1, open
    log.append_as_leader(plain_batch([b"p", b"q"]), leader_epoch=0)  # 2-3
    log.maybe_increment_high_watermark(4)
    assert log.last_stable_offset == 0
    log.delete_records(2)
    assert log.first_unstable_offset == 2 == log.last_stable_offset
    assert read_committed(log) == []
    log.append_end_txn_marker(1, 0, 0, commit=True, leader_epoch=0)
    log.maybe_increment_high_watermark(5)
    assert log.first_unstable_offset is None and read_committed(log) == [b"p", b"q"]


def test_transaction_rules_on_append(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "t-0", CONFIG)
    log.append_as_leader(txn_batch(1, 0, [b"x"], epoch=2), leader_epoch=0)
    idempotent = rec.build_batch(
        [(1, None, b"y")], producer_id=1, producer_epoch=2, base_sequence=1
    )
    with pytest.raises(InvalidTxnState):
        log.append_as_leader(idempotent, leader_epoch=0)
    with pytest.raises(InvalidProducerEpoch):
        log.append_end_txn_marker(1, 1, 0, commit=True, leader_epoch=0)
    log.append_end_txn_marker(1, 2, 5, commit=True, leader_epoch=0)
    with pytest.raises(TransactionCoordinatorFenced):
        log.append_end_txn_marker(1, 2, 4, commit=True, leader_epoch=0)
    assert log.log_end_offset == 2  # the refused ones wrote nothing
    log.append_as_leader(idempotent, leader_epoch=0)  # the transaction is over


def test_aborted_transactions_across_segments(tmp_path: Path) -> None:
    config = LogConfig(segment_bytes=300, index_interval_bytes=100, file_delete_delay_ms=0)
    log = Log.open(tmp_path / "t-0", config)
    seq = {1: 0, 2: 0}
    for round_ in range(6):
        for pid in (1, 2):
            log.append_as_leader(
                txn_batch(pid, seq[pid], [b"%d-%d" % (pid, round_)]), leader_epoch=0
            )
            seq[pid] += 1
        log.append_end_txn_marker(1, 0, 0, commit=round_ % 2 == 0, leader_epoch=0)
    log.append_end_txn_marker(2, 0, 0, commit=False, leader_epoch=0)
    log.maybe_increment_high_watermark(log.log_end_offset)
    assert len(log.segments) > 3
    # Producer 2's one long transaction is aborted; its entry is in the last segment and
    # covers everything from offset 1: every search must find it.
    entries = all_aborted(log)
    assert entries[-1] == AbortedTxn(2, 1, log.log_end_offset - 1, log.log_end_offset)
    assert log.segments[-1].txn_index.entries[-1] == entries[-1]
    assert entries[-1] == AbortedTxn(2, 1, 18, 19)
    for start in range(1, 19):
        assert entries[-1] in log.collect_aborted_transactions(start, start + 1), start
    assert read_committed(log, 100) == [b"1-0", b"1-2", b"1-4"]
    assert read_committed(log, 1 << 20) == [b"1-0", b"1-2", b"1-4"]


def test_truncation_and_retention_take_txn_index_entries_along(tmp_path: Path) -> None:
    config = LogConfig(segment_bytes=300, index_interval_bytes=100, file_delete_delay_ms=0)
    directory = tmp_path / "t-0"
    log = Log.open(directory, config)
    for i in range(8):
        log.append_as_leader(txn_batch(1, i, [b"v%d" % i]), leader_epoch=0)
        log.append_end_txn_marker(1, 0, 0, commit=False, leader_epoch=0)
    assert [e.last_offset for e in all_aborted(log)] == [1, 3, 5, 7, 9, 11, 13, 15]
    assert txn_index_files(directory) == txn_indexes_of(log) and len(log.segments) > 2
    log.truncate_to(9)
    assert [e.last_offset for e in all_aborted(log)] == [1, 3, 5, 7]
    assert txn_index_files(directory) == txn_indexes_of(log)
    # The next append after the truncation continues the producer where the log ends.
    # The truncation removed the marker at 9: the transaction from 8 is open again.
    log.append_as_leader(txn_batch(1, 5, [b"again"]), leader_epoch=0)
    # HW 0: nothing is stable. (The state is reloaded from the roll's snapshot below the cut,
    # which, as Kafka's, does not hold the completed transactions whose markers HW has not
    # passed yet: Kafka assumes a truncation is not above HW and clears them too.)
    assert log.last_stable_offset == 0
    log.maybe_increment_high_watermark(log.log_end_offset)
    assert log.first_unstable_offset == 8 == log.last_stable_offset
    log.delete_records(4)
    log.delete_old_segments()
    log.run_delayed_deletes()
    assert log.segments[0].base_offset > 0
    assert txn_index_files(directory) == txn_indexes_of(log)
    assert not list(directory.glob("*.deleted"))


def txn_index_files(directory: Path) -> list[str]:
    """The non-empty ``.txnindex`` files (a truncation may leave an empty one, as Kafka's)."""
    return sorted(
        p.name for p in directory.iterdir() if p.name.endswith(".txnindex") and p.stat().st_size
    )


def txn_indexes_of(log: Log) -> list[str]:
    return [f"{s.base_offset:020d}.txnindex" for s in log.segments if len(s.txn_index)]


def test_follower_copy_builds_the_same_index(tmp_path: Path) -> None:
    leader = Log.open(tmp_path / "a" / "t-0", CONFIG)
    for i in range(5):
        leader.append_as_leader(txn_batch(1, i, [b"x" * 50]), leader_epoch=1)
        leader.append_as_leader(txn_batch(2, i, [b"y" * 50]), leader_epoch=1)
        leader.append_end_txn_marker(1 + i % 2, 0, 3, commit=i % 3 == 0, leader_epoch=1)
    follower = Log.open(tmp_path / "b" / "t-0", CONFIG)
    start = 0
    while start < leader.log_end_offset:
        data = leader.read(start, 250, Isolation.LOG_END).slice.read_bytes()  # type: ignore[union-attr]
        start = follower.append_as_follower(data).last_offset + 1
    assert all_aborted(follower) == all_aborted(leader) != []
    leader.update_high_watermark(leader.log_end_offset)
    follower.update_high_watermark(leader.log_end_offset)
    assert follower.last_stable_offset == leader.last_stable_offset
    assert read_committed(follower) == read_committed(leader)


def test_corrupt_txn_index_is_rebuilt_at_load(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    log = Log.open(directory, CONFIG)
    log.append_as_leader(txn_batch(1, 0, [b"a"]), leader_epoch=0)
    log.append_as_leader(txn_batch(2, 0, [b"b"]), leader_epoch=0)
    log.append_end_txn_marker(1, 0, 0, commit=False, leader_epoch=0)
    log.append_end_txn_marker(2, 0, 0, commit=False, leader_epoch=0)
    expected = all_aborted(log)
    assert expected == [AbortedTxn(1, 0, 2, 1), AbortedTxn(2, 1, 3, 4)]
    log.close()
    (index,) = directory.glob("*.txnindex")
    index.write_bytes(index.read_bytes()[:50])  # torn
    orphan = directory / f"{500:020d}.txnindex"  # no .log: removed at load
    orphan.write_bytes(AbortedTxn(1, 0, 500, 501).encode())
    again = Log.open(directory, CONFIG, high_watermark=4)
    assert all_aborted(again) == expected
    assert len(index.read_bytes()) == 68 and not orphan.exists()


# -- model test ---------------------------------------------------------------------------------


@dataclass
class Txn:
    pid: int
    first: int
    end: int | None = None  # marker offset
    commit: bool = False


@dataclass
class Model:
    """Events in offset order: ("data", first, last, pid|None, values) / ("marker", off, pid)."""

    events: list[tuple[object, ...]] = field(default_factory=list)
    txns: list[Txn] = field(default_factory=list)
    aborted: list[AbortedTxn] = field(default_factory=list)
    leo: int = 0
    hw: int = 0

    def open_txn(self, pid: int) -> Txn | None:
        return next((t for t in self.txns if t.pid == pid and t.end is None), None)

    def seq(self, pid: int) -> int:
        return sum(len(e[4]) for e in self.events if e[0] == "data" and e[3] == pid)  # type: ignore[arg-type]

    def lso(self) -> int:
        unstable = [t.first for t in self.txns if t.end is None or t.end >= self.hw]
        return min([*unstable, self.hw])

    def committed_view(self) -> list[bytes]:
        lso = self.lso()
        out: list[bytes] = []
        for event in self.events:
            if event[0] != "data" or event[2] >= lso:  # type: ignore[operator]
                continue
            pid = event[3]
            if pid is not None:
                txn = next(
                    t
                    for t in self.txns
                    if t.pid == pid and t.first <= event[1] and (t.end is None or t.end > event[1])
                )  # type: ignore[operator]
                if not txn.commit:
                    continue
            out.extend(event[4])  # type: ignore[arg-type]
        return out

    def truncate(self, offset: int) -> None:
        self.events = [e for e in self.events if e[1] < offset]  # type: ignore[operator]
        self.txns = [t for t in self.txns if t.first < offset]
        for t in self.txns:
            if t.end is not None and t.end >= offset:
                t.end, t.commit = None, False
        self.aborted = [a for a in self.aborted if a.last_offset < offset]
        self.leo = offset
        self.hw = min(self.hw, offset)


PIDS = (1, 2, 3)
txn_op = st.tuples(st.just("txn"), st.sampled_from(PIDS), st.integers(1, 3))
end_op = st.tuples(st.just("end"), st.sampled_from(PIDS), st.booleans())
# Appends and markers weigh more than the rest: interleaved open transactions are the point.
operation = st.one_of(
    txn_op,
    txn_op,
    txn_op,
    end_op,
    end_op,
    st.tuples(st.just("plain"), st.integers(1, 3)),
    st.tuples(st.just("hw"), st.floats(0, 1)),
    st.tuples(st.just("truncate"), st.floats(0, 1)),
    st.tuples(st.just("restart"), st.sampled_from(["clean", "crash", "corrupt"])),
)


@settings(
    max_examples=int(os.environ.get("TXN_MODEL_EXAMPLES", "40")),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(ops=st.lists(operation, min_size=3, max_size=40))
@example(ops=[("txn", 1, 1), ("txn", 2, 1), ("end", 1, False), ("hw", 1.0), ("end", 2, False)])
def test_log_against_a_transaction_model(
    tmp_path_factory: pytest.TempPathFactory, ops: list[tuple[object, ...]]
) -> None:
    root = tmp_path_factory.mktemp("model")
    generation = 0
    directory = root / f"g{generation}" / "t-0"
    log = Log.open(directory, CONFIG)
    model = Model()
    counter = 0
    for op in ops:
        kind = op[0]
        if kind == "txn":
            pid, n = op[1], op[2]
            assert isinstance(pid, int) and isinstance(n, int)
            values = [b"%d:%d" % (pid, counter + i) for i in range(n)]
            counter += n
            info = log.append_as_leader(txn_batch(pid, model.seq(pid), values), leader_epoch=0)
            assert info.first_offset == model.leo
            if model.open_txn(pid) is None:
                model.txns.append(Txn(pid, model.leo))
            model.events.append(("data", model.leo, model.leo + n - 1, pid, values))
            model.leo += n
        elif kind == "plain":
            n = op[1]
            assert isinstance(n, int)
            values = [b"p:%d" % (counter + i) for i in range(n)]
            counter += n
            log.append_as_leader(plain_batch(values), leader_epoch=0)
            model.events.append(("data", model.leo, model.leo + n - 1, None, values))
            model.leo += n
        elif kind == "end":
            pid, commit = op[1], op[2]
            assert isinstance(pid, int) and isinstance(commit, bool)
            log.append_end_txn_marker(pid, 0, 0, commit=commit, leader_epoch=0)
            txn = model.open_txn(pid)
            if txn is not None:
                if not commit:
                    others = [t.first for t in model.txns if t.end is None and t.pid != pid]
                    lso = min(others) if others else model.leo + 1
                    model.aborted.append(AbortedTxn(pid, txn.first, model.leo, lso))
                txn.end, txn.commit = model.leo, commit
            model.events.append(("marker", model.leo, model.leo, pid))
            model.leo += 1
        elif kind == "hw":
            frac = op[1]
            assert isinstance(frac, float)
            model.hw += int((model.leo - model.hw) * frac)
            log.maybe_increment_high_watermark(model.hw)
        elif kind == "truncate":
            frac = op[1]
            assert isinstance(frac, float)
            boundaries = [e[1] for e in model.events if e[1] >= model.hw]  # type: ignore[operator]
            if boundaries:
                offset = boundaries[int(frac * (len(boundaries) - 1))]
                assert isinstance(offset, int)
                log.truncate_to(offset)
                model.truncate(offset)
        elif kind == "restart":
            # Kafka's snapshot does not say which completed transactions were above HW, so a
            # restart forgets that (as Kafka's does); restart with everything replicated.
            model.hw = model.leo
            log.maybe_increment_high_watermark(model.hw)
            generation += 1
            new_directory = root / f"g{generation}" / "t-0"
            recovery_point = log.recovery_point
            if op[1] == "clean":
                log.close()
                shutil.copytree(directory, new_directory)
                log = Log.open(
                    new_directory, CONFIG, recovery_point=recovery_point, high_watermark=model.hw
                )
            else:
                shutil.copytree(directory, new_directory)  # a killed process's files
                log.close()
                if op[1] == "corrupt":
                    for index in new_directory.glob("*.txnindex"):
                        index.write_bytes(index.read_bytes() + b"\x00")
                log = Log.open(
                    new_directory,
                    CONFIG,
                    recovery_point=recovery_point,
                    high_watermark=model.hw,
                    had_clean_shutdown=False,
                )
            directory = new_directory
        assert log.log_end_offset == model.leo
        assert log.high_watermark == model.hw
        assert log.last_stable_offset == model.lso(), op
        assert all_aborted(log) == model.aborted, op
        assert read_committed(log) == model.committed_view(), op
    # A follower copying the log batch by batch builds the same index and stable offsets.
    follower = Log.open(root / "follower" / "t-0", CONFIG)
    start = 0
    while start < log.log_end_offset:
        fetched = log.read(start, 400, Isolation.LOG_END).slice
        assert fetched is not None
        start = follower.append_as_follower(fetched.read_bytes()).last_offset + 1
    follower.update_high_watermark(model.hw)
    assert all_aborted(follower) == model.aborted
    assert follower.last_stable_offset == model.lso()
    assert read_committed(follower) == model.committed_view()
    follower.close()
    log.close()


# -- crash tests through the VFS seam -----------------------------------------------------------


def _abort_scenario(log: Log) -> None:
    log.flush()  # the directory is clean: creating the .txnindex must make it dirty
    log.append_as_leader(txn_batch(1, 1, [b"late"]), leader_epoch=0)
    log.append_end_txn_marker(1, 0, 0, commit=False, leader_epoch=0)
    log.flush()
    log.append_as_leader(txn_batch(2, 0, [b"two"]), leader_epoch=0)
    log.append_end_txn_marker(2, 0, 0, commit=False, leader_epoch=0)
    for i in range(4):  # an offset-index entry past the markers: recovery starts after them
        log.append_as_leader(plain_batch([b"after-%d" % i]), leader_epoch=0)
    log.flush()


CRASH_CONFIG = LogConfig(segment_bytes=10_000, index_interval_bytes=100)  # no roll


def test_crash_at_every_step_of_an_abort_leaves_a_consistent_index(tmp_path: Path) -> None:
    """An ABORT marker's index entry, then a flush, crashed at each disk step: reopened after
    a killed process or a power loss, the index holds exactly the aborts whose markers
    survived, and a read_committed reader sees none of the aborted records."""
    base = tmp_path / "base"
    log = Log.open(base / "t-0", CRASH_CONFIG)
    log.append_as_leader(plain_batch([b"keep"]), leader_epoch=0)
    log.append_as_leader(txn_batch(1, 0, [b"first"]), leader_epoch=0)
    log.close()

    dry = tmp_path / "dry"
    shutil.copytree(base, dry)
    vfs = CrashVFS(dry)
    log = Log.open(dry / "t-0", CRASH_CONFIG, vfs=vfs)
    opened = len(vfs.steps)  # the steps of the open itself (the same in every run)
    _abort_scenario(log)
    steps = len(vfs.steps)
    kinds = [(s.kind, s.path.suffix) for s in vfs.steps[opened:]]
    # Creating the .txnindex makes the directory dirty: the flush after it syncs the directory
    # (a power loss would lose the file otherwise, and a missing index reads "no aborts").
    created = kinds.index(("create", ".txnindex"))
    assert ("fsync_dir", "") in kinds[created:]
    log.close()

    for step in range(opened, steps + 1):  # steps: no crash, a power loss after the end
        for image in ("process", "power"):
            run = tmp_path / f"run-{step}-{image}"
            shutil.copytree(base, run / "live")
            vfs = CrashVFS(run / "live")
            vfs.crash_at = step
            vfs.tear = 20
            log = Log.open(run / "live" / "t-0", CRASH_CONFIG, vfs=vfs)
            try:
                _abort_scenario(log)
                crashed = False
            except Crash:
                crashed = True
            assert crashed == (step < steps)
            # The newest recovery point the LogManager could have checkpointed: recovery then
            # trusts everything below it, the .txnindex included.
            recovery_point = log.recovery_point
            vfs.release()
            if image == "process":
                disk = vfs.process_crash_image(run / "disk")
            else:
                disk = vfs.power_loss_image(run / "disk")
            after = Log.open(
                disk / "t-0", CRASH_CONFIG, recovery_point=recovery_point, had_clean_shutdown=False
            )
            after.update_high_watermark(after.log_end_offset)
            markers = {
                h.base_offset: h.producer_id
                for s in after.segments
                for _, h in s.batches()
                if h.is_control
            }
            entries = all_aborted(after)
            assert [e.last_offset for e in entries] == sorted(markers), (step, image)
            if 3 in markers:
                assert entries[0] == AbortedTxn(1, 1, 3, 4), (step, image)
            if 5 in markers:
                assert entries[-1] == AbortedTxn(2, 4, 5, 6), (step, image)
            seen = read_committed(after)
            assert seen[:1] == [b"keep"] and not {b"first", b"late", b"two"} & set(seen), (
                step,
                image,
            )
            after.close()


# -- dump-log ------------------------------------------------------------------------------------


def test_dump_log_shows_markers_and_the_txn_index(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from sluice.server.storage import dump_log

    directory = tmp_path / "t-0"
    log = Log.open(directory, CONFIG)
    log.append_as_leader(txn_batch(7, 0, [b"a", b"b"]), leader_epoch=0)  # 0-1
    log.append_end_txn_marker(7, 0, 3, commit=False, leader_epoch=0, timestamp=NOW)  # 2
    log.append_as_leader(txn_batch(7, 2, [b"c"]), leader_epoch=0)  # 3
    log.append_end_txn_marker(7, 0, 3, commit=True, leader_epoch=0, timestamp=NOW)  # 4
    log.close()
    segment = directory / f"{0:020d}.log"
    index = directory / f"{0:020d}.txnindex"
    runner = CliRunner()
    result = runner.invoke(dump_log.main, [str(index)])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines() == [
        f"Dumping {index}",
        "version: 0 producerId: 7 firstOffset: 0 lastOffset: 2 lastStableOffset: 3",
    ]
    deep = runner.invoke(dump_log.main, ["--deep-iteration", str(segment)]).output.splitlines()
    records = [line for line in deep if line.startswith("| ")]
    assert records == [
        f"| offset: 0 CreateTime: {NOW} keySize: -1 valueSize: 1 sequence: 0 headerKeys: []",
        f"| offset: 1 CreateTime: {NOW} keySize: -1 valueSize: 1 sequence: 1 headerKeys: []",
        f"| offset: 2 CreateTime: {NOW} keySize: 4 valueSize: 6 sequence: -1 headerKeys: [] "
        "endTxnMarker: ABORT coordinatorEpoch: 3",
        f"| offset: 3 CreateTime: {NOW} keySize: -1 valueSize: 1 sequence: 2 headerKeys: []",
        f"| offset: 4 CreateTime: {NOW} keySize: 4 valueSize: 6 sequence: -1 headerKeys: [] "
        "endTxnMarker: COMMIT coordinatorEpoch: 3",
    ]
    data = runner.invoke(dump_log.main, ["--print-data-log", str(segment)]).output
    assert "payload: c" in data and "endTxnMarker: COMMIT coordinatorEpoch: 3" in data
    assert dump_log.verify_partition(directory) == []
    # An entry that names no ABORT marker, and a torn file, are found.
    index.write_bytes(index.read_bytes() + AbortedTxn(7, 3, 4, 5).encode())
    problems = dump_log.verify_partition(directory)
    assert len(problems) == 1 and "names no ABORT marker of producer 7 at offset 4" in problems[0]
    index.write_bytes(index.read_bytes()[:40])
    (problem,) = dump_log.verify_partition(directory)
    assert "not a multiple" in problem
    assert "Unreadable transaction index" in runner.invoke(dump_log.main, [str(index)]).output


def test_failed_txn_index_write_takes_the_marker_back(tmp_path: Path) -> None:
    def setup(root: Path) -> tuple[Log, CrashVFS]:
        vfs = CrashVFS(root)
        log = Log.open(root / "t-0", CRASH_CONFIG, vfs=vfs)
        log.append_as_leader(txn_batch(1, 0, [b"gone"]), leader_epoch=0)
        log.append_as_leader(plain_batch([b"kept"]), leader_epoch=0)
        return log, vfs

    dry, vfs = setup(tmp_path / "dry")
    opened = len(vfs.steps)
    dry.append_end_txn_marker(1, 0, 0, commit=False, leader_epoch=0)
    kinds = [(s.kind, s.path.suffix) for s in vfs.steps]
    failing = kinds.index(("pwrite", ".txnindex"), opened)
    dry.close()

    log, vfs = setup(tmp_path / "run")
    vfs.fail_at = failing
    with pytest.raises(OSError):
        log.append_end_txn_marker(1, 0, 0, commit=False, leader_epoch=0)
    assert log.log_end_offset == 2 and all_aborted(log) == []
    log.maybe_increment_high_watermark(2)
    assert log.first_unstable_offset == 0  # the transaction is still open
    log.append_end_txn_marker(1, 0, 0, commit=False, leader_epoch=0)  # the coordinator retries
    log.maybe_increment_high_watermark(3)
    assert all_aborted(log) == [AbortedTxn(1, 0, 2, 3)]
    assert read_committed(log) == [b"kept"]
    log.close()
