"""Leader-side replication state: follower fetch state, ISR expand/shrink, HW, min ISR, acks=-1.

Two made-up followers (1 and 2) are fed the way the follower-fetch path feeds them; ISR writes go
to a writer the test controls (ZooKeeper's conditional update in a cluster), and time is a
clock the test moves, so every rule is checked at its boundary without sleeping.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from sluice.protocol import errors
from sluice.protocol.records import build_batch
from sluice.server.replication.partition import IsrUpdate, Partition, ReplicationSettings
from sluice.server.replication.replica_manager import ReplicaManager
from sluice.server.storage.log_config import LogConfig
from sluice.server.storage.log_manager import LogManager

LEADER, F1, F2 = 0, 1, 2
LAG_MS = 10_000
WAIT_S = 10.0


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        return self.now


class Writer:
    """An ISR store the test answers: each write parks until the test resolves it."""

    def __init__(self) -> None:
        self.updates: list[IsrUpdate] = []
        self.answers: list[asyncio.Future[int | None]] = []
        self.written = asyncio.Event()

    async def __call__(self, update: IsrUpdate) -> int | None:
        self.updates.append(update)
        answer = asyncio.get_running_loop().create_future()
        self.answers.append(answer)
        self.written.set()
        return await answer

    async def next_update(self) -> IsrUpdate:
        await asyncio.wait_for(self.written.wait(), WAIT_S)
        self.written.clear()
        return self.updates[-1]


def batch(n: int) -> bytes:
    return build_batch([(1_700_000_000_000 + i, None, b"v%d" % i) for i in range(n)])


@pytest.fixture
def manager(tmp_path: Path) -> Iterator[LogManager]:
    logs = LogManager(tmp_path, LogConfig.from_properties({}))
    logs.open()
    logs.create_topic("t", 1)
    yield logs
    logs.close()


def make_rm(
    manager: LogManager, clock: Clock, writer: Writer | None = None, min_isr: int = 1
) -> tuple[ReplicaManager, Partition]:
    settings = ReplicationSettings(LAG_MS, lambda partition: min_isr, clock)
    rm = ReplicaManager(manager, LEADER, settings, writer)
    partition = rm.get_partition("t", 0)
    assert partition is not None
    assert rm.apply_partition_state("t", 0, LEADER, 1, [LEADER, F1, F2], [LEADER, F1, F2], 5)
    return rm, partition


def append(rm: ReplicaManager, n: int = 1, acks: int = 1) -> int:
    results, delayed = rm.append_records([("t", 0, batch(n))], acks, 30_000)
    assert results[0].error == 0, results[0]
    assert delayed is None
    info = results[0].info
    assert info is not None
    return info.last_offset


def test_hw_is_min_leo_over_the_isr(manager: LogManager) -> None:
    clock = Clock()
    rm, p = make_rm(manager, clock)
    append(rm, 3)
    assert p.log.high_watermark == 0
    rm.update_follower_end_offset("t", 0, F1, 3)
    assert p.log.high_watermark == 0
    assert rm.update_follower_end_offset("t", 0, F2, 2)
    assert p.log.high_watermark == 2
    assert rm.update_follower_end_offset("t", 0, F2, 3)
    assert p.log.high_watermark == 3


def test_shrink_drops_only_followers_behind_for_longer_than_the_lag(manager: LogManager) -> None:
    clock = Clock()
    rm, p = make_rm(manager, clock)
    append(rm, 2)
    rm.update_follower_end_offset("t", 0, F1, 2)  # caught up
    rm.update_follower_end_offset("t", 0, F2, 1)  # behind, but caught up when it became ISR
    clock.now += LAG_MS
    assert rm.maybe_shrink_isr() == 0  # exactly the lag: still in
    clock.now += 1
    assert rm.maybe_shrink_isr() == 1
    assert p.isr == (LEADER, F1)
    assert p.partition_epoch == 6  # no writer: the leader's own word, one version on
    # F2 no longer holds HW back: it is neither in the ISR nor recently caught up.
    assert p.log.high_watermark == 2


def test_a_follower_at_the_leaders_leo_is_never_dropped(manager: LogManager) -> None:
    clock = Clock()
    rm, p = make_rm(manager, clock)
    append(rm, 2)
    rm.update_follower_end_offset("t", 0, F1, 2)
    rm.update_follower_end_offset("t", 0, F2, 2)
    clock.now += 10 * LAG_MS  # idle: no fetch, but nothing to fetch either
    assert rm.maybe_shrink_isr() == 0
    assert p.isr == (LEADER, F1, F2)


def test_caught_up_time_counts_reaching_the_leo_seen_at_the_previous_fetch(
    manager: LogManager,
) -> None:
    clock = Clock()
    rm, p = make_rm(manager, clock)
    append(rm, 1)
    rm.update_follower_end_offset("t", 0, F1, 1)
    rm.update_follower_end_offset("t", 0, F2, 1)
    # The leader keeps appending; F2 fetches every lag/2 but always one fetch behind: each fetch
    # reaches the LEO the leader had at its previous fetch, so it stays caught up (Kafka's rule).
    for _ in range(6):
        clock.now += LAG_MS // 2
        leo_before = p.log.log_end_offset
        append(rm, 1)
        rm.update_follower_end_offset("t", 0, F1, p.log.log_end_offset)
        rm.update_follower_end_offset("t", 0, F2, leo_before)
        assert rm.maybe_shrink_isr() == 0
    # Stop fetching: after the lag it is out.
    append(rm, 1)
    clock.now += LAG_MS + 1
    rm.update_follower_end_offset("t", 0, F1, p.log.log_end_offset)
    assert rm.maybe_shrink_isr() == 1
    assert p.isr == (LEADER, F1)


async def test_expand_waits_for_hw_and_epoch_start_and_is_written_conditionally(
    manager: LogManager,
) -> None:
    clock = Clock()
    writer = Writer()
    rm, p = make_rm(manager, clock, writer)
    append(rm, 4)
    # F2 drops out (written by the test's store at version 6).
    rm.update_follower_end_offset("t", 0, F1, 4)
    clock.now += LAG_MS + 1
    assert rm.maybe_shrink_isr() == 1
    update = await writer.next_update()
    assert update == IsrUpdate("t", 0, LEADER, 1, (LEADER, F1), 0, 5)
    assert p.isr == (LEADER, F1, F2)  # not stored yet
    assert p.maximal_isr == (LEADER, F1, F2)
    writer.answers[-1].set_result(6)
    await asyncio.wait_for(_until(lambda: p.isr == (LEADER, F1)), WAIT_S)
    assert p.partition_epoch == 6
    assert p.log.high_watermark == 4
    # F2 comes back below HW: not yet.
    rm.update_follower_end_offset("t", 0, F2, 3)
    assert len(writer.updates) == 1
    rm.update_follower_end_offset("t", 0, F2, 4)
    update = await writer.next_update()
    assert update.isr == (LEADER, F1, F2) and update.partition_epoch == 6
    # In flight: HW already waits for F2; no second proposal meanwhile.
    assert p.maximal_isr == (LEADER, F1, F2)
    append(rm, 1)
    rm.update_follower_end_offset("t", 0, F1, 5)
    assert p.log.high_watermark == 4
    clock.now += 10 * LAG_MS
    assert rm.maybe_shrink_isr() == 0
    writer.answers[-1].set_result(7)
    await asyncio.wait_for(_until(lambda: p.isr == (LEADER, F1, F2)), WAIT_S)
    assert p.partition_epoch == 7


async def test_a_refused_or_failed_isr_write_keeps_the_isr_and_is_retried(
    manager: LogManager,
) -> None:
    clock = Clock()
    writer = Writer()
    rm, p = make_rm(manager, clock, writer)
    append(rm, 2)
    rm.update_follower_end_offset("t", 0, F1, 2)
    clock.now += LAG_MS + 1
    rm.maybe_shrink_isr()
    await writer.next_update()
    writer.answers[-1].set_result(None)  # BADVERSION: the state moved on
    await asyncio.wait_for(_until(lambda: p.maximal_isr == p.isr), WAIT_S)
    assert p.isr == (LEADER, F1, F2) and p.partition_epoch == 5
    assert rm.maybe_shrink_isr() == 1  # proposes again
    await writer.next_update()
    writer.answers[-1].set_exception(ConnectionError("zookeeper connection lost"))
    await asyncio.wait_for(_until(lambda: p.maximal_isr == p.isr), WAIT_S)
    assert p.isr == (LEADER, F1, F2)


async def test_an_isr_write_that_lands_after_a_newer_state_is_ignored(
    manager: LogManager,
) -> None:
    clock = Clock()
    writer = Writer()
    rm, p = make_rm(manager, clock, writer)
    append(rm, 2)
    rm.update_follower_end_offset("t", 0, F1, 2)
    clock.now += LAG_MS + 1
    rm.maybe_shrink_isr()
    await writer.next_update()
    # The controller moved leadership meanwhile (epoch 2, version 6).
    assert rm.apply_partition_state("t", 0, F1, 2, [LEADER, F1, F2], [F1, LEADER], 6)
    writer.answers[-1].set_result(7)
    await asyncio.sleep(0)
    await asyncio.wait_for(_until(lambda: not rm._isr_writes), WAIT_S)
    assert (p.leader_id, p.leader_epoch, p.isr, p.partition_epoch) == (F1, 2, (F1, LEADER), 6)


async def test_strict_min_isr(manager: LogManager) -> None:
    clock = Clock()
    rm, p = make_rm(manager, clock, min_isr=2)
    append(rm, 1)
    rm.update_follower_end_offset("t", 0, F1, 1)
    rm.update_follower_end_offset("t", 0, F2, 1)
    assert p.log.high_watermark == 1
    # An acks=-1 produce parks; then both followers stop and drop out of the ISR.
    results, delayed = rm.append_records([("t", 0, batch(1))], -1, 30_000)
    assert results[0].error == 0 and delayed is not None
    clock.now += LAG_MS + 1
    assert rm.maybe_shrink_isr() == 1
    assert p.isr == (LEADER,)
    assert delayed.completed
    assert results[0].error == errors.NotEnoughReplicasAfterAppend.code
    # HW does not move with |ISR| < min ISR, though the leader alone has the records.
    assert p.log.high_watermark == 1 < p.log.log_end_offset
    # acks=-1 now fails before writing; acks=1 still writes.
    leo = p.log.log_end_offset
    results, delayed = rm.append_records([("t", 0, batch(1))], -1, 30_000)
    assert results[0].error == errors.NotEnoughReplicas.code and delayed is None
    assert "min.insync.replicas=2" in (results[0].message or "")
    assert p.log.log_end_offset == leo
    append(rm, 1, acks=1)
    assert p.log.log_end_offset == leo + 1
    # F1 catches up -> back in the ISR -> HW moves again.
    rm.update_follower_end_offset("t", 0, F1, p.log.log_end_offset)
    assert p.isr == (LEADER, F1)
    assert p.log.high_watermark == p.log.log_end_offset


async def test_losing_leadership_answers_parked_produces_and_refuses_new_ones(
    manager: LogManager,
) -> None:
    clock = Clock()
    rm, _ = make_rm(manager, clock)
    results, delayed = rm.append_records([("t", 0, batch(1))], -1, 30_000)
    assert delayed is not None
    # A stale state (older epoch) changes nothing.
    assert not rm.apply_partition_state("t", 0, F1, 0, [LEADER, F1, F2], [F1], 9)
    assert not delayed.completed
    assert rm.apply_partition_state("t", 0, F1, 2, [LEADER, F1, F2], [F1, LEADER], 6)
    assert delayed.completed
    assert results[0].error == errors.NotLeaderOrFollower.code
    results, _ = rm.append_records([("t", 0, batch(1))], 1, 30_000)
    assert results[0].error == errors.NotLeaderOrFollower.code
    with pytest.raises(errors.NotLeaderOrFollower):
        rm.update_follower_end_offset("t", 0, F2, 0)


def test_a_new_leader_waits_for_followers_it_has_not_heard_from(manager: LogManager) -> None:
    clock = Clock()
    rm, p = make_rm(manager, clock)
    append(rm, 2)
    rm.update_follower_end_offset("t", 0, F1, 2)
    rm.update_follower_end_offset("t", 0, F2, 2)
    assert p.log.high_watermark == 2
    assert rm.apply_partition_state("t", 0, F1, 2, [LEADER, F1, F2], [F1, LEADER, F2], 6)
    assert rm.apply_partition_state("t", 0, LEADER, 3, [LEADER, F1, F2], [LEADER, F1, F2], 7)
    assert p.leader_epoch_start_offset == 2
    append(rm, 1)
    assert p.follower_end_offset(F1) == -1
    assert p.log.high_watermark == 2


async def _until(condition: object) -> None:
    assert callable(condition)
    while not condition():
        await asyncio.sleep(0.001)


async def test_a_caught_up_follower_outside_the_isr_holds_hw_back(manager: LogManager) -> None:
    clock = Clock()
    writer = Writer()
    rm, p = make_rm(manager, clock, writer)
    assert rm.apply_partition_state("t", 0, LEADER, 2, [LEADER, F1, F2], [LEADER, F1], 6)
    append(rm, 2)
    rm.update_follower_end_offset("t", 0, F1, 1)
    clock.now += LAG_MS + 1
    assert rm.maybe_shrink_isr() == 1  # F1 out: in flight, so F2 cannot be proposed meanwhile
    await writer.next_update()
    rm.update_follower_end_offset("t", 0, F2, 2)  # caught up now, but not in the ISR
    assert p.maximal_isr == (LEADER, F1)
    append(rm, 1)
    rm.update_follower_end_offset("t", 0, F1, 3)
    # Leader and F1 are at 3; F2, about to join, is at 2 and caught up within the lag.
    assert p.log.high_watermark == 2


def test_expand_needs_the_current_epochs_start_offset(manager: LogManager) -> None:
    clock = Clock()
    rm, p = make_rm(manager, clock)
    assert rm.apply_partition_state("t", 0, LEADER, 2, [LEADER, F1, F2], [LEADER, F1], 6)
    append(rm, 5)
    rm.update_follower_end_offset("t", 0, F1, 3)
    assert p.log.high_watermark == 3
    # Leader again at epoch 3: the epoch starts at LEO 5 (F1's LEO is kept: same leader).
    assert rm.apply_partition_state("t", 0, LEADER, 3, [LEADER, F1, F2], [LEADER, F1], 7)
    assert p.leader_epoch_start_offset == 5
    rm.update_follower_end_offset("t", 0, F2, 4)  # >= HW 3 but below the epoch start
    assert p.isr == (LEADER, F1)
    rm.update_follower_end_offset("t", 0, F2, 5)
    assert p.isr == (LEADER, F1, F2)


async def test_an_old_write_answering_for_an_equal_new_proposal_is_ignored(
    manager: LogManager,
) -> None:
    clock = Clock()
    writer = Writer()
    rm, p = make_rm(manager, clock, writer)
    append(rm, 2)
    rm.update_follower_end_offset("t", 0, F1, 2)
    clock.now += LAG_MS + 1
    rm.maybe_shrink_isr()
    first = await writer.next_update()
    # Same leader, newer epoch from the controller; the same shrink is proposed again on it.
    assert rm.apply_partition_state("t", 0, LEADER, 2, [LEADER, F1, F2], [LEADER, F1, F2], 6)
    clock.now += LAG_MS + 1
    rm.update_follower_end_offset("t", 0, F1, 2)
    rm.maybe_shrink_isr()
    second = await writer.next_update()
    assert first.isr == second.isr and second.leader_epoch == 2
    writer.answers[0].set_result(6)  # the first write's late answer
    await asyncio.wait_for(_until(lambda: len(rm._isr_writes) == 1), WAIT_S)
    assert p.isr == (LEADER, F1, F2) and p.maximal_isr == (LEADER, F1, F2)
    writer.answers[1].set_result(7)
    await asyncio.wait_for(_until(lambda: p.isr == (LEADER, F1)), WAIT_S)
    assert p.partition_epoch == 7


def test_a_newer_state_in_the_same_term_keeps_the_epoch_start_and_follower_history(
    manager: LogManager,
) -> None:
    """The leader's own stored ISR change comes back through the state watch at the same leader
    epoch: the term did not restart, so its start offset and the followers' lag timers hold."""
    clock = Clock()
    rm, p = make_rm(manager, clock)
    append(rm, 3)
    rm.update_follower_end_offset("t", 0, F1, 3)
    start = p.leader_epoch_start_offset
    clock.now += LAG_MS + 1  # F2 has not fetched since the term began
    assert rm.apply_partition_state("t", 0, LEADER, 1, [LEADER, F1, F2], [LEADER, F1, F2], 6)
    assert p.leader_epoch_start_offset == start == 0
    assert rm.maybe_shrink_isr() == 1  # F2's lag kept counting from the term's start
    assert p.isr == (LEADER, F1)
    # A new term restarts both.
    assert rm.apply_partition_state("t", 0, LEADER, 2, [LEADER, F1, F2], [LEADER, F1, F2], 8)
    assert p.leader_epoch_start_offset == 3


def test_resign_stops_leading_at_once_and_lets_the_same_state_apply_again(
    manager: LogManager,
) -> None:
    clock = Clock()
    rm, p = make_rm(manager, clock)
    append(rm, 1)
    assert [q.index for q in rm.resign_all()] == [0]
    assert not p.is_leader
    results, _ = rm.append_records([("t", 0, batch(1))], 1, 30_000)
    assert results[0].error == errors.NotLeaderOrFollower.code
    assert rm.resign_all() == []
    # The current state, re-read after a new session, is the one held before: it applies.
    assert rm.apply_partition_state("t", 0, LEADER, 1, [LEADER, F1, F2], [LEADER, F1, F2], 5)
    assert p.is_leader
    assert not rm.apply_partition_state("t", 0, LEADER, 0, [LEADER], [LEADER], 9)  # older epoch


def test_cluster_mode_hosts_only_what_it_is_told(manager: LogManager) -> None:
    rm = ReplicaManager(manager, LEADER, standalone=False)
    rm.startup()
    assert rm.get_partition("t", 0) is None
    assert rm.missing_partition_code("t", 0) == errors.NotLeaderOrFollower.code
    assert rm.missing_partition_code("nope", 0) == errors.UnknownTopicOrPartition.code
    p = rm.host("t", 0)
    assert rm.get_partition("t", 0) is p and p.leader_id == -1
    results, _ = rm.append_records([("t", 0, batch(1))], 1, 30_000)
    assert results[0].error == errors.NotLeaderOrFollower.code
    with pytest.raises(errors.UnknownTopicOrPartition):
        rm.host("t", 1)


RACKS = {LEADER: "rack-l", F1: "rack-1", F2: "rack-1"}


def test_preferred_read_replica_is_kafkas_rack_aware_selector(manager: LogManager) -> None:
    """KIP-392 (Kafka's RackAwareReplicaSelector): the leader when it shares the client's rack or
    no in-sync replica that reached the fetch offset does; else the most caught-up of those."""
    clock = Clock()
    rm, p = make_rm(manager, clock)
    append(rm, 5)
    rack_of = RACKS.get
    assert p.preferred_read_replica("", 0, rack_of) is None  # no rack: the leader
    assert p.preferred_read_replica("rack-l", 0, rack_of) is None  # the leader's rack
    assert p.preferred_read_replica("elsewhere", 0, rack_of) is None  # nobody's rack
    # Neither follower has fetched yet (LEO unknown, -1): nobody has reached offset 0.
    assert p.preferred_read_replica("rack-1", 0, rack_of) is None
    rm.update_follower_end_offset("t", 0, F1, 3)
    rm.update_follower_end_offset("t", 0, F2, 5)
    assert p.preferred_read_replica("rack-1", 0, rack_of) == F2  # furthest ahead
    assert p.preferred_read_replica("rack-1", 4, rack_of) == F2
    rm.update_follower_end_offset("t", 0, F2, 2)
    assert p.preferred_read_replica("rack-1", 0, rack_of) == F1
    assert p.preferred_read_replica("rack-1", 3, rack_of) == F1
    assert p.preferred_read_replica("rack-1", 4, rack_of) is None  # none reached offset 4
    clock.now += LAG_MS + 1
    rm.maybe_shrink_isr()
    assert p.isr == (LEADER,)  # both out of the ISR now
    assert p.preferred_read_replica("rack-1", 0, rack_of) is None


def test_fetch_sends_a_consumer_with_a_rack_to_its_replica(manager: LogManager) -> None:
    """The leader answers without records and with the preferred replica only when the selector
    is configured and the consumer names a rack; without, it reads as before."""
    from sluice.server.storage.log import Isolation

    clock = Clock()
    rm, _ = make_rm(manager, clock)
    append(rm, 4)
    rm.update_follower_end_offset("t", 0, F1, 4)
    rm.update_follower_end_offset("t", 0, F2, 4)
    rm.rack_of = RACKS.get
    want = [("t", 0, 0, 1 << 20, -1)]

    def read(rack: str | None) -> tuple[int, int]:
        (result,) = rm.fetch_messages(want, 1 << 20, Isolation.HIGH_WATERMARK, client_rack=rack)
        assert result.error is None and result.info is not None
        size = result.info.slice.size if result.info.slice is not None else 0
        return result.preferred_read_replica, size

    assert read("rack-1")[0] == -1 and read("rack-1")[1] > 0  # no selector configured
    rm.rack_aware_selector = True
    preferred, size = read("rack-1")
    assert preferred in (F1, F2) and size == 0
    assert read("rack-l") == (-1, read(None)[1])
    assert read(None)[0] == -1
