"""The leader's HW/ISR rules and ``acks=all``, driven at random against a model of Kafka's rules.

The real :class:`ReplicaManager` and :class:`Partition` over a real log (three replicas: this
broker 0 leads, followers 1 and 2 are fed the way the follower-fetch path feeds them); only the
clock and the ISR store are fakes: time moves when the test says, and each ISR write waits until
the test answers it (stored, refused as ZooKeeper's BADVERSION, or failed).

The model (:class:`Model`) is Kafka's ``Partition.scala`` / ``Replica.scala`` reduced to
integers: ``updateFetchState`` (caught-up time), ``maybeExpandIsr`` (follower LEO >= HW and >=
the leader epoch start offset, one change in flight), ``maybeShrinkIsr`` (not at LEO and not
caught up within ``replica.lag.time.max.ms``; never the leader), ``maybeIncrementLeaderHW`` (min
LEO over the maximal ISR and the followers caught up within the lag, only forward, not at all
under ``min(min.insync.replicas, RF)`` -- KIP-966's strict min ISR), ``appendRecordsToLeader``
(acks=all under ``min.insync.replicas`` -> NOT_ENOUGH_REPLICAS, nothing written) and
``DelayedProduce`` (NONE once HW passes the records; the stored ISR below
``min.insync.replicas`` -> NOT_ENOUGH_REPLICAS_AFTER_APPEND; leadership gone ->
NOT_LEADER_OR_FOLLOWER). Where Sluice differs from Kafka on purpose the model follows Sluice,
said at the spot.

Besides agreeing with the model step by step, the machine checks the safety rules directly:
HW never moves backwards on the leader; when it moves, every member of the (maximal) ISR has
it; an acks=all produce answered NONE has its records on every stored ISR member, and the ISR
had at least ``min.insync.replicas`` members; every parked produce is answered exactly once.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from sluice.protocol import errors
from sluice.protocol.records import build_batch
from sluice.server.replication.delayed import DelayedProduce
from sluice.server.replication.partition import IsrUpdate, Partition, ReplicationSettings
from sluice.server.replication.replica_manager import ReplicaManager
from sluice.server.storage.log_config import LogConfig
from sluice.server.storage.log_manager import LogManager
from tests.properties.support import SCRATCH

LEADER = 0
FOLLOWERS = (1, 2)
REPLICAS = (LEADER, *FOLLOWERS)
LAG_MS = 10_000
NONE = 0
NOT_LEADER = errors.NotLeaderOrFollower.code
NOT_ENOUGH_REPLICAS = errors.NotEnoughReplicas.code
NOT_ENOUGH_REPLICAS_AFTER_APPEND = errors.NotEnoughReplicasAfterAppend.code


@dataclass
class FollowerModel:
    """Kafka's ``ReplicaState`` of one follower, on the leader."""

    leo: int = -1
    last_caught_up_ms: int = 0
    last_fetch_leader_leo: int = -1
    last_fetch_ms: int = 0


@dataclass
class Waiter:
    """A parked acks=all produce: the real operation and what the model expects of it."""

    op: DelayedProduce
    required: int  # HW must reach this (last offset + 1)
    expected: int | None = None  # the model's outcome, once it says the produce is answered
    answered: int | None = None  # the real outcome, once seen


@dataclass
class Model:
    min_isr: int
    now: int
    leo: int = 0
    hw: int = 0
    leader: bool = True
    leader_epoch: int = 1
    partition_epoch: int = 0
    epoch_start: int = 0
    isr: tuple[int, ...] = REPLICAS
    pending: tuple[int, ...] | None = None
    followers: dict[int, FollowerModel] = field(default_factory=dict)
    #: ISR changes proposed, in order: (isr, leader epoch, partition epoch they were computed on)
    proposals: list[tuple[tuple[int, ...], int, int]] = field(default_factory=list)

    @property
    def maximal_isr(self) -> set[int]:
        return set(self.isr) | set(self.pending or ())

    def become_leader(self, leader_epoch: int, isr: tuple[int, ...], partition_epoch: int) -> None:
        """``Partition.makeLeader`` + ``Replica.resetReplicaState``. (Kafka resets a new leader's
        followers to "last fetch: never" (-1, 0); Sluice counts the election as their previous
        fetch (epoch start offset, now), which can only make HW wait longer for a non-ISR
        follower, at most the lag time. The model follows Sluice.)"""
        new_leader = not self.leader
        self.leader, self.leader_epoch, self.partition_epoch = True, leader_epoch, partition_epoch
        self.epoch_start = self.leo
        self.isr, self.pending = isr, None
        for replica in FOLLOWERS:
            old = self.followers.get(replica) if not new_leader else None
            self.followers[replica] = FollowerModel(
                leo=-1 if old is None else old.leo,
                last_caught_up_ms=self.now if replica in isr else 0,
                last_fetch_leader_leo=self.leo,
                last_fetch_ms=self.now,
            )
        self.maybe_increment_hw()

    def become_follower(
        self, leader_epoch: int, isr: tuple[int, ...], partition_epoch: int
    ) -> None:
        self.leader, self.leader_epoch, self.partition_epoch = False, leader_epoch, partition_epoch
        self.isr, self.pending, self.epoch_start = isr, None, -1
        self.followers = {}

    def maybe_increment_hw(self) -> None:
        """``maybeIncrementLeaderHW``."""
        if not self.leader:
            return
        new = self.leo
        maximal = self.maximal_isr
        for replica, f in self.followers.items():
            caught_up = self.now - f.last_caught_up_ms <= LAG_MS
            if f.leo < new and (replica in maximal or caught_up):
                new = f.leo
        if len(self.isr) < min(self.min_isr, len(REPLICAS)):
            return  # strict min ISR
        self.hw = max(self.hw, new)

    def propose(self, isr: tuple[int, ...]) -> None:
        self.pending = isr
        self.proposals.append((isr, self.leader_epoch, self.partition_epoch))

    def fetch(self, replica: int, offset: int) -> None:
        """``updateFollowerFetchState``: ``Replica.updateFetchState``, ``maybeExpandIsr``, HW."""
        offset = min(offset, self.leo)
        f = self.followers[replica]
        if offset >= self.leo:
            f.last_caught_up_ms = max(f.last_caught_up_ms, self.now)
        elif offset >= f.last_fetch_leader_leo:
            f.last_caught_up_ms = max(f.last_caught_up_ms, f.last_fetch_ms)
        f.last_fetch_leader_leo, f.last_fetch_ms, f.leo = self.leo, self.now, offset
        if (
            replica not in self.isr
            and self.pending is None
            and offset >= self.hw
            and offset >= self.epoch_start >= 0
        ):
            self.propose((*self.isr, replica))
        self.maybe_increment_hw()

    def shrink(self) -> bool:
        """``maybeShrinkIsr`` / ``getOutOfSyncReplicas``."""
        if not self.leader or self.pending is not None:
            return False
        out = {
            r
            for r in self.isr
            if r != LEADER
            and self.followers[r].leo != self.leo
            and self.now - self.followers[r].last_caught_up_ms > LAG_MS
        }
        if not out:
            return False
        self.propose(tuple(r for r in self.isr if r not in out))
        return True

    def isr_write_answered(self, index: int, version: int | None) -> None:
        """The store answered proposal ``index``: applied only over the state it was computed
        on (KIP-497's in-flight ISR, fenced by leader epoch and partition epoch)."""
        isr, leader_epoch, partition_epoch = self.proposals[index]
        if (
            not self.leader
            or self.pending != isr
            or (self.leader_epoch, self.partition_epoch) != (leader_epoch, partition_epoch)
        ):
            return
        self.pending = None
        if version is not None:
            self.isr, self.partition_epoch = isr, version
            self.maybe_increment_hw()

    def produce_outcome(self, required: int) -> int | None:
        """``DelayedProduce.tryComplete`` as Sluice orders it: a stored ISR below min ISR answers
        NOT_ENOUGH_REPLICAS_AFTER_APPEND at once (Kafka waits, and with KIP-966's strict min ISR
        that wait can only time out: the same "not acknowledged", sooner)."""
        if not self.leader:
            return NOT_LEADER
        if len(self.isr) < self.min_isr:
            return NOT_ENOUGH_REPLICAS_AFTER_APPEND
        if self.hw >= required:
            return NONE
        return None


class IsrStore:
    """The ISR writer (ZooKeeper's conditional update in a cluster): each write parks until
    the test answers it. ``returned`` counts writes whose answer the replica manager has
    taken: it applies the answer in the same loop step the writer returns in."""

    def __init__(self) -> None:
        self.updates: list[IsrUpdate] = []
        self.answers: list[asyncio.Future[int | None]] = []
        self.returned = 0

    async def __call__(self, update: IsrUpdate) -> int | None:
        self.updates.append(update)
        answer = asyncio.get_running_loop().create_future()
        self.answers.append(answer)
        try:
            return await answer
        finally:
            self.returned += 1


offsets = st.one_of(st.sampled_from(["hw", "epoch_start", "previous"]), st.integers(0, 60))


class PartitionMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.dir = Path(tempfile.mkdtemp(prefix="sluice-props-", dir=SCRATCH))
        self.logs = LogManager(self.dir, LogConfig.from_properties({}))
        self.logs.open()
        self.logs.create_topic("t", 1)
        self.clock_ms = 1_000_000
        self.store = IsrStore()
        self.waiters: list[Waiter] = []
        self.hw_seen = 0

    def teardown(self) -> None:
        try:
            if hasattr(self, "rm"):
                self.run(self.rm.shutdown)  # cancels the ISR writes still waiting for an answer

                async def settle() -> None:
                    tasks = asyncio.all_tasks() - {asyncio.current_task()}
                    await asyncio.gather(*tasks, return_exceptions=True)

                self.loop.run_until_complete(settle())
            self.logs.close()
        finally:
            self.loop.close()
            shutil.rmtree(self.dir, ignore_errors=True)

    def run(self, step: Callable[[], Any]) -> Any:
        """Run ``step`` on the loop (the replica manager starts ISR writes as tasks), then let
        those tasks reach the store."""

        async def body() -> Any:
            result = step()
            await asyncio.sleep(0)
            return result

        coro: Coroutine[Any, Any, Any] = body()
        return self.loop.run_until_complete(coro)

    @initialize(min_isr=st.integers(1, 3), isr=st.sampled_from([REPLICAS, (0, 1), (0,), (0, 2, 1)]))
    def start(self, min_isr: int, isr: tuple[int, ...]) -> None:
        self.model = Model(min_isr=min_isr, now=self.clock_ms)
        settings_ = ReplicationSettings(
            LAG_MS, lambda _p: self.model.min_isr, lambda: self.clock_ms
        )
        self.rm = ReplicaManager(self.logs, LEADER, settings_, self.store)
        partition = self.rm.get_partition("t", 0)  # standalone: epoch 0, ISR [0]
        assert partition is not None
        self.partition: Partition = partition
        self.model.leader_epoch, self.model.partition_epoch = 0, 0
        self.model.isr = (LEADER,)
        self.model.become_leader(0, (LEADER,), 0)
        self.apply_state(LEADER, 1, isr, 1)

    def apply_state(
        self, leader: int, leader_epoch: int, isr: tuple[int, ...], partition_epoch: int
    ) -> None:
        """A partition state from the controller (through the ZooKeeper watcher)."""
        applied = self.run(
            lambda: self.rm.apply_partition_state(
                "t", 0, leader, leader_epoch, REPLICAS, isr, partition_epoch
            )
        )
        newer = (leader_epoch, partition_epoch) > (
            self.model.leader_epoch,
            self.model.partition_epoch,
        )
        assert applied == newer
        if newer:
            if leader == LEADER:
                self.model.become_leader(leader_epoch, isr, partition_epoch)
            else:
                self.model.become_follower(leader_epoch, isr, partition_epoch)

    # --- rules ------------------------------------------------------------------------------

    # Hypothesis picks among the rules evenly: the common events (produce, fetch) have two
    # rules each, the rare ones (a new state) share one.

    @rule(count=st.integers(1, 5), acks=st.sampled_from([1, -1]))
    def produce(self, count: int, acks: int) -> None:
        self._produce(count, acks)

    @rule(count=st.integers(1, 5))
    def produce_acks_all(self, count: int) -> None:
        self._produce(count, -1)

    def _produce(self, count: int, acks: int) -> None:
        records = build_batch([(1_700_000_000_000, None, b"v%d" % i) for i in range(count)])
        results, delayed = self.run(
            lambda: self.rm.append_records([("t", 0, records)], acks, 30_000)
        )
        m = self.model
        if not m.leader:
            assert results[0].error == NOT_LEADER
            return
        if acks == -1 and len(m.isr) < m.min_isr:
            assert results[0].error == NOT_ENOUGH_REPLICAS, results[0]
            assert self.partition.log.log_end_offset == m.leo  # nothing written
            return
        assert results[0].error == NONE, results[0]
        m.leo += count
        m.maybe_increment_hw()
        if acks == -1:
            outcome = m.produce_outcome(m.leo)
            if delayed is None:
                assert outcome == NONE
                self.check_acked(m.leo)
            else:
                assert outcome is None, "parked although it could be answered"
                self.waiters.append(Waiter(delayed, m.leo))

    @precondition(lambda self: self.model.leader)
    @rule(replica=st.sampled_from(FOLLOWERS))
    def follower_fetch_at_leo(self, replica: int) -> None:
        self._fetch(replica, self.model.leo)

    @precondition(lambda self: self.model.leader)
    @rule(replica=st.sampled_from(FOLLOWERS), where=offsets)
    def follower_fetch(self, replica: int, where: str | int) -> None:
        m = self.model
        if where == "hw":
            offset = m.hw
        elif where == "epoch_start":
            offset = m.epoch_start
        elif where == "previous":
            offset = max(m.followers[replica].leo, 0)
        else:
            assert isinstance(where, int)
            offset = where
        self._fetch(replica, offset)

    def _fetch(self, replica: int, offset: int) -> None:
        self.run(lambda: self.rm.update_follower_end_offset("t", 0, replica, offset))
        self.model.fetch(replica, offset)

    @rule(ms=st.sampled_from([1, LAG_MS // 2, LAG_MS, LAG_MS + 1, 3 * LAG_MS]))
    def time_passes(self, ms: int) -> None:
        self.clock_ms += ms
        self.model.now = self.clock_ms

    @rule()
    def shrink_check(self) -> None:
        proposed = self.run(self.rm.maybe_shrink_isr)
        assert proposed == int(self.model.shrink())

    def _store_every_isr_write(self) -> None:
        for index, answer in enumerate(self.store.answers):
            if not answer.done():
                self._answer(index, "stored")
                self.check()

    def check(self) -> None:
        """The invariants, between the events of a rule that makes several."""
        self.agrees_with_the_model()
        self.hw_is_safe()
        self.every_parked_produce_is_answered_once_and_rightly()

    @precondition(lambda self: self.model.leader)
    @rule()
    def idle_partition(self) -> None:
        """The followers reach the leader's LEO, then nothing is produced for three lag times:
        a follower at the LEO is in sync however long ago it caught up."""
        for replica in FOLLOWERS:
            self._fetch(replica, self.model.leo)
            self.check()
        self._store_every_isr_write()
        self.time_passes(3 * LAG_MS)
        self.shrink_check()

    @precondition(lambda self: self.model.leader)
    @rule(replica=st.sampled_from(FOLLOWERS))
    def follower_falls_out_and_comes_back(self, replica: int) -> None:
        """One follower keeps up, the other (``replica``) stops fetching while records arrive
        and is dropped from the ISR; later it fetches from the HW while the leader has more:
        it is proposed for the ISR although it has not been caught up for long, so HW must
        wait for it from then on (the maximal ISR), also when the other follower catches up --
        records produced next must not count as committed before it has them."""
        other = FOLLOWERS[0] if replica != FOLLOWERS[0] else FOLLOWERS[1]
        self._store_every_isr_write()
        for step in (
            lambda: self._produce(2, 1),
            lambda: self._fetch(other, self.model.leo),
            lambda: self.time_passes(3 * LAG_MS),
            lambda: self._fetch(other, self.model.leo),
            self.shrink_check,
            self._store_every_isr_write,
            lambda: self._produce(2, 1),
            lambda: self._fetch(replica, self.model.hw),
            lambda: self._fetch(other, self.model.leo),
        ):
            step()
            self.check()

    @precondition(lambda self: self.model.leader)
    @rule(count=st.integers(1, 3))
    def leadership_moves_while_produce_waits(self, count: int) -> None:
        """An acks=all produce parks, then the controller moves leadership to broker 1: it
        answers NOT_LEADER_OR_FOLLOWER, never NONE."""
        self._produce(count, -1)
        self.check()
        m = self.model
        self.apply_state(1, m.leader_epoch + 1, (1, 2), m.partition_epoch + 1)

    @precondition(lambda self: self.store.returned < len(self.store.answers))
    @rule(data=st.data(), outcome=st.sampled_from(["stored", "stored", "conflict", "error"]))
    def answer_isr_write(self, data: st.DataObject, outcome: str) -> None:
        waiting = [i for i, a in enumerate(self.store.answers) if not a.done()]
        self._answer(data.draw(st.sampled_from(waiting)), outcome)

    def _answer(self, index: int, outcome: str) -> None:
        update = self.store.updates[index]
        answer = self.store.answers[index]
        version = update.partition_epoch + 1 if outcome == "stored" else None
        if outcome == "error":
            answer.set_exception(ConnectionError("ZooKeeper connection lost"))
        else:
            answer.set_result(version)
        expected = self.store.returned + 1

        async def taken() -> None:
            for _ in range(10):  # bounded: the writer's task resumes in the next loop step
                if self.store.returned >= expected:
                    return
                await asyncio.sleep(0)

        self.loop.run_until_complete(taken())
        assert self.store.returned == expected
        self.model.isr_write_answered(index, version)

    @rule(
        isr=st.sampled_from(["held", REPLICAS, (0, 1), (0, 2), (0,)]),
        leader=st.sampled_from([LEADER, LEADER, 1, "stale"]),
    )
    def controller(self, isr: tuple[int, ...] | str, leader: int | str) -> None:
        """A new leader epoch from the controller: this broker again (with the ISR the
        controller wrote, often the one held: then an ISR change in flight is proposed again
        over the new state, and the old answer must not apply) or broker 1; or the watcher
        delivers the state held again (ignored)."""
        m = self.model
        if isr == "held":
            isr = m.isr
        assert isinstance(isr, tuple)
        if leader == "stale":
            self.apply_state(LEADER, m.leader_epoch, m.isr, m.partition_epoch)
            return
        assert isinstance(leader, int)
        if leader != LEADER:
            isr = tuple(r for r in isr if r != LEADER) or (leader,)
        if leader not in isr:
            isr = (leader, *isr)  # the controller elects from the ISR
        self.apply_state(leader, m.leader_epoch + 1, isr, m.partition_epoch + 1)

    @precondition(lambda self: self.model.leader and self.store.returned < len(self.store.answers))
    @rule()
    def reelected_while_isr_write_in_flight(self) -> None:
        """The controller re-elects this broker (same ISR, next epoch) while an ISR write is in
        flight, and the followers fetch again at once: the same change is often proposed again,
        over the new state, and the answer to the old proposal must not apply to it."""
        m = self.model
        self.apply_state(LEADER, m.leader_epoch + 1, m.isr, m.partition_epoch + 1)
        for replica in FOLLOWERS:
            self.check()
            self._fetch(replica, max(m.followers[replica].leo, 0))

    # --- checks -----------------------------------------------------------------------------

    def check_acked(self, required: int) -> None:
        """An acks=all produce answered NONE: every stored ISR member has its records, and
        there were at least min.insync.replicas of them."""
        p = self.partition
        assert len(p.isr) >= self.model.min_isr
        assert p.log.high_watermark >= required
        for replica in p.isr:
            if replica != LEADER:
                assert p.follower_end_offset(replica) >= required, (replica, p.isr, required)

    @invariant()
    def agrees_with_the_model(self) -> None:
        if not hasattr(self, "model"):
            return
        p, m = self.partition, self.model
        assert p.log.log_end_offset == m.leo
        assert p.log.high_watermark == m.hw, (p.log.high_watermark, m)
        assert p.is_leader == m.leader
        assert (p.leader_epoch, p.partition_epoch) == (m.leader_epoch, m.partition_epoch)
        assert p.isr == m.isr
        assert set(p.maximal_isr) == m.maximal_isr
        sent = [(u.isr, u.leader_epoch, u.partition_epoch) for u in self.store.updates]
        assert sent == m.proposals
        if m.leader:
            assert p.leader_epoch_start_offset == m.epoch_start
            for replica in FOLLOWERS:
                assert p.follower_end_offset(replica) == m.followers[replica].leo

    @invariant()
    def hw_is_safe(self) -> None:
        if not hasattr(self, "model"):
            return
        p = self.partition
        hw = p.log.high_watermark
        assert self.hw_seen <= hw <= p.log.log_end_offset, "HW moved backwards or past LEO"
        if p.is_leader and hw > self.hw_seen:
            for replica in p.maximal_isr:
                if replica != LEADER:
                    assert p.follower_end_offset(replica) >= hw, (replica, hw)
        self.hw_seen = hw

    @invariant()
    def every_parked_produce_is_answered_once_and_rightly(self) -> None:
        for waiter in self.waiters:
            expected = self.model.produce_outcome(waiter.required)
            if waiter.expected is None:
                waiter.expected = expected
            done = waiter.op.completed
            if waiter.answered is not None:
                assert done  # a future completes once; the outcome must not change afterwards
                assert waiter.op.results[0].error == waiter.answered
                continue
            if not done:
                assert waiter.expected is None, f"lost completion: should be {waiter.expected}"
                continue
            waiter.answered = waiter.op.results[0].error
            assert waiter.answered == waiter.expected, (waiter, self.model)
            if waiter.answered == NONE:
                self.check_acked(waiter.required)


PartitionMachine.TestCase.settings = settings(
    max_examples=100, stateful_step_count=50, deadline=None
)
test_partition_hw_isr = PartitionMachine.TestCase
