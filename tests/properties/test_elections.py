"""The controller's leader elections against Kafka's ``PartitionLeaderElectionAlgorithms``.

Two kinds of test:

* Each election function on random states (broker ids, assignment order, ISR order, live and
  shutting-down sets drawn freely) against a transliteration of Kafka's algorithm plus the ISR
  adjustment of Kafka's ``Election.scala`` (ZooKeeper mode): offline -> first live ISR member in
  assignment order, new ISR = old ISR minus the dead; unclean (only if enabled) -> first live
  replica, ISR = just it; controlled shutdown -> first live ISR member not shutting down, the
  shutting-down brokers leave the ISR; preferred -> the first replica if live and in the ISR,
  ISR unchanged. Every change bumps the leader epoch by one.
* A cluster of brokers dying, coming back, shutting down in a controlled way, committing
  ``acks=all`` records and moving ISR members in and out, run through the election functions
  the way the controller calls them. With unclean election off, the ISR always holds only
  replicas that have every committed record, so whoever leads has them: nothing acknowledged
  is lost.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from sluice.server.controller.election import (
    NO_LEADER,
    LeaderAndIsr,
    elect_controlled_shutdown,
    elect_offline,
    elect_preferred,
    remove_replicas,
)

BROKERS = range(1, 7)

# --- Kafka's algorithms, transliterated (PartitionStateMachine.scala, Election.scala) ---------


def kafka_offline(
    assignment: Sequence[int], isr: Sequence[int], live: Collection[int], unclean: bool
) -> int | None:
    live_replicas = {r for r in assignment if r in live}
    leader = next((r for r in assignment if r in live_replicas and r in isr), None)
    if leader is None and unclean:
        leader = next((r for r in assignment if r in live_replicas), None)
    return leader


def kafka_controlled_shutdown(
    assignment: Sequence[int],
    isr: Sequence[int],
    live: Collection[int],
    shutting_down: Collection[int],
) -> int | None:
    return next((r for r in assignment if r in live and r in isr and r not in shutting_down), None)


def kafka_preferred(
    assignment: Sequence[int], isr: Sequence[int], live: Collection[int]
) -> int | None:
    if assignment and assignment[0] in live and assignment[0] in isr:
        return assignment[0]
    return None


# --- strategies ------------------------------------------------------------------------------


@st.composite
def partition_states(draw: st.DrawFn) -> tuple[LeaderAndIsr, tuple[int, ...]]:
    """A state and its assignment: assignment order and ISR order independent, ISR a non-empty
    subset of the assignment, the leader an ISR member or none."""
    assignment = tuple(draw(st.permutations(BROKERS))[: draw(st.integers(1, len(BROKERS)))])
    isr_members = draw(st.permutations(assignment))
    isr = tuple(isr_members[: draw(st.integers(1, len(assignment)))])
    leader = draw(st.sampled_from([*isr, NO_LEADER]))
    epoch = draw(st.integers(0, 1000))
    return LeaderAndIsr(leader, epoch, isr), assignment


brokers_sets = st.frozensets(st.sampled_from(BROKERS))


@settings(max_examples=300)
@given(partition_states(), brokers_sets, st.booleans())
def test_offline_election_is_kafkas(
    case: tuple[LeaderAndIsr, tuple[int, ...]], live: frozenset[int], unclean: bool
) -> None:
    state, assignment = case
    result = elect_offline(state, assignment, live, unclean=unclean)
    leader = kafka_offline(assignment, state.isr, live, unclean)
    if leader is None:
        # No eligible replica: offline with the ISR kept (nothing to write if already offline),
        # never an out-of-sync replica.
        expected = None if state.leader == NO_LEADER else state.next(NO_LEADER, state.isr)
    elif leader in state.isr:
        expected = state.next(leader, [r for r in state.isr if r in live])
    else:
        expected = state.next(leader, [leader])
    assert result == expected
    if result is not None and result.leader != NO_LEADER:
        assert result.leader in result.isr
        assert unclean or result.leader in state.isr


@settings(max_examples=300)
@given(partition_states(), brokers_sets, brokers_sets)
def test_controlled_shutdown_election_is_kafkas(
    case: tuple[LeaderAndIsr, tuple[int, ...]],
    live: frozenset[int],
    shutting_down: frozenset[int],
) -> None:
    state, assignment = case
    # Kafka counts a shutting-down broker as online for this election (it is still running).
    live = live | shutting_down
    result = elect_controlled_shutdown(state, assignment, live, shutting_down)
    leader = kafka_controlled_shutdown(assignment, state.isr, live, shutting_down)
    if leader is None:
        assert result is None
    else:
        assert result == state.next(leader, [r for r in state.isr if r not in shutting_down])
        assert result.leader not in shutting_down and result.leader in result.isr


@settings(max_examples=300)
@given(partition_states(), brokers_sets)
def test_preferred_election_is_kafkas(
    case: tuple[LeaderAndIsr, tuple[int, ...]], live: frozenset[int]
) -> None:
    state, assignment = case
    result = elect_preferred(state, assignment, live)
    leader = kafka_preferred(assignment, state.isr, live)
    if leader is None or leader == state.leader:
        assert result is None
    else:
        assert result == state.next(leader, state.isr)


# --- a cluster over time ---------------------------------------------------------------------

RF = 3


class ClusterElections(RuleBasedStateMachine):
    """Brokers 1..5, one partition assigned to three of them; the controller's reactions as
    ``Controller`` makes them (broker gone: offline election if it led, else it leaves the ISR;
    controlled shutdown: move leadership off, then leave the ISR; preferred election).

    ``has_all`` is the model of which replicas hold every committed record: an ``acks=all``
    commit reaches every ISR member (it cannot commit while one is down), a follower joins the
    ISR only after catching up, and a replica leaving the ISR keeps what it has.
    """

    def __init__(self) -> None:
        super().__init__()
        self.assignment: tuple[int, ...] = ()
        self.state = LeaderAndIsr(NO_LEADER, 0, ())
        self.live: set[int] = set()
        self.has_all: set[int] = set()
        self.unclean = False
        self.lost = False  # an unclean election happened: committed records may be gone

    @rule(
        assignment=st.permutations(range(1, 6)).map(lambda p: tuple(p[:RF])),
        unclean=st.booleans(),
    )
    @precondition(lambda self: not self.assignment)
    def create(self, assignment: tuple[int, ...], unclean: bool) -> None:
        self.assignment = assignment
        self.unclean = unclean
        self.live = set(range(1, 6))
        self.state = LeaderAndIsr(assignment[0], 0, assignment)
        self.has_all = set(assignment)

    def _apply(self, new: LeaderAndIsr | None) -> None:
        if new is None:
            return
        assert new.leader_epoch == self.state.leader_epoch + 1
        if new.leader != NO_LEADER and new.leader not in self.has_all:
            assert self.unclean, f"{new} elected a replica without every committed record"
            self.lost = True
            self.has_all = {new.leader}  # the committed history starts again from its log
        self.state = new

    def _broker_gone(self, broker: int) -> None:
        state = self.state
        if state.leader == broker or state.leader == NO_LEADER:
            self._apply(elect_offline(state, self.assignment, self.live, unclean=self.unclean))
        else:
            self._apply(remove_replicas(state, [r for r in state.isr if r not in self.live]))

    @precondition(lambda self: self.assignment)
    @rule(broker=st.sampled_from(range(1, 6)))
    def kill(self, broker: int) -> None:
        if broker not in self.live:
            return
        self.live.discard(broker)
        self._broker_gone(broker)

    @precondition(lambda self: self.assignment)
    @rule(broker=st.sampled_from(range(1, 6)))
    def controlled_shutdown(self, broker: int) -> None:
        if broker not in self.live:
            return
        state = self.state
        if state.leader == broker:
            self._apply(elect_controlled_shutdown(state, self.assignment, self.live, {broker}))
        elif broker in state.isr:
            self._apply(remove_replicas(state, [broker]))
        self.live.discard(broker)
        self._broker_gone(broker)

    @precondition(lambda self: self.assignment)
    @rule(broker=st.sampled_from(range(1, 6)))
    def restart(self, broker: int) -> None:
        if broker in self.live:
            return
        self.live.add(broker)
        if self.state.leader == NO_LEADER:
            self._apply(elect_offline(self.state, self.assignment, self.live, unclean=self.unclean))

    @precondition(lambda self: self.assignment and self.state.leader != NO_LEADER)
    @rule()
    def commit(self) -> None:
        """An acks=all record commits once every ISR member has it (all must be live)."""
        if all(r in self.live for r in self.state.isr):
            self.has_all = set(self.state.isr)

    @precondition(lambda self: self.assignment and self.state.leader != NO_LEADER)
    @rule(data=st.data())
    def follower_catches_up(self, data: st.DataObject) -> None:
        """A live follower out of the ISR reaches the leader's HW and LEO and joins (the leader's
        ISR expansion, stored at the next partition epoch, same leader epoch)."""
        out = [r for r in self.assignment if r in self.live and r not in self.state.isr]
        if not out:
            return
        replica = data.draw(st.sampled_from(out))
        self.has_all.add(replica)
        self.state = self.state._replace(isr=(*self.state.isr, replica))

    @precondition(lambda self: self.assignment and self.state.leader != NO_LEADER)
    @rule(data=st.data())
    def follower_falls_behind(self, data: st.DataObject) -> None:
        """The leader drops a lagging follower from the ISR (never itself)."""
        followers = [r for r in self.state.isr if r != self.state.leader]
        if not followers:
            return
        replica = data.draw(st.sampled_from(followers))
        self.state = self.state._replace(isr=tuple(r for r in self.state.isr if r != replica))

    @precondition(lambda self: self.assignment)
    @rule()
    def preferred_election(self) -> None:
        self._apply(elect_preferred(self.state, self.assignment, self.live))

    @invariant()
    def leader_is_live_and_in_sync(self) -> None:
        state = self.state
        if not self.assignment:
            return
        assert state.isr, "the ISR never becomes empty"
        assert set(state.isr) <= set(self.assignment)
        if state.leader != NO_LEADER:
            assert state.leader in self.live
            assert state.leader in state.isr
        else:
            # Offline only when no replica may lead.
            assert kafka_offline(self.assignment, state.isr, self.live, self.unclean) is None

    @invariant()
    def the_isr_holds_every_committed_record(self) -> None:
        if self.assignment:
            assert set(self.state.isr) <= self.has_all
            assert self.unclean or not self.lost


ClusterElections.TestCase.settings = settings(max_examples=80, stateful_step_count=30)
test_cluster_elections = ClusterElections.TestCase
