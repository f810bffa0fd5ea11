"""Who leads a partition after a change: Kafka's leader election algorithms.

Kafka's ``PartitionLeaderElectionAlgorithms`` and the ISR adjustments of its partition and
replica state machines (ZooKeeper mode, 2.6), as pure functions of a partition's state:

* **offline** (the leader died, or the partition has none): the first replica in *assignment
  order* that is alive and in the ISR; none: the first live *eligible leader replica* (KIP-966,
  below), which becomes the ISR alone. Only if ``unclean.leader.election.enable`` is on may an
  out-of-sync live replica be chosen (it may lack acknowledged records: Kafka's documented
  trade). New ISR = old ISR minus the dead; after an unclean election, just the new leader.
  No eligible replica: no leader (-1), ISR unchanged -- never silently an out-of-sync one.
* **controlled shutdown**: the first live ISR member in assignment order that is not shutting
  down; the shutting-down brokers leave the ISR.
* **preferred**: the first replica of the assignment, if it is alive and in the ISR.
* **replica offline** (a follower died): it leaves the ISR, unless it is the last member (Kafka
  keeps the last ISR member, so the partition remembers who has every acknowledged record);
  several at once leave in one epoch bump.

Every result that changes leader or ISR bumps the leader epoch by one (Kafka's
``LeaderAndIsr.newLeaderAndIsr``): followers truncate by epoch, clients drop older metadata.

**Eligible leader replicas** (ELR, KIP-966, :func:`next_elr`). With a strict
``min.insync.replicas`` the high watermark does not move while the ISR is smaller than it, so a
replica that leaves the ISR at such a time keeps every record below the high watermark -- every
record acknowledged with acks=all -- for as long as the ISR stays small. Such replicas are kept
in the state as eligible: when the ISR's last member is gone, one of them leads instead, so
nothing acknowledged is lost. Once the ISR reaches ``min.insync.replicas`` again the high
watermark moves past them and the list is emptied.

**Back from a power loss** (``distrusted`` in :func:`elect_offline`). A broker whose first
registration says it may have lost unflushed writes (an unclean stop in another boot, or a log
below its checkpointed high watermark: ``BrokerInfo.may_have_lost_unflushed``) may lack records
that the states written before that registration count it as holding -- even the last ISR
member's acknowledged ones. It leaves the ISR and the eligible list and does not lead while
another ISR member or eligible replica exists, live or not: the partition waits for one that
holds the committed log (Kafka 4 drops a broker with an unclean shutdown from both lists the
same way). When it is all there is, it leads on what it kept. A broker that registered again
after a pause, a kill -9 in the same boot (the page cache kept its writes) or a clean stop
holds everything it had, and stays where it was.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import NamedTuple

#: ``leader`` of a partition without one (Kafka's ``LeaderAndIsr.NoLeader``).
NO_LEADER = -1


class LeaderAndIsr(NamedTuple):
    """A partition's leadership state as the controller writes it to the state znode."""

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    #: KIP-966's eligible leader replicas (module docstring); never an ISR member.
    elr: tuple[int, ...] = ()

    def next(
        self, leader: int, isr: Sequence[int], elr: Sequence[int] | None = None
    ) -> LeaderAndIsr:
        """The state after a change: ``leader`` and ``isr`` at the next leader epoch; the
        eligible replicas kept (minus the new ISR) unless given."""
        kept = self.elr if elr is None else elr
        return LeaderAndIsr(
            leader, self.leader_epoch + 1, tuple(isr), tuple(r for r in kept if r not in isr)
        )


def next_elr(
    old_isr: Sequence[int], old_elr: Sequence[int], new_isr: Sequence[int], min_isr: int
) -> tuple[int, ...]:
    """The eligible leader replicas after the ISR changes from ``old_isr`` to ``new_isr``
    (KIP-966): while the new ISR is below ``min_isr``, the replicas that left it join the
    eligible ones; once it is not, there are none (the high watermark may move past them)."""
    if len(new_isr) >= min_isr:
        return ()
    joined = [r for r in old_isr if r not in new_isr and r not in old_elr]
    return tuple(r for r in (*old_elr, *joined) if r not in new_isr)


def elect_offline(
    state: LeaderAndIsr,
    assignment: Sequence[int],
    live: Collection[int],
    *,
    unclean: bool = False,
    distrusted: Collection[int] = (),
) -> LeaderAndIsr | None:
    """A leader for a partition whose leader is gone; ``None`` if nothing changes.

    Returns a state with ``leader == NO_LEADER`` when no replica may lead (the partition goes
    offline; its ISR is kept so a returning ISR member can lead again).

    ``distrusted``: ISR members or eligible replicas that may have lost writes since the state
    was written (back from a power loss). While another ISR member or eligible replica exists
    -- live or not: one that holds what they lost -- they neither lead nor stay in either list
    (the partition waits for that one rather than lead with less). When they are all there
    is, they lead on what they kept: nothing better is known.
    """
    isr = [r for r in state.isr if r not in distrusted]
    elr = [r for r in state.elr if r not in distrusted]
    if not isr and not elr:
        isr = list(state.isr)  # nobody else: they are trusted with what they kept
    live_isr = [r for r in isr if r in live]
    leader = next((r for r in assignment if r in live_isr), None)
    if leader is not None:
        return state.next(leader, live_isr, elr=elr)
    leader = next((r for r in assignment if r in live and r in elr), None)
    if leader is not None:  # KIP-966: it holds every record below the high watermark
        return state.next(leader, [leader], elr=elr)
    if unclean:
        leader = next((r for r in assignment if r in live), None)
        if leader is not None:
            return state.next(leader, [leader], elr=())
    if state.leader == NO_LEADER and tuple(isr) == state.isr and tuple(elr) == state.elr:
        return None
    return state.next(NO_LEADER, isr, elr=elr)


def elect_controlled_shutdown(
    state: LeaderAndIsr,
    assignment: Sequence[int],
    live: Collection[int],
    shutting_down: Collection[int],
) -> LeaderAndIsr | None:
    """Move leadership off brokers that are shutting down; ``None`` if no other ISR member can
    lead (the broker keeps leading until it stops, then the offline election runs)."""
    leader = next(
        (r for r in assignment if r in live and r in state.isr and r not in shutting_down), None
    )
    if leader is None:
        return None
    return state.next(leader, [r for r in state.isr if r not in shutting_down])


def elect_preferred(
    state: LeaderAndIsr, assignment: Sequence[int], live: Collection[int]
) -> LeaderAndIsr | None:
    """Give leadership back to the preferred (first assigned) replica if it is live and in sync;
    ``None`` if it already leads or cannot."""
    if not assignment:
        return None
    preferred = assignment[0]
    if preferred == state.leader or preferred not in live or preferred not in state.isr:
        return None
    return state.next(preferred, state.isr)


def remove_replica(state: LeaderAndIsr, replica: int) -> LeaderAndIsr | None:
    """A replica went offline: drop it from the ISR (and from leadership); ``None`` if it was
    in neither. The last ISR member stays in the ISR (Kafka's rule)."""
    return remove_replicas(state, (replica,))


def remove_replicas(state: LeaderAndIsr, replicas: Collection[int]) -> LeaderAndIsr | None:
    """:func:`remove_replica` for several replicas at once, in one epoch bump: they leave the
    ISR in order until one member would be left (that last member stays, as when Kafka removes
    them one by one); a removed leader leaves leadership."""
    isr = list(state.isr)
    for replica in replicas:
        if replica in isr and len(isr) > 1:
            isr.remove(replica)
    leader = NO_LEADER if state.leader in replicas else state.leader
    if leader == state.leader and tuple(isr) == state.isr:
        return None
    return state.next(leader, isr)


def fits_assignment(state: LeaderAndIsr, replicas: Collection[int]) -> bool:
    """Whether leader and ISR are all assigned replicas (after a reassignment shrank the
    assignment they must be; a controller that failed in between leaves them not)."""
    leader_ok = state.leader == NO_LEADER or state.leader in replicas
    return leader_ok and all(r in replicas for r in state.isr)


def elect_reassigned(
    state: LeaderAndIsr,
    replicas: Sequence[int],
    live: Collection[int],
    *,
    move_only: bool = False,
) -> LeaderAndIsr | None:
    """Fit leader and ISR to the assignment ``replicas`` (Kafka's reassignment steps B3-B4).

    The leader stays if it is one of ``replicas`` and live; otherwise the first of ``replicas``
    (in order) that is live and in the ISR leads (Kafka's ``reassignPartitionLeaderElection``;
    none: no leader, until one returns). Unless ``move_only``, replicas outside ``replicas``
    leave the ISR, and the epoch is bumped even if nothing else changes (the leader must hear
    of the new replica set, so that it stops waiting for the removed followers). ``None``: no
    change -- with ``move_only`` when the leader may stay or none can take over, and always
    when no ISR member would be left (the ISR must keep whoever has every acknowledged
    record).
    """
    isr = list(state.isr) if move_only else [r for r in state.isr if r in replicas]
    if not isr:
        return None
    leader = state.leader
    if leader not in replicas or leader not in live:
        leader = next((r for r in replicas if r in live and r in isr), NO_LEADER)
    if move_only and leader in (state.leader, NO_LEADER):
        return None
    return state.next(leader, isr, elr=[r for r in state.elr if r in replicas])
