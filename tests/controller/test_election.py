"""Leader election rules (Kafka's ``PartitionLeaderElectionAlgorithms``), incl. a model check."""

from __future__ import annotations

import itertools

import pytest

from sluice.server.controller.election import (
    NO_LEADER,
    LeaderAndIsr,
    elect_controlled_shutdown,
    elect_offline,
    elect_preferred,
    next_elr,
    remove_replica,
    remove_replicas,
)

ASSIGNMENT = (1, 2, 3)


def test_offline_picks_first_live_isr_member_in_assignment_order() -> None:
    state = LeaderAndIsr(1, 4, (3, 1, 2))
    assert elect_offline(state, ASSIGNMENT, live={2, 3}) == LeaderAndIsr(2, 5, (3, 2))


def test_offline_never_picks_an_out_of_sync_replica_by_default() -> None:
    state = LeaderAndIsr(1, 4, (1,))
    assert elect_offline(state, ASSIGNMENT, live={2, 3}) == LeaderAndIsr(NO_LEADER, 5, (1,))
    # Already offline: nothing to write.
    assert elect_offline(LeaderAndIsr(NO_LEADER, 5, (1,)), ASSIGNMENT, live={2, 3}) is None


def test_offline_partition_comes_back_with_its_last_isr_member() -> None:
    state = LeaderAndIsr(NO_LEADER, 5, (1,))
    assert elect_offline(state, ASSIGNMENT, live={1, 2, 3}) == LeaderAndIsr(1, 6, (1,))


def test_unclean_election_takes_a_live_replica_and_resets_the_isr() -> None:
    state = LeaderAndIsr(1, 4, (1,))
    assert elect_offline(state, ASSIGNMENT, live={3}, unclean=True) == LeaderAndIsr(3, 5, (3,))
    # Clean choice still preferred when one exists.
    state = LeaderAndIsr(1, 4, (1, 3))
    assert elect_offline(state, ASSIGNMENT, live={2, 3}, unclean=True) == LeaderAndIsr(3, 5, (3,))


def test_controlled_shutdown_moves_leadership_and_shrinks_isr() -> None:
    state = LeaderAndIsr(1, 2, (1, 2, 3))
    assert elect_controlled_shutdown(state, ASSIGNMENT, {1, 2, 3}, {1}) == LeaderAndIsr(
        2, 3, (2, 3)
    )
    # Nobody else in sync: no move (the broker leads until it stops).
    assert elect_controlled_shutdown(LeaderAndIsr(1, 2, (1,)), ASSIGNMENT, {1, 2, 3}, {1}) is None


def test_preferred_replica_takes_back_leadership_only_when_in_sync() -> None:
    state = LeaderAndIsr(2, 7, (2, 3, 1))
    assert elect_preferred(state, ASSIGNMENT, {1, 2, 3}) == LeaderAndIsr(1, 8, (2, 3, 1))
    assert elect_preferred(LeaderAndIsr(2, 7, (2, 3)), ASSIGNMENT, {1, 2, 3}) is None
    assert elect_preferred(state, ASSIGNMENT, {2, 3}) is None
    assert elect_preferred(LeaderAndIsr(1, 7, (1, 2)), ASSIGNMENT, {1, 2, 3}) is None


def test_remove_replica_keeps_the_last_isr_member() -> None:
    assert remove_replica(LeaderAndIsr(1, 3, (1, 2)), 2) == LeaderAndIsr(1, 4, (1,))
    assert remove_replica(LeaderAndIsr(1, 3, (1, 2)), 1) == LeaderAndIsr(NO_LEADER, 4, (2,))
    assert remove_replica(LeaderAndIsr(1, 3, (1,)), 1) == LeaderAndIsr(NO_LEADER, 4, (1,))
    assert remove_replica(LeaderAndIsr(1, 3, (1, 2)), 3) is None


def test_remove_replicas_is_removing_them_one_by_one_in_one_epoch() -> None:
    # Two dead followers leave together: one epoch bump, not two.
    assert remove_replicas(LeaderAndIsr(1, 3, (1, 2, 3)), [2, 3]) == LeaderAndIsr(1, 4, (1,))
    # All ISR members gone: the last one in removal order stays (Kafka, replica by replica).
    assert remove_replicas(LeaderAndIsr(1, 3, (1, 2)), [1, 2]) == LeaderAndIsr(NO_LEADER, 4, (2,))
    assert remove_replicas(LeaderAndIsr(1, 3, (1, 2)), []) is None
    assert remove_replicas(LeaderAndIsr(1, 3, (1, 2)), [4]) is None
    # The same result as applying remove_replica in turn, epochs aside.
    for isr in itertools.chain.from_iterable(
        itertools.permutations(ASSIGNMENT, n) for n in range(1, 4)
    ):
        for gone in itertools.chain.from_iterable(
            itertools.permutations(ASSIGNMENT, n) for n in range(0, 4)
        ):
            state = LeaderAndIsr(isr[0], 0, tuple(isr))
            stepwise = state
            for replica in gone:
                stepwise = remove_replica(stepwise, replica) or stepwise
            together = remove_replicas(state, gone)
            expected = None if stepwise == state else (stepwise.leader, stepwise.isr)
            assert (together and (together.leader, together.isr)) == expected
            assert together is None or together.leader_epoch == 1


STATES = [
    LeaderAndIsr(leader, 0, isr)
    for r in range(1, 4)
    for isr in itertools.permutations(ASSIGNMENT, r)
    for leader in [*isr[:1], NO_LEADER]
]
LIVE_SETS = [set(s) for r in range(4) for s in itertools.combinations(ASSIGNMENT, r)]


@pytest.mark.parametrize("unclean", [False, True])
def test_offline_election_invariants_over_every_small_state(unclean: bool) -> None:
    for state, live in itertools.product(STATES, LIVE_SETS):
        new = elect_offline(state, ASSIGNMENT, live, unclean=unclean)
        if new is None:
            assert state.leader == NO_LEADER
            continue
        assert new.leader_epoch == state.leader_epoch + 1
        if new.leader == NO_LEADER:
            # Offline only when no live ISR member exists (and, if unclean, no live replica).
            assert not (set(state.isr) & live)
            assert not (unclean and live)
            assert new.isr == state.isr
        else:
            assert new.leader in live and new.leader in new.isr
            assert set(new.isr) <= live
            if new.leader not in state.isr:
                assert unclean and new.isr == (new.leader,) and not (set(state.isr) & live)
            else:
                # The first eligible in assignment order.
                assert new.leader == next(r for r in ASSIGNMENT if r in live and r in state.isr)


# --- KIP-966: eligible leader replicas ----------------------------------------------------------


def test_replicas_leaving_an_isr_below_min_isr_become_eligible() -> None:
    # min ISR 2: [1, 2, 3] -> [1, 3] keeps the bound (the HW may still move: 2 is not eligible);
    # [1, 3] -> [1] falls below it (the HW stops): 3 is eligible.
    assert next_elr((1, 2, 3), (), (1, 3), 2) == ()
    assert next_elr((1, 3), (), (1,), 2) == (3,)
    assert next_elr((1, 2, 3), (), (1,), 2) == (2, 3)  # seed 5014: both at once
    assert next_elr((1,), (2, 3), (1, 3), 2) == ()  # back at the bound: the HW moves again
    assert next_elr((1,), (2, 3), (1,), 3) == (2, 3)
    assert next_elr((1, 2), (3,), (1,), 3) == (3, 2)
    assert next_elr((1,), (2, 3), (1, 2), 3) == (3,)  # 2 rejoined the ISR


def test_an_eligible_replica_leads_when_no_isr_member_is_left() -> None:
    state = LeaderAndIsr(1, 4, (1,), elr=(3, 2))
    # The ISR's last member died: the first live eligible replica in assignment order.
    assert elect_offline(state, ASSIGNMENT, live={2, 3}) == LeaderAndIsr(2, 5, (2,), (3,))
    assert elect_offline(state, ASSIGNMENT, live={3}) == LeaderAndIsr(3, 5, (3,), (2,))
    # A live ISR member still wins.
    assert elect_offline(state, ASSIGNMENT, live={1, 2}) == LeaderAndIsr(1, 5, (1,), (3, 2))
    # None eligible alive: offline, the eligible kept.
    assert elect_offline(state, ASSIGNMENT, live=set()) == LeaderAndIsr(NO_LEADER, 5, (1,), (3, 2))
    # Unclean elections do not need them and clear them.
    unclean = elect_offline(LeaderAndIsr(1, 4, (1,)), ASSIGNMENT, live={3}, unclean=True)
    assert unclean == LeaderAndIsr(3, 5, (3,), ())


def test_a_replica_back_from_a_power_loss_waits_for_one_that_holds_what_it_lost() -> None:
    """``distrusted``: back from a power loss since the state was written (it may lack records
    the state counts it as holding)."""
    state = LeaderAndIsr(NO_LEADER, 5, (1,), elr=(2, 3))
    # 1, the sole ISR member, is back; 2 and 3 (who hold what 1 lost) are down: nobody leads,
    # and 1 leaves the ISR, so that no later state counts it as holding the committed log.
    assert elect_offline(state, ASSIGNMENT, live={1}, distrusted={1}) == LeaderAndIsr(
        NO_LEADER, 6, (), (2, 3)
    )
    assert elect_offline(state, ASSIGNMENT, live={1, 3}, distrusted={1}) == LeaderAndIsr(
        3, 6, (3,), (2,)
    )
    # Trusted (a kill -9 in the same boot), it leads as before.
    assert elect_offline(state, ASSIGNMENT, live={1}) == LeaderAndIsr(1, 6, (1,), (2, 3))
    # Nobody else was ever eligible: it leads on what it kept (nothing better is known).
    lone = LeaderAndIsr(NO_LEADER, 5, (1,))
    assert elect_offline(lone, ASSIGNMENT, live={1}, distrusted={1}) == LeaderAndIsr(1, 6, (1,))
    # An eligible replica back from a power loss does not lead while an ISR member exists.
    assert elect_offline(
        LeaderAndIsr(NO_LEADER, 5, (1,), elr=(2,)), ASSIGNMENT, live={2}, distrusted={2}
    ) == LeaderAndIsr(NO_LEADER, 6, (1,), ())
    # A trusted ISR member leads; the distrusted one leaves the ISR.
    assert elect_offline(
        LeaderAndIsr(3, 5, (1, 2, 3)), ASSIGNMENT, live={1, 2}, distrusted={1}
    ) == LeaderAndIsr(2, 6, (2,))
