"""The random-fault runner: its schedules, its verdicts, and a few real trials (CI's bounded share
of ``python -m tests.jepsen``; the figures come from hundreds of trials run by hand)."""

from __future__ import annotations

import itertools
import json

import pytest

from sluice.protocol.records import BatchHeader, build_batch
from sluice.testing.zookeeper import ZooKeeperServer
from tests.jepsen.checker import Observation, Send, check
from tests.jepsen.runner import (
    FAULTS,
    TrialConfig,
    TrialResult,
    _classify_duplicates,
    _classify_losses,
    _settled_epochs,
    _windows,
    format_line,
    make_schedule,
    run_trial,
)


def test_a_schedule_is_a_pure_function_of_its_seed() -> None:
    assert make_schedule(5, 10.0) == make_schedule(5, 10.0)
    assert make_schedule(5, 10.0) != make_schedule(6, 10.0)


@pytest.mark.parametrize("seed", range(50))
def test_a_schedule_has_one_fault_at_a_time_within_the_workload(seed: int) -> None:
    steps = make_schedule(seed, 10.0)
    assert steps
    for step in steps:
        assert step.fault in FAULTS
        assert 0 < step.at < 9.0
        assert 1 <= step.broker <= 3
    for a, b in itertools.pairwise(steps):
        assert b.at >= a.at + a.hold + 0.5  # the next starts after the previous was undone


def test_unavailability_windows_are_the_gaps_between_acknowledgements() -> None:
    acked = {0: [0.1, 0.2, 1.5, 1.6], 1: [0.1, 4.0], 2: []}
    windows = sorted(round(w, 2) for w in _windows(acked, 5.0))
    # partition 0: 0.2 -> 1.5 and 1.6 -> 5.0; partition 1: 0.1 -> 4.0, 4.0 -> 5.0;
    # partition 2 acknowledged nothing at all: the whole run.
    assert windows == [1.0, 1.3, 3.4, 3.9, 5.0]


def header(base_offset: int, count: int, producer_epoch: int, base_sequence: int) -> BatchHeader:
    """A batch of ``count`` records of producer 7 (the fields the classification reads)."""
    return BatchHeader(base_offset, 0, 0, 2, 0, 0, count - 1, 0, 0, 7, producer_epoch,
                       base_sequence, count)  # fmt: skip


def _result(
    config: TrialConfig,
    sends: list[Send],
    read: list[Observation],
    batches: list[BatchHeader] | None = None,
) -> TrialResult:
    result = TrialResult(config, make_schedule(config.seed, config.duration))
    result.report = check(sends, [read])
    result.summary = result.report.summary()
    _classify_duplicates(result.report, {0: batches or []}, result)
    return result


def test_each_configuration_is_held_to_its_own_promise() -> None:
    sends = [Send("a", "ok", 0, 0), Send("b", "ok", 0, 1)]
    lost_b = [Observation(0, 0, "a")]
    dup_a = [Observation(0, 0, "a"), Observation(0, 1, "b"), Observation(0, 2, "a")]
    assert not _result(TrialConfig(1), sends, lost_b).valid  # acks=all loses nothing
    assert _result(TrialConfig(1, acks="1"), sends, lost_b).valid  # acks=1 may
    # "a" at offsets 0 and 2 under one (producer, epoch, sequence): the broker wrote it twice.
    rewritten = [header(0, 2, 0, 0), header(2, 1, 0, 0)]
    assert not _result(TrialConfig(1), sends, dup_a, rewritten).valid
    assert _result(TrialConfig(1, idempotence=False), sends, dup_a).valid
    # The second copy under a bumped epoch at sequence 0: the client sent it again as new.
    resent = _result(TrialConfig(1), sends, dup_a, [header(0, 2, 0, 0), header(2, 1, 1, 0)])
    assert resent.valid
    assert (resent.duplicate_resent, resent.duplicate_rewritten) == (["a"], [])
    moved = [Observation(0, 0, "b"), Observation(0, 1, "a")]  # offsets disagree: never allowed
    assert not _result(TrialConfig(1, acks="1", idempotence=False), sends, moved).valid


def test_an_invalid_trial_prints_its_seed_schedule_and_evidence() -> None:
    result = _result(TrialConfig(4242), [Send("a", "ok", 0, 0)], [])
    assert format_line(result).startswith("seed 4242: INVALID")
    record = json.loads(json.dumps(result.record()))
    assert record["config"]["seed"] == 4242
    assert record["schedule"] == [
        {k: getattr(s, k) for k in ("at", "fault", "target", "hold", "partition", "broker")}
        for s in make_schedule(4242, 10.0)
    ]
    assert record["evidence"]["lost"] == ["a"]


@pytest.mark.slow
@pytest.mark.parametrize("seed", [11])
def test_random_faults_lose_nothing_acknowledged(
    sluice_zookeeper: ZooKeeperServer, seed: int
) -> None:
    """acks=all, idempotence on: nothing lost, duplicated or disagreeing, replicas identical."""
    assert_kept_its_promise(run_trial(sluice_zookeeper, TrialConfig(seed=seed, duration=8.0)))


def assert_kept_its_promise(result: TrialResult) -> None:
    """A real trial ran its faults, acknowledged writes and kept its configuration's promise."""
    print(format_line(result))
    assert not result.error, result.error
    assert result.played, "the schedule played no fault"
    assert result.summary["acknowledged"] > 100
    assert result.valid, json.dumps(result.record(), indent=1)
    assert result.summary["read"] >= result.summary["acknowledged"]


def test_losses_in_the_kip966_window_are_reported_and_fail_the_trial() -> None:
    """A value lost in a partition whose only in-sync replica lost its unflushed writes is
    KIP-966's window: reported apart (the window was exercised), and, since an eligible replica
    leads there instead, a failed trial like any other loss."""
    sends = [Send("a", "ok", 0, 0), Send("b", "ok", 1, 0)]
    result = _result(TrialConfig(1), sends, [Observation(1, 0, "b")])
    assert not result.valid
    result.played = [{"fault": "lose_unflushed", "broker": 2, "sole_isr": [0]}]
    assert result.report is not None
    _classify_losses(result.report, sends, result)
    assert (result.kip966_partitions, result.lost_in_kip966_window) == ([0], ["a"])
    assert not result.valid
    result.played = [{"fault": "lose_unflushed", "broker": 2, "sole_isr": [1]}]
    _classify_losses(result.report, sends, result)
    assert not result.valid  # "a" was lost outside the window
    assert json.loads(json.dumps(result.record()))["lost_in_kip966_window"] == 0


def test_a_leaders_epoch_with_nothing_written_yet_is_no_disagreement() -> None:
    log = build_batch([(0, None, b"x")])  # one record at offset 0: the log ends at 1
    leader = "0\n2\n0 0\n1 1\n"  # elected at epoch 1 when the log ended at 1
    follower = "0\n1\n0 0\n"
    assert _settled_epochs(leader, log) == _settled_epochs(follower, log) == ((0, 0),)
    assert _settled_epochs("0\n2\n0 0\n1 0\n", log) != _settled_epochs(follower, log)
