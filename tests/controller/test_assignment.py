"""Replica placement against Kafka's own expected layouts (``AdminUtilsTest``)."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from sluice.protocol import errors
from sluice.server.controller.assignment import (
    assign_replicas,
    rack_alternated,
    validate_assignment,
)


def test_five_brokers_ten_partitions_rf3_matches_kafka() -> None:
    # AdminUtilsTest.testReplicaAssignment (fixedStartIndex = 0).
    assert assign_replicas(range(5), 10, 3, start_index=0) == {
        0: [0, 1, 2],
        1: [1, 2, 3],
        2: [2, 3, 4],
        3: [3, 4, 0],
        4: [4, 0, 1],
        5: [0, 2, 3],
        6: [1, 3, 4],
        7: [2, 4, 0],
        8: [3, 0, 1],
        9: [4, 1, 2],
    }


def test_three_brokers_six_partitions_rf3_matches_kafka() -> None:
    # AdminUtilsTest.testAssignReplicasToBrokersRackUnaware.
    assert assign_replicas([2, 0, 1], 6, 3, start_index=0) == {
        0: [0, 1, 2],
        1: [1, 2, 0],
        2: [2, 0, 1],
        3: [0, 2, 1],
        4: [1, 0, 2],
        5: [2, 1, 0],
    }


def test_broker_ids_need_not_be_dense() -> None:
    assert assign_replicas([10, 30, 20], 3, 2, start_index=0) == {
        0: [10, 20],
        1: [20, 30],
        2: [30, 10],
    }


def test_adding_partitions_numbers_them_after_the_existing_ones() -> None:
    # Kafka's addPartitions passes startPartitionId = current count; leaders keep rotating.
    tail = assign_replicas(range(5), 4, 3, start_index=0, start_partition=6)
    assert sorted(tail) == [6, 7, 8, 9]
    assert [tail[p][0] for p in sorted(tail)] == [1, 2, 3, 4]


@pytest.mark.parametrize("seed", range(20))
def test_random_start_spreads_leaders_and_never_repeats_a_broker(seed: int) -> None:
    rng = random.Random(seed)
    brokers = rng.sample(range(100), rng.randint(1, 7))
    rf = rng.randint(1, len(brokers))
    partitions = len(brokers) * rng.randint(1, 4)
    assignment = assign_replicas(brokers, partitions, rf, rng=rng)
    assert sorted(assignment) == list(range(partitions))
    for replicas in assignment.values():
        assert len(replicas) == rf
        assert len(set(replicas)) == rf
        assert set(replicas) <= set(brokers)
    # A whole number of rounds: every broker leads the same number of partitions.
    leaders = Counter(replicas[0] for replicas in assignment.values())
    assert set(leaders.values()) == {partitions // len(brokers)}
    validate_assignment(assignment, brokers)


@pytest.mark.parametrize(
    ("partitions", "rf", "error", "message"),
    [
        (0, 1, errors.InvalidPartitions, "larger than 0"),
        (3, 0, errors.InvalidReplicationFactor, "larger than 0"),
        (3, 4, errors.InvalidReplicationFactor, "4 larger than available brokers: 3"),
    ],
)
def test_bad_requests_raise_kafkas_errors(
    partitions: int, rf: int, error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        assign_replicas(range(3), partitions, rf, start_index=0)


@pytest.mark.parametrize(
    ("assignment", "message"),
    [
        ({}, "empty"),
        ({0: [0, 0]}, "Duplicate"),
        ({0: [0, 1], 1: [0]}, "same number"),
        ({0: [0], 2: [1]}, "consecutive"),
        ({0: [0, 7]}, r"Unknown broker\(s\) \[7\]"),
        ({0: []}, "same number"),
    ],
)
def test_explicit_assignment_is_validated(assignment: dict[int, list[int]], message: str) -> None:
    with pytest.raises(errors.InvalidReplicaAssignment, match=message):
        validate_assignment(assignment, [0, 1, 2])


KAFKA_RACKS = {0: "rack1", 1: "rack3", 2: "rack3", 3: "rack2", 4: "rack2", 5: "rack1"}


def test_rack_aware_matches_kafka() -> None:
    # AdminRackAwareTest.testGetRackAlternatedBrokerListAndAssignReplicasToBrokers.
    assert rack_alternated(KAFKA_RACKS) == [0, 3, 1, 5, 4, 2]
    assert rack_alternated({b: r for b, r in KAFKA_RACKS.items() if b != 5}) == [0, 3, 1, 4, 2]
    assert assign_replicas(KAFKA_RACKS, 7, 3, start_index=0) == {
        0: [0, 3, 1],
        1: [3, 1, 5],
        2: [1, 5, 4],
        3: [5, 4, 2],
        4: [4, 2, 0],
        5: [2, 0, 3],
        6: [0, 4, 2],
    }


@pytest.mark.parametrize(
    ("racks", "partitions", "rf"),
    [
        ({0: "r1", 1: "r2", 2: "r2", 3: "r3", 4: "r3", 5: "r1"}, 6, 3),
        ({0: "r1", 1: "r2", 2: "r2", 3: "r3", 4: "r3", 5: "r1"}, 12, 2),
        ({0: "r1", 1: "r1", 2: "r2", 3: "r3", 4: "r3", 5: "r1"}, 12, 3),  # uneven racks
        ({0: "r1", 1: "r2", 4: "r3"}, 3, 2),
        ({0: "r1", 1: "r1", 2: "r2"}, 9, 3),  # more replicas than racks
        ({b: f"r{b % 4}" for b in range(12)}, 96, 3),
    ],
)
def test_rack_aware_spreads_every_partition_over_racks(
    racks: dict[int, str], partitions: int, rf: int
) -> None:
    """Kafka's ``checkReplicaDistribution``: every partition has ``min(rf, racks)`` racks and no
    broker twice, whatever the random start; with as many racks as replicas and equal racks,
    leaders and replicas are even across brokers."""
    num_racks = len(set(racks.values()))
    for seed in range(20):
        assignment = assign_replicas(racks, partitions, rf, rng=random.Random(seed))
        assert sorted(assignment) == list(range(partitions))
        for replicas in assignment.values():
            assert len(set(replicas)) == rf
            assert len({racks[b] for b in replicas}) == min(rf, num_racks)
        sizes = Counter(len([b for b in racks if racks[b] == r]) for r in set(racks.values()))
        if len(sizes) == 1 and partitions % len(racks) == 0 and rf <= num_racks:
            leaders = Counter(replicas[0] for replicas in assignment.values())
            assert set(leaders.values()) == {partitions // len(racks)}
            every = Counter(b for replicas in assignment.values() for b in replicas)
            assert set(every.values()) == {partitions * rf // len(racks)}


def test_rack_aware_expansion_continues_the_layout() -> None:
    whole = assign_replicas(KAFKA_RACKS, 12, 2, start_index=1)
    tail = assign_replicas(KAFKA_RACKS, 6, 2, start_index=1, start_partition=6)
    assert tail == {p: whole[p] for p in range(6, 12)}


def test_some_brokers_without_a_rack_is_refused_as_kafka_does() -> None:
    with pytest.raises(errors.UnknownServerError, match="Not all brokers have rack information"):
        assign_replicas({0: "r1", 1: None, 2: "r2"}, 3, 2)
    # None anywhere: rack-unaware, the same layout as plain ids.
    assert assign_replicas(dict.fromkeys(range(5)), 10, 3, start_index=0) == assign_replicas(
        range(5), 10, 3, start_index=0
    )
