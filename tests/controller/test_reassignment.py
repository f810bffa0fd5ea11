"""ElectLeaders and partition reassignment in the controller, against a real ZooKeeper.

Fake brokers as in ``test_controller.py`` (its :class:`Harness`): the leader's ISR expansion
is written by the test, as a leader that saw the new follower catch up would; every check reads
the znodes Kafka's tools read (the topic znode's ``adding_replicas`` / ``removing_replicas``,
the state znode, ``/admin/reassign_partitions``).
"""

from __future__ import annotations

import pytest

from sluice.protocol import errors
from sluice.server.controller.controller import Controller, validate_reassignment
from sluice.server.controller.election import LeaderAndIsr, elect_reassigned, fits_assignment
from sluice.server.zk.data import (
    PREFERRED_REPLICA_ELECTION_PATH,
    REASSIGN_PARTITIONS_PATH,
    ReplicaAssignment,
    decode_partition_reassignment,
    encode_preferred_replica_election,
)

from .test_controller import Harness, _leaders_moved_to_2, h, tp, until

__all__ = ["h"]  # the fixture, imported for pytest


async def assignment(h: Harness, topic: str, partition: int = 0) -> ReplicaAssignment:
    found = await h.observer.get_topic_assignment(topic)
    assert found is not None
    return found.partitions[partition]


async def wait_assignment(h: Harness, topic: str, want: ReplicaAssignment) -> None:
    async def matches() -> bool:
        return await assignment(h, topic) == want

    await until(matches, f"{topic}-0 assigned {want}")


# --- pure parts ------------------------------------------------------------------------------


def test_reassign_to_is_kafkas() -> None:
    """Kafka's ``ReplicaAssignment.reassignTo`` (and its doc's example [1,2,3] -> [3,4,2])."""
    start = ReplicaAssignment((1, 2, 3))
    moving = start.reassign_to([3, 4, 2])
    assert moving == ReplicaAssignment((3, 4, 2, 1), (4,), (1,))
    assert (moving.origin_replicas, moving.target_replicas) == ((3, 2, 1), (3, 4, 2))
    assert moving.is_being_reassigned and not start.is_being_reassigned
    # A new target while moving starts from the original replicas, not from RS.
    assert moving.reassign_to([5]) == ReplicaAssignment((5, 3, 2, 1), (5,), (3, 2, 1))
    # Cancelling: back to the origin replicas (their order is lost, as Kafka documents).
    assert moving.reassign_to(moving.origin_replicas) == ReplicaAssignment((3, 2, 1))
    assert ReplicaAssignment((1, 2, 3, 4, 5, 6), (4, 5, 6), (1, 2, 3)).target_replicas == (4, 5, 6)


def test_validate_reassignment_refusals() -> None:
    current = ReplicaAssignment((1, 2))
    assert validate_reassignment(current, [2, 3], {1, 2, 3}) is None
    assert validate_reassignment(current, [1, 2], {1, 2}) is None  # nothing added
    for target, live, text in (
        ([], {1, 2, 3}, "Empty replica list"),
        ([2, 2], {1, 2, 3}, "Duplicate replica ids"),
        ([2, -1], {1, 2, 3}, "Invalid broker id"),
        ([2, 9], {1, 2, 3}, "not alive"),
    ):
        error = validate_reassignment(current, target, live)
        assert isinstance(error, errors.InvalidReplicaAssignment) and text in str(error), target


def test_elect_reassigned_fits_leader_and_isr_to_the_target() -> None:
    state = LeaderAndIsr(1, 4, (1, 2, 3))
    # B3: leader 1 is leaving; the first live in-sync target replica takes over, ISR kept.
    assert elect_reassigned(state, (2, 3), {1, 2, 3}, move_only=True) == LeaderAndIsr(
        2, 5, (1, 2, 3)
    )
    assert elect_reassigned(state, (3, 1), {1, 2, 3}, move_only=True) is None  # 1 stays
    assert elect_reassigned(state, (2, 3), {1}, move_only=True) is None  # none can take over
    # B4: the removed replicas leave the ISR; the epoch moves even when nothing else does.
    assert elect_reassigned(state, (2, 3), {1, 2, 3}) == LeaderAndIsr(2, 5, (2, 3))
    assert elect_reassigned(LeaderAndIsr(2, 4, (2, 3)), (2, 3), {2, 3}) == LeaderAndIsr(
        2, 5, (2, 3)
    )
    # Never an empty ISR: it holds whoever has every acknowledged record.
    assert elect_reassigned(LeaderAndIsr(1, 4, (1,)), (2, 3), {1, 2, 3}) is None
    assert fits_assignment(LeaderAndIsr(2, 0, (2, 3)), (2, 3))
    assert not fits_assignment(LeaderAndIsr(1, 0, (2, 3)), (2, 3))
    assert not fits_assignment(LeaderAndIsr(2, 0, (2, 1)), (2, 3))
    assert fits_assignment(LeaderAndIsr(-1, 0, (2,)), (2, 3))


# --- reassignment ------------------------------------------------------------------------------


async def test_reassignment_adds_then_removes_replicas_in_kafkas_steps(h: Harness) -> None:
    for b in (1, 2, 3):
        await h.broker(b)
    controller = await h.active()
    await h.topic("t", {0: [1, 2]})
    await h.wait_state("t", leader=1, isr=[1, 2], leader_epoch=0)

    assert await controller.alter_partition_reassignments({tp("t"): [2, 3]}) == {tp("t"): None}
    # U1 + A1: RS = TRS + ORS with AR / RR in the topic znode; the epoch bumped for RS.
    moving = ReplicaAssignment((2, 3, 1), (3,), (1,))
    assert await assignment(h, "t") == moving
    s = await h.wait_state("t", leader=1, isr=[1, 2], leader_epoch=1)
    assert await controller.list_partition_reassignments() == {tp("t"): moving}
    assert await controller.list_partition_reassignments([tp("t", 5)]) == {}

    # Not complete while 3 is out of the ISR; the leader lets it in once caught up.
    await h.leader_writes_isr("t", 0, [1, 2, 3])
    await wait_assignment(h, "t", ReplicaAssignment((2, 3)))
    s = await h.wait_state("t", leader=2, isr=[2, 3])
    # Leader moved off the removed 1 (ISR kept), then the ISR fitted to TRS: two epochs.
    assert s.leader_epoch == 3
    assert await controller.list_partition_reassignments() == {}
    # Nothing to cancel any more.
    again = await controller.alter_partition_reassignments({tp("t"): None})
    assert isinstance(again[tp("t")], errors.NoReassignmentInProgress)


async def test_refusals_and_cancellation(h: Harness) -> None:
    for b in (1, 2, 3):
        await h.broker(b)
    controller = await h.active()
    await h.topic("t", {0: [1, 2]})
    await h.wait_state("t", leader=1, isr=[1, 2])
    results = await controller.alter_partition_reassignments(
        {tp("t"): [2, 9], tp("t", 7): [1], tp("nope"): [1], tp("t", 0): [2, 9]}
    )
    assert isinstance(results[tp("t")], errors.InvalidReplicaAssignment)
    assert isinstance(results[tp("t", 7)], errors.UnknownTopicOrPartition)
    assert isinstance(results[tp("nope")], errors.UnknownTopicOrPartition)
    assert await assignment(h, "t") == ReplicaAssignment((1, 2))  # nothing written
    cancel = await controller.alter_partition_reassignments({tp("t"): None})
    assert isinstance(cancel[tp("t")], errors.NoReassignmentInProgress)

    # Cancel before the new replicas are all in sync: 3 joined the ISR, 4 not yet. The
    # assignment goes back to the origin replicas and 3 leaves the ISR.
    await h.broker(4)
    await _sees(controller, 4)
    assert await controller.alter_partition_reassignments({tp("t"): [3, 4]}) == {tp("t"): None}
    await h.wait_state("t", leader_epoch=1)
    assert await assignment(h, "t") == ReplicaAssignment((3, 4, 1, 2), (3, 4), (1, 2))
    await h.leader_writes_isr("t", 0, [1, 2, 3])
    assert await controller.alter_partition_reassignments({tp("t"): None}) == {tp("t"): None}
    await wait_assignment(h, "t", ReplicaAssignment((1, 2)))
    s = await h.wait_state("t", leader=1, isr=[1, 2])
    assert s.leader_epoch == 2  # one bump: the leader hears RS = [1, 2]
    assert await controller.list_partition_reassignments() == {}


async def test_a_reassignment_keeping_the_leader_shrinks_the_isr_only(h: Harness) -> None:
    for b in (1, 2, 3):
        await h.broker(b)
    controller = await h.active()
    await h.topic("t", {0: [1, 2, 3]})
    await h.wait_state("t", leader=1, isr=[1, 2, 3])
    await h.broker(4)
    await _sees(controller, 4)
    assert await controller.alter_partition_reassignments({tp("t"): [4, 1]}) == {tp("t"): None}
    await h.wait_state("t", leader_epoch=1)
    assert await assignment(h, "t") == ReplicaAssignment((4, 1, 2, 3), (4,), (2, 3))
    await h.leader_writes_isr("t", 0, [1, 2, 3, 4])
    # Complete: leader 1 is in TRS and stays; 2 and 3 leave the ISR.
    await wait_assignment(h, "t", ReplicaAssignment((4, 1)))
    s = await h.wait_state("t", leader=1, isr=[1, 4])
    assert s.leader_epoch == 2


async def test_a_new_controller_resumes_a_reassignment_from_zookeeper(h: Harness) -> None:
    for b in (1, 2, 3):
        await h.broker(b)
    first = await h.active()
    await h.topic("t", {0: [1, 2]})
    await h.wait_state("t", leader=1, isr=[1, 2])
    assert await first.alter_partition_reassignments({tp("t"): [2, 3]}) == {tp("t"): None}
    await h.wait_state("t", leader_epoch=1)
    second = await h.controller(broker_id=101)
    await first.stop()
    await until(lambda: _active(second), "the second controller took over")
    # The ISR grows after the failover: the new controller watches the partition it resumed.
    await h.leader_writes_isr("t", 0, [1, 2, 3])
    await wait_assignment(h, "t", ReplicaAssignment((2, 3)))
    await h.wait_state("t", leader=2, isr=[2, 3])


async def test_a_failover_between_the_assignment_and_the_state_is_repaired(h: Harness) -> None:
    """The completion writes RS = TRS, then fits the state; a controller that stopped in
    between leaves leader/ISR outside the assignment: the next one fits them."""
    for b in (1, 2, 3):
        await h.broker(b)
    await h.topic("t", {0: [1, 2, 3]})
    first = await h.active()
    await h.wait_state("t", leader=1, isr=[1, 2, 3])
    await first.stop()
    found = await h.observer.get_topic_assignment("t")
    assert found is not None
    from dataclasses import replace

    await h.observer.add_partitions(replace(found, partitions={0: ReplicaAssignment((2, 3))}))
    await h.active(broker_id=102)
    s = await h.wait_state("t", leader=2, isr=[2, 3])
    assert s.leader_epoch == 1


async def test_reassign_partitions_znode(h: Harness) -> None:
    """The older tools' request: ``/admin/reassign_partitions``; each partition leaves it when
    done, the znode with the last; a request that cannot start leaves it at once."""
    for b in (1, 2, 3):
        await h.broker(b)
    await h.active()
    await h.topic("t", {0: [1, 2]})
    await h.wait_state("t", leader=1, isr=[1, 2])
    await h.observer.create_partition_reassignment({tp("t"): [2, 3], tp("gone"): [1]})
    await wait_assignment(h, "t", ReplicaAssignment((2, 3, 1), (3,), (1,)))

    async def pending() -> dict[object, object] | None:
        try:
            data, _ = await h.observer.zk.get(REASSIGN_PARTITIONS_PATH)
        except Exception:
            return None
        return dict(decode_partition_reassignment(data))

    async def only_t() -> bool:
        return await pending() == {tp("t"): (2, 3)}

    await until(only_t, "the unknown partition left the request")
    await h.leader_writes_isr("t", 0, [1, 2, 3])
    await wait_assignment(h, "t", ReplicaAssignment((2, 3)))

    async def gone() -> bool:
        return await h.observer.zk.exists(REASSIGN_PARTITIONS_PATH) is None

    await until(gone, "the request deleted once done")


# --- ElectLeaders ----------------------------------------------------------------------------


async def test_elect_preferred_leaders(h: Harness) -> None:
    controller = await h.active()
    await _leaders_moved_to_2(h)
    results = await controller.elect_leaders([tp("p", 0), tp("p", 2), tp("p", 9), tp("x")])
    assert results[tp("p", 0)] is None
    assert isinstance(results[tp("p", 2)], errors.ElectionNotNeeded)  # 2 is its preferred
    assert isinstance(results[tp("p", 9)], errors.UnknownTopicOrPartition)
    assert isinstance(results[tp("x")], errors.UnknownTopicOrPartition)
    await h.wait_state("p", 0, leader=1)
    everything = await controller.elect_leaders(None)
    assert everything[tp("p", 1)] is None
    assert isinstance(everything[tp("p", 0)], errors.ElectionNotNeeded)
    # The preferred replica back but not in the ISR: PREFERRED_LEADER_NOT_AVAILABLE.
    await h.topic("q", {0: [1, 2]})
    await h.wait_state("q", leader=1, isr=[1, 2])
    await h.kill(1)
    await h.wait_state("q", leader=2, isr=[2])
    await h.broker(1)
    results = await controller.elect_leaders([tp("q")])
    assert isinstance(results[tp("q")], errors.PreferredLeaderNotAvailable)
    await h.leader_writes_isr("q", 0, [2, 1])
    assert await controller.elect_leaders([tp("q")]) == {tp("q"): None}
    await h.wait_state("q", leader=1, isr=[2, 1])


async def test_elect_unclean_leaders(h: Harness) -> None:
    await h.broker(1)
    await h.broker(2)
    controller = await h.active()
    await h.topic("u", {0: [1, 2]})
    await h.wait_state("u", leader=1, isr=[1, 2])
    assert isinstance(
        (await controller.elect_leaders([tp("u")], unclean=True))[tp("u")], errors.ElectionNotNeeded
    )
    await h.leader_writes_isr("u", 0, [1])
    await h.kill(1)
    await h.wait_state("u", leader=-1, isr=[1])
    # Preferred (1) is dead: not available; unclean elects the out-of-sync 2.
    preferred = await controller.elect_leaders([tp("u")])
    assert isinstance(preferred[tp("u")], errors.PreferredLeaderNotAvailable)
    assert await controller.elect_leaders([tp("u")], unclean=True) == {tp("u"): None}
    s = await h.wait_state("u", leader=2, isr=[2])
    await h.kill(2)
    await h.wait_state("u", leader=-1)
    failed = await controller.elect_leaders([tp("u")], unclean=True)
    assert isinstance(failed[tp("u")], errors.EligibleLeadersNotAvailable)
    assert s.leader_epoch >= 2


async def test_preferred_replica_election_znode(h: Harness) -> None:
    await h.active()
    await _leaders_moved_to_2(h)
    await h.observer.zk.create(
        PREFERRED_REPLICA_ELECTION_PATH, encode_preferred_replica_election([tp("p", 1)])
    )
    await h.wait_state("p", 1, leader=1)

    async def gone() -> bool:
        return await h.observer.zk.exists(PREFERRED_REPLICA_ELECTION_PATH) is None

    await until(gone, "the request deleted once done")
    s = await h.state("p", 0)
    assert s is not None and s.leader == 2  # not named: untouched


async def _sees(controller: Controller, broker_id: int) -> None:
    """Wait until ``controller`` handled ``broker_id``'s registration (its broker-change watch
    fires asynchronously): until then a reassignment to it is refused as to a dead broker, as
    Kafka's controller refuses it."""

    async def seen() -> bool:
        return broker_id in controller._live

    await until(seen, f"the controller saw broker {broker_id} register")


async def _active(controller: object) -> bool:
    return bool(getattr(controller, "is_active", False))


@pytest.mark.parametrize("target", [[2, 3], [3]])
def test_targets_are_validated_against_live_brokers(target: list[int]) -> None:
    assert validate_reassignment(ReplicaAssignment((1, 2)), target, {1, 2}) is not None
