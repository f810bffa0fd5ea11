"""The compacted workload's latest-per-key checker on handmade histories (each anomaly it must
catch, and what it must allow), the replica's compacted view, and one short real trial."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sluice.protocol.records import build_batch
from sluice.testing.zookeeper import ZooKeeperServer
from tests.jepsen.compacted_workload import (
    CompactedTrialResult,
    KeyedObservation,
    KeyedSend,
    check_latest,
    compacted_view,
    epochs_disagree_with_batches,
    run_compacted_trial,
)
from tests.jepsen.runner import TrialConfig, format_line

Send, Obs = KeyedSend, KeyedObservation

# Key "a" in partition 0: a1 acknowledged at 0, a2 at 1; a tombstone acknowledged at 2; a3 at 3.
A1 = Send(0, "a", "a1", "ok", 0, 0)
A2 = Send(1, "a", "a2", "ok", 0, 1)
A_DEL = Send(2, "a", None, "ok", 0, 2)
A3 = Send(3, "a", "a3", "ok", 0, 3)


def test_the_latest_acknowledged_value_of_every_key_is_valid() -> None:
    report = check_latest([A1, A2], [[Obs(0, 1, "a", "a2")]])
    assert report.valid, report.evidence()
    # Superseded values not yet cleaned are allowed too, and offsets may have gaps.
    report = check_latest([A1, A2, A3], [[Obs(0, 0, "a", "a1"), Obs(0, 3, "a", "a3")]])
    assert report.valid, report.evidence()
    assert report.summary()["keys_read"] == 1


def test_a_lost_latest_is_caught() -> None:
    # a2 acknowledged, but the key ends with a1: the acknowledged write was lost.
    report = check_latest([A1, A2], [[Obs(0, 0, "a", "a1")]])
    assert list(report.lost) == ["a"] and not report.valid
    # ...or the key is absent altogether.
    report = check_latest([A1, A2], [[]])
    assert list(report.lost) == ["a"] and not report.valid


def test_a_tombstoned_key_may_be_absent_or_end_with_its_tombstone() -> None:
    assert check_latest([A1, A_DEL], [[]]).valid
    assert check_latest([A1, A_DEL], [[Obs(0, 2, "a", None)]]).valid


def test_a_resurrected_key_is_caught() -> None:
    # The delete was acknowledged, yet the older value is the key's last record.
    report = check_latest([A1, A_DEL], [[Obs(0, 0, "a", "a1")]])
    assert list(report.resurrected) == ["a"] and not report.valid


def test_a_value_after_a_tombstone_must_survive_it() -> None:
    assert check_latest([A1, A_DEL, A3], [[Obs(0, 3, "a", "a3")]]).valid
    report = check_latest([A1, A_DEL, A3], [[Obs(0, 2, "a", None)]])
    assert list(report.lost) == ["a"] and not report.valid


def test_later_unknown_sends_are_indeterminate() -> None:
    pending = Send(2, "a", "a-maybe", "unknown")
    pending_delete = Send(3, "a", None, "unknown")
    history = [A1, A2, pending, pending_delete]
    for read in ([Obs(0, 1, "a", "a2")], [Obs(0, 5, "a", "a-maybe")], [Obs(0, 6, "a", None)], []):
        report = check_latest(history, [read])
        assert report.valid, (read, report.evidence())
    assert check_latest(history, [[Obs(0, 5, "a", "a-maybe")]]).recovered == ["a"]
    # ...but an old tombstone before the acknowledged a2 is no pending delete.
    report = check_latest([A1, Send(1, "a", None, "ok", 0, 1), A3, pending_delete],
                          [[Obs(0, 1, "a", None)]])  # fmt: skip
    assert list(report.lost) == ["a"]
    # An unknown send *before* the last acknowledged one cannot be the latest.
    early = Send(0, "a", "a0", "unknown")
    report = check_latest([early, Send(1, "a", "a1", "ok", 0, 4)], [[Obs(0, 3, "a", "a0")]])
    assert list(report.lost) == ["a"]


def test_a_key_never_acknowledged_may_be_absent_or_any_of_its_sends() -> None:
    history = [Send(0, "b", "b1", "unknown"), Send(1, "b", "b2", "unknown")]
    for read in ([], [Obs(1, 0, "b", "b1")], [Obs(1, 0, "b", "b2")]):
        assert check_latest(history, [read]).valid


def test_phantoms_are_caught() -> None:
    b = Send(1, "b", "b1", "ok", 1, 0)
    failed = Send(2, "a", "a-failed", "fail")
    cases = [
        [Obs(0, 0, "a", "a1"), Obs(0, 9, "a", "never-sent")],
        [Obs(0, 0, "a", "a1"), Obs(1, 0, "b", "b1"), Obs(0, 5, "a", "b1")],  # b's value under a
        [Obs(0, 0, "a", "a1"), Obs(0, 7, "a", "a-failed")],
    ]
    for read in cases:
        report = check_latest([A1, b, failed], [read])
        assert report.phantom and not report.valid, read


def test_offsets_must_strictly_increase_and_agree() -> None:
    report = check_latest([A1, A2], [[Obs(0, 1, "a", "a2"), Obs(0, 1, "a", "a2")]])
    assert report.nonmonotonic and not report.valid
    report = check_latest([A1, A2], [[Obs(0, 0, "a", "a1"), Obs(0, 3, "a", "a2")]])
    assert report.inconsistent_offsets == {(0, 1): ["a2 acknowledged here, read at [(0, 3)]"]}
    assert not report.valid
    report = check_latest([A1, A2], [[Obs(0, 0, "a", "a1")], [Obs(0, 0, "a", "a2")]])
    assert (0, 0) in report.inconsistent_offsets


def test_a_value_read_twice_is_a_duplicate() -> None:
    pending = Send(2, "a", "a3", "unknown")
    report = check_latest([A1, A2, pending], [[Obs(0, 1, "a", "a2"), Obs(0, 2, "a", "a2")]])
    assert report.duplicate == {"a2": [(0, 1), (0, 2)]} and not report.valid


def test_a_trial_allows_a_clients_resend_but_not_a_brokers_rewrite() -> None:
    """A value read twice under two producer identities was sent twice by librdkafka (an
    epoch bump): allowed when it did not change the latest; one identity twice: the broker's."""
    from tests.jepsen.runner import _classify_duplicates
    from tests.jepsen.test_random_faults import header

    pending = Send(2, "a", "a3", "unknown")
    read = [Obs(0, 1, "a", "a2"), Obs(0, 2, "a", "a2")]
    for batches, valid in (([header(0, 2, 0, 0), header(2, 1, 1, 1)], True),
                           ([header(0, 2, 0, 0), header(2, 1, 0, 1)], False)):  # fmt: skip
        result = CompactedTrialResult(TrialConfig(1), [])
        result.compacted = check_latest([A1, A2, pending], [read])
        _classify_duplicates(result.compacted, {0: batches}, result)  # type: ignore[arg-type]
        assert result.valid is valid, batches


def test_values_must_be_unique() -> None:
    with pytest.raises(ValueError):
        check_latest([A1, Send(1, "a", "a1", "ok", 0, 1)], [[]])


def test_a_replicas_compacted_view_is_its_latest_record_per_key(tmp_path: Path) -> None:
    """Two replicas holding different bytes (one cleaned, one not; one with a tombstone the
    other dropped) have one compacted view."""
    raw = tmp_path / "raw"
    cleaned = tmp_path / "cleaned"
    raw.mkdir()
    cleaned.mkdir()
    (raw / "00000000000000000000.log").write_bytes(
        build_batch([(0, b"a", b"1"), (0, b"b", b"1"), (0, b"a", b"2")], base_offset=0)
        + build_batch([(0, b"b", None)], base_offset=3)
    )
    (cleaned / "00000000000000000000.log").write_bytes(
        build_batch([(0, b"a", b"2")], base_offset=2)
    )
    (cleaned / "00000000000000000003.log").write_bytes(b"")
    assert compacted_view(raw) == compacted_view(cleaned) == {b"a": (2, -1, b"2")}
    (cleaned / "00000000000000000003.log").write_bytes(
        build_batch([(0, b"a", b"3")], base_offset=3)
    )
    assert compacted_view(raw) != compacted_view(cleaned)


def test_an_epoch_cache_must_agree_with_its_replicas_batches(tmp_path: Path) -> None:
    """A follower whose epoch 1 starts later than the leader's (the leader had cleaned away
    its first batches of that epoch) is consistent; a cache that gives a batch another epoch
    is not."""
    (tmp_path / "00000000000000000000.log").write_bytes(
        build_batch([(0, b"a", b"1")], base_offset=0, partition_leader_epoch=0)
        + build_batch([(0, b"a", b"2")], base_offset=7, partition_leader_epoch=1)
    )
    assert epochs_disagree_with_batches("0\n2\n0 0\n1 3\n", tmp_path) == []  # the leader's
    assert epochs_disagree_with_batches("0\n2\n0 0\n1 7\n", tmp_path) == []  # a follower's
    assert epochs_disagree_with_batches("0\n2\n0 0\n1 8\n", tmp_path) == [
        "batch at 7 of epoch 1, cache says 0"
    ]


@pytest.mark.slow
def test_a_compacted_trial_under_faults_keeps_the_latest_of_every_key(
    sluice_zookeeper: ZooKeeperServer,
) -> None:
    result = run_compacted_trial(sluice_zookeeper, TrialConfig(seed=23, duration=8.0))
    print(format_line(result))
    assert not result.error, result.error
    assert result.played, "the schedule played no fault"
    assert result.summary["acknowledged"] > 100
    assert result.summary["tombstones"] > 10
    assert result.cleanings > 0, "no replica cleaned during the trial"
    assert result.valid, json.dumps(result.record(), indent=1)
