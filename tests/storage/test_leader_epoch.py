"""Leader epoch cache and the follower truncation function, against simple models.

* the cache (and its checkpoint file) against a list-comprehension model of the spec's rules,
  over random assign / truncate / end_offset_for sequences;
* ``follower_truncation_offset`` on random pairs of diverged logs made by simulated leader
  elections, appends, partial replication and crashes that lose unflushed records: after the
  truncation exchange the follower's log is a prefix of the leader's.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sluice.protocol import records as rec
from sluice.server.storage.checkpoint import CorruptCheckpointError, LeaderEpochCheckpointFile
from sluice.server.storage.layout import LEADER_EPOCH_CHECKPOINT
from sluice.server.storage.leader_epoch import (
    EpochEntry,
    LeaderEpochFileCache,
    TruncationState,
    entries_from_batches,
    follower_truncation_offset,
)

# ------------------------------------------------------------------------- checkpoint file


def test_checkpoint_file_is_kafkas_text_format(tmp_path: Path) -> None:
    path = tmp_path / LEADER_EPOCH_CHECKPOINT
    cp = LeaderEpochCheckpointFile(path)
    assert cp.read() is None
    cache = LeaderEpochFileCache(cp)
    cache.assign(0, 0)
    cache.assign(3, 1200)
    assert path.read_text() == "0\n2\n0 0\n3 1200\n"
    assert cp.read() == [(0, 0), (3, 1200)]
    assert not (tmp_path / (LEADER_EPOCH_CHECKPOINT + ".tmp")).exists()
    cache.clear()
    assert path.read_text() == "0\n0\n"
    assert cp.read() == []


@pytest.mark.parametrize(
    "content",
    [
        "",
        "0\n",
        "1\n0\n",  # unknown version
        "0\n2\n0 0\n",  # count does not match
        "0\n1\n0 0",  # last line not terminated (a torn write)
        "0\n1\n0\n",  # one field
        "0\n1\n0 0 0\n",  # three fields
        "0\n1\n-1 5\n",  # negative epoch
        "0\n1\n2 -5\n",  # negative offset
        "0\n1\n2 x\n",
    ],
)
def test_malformed_checkpoint_is_refused(tmp_path: Path, content: str) -> None:
    path = tmp_path / LEADER_EPOCH_CHECKPOINT
    path.write_text(content)
    with pytest.raises(CorruptCheckpointError):
        LeaderEpochCheckpointFile(path).read()


def test_loading_unordered_entries_repairs_them_like_kafkas_load() -> None:
    # Kafka's load assigns each stored entry in turn: later entries win over what they contradict.
    cache = LeaderEpochFileCache(None, [(0, 0), (5, 10), (3, 20), (4, 30)])
    assert cache.entries == ((0, 0), (3, 20), (4, 30))


# ------------------------------------------------------------------------- the spec's cases


def test_end_offset_for_cases_of_the_spec() -> None:
    cache = LeaderEpochFileCache(None, [(2, 10), (4, 30), (7, 55)])
    leo = 80
    assert cache.end_offset_for(7, leo) == (7, 80)  # latest: LEO
    assert cache.end_offset_for(4, leo) == (4, 55)  # next epoch's start
    assert cache.end_offset_for(5, leo) == (4, 55)  # unknown: largest <= it
    assert cache.end_offset_for(6, leo) == (4, 55)
    assert cache.end_offset_for(2, leo) == (2, 30)
    assert cache.end_offset_for(1, leo) == (1, 10)  # below all: first start
    assert cache.end_offset_for(8, leo) == (-1, -1)  # above all
    assert cache.end_offset_for(-1, leo) == (-1, -1)
    assert LeaderEpochFileCache().end_offset_for(0, 0) == (-1, -1)


def test_assign_rules() -> None:
    cache = LeaderEpochFileCache()
    assert cache.latest_epoch is None
    assert cache.assign(1, 0)
    assert not cache.assign(1, 5)  # same epoch later: nothing to record
    assert cache.assign(1, 0) is False
    assert cache.assign(3, 10)
    assert cache.entries == (EpochEntry(1, 0), EpochEntry(3, 10))
    # A lower epoch at a later offset drops the higher one (a follower after divergence).
    assert cache.assign(2, 12)
    assert cache.entries == ((1, 0), (2, 12))
    # The latest epoch at an earlier offset moves its start back (Kafka's isUpdateNeeded).
    assert cache.assign(2, 11)
    assert cache.entries == ((1, 0), (2, 11))
    # A higher epoch at an offset not above the last start replaces it.
    assert cache.assign(5, 11)
    assert cache.entries == ((1, 0), (5, 11))
    with pytest.raises(ValueError):
        cache.assign(-1, 3)
    with pytest.raises(ValueError):
        cache.assign(6, -3)


def test_truncations() -> None:
    cache = LeaderEpochFileCache(None, [(1, 0), (2, 10), (3, 20)])
    assert not cache.truncate_from_end(21)
    assert cache.truncate_from_end(20)
    assert cache.entries == ((1, 0), (2, 10))
    assert cache.truncate_from_start(15)
    assert cache.entries == ((2, 15),)
    assert not cache.truncate_from_start(15)  # already there
    assert not cache.truncate_from_start(3)
    assert cache.epoch_for_offset(14) is None
    assert cache.epoch_for_offset(15) == 2
    assert cache.epoch_for_offset(10**9) == 2


# ------------------------------------------------------------------------- model test


class Model:
    """The spec's rules written as plainly as possible (whole-list filters, linear scans)."""

    def __init__(self) -> None:
        self.entries: list[tuple[int, int]] = []

    def assign(self, epoch: int, start: int) -> None:
        if self.entries and self.entries[-1][0] == epoch and start >= self.entries[-1][1]:
            return
        self.entries = [(e, o) for e, o in self.entries if e < epoch and o < start]
        self.entries.append((epoch, start))

    def truncate_from_end(self, end: int) -> None:
        self.entries = [(e, o) for e, o in self.entries if o < end]

    def truncate_from_start(self, start: int) -> None:
        before = [(e, o) for e, o in self.entries if o <= start]
        after = [(e, o) for e, o in self.entries if o > start]
        self.entries = ([(before[-1][0], start)] if before else []) + after

    def end_offset_for(self, epoch: int, leo: int) -> tuple[int, int]:
        if epoch == -1 or not self.entries:
            return -1, -1
        if self.entries[-1][0] == epoch:
            return epoch, leo
        higher = [o for e, o in self.entries if e > epoch]
        lower = [e for e, _ in self.entries if e <= epoch]
        if not higher:
            return -1, -1
        return (lower[-1] if lower else epoch), higher[0]

    def epoch_for_offset(self, offset: int) -> int | None:
        found = [e for e, o in self.entries if o <= offset]
        return found[-1] if found else None


OPS = st.lists(
    st.tuples(
        st.sampled_from(["assign", "assign", "assign", "end", "start", "clear"]),
        st.integers(0, 12),
        st.integers(0, 60),
    ),
    max_size=40,
)


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(OPS)
def test_cache_against_model(tmp_path_factory: pytest.TempPathFactory, ops: list) -> None:
    path = tmp_path_factory.mktemp("epochs") / LEADER_EPOCH_CHECKPOINT
    checkpoint = LeaderEpochCheckpointFile(path)
    cache = LeaderEpochFileCache(checkpoint)
    model = Model()
    for op, epoch, offset in ops:
        before = cache.entries
        if op == "assign":
            changed = cache.assign(epoch, offset)
            model.assign(epoch, offset)
        elif op == "end":
            changed = cache.truncate_from_end(offset)
            model.truncate_from_end(offset)
        elif op == "start":
            changed = cache.truncate_from_start(offset)
            model.truncate_from_start(offset)
        else:
            changed = cache.clear()
            model.entries = []
        assert list(cache.entries) == model.entries
        assert changed == (cache.entries != before)
        # Invariant: epochs and start offsets strictly increase.
        for (e1, o1), (e2, o2) in zip(cache.entries, cache.entries[1:], strict=False):
            assert e1 < e2 and o1 < o2
        # The file says what memory says (whenever anything was ever written).
        if path.exists():
            assert checkpoint.read() == model.entries
            assert (
                LeaderEpochFileCache(checkpoint, checkpoint.read() or []).entries == cache.entries
            )
        leo = max([o for _, o in model.entries] + [0]) + 5
        for asked in range(-1, 14):
            assert cache.end_offset_for(asked, leo) == model.end_offset_for(asked, leo)
        for at in range(0, 65, 3):
            assert cache.epoch_for_offset(at) == model.epoch_for_offset(at)


def _header(base_offset: int, epoch: int, records: int = 1) -> rec.BatchHeader:
    data = bytearray(rec.build_batch([(0, None, b"x")] * records))
    header = rec.parse_header(data)._replace(base_offset=base_offset, partition_leader_epoch=epoch)
    rec.HEADER.pack_into(data, 0, *header)
    return rec.parse_header(data)


def test_entries_from_batches_is_what_appends_would_assign() -> None:
    headers = [_header(0, 0, 3), _header(3, 0), _header(4, 2, 2), _header(6, -1), _header(7, 5)]
    assert entries_from_batches(headers) == ((0, 0), (2, 4), (5, 7))
    # The log start inside epoch 2's first batch: epoch 2 starts there.
    assert entries_from_batches(headers, 5) == ((2, 5), (5, 7))
    assert entries_from_batches([]) == ()


# ------------------------------------------------------------------------- truncation function


def test_truncation_function_cases() -> None:
    follower = LeaderEpochFileCache(None, [(0, 0), (2, 10), (4, 20)])

    def decide(leader_epoch: int, leader_end: int, leo: int = 30, hw: int = 7) -> TruncationState:
        return follower_truncation_offset(
            follower,
            leader_epoch=leader_epoch,
            leader_end_offset=leader_end,
            log_end_offset=leo,
            high_watermark=hw,
        )

    assert decide(-1, -1) == (7, True)  # undefined: HW
    assert decide(-1, -1, leo=5) == (5, True)
    assert decide(-1, 12) == (12, True)  # no epoch in the answer (v0): leader's end
    assert decide(4, 25) == (25, True)  # same latest epoch: min(leader end, LEO)
    assert decide(4, 40) == (30, True)
    assert decide(2, 15) == (15, True)  # knows epoch 2, which ends at 20 here
    assert decide(2, 22) == (20, True)
    assert decide(3, 25) == (20, False)  # never saw 3: to the end of its own epoch 2, ask again
    assert decide(1, 9) == (10, False)  # never saw 1: to the end of epoch 0
    empty = LeaderEpochFileCache()
    assert follower_truncation_offset(
        empty, leader_epoch=3, leader_end_offset=9, log_end_offset=30, high_watermark=0
    ) == (9, True)


class Rec(NamedTuple):
    """One record of a simulated log: the epoch that wrote it and a unique id."""

    epoch: int
    uid: int


class Replica:
    """An in-memory replica: its records (one per offset), epoch cache and HW."""

    def __init__(self) -> None:
        self.records: list[Rec] = []
        self.cache = LeaderEpochFileCache()
        self.hw = 0

    def truncate_to(self, offset: int) -> None:
        # What Log.truncate_to does with the cache: drop what starts at or after the new end.
        del self.records[offset:]
        self.cache.truncate_from_end(min(offset, len(self.records)))
        self.hw = min(self.hw, len(self.records))

    def append(self, record: Rec) -> None:
        self.cache.assign(record.epoch, len(self.records))
        self.records.append(record)


def truncate_follower(follower: Replica, leader: Replica) -> int:
    """The exchange of spec §4 until it completes; returns the rounds it took."""
    for rounds in range(1, 100):
        latest = follower.cache.latest_epoch
        if latest is None:
            follower.truncate_to(follower.hw)
            return rounds
        epoch, end = leader.cache.end_offset_for(latest, len(leader.records))
        state = follower_truncation_offset(
            follower.cache,
            leader_epoch=epoch,
            leader_end_offset=end,
            log_end_offset=len(follower.records),
            high_watermark=follower.hw,
        )
        follower.truncate_to(state.offset)
        if state.complete:
            return rounds
    raise AssertionError("truncation did not converge")


def simulate(
    rng: random.Random, replicas: list[Replica], steps: int, check: Callable[..., None]
) -> None:
    """Random history: elections (clean or not), appends, partial fetches, crashes losing the
    unflushed tail. ``check(follower, leader)`` runs after every truncation exchange."""
    epoch = -1
    leader: Replica | None = None
    uid = 0
    flushed = [0] * len(replicas)
    for _ in range(steps):
        action = rng.random()
        if leader is None or action < 0.15:
            epoch += 1
            leader = rng.choice(replicas)
            leader.cache.assign(epoch, len(leader.records))  # KIP-279: the term starts now
        elif action < 0.55:
            for _ in range(rng.randint(1, 4)):
                uid += 1
                leader.append(Rec(epoch, uid))
        elif action < 0.9:
            follower = rng.choice([r for r in replicas if r is not leader])
            truncate_follower(follower, leader)
            check(follower, leader)
            start = len(follower.records)
            for record in leader.records[start : start + rng.randint(0, 6)]:
                follower.append(record)
        else:
            victim = rng.randrange(len(replicas))
            r = replicas[victim]
            if rng.random() < 0.5:
                flushed[victim] = len(r.records)
            else:  # crash: the unflushed tail is lost; the reload drops entries past LEO
                del r.records[rng.randint(min(flushed[victim], len(r.records)), len(r.records)) :]
                flushed[victim] = min(flushed[victim], len(r.records))
                r.cache.truncate_from_end(len(r.records) + 1)
                r.hw = min(r.hw, len(r.records))
                if r is leader:
                    leader = None  # a restarted broker is no leader until elected again


def assert_prefix(follower: Replica, leader: Replica) -> None:
    assert follower.records == leader.records[: len(follower.records)]


@pytest.mark.parametrize("seed", range(300))
def test_truncation_makes_the_follower_a_prefix_of_the_leader(seed: int) -> None:
    rng = random.Random(seed)
    replicas = [Replica() for _ in range(rng.choice([2, 3]))]
    simulate(rng, replicas, 80, assert_prefix)


def test_truncation_converges_past_an_empty_term() -> None:
    # Epoch 0's leader wrote 0..9; the leader-to-be copied 0..7 and led epoch 3 (8..11); the
    # follower, with 0..9, led epoch 5 without writing; the leader leads epoch 6. Without the
    # empty term's entry going when the follower "truncates" to its LEO, it would ask for
    # epoch 5 forever.
    leader, follower = Replica(), Replica()
    for uid in range(10):
        follower.append(Rec(0, uid))
    for record in follower.records[:8]:
        leader.append(record)
    for uid in range(100, 104):
        leader.append(Rec(3, uid))
    follower.cache.assign(5, 10)
    leader.cache.assign(6, 12)
    assert truncate_follower(follower, leader) == 2
    assert follower.records == leader.records[:8]
