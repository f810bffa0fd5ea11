"""The delayed-operation purgatories: every parked request is answered exactly once, rightly.

The real :class:`ReplicaManager` (two partitions led here, follower 1 in the ISR, so HW waits for
it) with its fetch and produce purgatories, parked the way the Fetch and Produce handlers park
them (:meth:`ReplicaManager.delayed_fetch` / :meth:`ReplicaManager.append_records` with
``acks=-1``, then ``purgatory.wait(op, timeout)`` in a task); the event loop's clock is virtual,
so expiries happen exactly when the test moves time. Any interleaving of parks, appends,
follower fetches (which move HW), time, cancelled waits (a client gone), new leader epochs,
lost and regained leadership and a deleted topic is checked against a model of Kafka's
``DelayedOperation`` rules:

* a parked fetch completes (``wait`` returns True) at the first event that changes one of its
  partitions' read bound (HW for consumers, LEO for a follower's ``LOG_END`` read) or leader
  epoch, or removes the partition; otherwise it expires at its deadline (rounded up to the
  purgatory's tick) and ``wait`` returns False;
* a parked ``acks=-1`` produce answers NONE at the first event that brings HW to its records,
  NOT_LEADER_OR_FOLLOWER when the partition is no longer led here, REQUEST_TIMED_OUT at its
  deadline; the answer never changes afterwards;
* a cancelled wait completes nothing and leaves nothing behind; no operation stays watched once
  its wait is over (no leak), and none completes twice (a second completion of a future would
  raise in the code that caused it).
"""

from __future__ import annotations

import asyncio
import math
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from sluice.protocol import errors
from sluice.protocol.records import build_batch
from sluice.server.replication.delayed import DelayedProduce
from sluice.server.replication.partition import ReplicationSettings
from sluice.server.replication.purgatory import EXPIRY_TICK_S, DelayedOperation
from sluice.server.replication.replica_manager import ReplicaManager
from sluice.server.storage.log import Isolation
from sluice.server.storage.log_config import LogConfig
from sluice.server.storage.log_manager import LogManager
from tests.properties.support import CLOCK_RESOLUTION, SCRATCH, VirtualTimeLoop

LEADER, FOLLOWER = 0, 1
PARTITIONS = (0, 1)
NONE = 0
NOT_LEADER = errors.NotLeaderOrFollower.code
TIMED_OUT = errors.RequestTimedOut.code


@dataclass
class PartitionModel:
    leo: int = 0
    hw: int = 0
    follower_leo: int = -1
    leader: bool = True
    leader_epoch: int = 1
    partition_epoch: int = 1
    exists: bool = True

    def observed(self, isolation: Isolation) -> tuple[bool, int, int]:
        """What a parked fetch compares (DelayedFetch: partition, leader epoch, read bound)."""
        return (
            self.exists,
            self.leader_epoch,
            self.leo if isolation is Isolation.LOG_END else self.hw,
        )

    def maybe_increment_hw(self) -> None:
        if self.leader and self.follower_leo >= 0:
            self.hw = max(self.hw, min(self.leo, self.follower_leo))


@dataclass
class Parked:
    """One parked request: the real operation and waiting task, the model's view of it."""

    op: DelayedOperation
    task: asyncio.Task[bool]
    deadline: float  # loop time at which its tick expires it
    keys: tuple[int, ...]
    isolation: Isolation | None = None  # fetch only
    observed: tuple[tuple[bool, int, int], ...] = ()  # fetch only
    required: int = 0  # produce only
    state: str = "waiting"  # waiting / completed / expired / cancelled
    outcome: int | None = None  # produce only: the error code expected
    answered: list[Any] | None = None  # produce only: the results when it was answered


class PurgatoryMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.loop = VirtualTimeLoop()
        self.dir = Path(tempfile.mkdtemp(prefix="sluice-props-", dir=SCRATCH))
        self.logs = LogManager(self.dir, LogConfig.from_properties({}))
        self.logs.open()
        self.logs.create_topic("t", len(PARTITIONS))
        settings_ = ReplicationSettings(10_000, lambda _p: 1, lambda: 0)
        self.rm = ReplicaManager(self.logs, LEADER, settings_)
        self.model = {p: PartitionModel() for p in PARTITIONS}
        for p in PARTITIONS:
            assert self.rm.get_partition("t", p) is not None  # standalone: led at epoch 0
            self.apply(p, LEADER, 1, 1)
        self.parked: list[Parked] = []

    def teardown(self) -> None:
        try:
            tasks = [p.task for p in self.parked if not p.task.done()]
            for task in tasks:
                task.cancel()
            if tasks:
                self.loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
            self.logs.close()
        finally:
            self.loop.close()
            shutil.rmtree(self.dir, ignore_errors=True)

    def run(self, step: Any) -> Any:
        """Run ``step`` on the loop, then let every task it woke run to its end."""
        return self.loop.run_step(step)

    def apply(self, p: int, leader: int, leader_epoch: int, partition_epoch: int) -> None:
        applied = self.run(
            lambda: self.rm.apply_partition_state(
                "t",
                p,
                leader,
                leader_epoch,
                (LEADER, FOLLOWER),
                (LEADER, FOLLOWER),
                partition_epoch,
            )
        )
        assert applied

    # --- the model's verdicts ---------------------------------------------------------------

    def settle_model(self) -> None:
        """After a step that changed partition state: what must have completed now."""
        for parked in self.parked:
            if parked.state != "waiting":
                continue
            if parked.isolation is not None:
                now = tuple(self.model[k].observed(parked.isolation) for k in parked.keys)
                if now != parked.observed:
                    parked.state = "completed"
            else:
                m = self.model[parked.keys[0]]
                if not m.exists or not m.leader:
                    parked.state, parked.outcome = "completed", NOT_LEADER
                elif m.hw >= parked.required:
                    parked.state, parked.outcome = "completed", NONE

    # --- rules ------------------------------------------------------------------------------

    def _deadline(self, timeout_s: float) -> float:
        # DelayedOperationPurgatory.wait: the deadline rounded up to the next tick.
        return math.ceil((self.loop.time() + timeout_s) / EXPIRY_TICK_S) * EXPIRY_TICK_S

    @precondition(lambda self: self.model[0].exists)
    @rule(
        keys=st.sets(st.sampled_from(PARTITIONS), min_size=1),
        isolation=st.sampled_from([Isolation.HIGH_WATERMARK, Isolation.LOG_END]),
        timeout_ms=st.sampled_from([1, 5, 12, 50, 500]),
    )
    def park_fetch(self, keys: set[int], isolation: Isolation, timeout_ms: int) -> None:
        ordered = tuple(sorted(keys))
        if not all(self.model[k].leader for k in ordered):
            return  # the handler's read answers NOT_LEADER_OR_FOLLOWER before any parking
        purgatory = self.rm.fetch_purgatory

        def park() -> tuple[DelayedOperation, asyncio.Task[bool]]:
            op = self.rm.delayed_fetch([("t", k) for k in ordered], isolation)
            return op, asyncio.get_running_loop().create_task(purgatory.wait(op, timeout_ms / 1000))

        deadline = self._deadline(timeout_ms / 1000)
        op, task = self.run(park)
        observed = tuple(self.model[k].observed(isolation) for k in ordered)
        self.parked.append(Parked(op, task, deadline, ordered, isolation, observed))

    @precondition(lambda self: self.model[0].exists)
    @rule(
        p=st.sampled_from(PARTITIONS),
        count=st.integers(1, 3),
        timeout_ms=st.sampled_from([1, 5, 12, 50, 500]),
    )
    def park_produce(self, p: int, count: int, timeout_ms: int) -> None:
        m = self.model[p]
        records = build_batch([(1_700_000_000_000, None, b"v") for _ in range(count)])
        purgatory = self.rm.produce_purgatory

        def produce() -> tuple[list[Any], DelayedProduce | None, asyncio.Task[bool] | None]:
            results, delayed = self.rm.append_records([("t", p, records)], -1, timeout_ms)
            if delayed is None:
                return results, None, None
            return (
                results,
                delayed,
                asyncio.get_running_loop().create_task(purgatory.wait(delayed, timeout_ms / 1000)),
            )

        deadline = self._deadline(timeout_ms / 1000)
        results, delayed, task = self.run(produce)
        if not m.leader:
            assert results[0].error == NOT_LEADER and delayed is None
            return
        assert results[0].error == NONE
        m.leo += count
        m.maybe_increment_hw()
        assert delayed is not None and task is not None, "HW cannot pass new records at once here"
        self.settle_model()  # the append may wake fetches
        self.parked.append(Parked(delayed, task, deadline, (p,), required=m.leo))

    @precondition(lambda self: self.model[0].exists)
    @rule(p=st.sampled_from(PARTITIONS), count=st.integers(1, 3))
    def append(self, p: int, count: int) -> None:
        records = build_batch([(1_700_000_000_000, None, b"v") for _ in range(count)])
        results, delayed = self.run(lambda: self.rm.append_records([("t", p, records)], 1, 0))
        m = self.model[p]
        if not m.leader:
            assert results[0].error == NOT_LEADER
            return
        assert results[0].error == NONE and delayed is None
        m.leo += count
        m.maybe_increment_hw()
        self.settle_model()

    @precondition(lambda self: self.model[0].exists)
    @rule(p=st.sampled_from(PARTITIONS), where=st.one_of(st.just(-1), st.integers(0, 30)))
    def follower_fetch(self, p: int, where: int) -> None:
        m = self.model[p]
        if not m.leader:
            return
        offset = m.leo if where < 0 else min(where, m.leo)
        self.run(lambda: self.rm.update_follower_end_offset("t", p, FOLLOWER, offset))
        m.follower_leo = offset
        m.maybe_increment_hw()
        self.settle_model()

    @rule(ms=st.sampled_from([1, 2, 5, 7, 20, 100, 600]))
    def time_passes(self, ms: int) -> None:
        self.loop.now += ms / 1000
        self.run(lambda: None)
        self.expire_model()

    @precondition(lambda self: self.model[0].exists)
    @rule(p=st.sampled_from(PARTITIONS), ms=st.sampled_from([1, 5, 12, 50]))
    def follower_catches_up_as_deadlines_pass(self, p: int, ms: int) -> None:
        """A completion and expiries in one loop step: time jumps, and the first thing the loop
        runs is a follower fetch that moves HW; the timers due run after it in the same step.
        An operation completed by the fetch must count as completed, not expired."""
        m = self.model[p]
        if not m.leader:
            return
        self.loop.now += ms / 1000
        self.run(lambda: self.rm.update_follower_end_offset("t", p, FOLLOWER, m.leo))
        m.follower_leo = m.leo
        m.maybe_increment_hw()
        self.settle_model()
        self.expire_model()

    def expire_model(self) -> None:
        limit = self.loop.time() + CLOCK_RESOLUTION  # the loop's rule for a timer being due
        for parked in self.parked:
            if parked.state == "waiting" and parked.deadline < limit:
                parked.state = "expired"
                if parked.isolation is None:
                    parked.outcome = TIMED_OUT

    @precondition(lambda self: any(p.state == "waiting" for p in self.parked))
    @rule(data=st.data())
    def client_goes_away(self, data: st.DataObject) -> None:
        waiting = [p for p in self.parked if p.state == "waiting"]
        parked = data.draw(st.sampled_from(waiting))
        parked.task.cancel()
        self.run(lambda: None)
        parked.state = "cancelled"

    @precondition(lambda self: self.model[0].exists)
    @rule(
        p=st.sampled_from(PARTITIONS),
        change=st.sampled_from(["new epoch", "new epoch", "leadership", "leadership", "delete"]),
    )
    def partition_state_changes(self, p: int, change: str) -> None:
        m = self.model[p]
        if change == "delete":
            self.run(lambda: self.rm.delete_topic("t"))
            for each in self.model.values():
                each.exists = False
        else:
            leader = LEADER if change == "new epoch" or not m.leader else FOLLOWER
            self.apply(p, leader, m.leader_epoch + 1, m.partition_epoch + 1)
            m.leader_epoch += 1
            m.partition_epoch += 1
            if leader == LEADER and not m.leader:
                m.follower_leo = -1  # a new leader forgets its followers' offsets
            m.leader = leader == LEADER
        self.settle_model()

    # --- checks -----------------------------------------------------------------------------

    @invariant()
    def every_request_answered_once_and_rightly(self) -> None:
        for parked in self.parked:
            task = parked.task
            if parked.state == "waiting":
                assert not task.done(), f"answered early or wrongly: {parked}"
                continue
            assert task.done(), f"lost: the model says {parked.state}: {parked}"
            if parked.state == "cancelled":
                assert task.cancelled()
                continue
            assert task.result() == (parked.state == "completed"), parked
            if parked.isolation is None:
                assert isinstance(parked.op, DelayedProduce)
                results = list(parked.op.results)
                assert results[0].error == parked.outcome, (results, parked)
                if parked.answered is None:
                    parked.answered = results
                assert results == parked.answered, "a produce's answer changed after it was sent"

    @invariant()
    def nothing_stays_watched(self) -> None:
        fetches = sum(1 for p in self.parked if p.state == "waiting" and p.isolation is not None)
        produces = sum(1 for p in self.parked if p.state == "waiting" and p.isolation is None)
        assert len(self.rm.fetch_purgatory) == fetches
        assert len(self.rm.produce_purgatory) == produces


PurgatoryMachine.TestCase.settings = settings(
    max_examples=100, stateful_step_count=40, deadline=None
)
test_purgatory = PurgatoryMachine.TestCase
