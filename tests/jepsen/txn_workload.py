"""The transactional workload of the fault suite (``python -m tests.jepsen --workload txn``).

One trial (:func:`run_txn_trial`) on a :class:`FaultCluster` (``__transaction_state`` of
:data:`STATE_PARTITIONS` partitions, RF 3, min ISR 2):

1. two topics of 2 partitions each (RF 3, min ISR 2, unclean election off);
2. :data:`PRODUCERS` confluent-kafka transactional producers (each its own ``transactional.id``,
   so their coordinators may be different brokers) run transactions back to back for
   ``duration`` seconds: each writes 1-3 unique values to each of 2-4 partitions drawn by the
   seed, then commits or (one in four, by the seed) aborts. A value is
   ``<seed>:<producer>:<n>:<i>/<count>``: transaction ``<producer>:<n>``, its ``i``-th of
   ``count`` writes. Errors are handled as librdkafka documents: an abortable error aborts, a
   retriable one on commit retries the commit, a fatal one (fencing, an epoch it cannot recover)
   drops the producer and a new instance with the same ``transactional.id`` re-initialises
   (fencing the old one). Each transaction's outcome is recorded (``tests.jepsen.txn_checker``);
3. a consume-transform-produce copier (:class:`_Copier`) copies the first topic to a third one,
   committing its consumer offsets in each transaction (``send_offsets_to_transaction``), and a
   ``read_committed`` consumer reads every partition of the two topics from offset 0 throughout;
4. meanwhile the nemesis plays the seed's schedule (``tests.jepsen.runner.make_schedule``'s
   faults and timing) with targets of its own (:data:`TXN_TARGETS`): the transaction
   coordinator of a producer, that coordinator *while a commit is in flight* (``mid_commit``: the
   producer signals right before ``commit_transaction``), the leader of a partition a
   transaction has written *between its AddPartitions/records and its EndTxn*
   (``before_end``: the producer waits, bounded, until the fault is applied), a partition
   leader, the controller or a broker of the seed;
5. then everything is healed, the cluster waited on until every partition has its full ISR and
   its last stable offset equals its high watermark (every transaction ended: open ones abort
   after ``transaction.timeout.ms``), and every partition read to its end by a final
   ``read_committed`` and a final ``read_uncommitted`` consumer (the copy: ``read_committed``),
   the copier group's committed offsets fetched; the replicas are compared;
6. :func:`tests.jepsen.txn_checker.check` judges (G1a, G1b, non-atomic, lost, ...).

The copier is judged by :func:`tests.jepsen.txn_checker.check_copy` against the final reads and
the group's committed offsets (each committed input value copied exactly once, nothing copied
beyond the committed offsets).
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import json
import logging
import random
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from sluice.server.group.offsets_store import partition_for
from sluice.testing.zookeeper import ZooKeeperServer
from tests.broker_util import read_to_end
from tests.jepsen.harness import SAFE_TOPIC_CONFIG, FaultCluster
from tests.jepsen.runner import (
    Step,
    TrialConfig,
    _Nemesis,
    _producer_config,
    make_schedule,
    recorded,
)
from tests.jepsen.txn_checker import (
    Read,
    Reader,
    Txn,
    TxnOutcome,
    TxnReport,
    Write,
    check,
    check_copy,
)

PRODUCERS = 2
#: The consume-transform-produce copier's consumer group (one per trial: a cluster per trial).
COPIER_GROUP = "copier"
TOPICS = ("a", "b")
PARTITIONS_PER_TOPIC = 2
STATE_PARTITIONS = 3
TXN_TARGETS = ("coordinator", "mid_commit", "before_end", "leader", "controller", "random")
#: Seconds a producer's transactional call may take before it counts as timed out.
CALL_TIMEOUT = 10.0
#: Seconds in ``send_offsets_to_transaction`` after which the copier is not waited for: past
#: its timeout by this much it is librdkafka's endless wait (:class:`_Copier`), not a slow call.
COPIER_STUCK_AFTER = 2 * CALL_TIMEOUT
#: Broker settings: few ``__transaction_state`` partitions (fast loads), timed-out transactions
#: aborted within a second of their timeout.
TXN_PROPERTIES = {
    "transaction.state.log.num.partitions": str(STATE_PARTITIONS),
    "transaction.state.log.replication.factor": "3",
    "transaction.state.log.min.isr": "2",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000",
}
#: The producers' ``transaction.timeout.ms``: a transaction left open by a dropped producer is
#: aborted by its coordinator after this, bounding the wait for the last stable offset.
TXN_TIMEOUT_MS = 10_000


def make_txn_schedule(seed: int, duration: float, faults: tuple[str, ...]) -> list[Step]:
    """The queue workload's schedule (faults, times, holds) with targets drawn from
    :data:`TXN_TARGETS`: a pure function of the seed."""
    rng = random.Random(f"txn-targets-{seed}")
    return [
        dataclasses.replace(step, target=rng.choice(TXN_TARGETS))
        for step in make_schedule(seed, duration, faults=faults)
    ]


@dataclass
class TxnTrialResult:
    config: TrialConfig
    schedule: list[Step]
    played: list[dict[str, Any]] = field(default_factory=list)
    summary: dict[str, int] = field(default_factory=dict)
    replica_mismatch: list[str] = field(default_factory=list)
    producer_errors: dict[str, int] = field(default_factory=dict)
    #: Producer instances dropped after a fatal error and replaced (re-initialised).
    reinits: int = 0
    #: ``mid_commit`` / ``before_end`` steps whose point a producer reached (the fault then hit
    #: a commit in flight / a transaction between its records and its EndTxn).
    hooked: dict[str, int] = field(default_factory=dict)
    #: (point, seconds) of those transactions' ``commit_transaction`` calls: a commit that
    #: took seconds waited for the fault (a coordinator elected again, say).
    hooked_commits: list[tuple[str, float]] = field(default_factory=list)
    #: The copier's transactions by outcome (committed / aborted / unknown).
    copier: dict[str, int] = field(default_factory=dict)
    #: Where the copier was stuck, with librdkafka's last ``eos`` debug lines, when it did not
    #: finish (the copy is then not judged).
    copier_stuck: str = ""
    error: str = ""
    seconds: float = 0.0
    report: TxnReport | None = None

    @property
    def valid(self) -> bool:
        return (
            not self.error and not self.replica_mismatch and bool(self.report and self.report.valid)
        )

    def record(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "workload": "txn",
            "config": asdict(self.config),
            "valid": self.valid,
            "summary": self.summary,
            "schedule": [asdict(s) for s in self.schedule],
            "played": self.played,
            "replica_mismatch": self.replica_mismatch,
            "producer_errors": self.producer_errors,
            "reinits": self.reinits,
            "hooked": self.hooked,
            "hooked_commits": self.hooked_commits,
            "copier": self.copier,
            "copier_stuck": self.copier_stuck,
            "seconds": round(self.seconds, 1),
            "error": self.error,
        }
        if self.report is not None and not self.report.valid:
            r = self.report
            out["evidence"] = {
                "g1a": r.g1a[:20],
                "g1b": r.g1b[:20],
                "non_atomic": r.non_atomic[:20],
                "lost": r.lost[:20],
                "duplicate": dict(list(r.duplicate.items())[:20]),
                "inconsistent_offsets": {
                    f"{p}@{o}": v for (p, o), v in list(r.inconsistent_offsets.items())[:20]
                },
                "nonmonotonic": r.nonmonotonic[:20],
                "committed_not_uncommitted": r.committed_not_uncommitted[:20],
                **{
                    k: getattr(r, k)[:20]
                    for k in ("copy_duplicate", "copy_missing", "copy_ahead", "copy_foreign")
                },
            }
        return out


class _Hooks:
    """Where the nemesis meets the producers: it *arms* a point (``mid_commit``,
    ``before_end``), the first producer to reach it claims it and reports which transaction;
    at ``before_end`` that producer waits (bounded) until the fault is applied."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._armed: str | None = None
        self.reached = threading.Event()
        self.applied = threading.Event()
        self.producer = 0
        self.partitions: list[str] = []
        #: Steps of the schedule aimed at a point and not yet resolved.
        self.waiting = 0

    def arm(self, point: str) -> None:
        with self._lock:
            self.reached.clear()
            self.applied.clear()
            self._armed = point

    @property
    def pending(self) -> bool:
        """A fault is armed or still to be (the nemesis counts its steps in ``waiting``)."""
        return self._armed is not None or self.waiting > 0

    def disarm(self) -> None:
        with self._lock:
            self._armed = None

    def point(self, point: str, producer: int, partitions: list[str]) -> bool:
        """A producer is at ``point``: answers whether it claimed the armed fault."""
        with self._lock:
            if self._armed != point:
                return False
            self._armed = None
            self.producer, self.partitions = producer, partitions
            self.reached.set()
        if point == "before_end":
            self.applied.wait(CALL_TIMEOUT)
        return True


class _SignallingCluster(FaultCluster):
    """A :class:`FaultCluster` that tells the hooks when a fault has been applied."""

    hooks: _Hooks

    def apply(self, fault: str, broker_id: int) -> None:
        super().apply(fault, broker_id)
        self.hooks.applied.set()


class _TxnNemesis(_Nemesis):
    """The fault-suite nemesis, resolving the transactional targets (module docstring)."""

    def __init__(
        self, cluster: _SignallingCluster, topics: list[str], steps: list[Step], t0: float,
        end: float, txn_ids: list[str],
    ) -> None:  # fmt: skip
        super().__init__(cluster, topics[0], steps, t0)
        self.topics, self.end, self.txn_ids = topics, end, txn_ids
        self.hooks = cluster.hooks
        self.hooked = dict.fromkeys(("mid_commit", "before_end"), 0)
        self.hooks.waiting = sum(1 for s in steps if s.target in self.hooked)

    def _coordinator(self, producer: int) -> int:
        partition = partition_for(self.txn_ids[producer], STATE_PARTITIONS)
        return self._leader("__transaction_state", partition)

    def _leader(self, topic: str, partition: int) -> int:
        try:
            return int(self.cluster.partitions(topic)[partition].leader_id)
        except (OSError, ConnectionError, TimeoutError, RuntimeError, KeyError):
            return -1

    def _resolve(self, step: Step) -> int:
        broker = -1
        if step.target == "coordinator":
            broker = self._coordinator(step.partition % len(self.txn_ids))
        elif step.target == "leader":
            topic, partition = _split(_partition_names(self.topics)[step.partition % 4])
            broker = self._leader(topic, partition)
        elif step.target in ("mid_commit", "before_end"):
            coordinators = [self._coordinator(p) for p in range(len(self.txn_ids))]
            self.hooks.arm(step.target)
            reached = self.hooks.reached.wait(max(0.0, self.end + CALL_TIMEOUT - time.monotonic()))
            self.hooks.disarm()
            self.hooks.waiting -= 1
            self.hooked[step.target] += reached
            if reached and step.target == "mid_commit":
                broker = coordinators[self.hooks.producer]
            elif reached:
                names = self.hooks.partitions
                broker = self._leader(*_split(names[step.partition % len(names)]))
        else:
            return super()._resolve(step)
        return broker if broker > 0 else step.broker


def _partition_names(topics: list[str]) -> list[str]:
    return [f"{t}-{p}" for t in topics for p in range(PARTITIONS_PER_TOPIC)]


def _split(name: str) -> tuple[str, int]:
    topic, _, partition = name.rpartition("-")
    return topic, int(partition)


class _TxnProducer(threading.Thread):
    """One transactional id's transactions until ``end`` (module docstring, step 2)."""

    def __init__(
        self, index: int, config: TrialConfig, bootstrap: str, topics: list[str], end: float,
        hooks: _Hooks,
    ) -> None:  # fmt: skip
        super().__init__(name=f"txn-producer-{index}", daemon=True)
        self.index, self.config, self.topics, self.end, self.hooks = (
            index, config, topics, end, hooks,
        )  # fmt: skip
        self.txn_id = f"jepsen-txn-{config.seed}-{index}"
        self.conf = {
            **_producer_config(config, bootstrap),
            "acks": "all",
            "enable.idempotence": True,
            "transactional.id": self.txn_id,
            "transaction.timeout.ms": TXN_TIMEOUT_MS,
            "message.timeout.ms": TXN_TIMEOUT_MS,
        }
        self.rng = random.Random(f"{config.seed}-{index}")
        self.txns: list[Txn] = []
        self.errors: dict[str, int] = {}
        self.reinits = 0
        #: (point, seconds its commit_transaction took) of the transactions a fault was aimed at.
        self.hooked_commits: list[tuple[str, float]] = []
        self.error: BaseException | None = None
        self.halted = threading.Event()
        self.producer: Any = None  # the instance in use

    def _count(self, exc: BaseException) -> Any:
        from confluent_kafka import KafkaException

        err = exc.args[0] if isinstance(exc, KafkaException) else None
        name = err.name() if err is not None else type(exc).__name__
        self.errors[name] = self.errors.get(name, 0) + 1
        return err

    def run(self) -> None:
        try:
            self._run()
        except BaseException as exc:  # reported by the trial
            self.error = exc

    def _run(self) -> None:
        from confluent_kafka import KafkaException, Producer

        producer: Any = None
        while not self.halted.is_set() and self._going_on():
            if producer is None:
                producer = Producer(self.conf)
                try:
                    producer.init_transactions(CALL_TIMEOUT)
                except KafkaException as exc:
                    err = self._count(exc)
                    if err.fatal() or not err.retriable():
                        producer = self._drop(producer)
                    else:
                        producer = self._init_again(producer)
                    continue
            self.producer = producer
            producer = self._transaction(producer)
        if producer is not None:
            producer.flush(1)

    def _going_on(self) -> bool:
        """Until the end of the workload, and (bounded) past it while a fault is still to meet a
        producer at its point: a broker restart that is slow under load (the schedule's clock
        runs late) does not make the nemesis miss its transaction."""
        now = time.monotonic()
        return now < self.end or (self.hooks.pending and now < self.end + 2 * CALL_TIMEOUT)

    def _transaction(self, producer: Any) -> Any:
        """One transaction of the seed's drawing; answers the producer to go on with (None:
        dropped)."""
        from confluent_kafka import KafkaException

        names = _partition_names(self.topics)
        n = len(self.txns)
        chosen = sorted(self.rng.sample(names, self.rng.randint(2, len(names))))
        plan = [p for p in chosen for _ in range(self.rng.randint(1, 3))]
        commit = self.rng.random() < 0.75
        tid = f"{self.index}:{n}"
        writes = tuple(
            Write(p, f"{self.config.seed}:{tid}:{i}/{len(plan)}") for i, p in enumerate(plan)
        )
        outcome: TxnOutcome = "aborted"
        try:
            producer.begin_transaction()
            for w in writes:
                topic, partition = _split(w.partition)
                producer.produce(topic, w.value.encode(), partition=partition)
            # The records written (an abort would otherwise purge those still queued, and
            # leave the aborted-read check nothing to find): between them and EndTxn.
            producer.flush(CALL_TIMEOUT)
            if commit:
                hooked = [
                    point
                    for point in ("before_end", "mid_commit")
                    if self.hooks.point(point, self.index, sorted(set(plan)))
                ]
                outcome = "unknown"
                asked = time.monotonic()
                try:
                    producer.commit_transaction(CALL_TIMEOUT)
                    outcome = "committed"
                finally:
                    for point in hooked:
                        self.hooked_commits.append((point, round(time.monotonic() - asked, 3)))
            else:
                producer.abort_transaction(CALL_TIMEOUT)
        except KafkaException as exc:
            outcome, producer = self._recover(exc, producer, outcome)
        self.txns.append(Txn(tid, outcome, writes))
        return producer

    def _recover(
        self, exc: BaseException, producer: Any, outcome: TxnOutcome
    ) -> tuple[TxnOutcome, Any]:
        """librdkafka's error handling for a failed transactional call; the outcome stays
        ``unknown`` once a commit was asked for unless a retried commit succeeds."""
        from confluent_kafka import KafkaException

        err = self._count(exc)
        for _ in range(3):
            if err.fatal():
                return outcome, self._drop(producer)
            try:
                if err.txn_requires_abort():
                    producer.abort_transaction(CALL_TIMEOUT)
                    return outcome, producer
                if err.retriable() and outcome == "unknown":
                    producer.commit_transaction(CALL_TIMEOUT)
                    return "committed", producer
                if err.retriable():
                    producer.abort_transaction(CALL_TIMEOUT)
                    return outcome, producer
                return outcome, self._drop(producer)
            except KafkaException as again:
                err = self._count(again)
        return outcome, self._drop(producer)

    def _init_again(self, producer: Any) -> Any:
        from confluent_kafka import KafkaException

        while time.monotonic() < self.end:
            try:
                producer.init_transactions(CALL_TIMEOUT)
                return producer
            except KafkaException as exc:
                err = self._count(exc)
                if err.fatal() or not err.retriable():
                    break
        return self._drop(producer)

    def _drop(self, producer: Any) -> Any:
        """Forget a producer instance (its open transaction, if any, is aborted by the next
        instance's InitProducerId or by the coordinator's timeout): answers the none left."""
        self.reinits += 1
        del producer
        return None


class _DequeHandler(logging.Handler):
    def __init__(self, lines: collections.deque[str]) -> None:
        super().__init__()
        self.lines = lines

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(f"{record.created:.3f} {record.getMessage()}")


class _Copier(_TxnProducer):
    """Consume-transform-produce: reads the first topic with ``read_committed`` (group
    :data:`COPIER_GROUP`, assigned partitions), copies each value to the same partition of the
    output topic and commits its offsets in the same transaction (``send_offsets_to_transaction``).
    After an abort it goes back to its last committed offsets; after a commit of unknown outcome
    it asks the group for them (KIP-447's stable offsets) before going on.

    **librdkafka's endless ``send_offsets_to_transaction``** (the trial's ``copier_stuck``, ~7 %
    of trials): a client bug, confluentinc/librdkafka #5511 compounded by #5456, not a broker
    answer. Seen with librdkafka 2.16.0, ``debug=eos,broker,protocol`` and every group and
    transaction request our brokers answered logged (seed 26155, ``--duration 6 --faults kill``:
    broker 1, the group's coordinator, killed at 1.1 s and back at 3.1 s; broker 2 killed at
    3.4 s and back at 6.2 s):

    1. AddOffsetsToTxn to the transaction coordinator (broker 3): NOT_COORDINATOR after 1.7 s --
       the controller took dead broker 1 out of the ``__transaction_state`` partition's ISR,
       which bumps its leader epoch, so the coordinator reloaded it mid-append (Kafka's
       ``newLeaderAndIsr`` bumps it likewise and its ``appendTransactionToLog`` answers
       NOT_COORDINATOR on a changed coordinator epoch); retried: NO_ERROR.
    2. TxnOffsetCommit to the cached group coordinator, broker 1 just restarted: NOT_COORDINATOR
       on every partition (it no longer leads the group's ``__consumer_offsets`` partition;
       Kafka's ``validateGroupStatus`` answers the same). librdkafka evicts it and looks again.
    3. FindCoordinator(GROUP) at +0.5 s and +1.6 s: broker 2 -- killed 0.4 s before, but still
       registered until its ZooKeeper session expires (Kafka's ``getCoordinator`` answers the
       same leader while the broker is alive in its metadata cache). librdkafka caches broker 2
       and waits for a connection to it (``COORD ... Coordinator connection is still down:
       querying for new coordinator``).
    4. Once broker 2's session expired, our Metadata (like Kafka's: alive brokers only) left it
       out and librdkafka *decommissioned* that broker handle (``Decommissioning this broker``),
       since f7c42733 (v2.10). The coordinator cache and the pending coordinator request still
       hold the old handle, whose thread then sits in INIT without ever changing state
       (``Broker handle is terminating (after 108260ms in state INIT)``). Broker 2 came back
       1.3 s later as a new handle (``Added new broker with NodeId 2``), never connected.
    5. ``rd_kafka_coord_req_fsm`` (``rdkafka_coord.c``) runs again only on a broker state change
       to or from UP, and nothing enforces ``creq_ts_timeout`` (#5456), so for 108 s no
       FindCoordinator and no TxnOffsetCommit were sent, well past the call's 10 s timeout; at
       the trial's end a broker's connection closed, the FSM ran, and the request went out at
       once (FindCoordinator, then TxnOffsetCommit: INVALID_PRODUCER_EPOCH, the transaction
       having been aborted by its timeout meanwhile).

    Every answer in the sequence is the one Apache Kafka 3.9 gives in the same state, so the
    trial is kept (its transactions judged), the copy is not judged, and the copier is no longer
    waited for once :data:`COPIER_STUCK_AFTER` seconds in the call (:meth:`stuck`)."""

    def __init__(
        self, config: TrialConfig, bootstrap: str, source: str, output: str, end: float
    ) -> None:
        super().__init__(PRODUCERS, config, bootstrap, [source], end, _Hooks())
        self.name = "txn-copier"
        self.source, self.output, self.bootstrap = source, output, bootstrap
        self.txn_id = self.conf["transactional.id"] = f"jepsen-txn-{config.seed}-copier"
        self.positions = dict.fromkeys(range(PARTITIONS_PER_TOPIC), 0)
        self.rewind = False
        self.outcomes: dict[str, int] = {}
        self.consumer: Any = None
        #: When the copier entered ``send_offsets_to_transaction`` (``time.monotonic()``); None
        #: outside it.
        self.sending_offsets_since: float | None = None
        #: librdkafka's last transaction-manager debug lines (``debug=eos``), served by
        #: :meth:`debug_tail` when the copier is stuck inside a call.
        self.debug: collections.deque[str] = collections.deque(maxlen=80)
        logger = logging.getLogger(f"jepsen.copier.{config.seed}")
        logger.propagate = False
        logger.setLevel(logging.DEBUG)
        logger.handlers = [_DequeHandler(self.debug)]
        self.conf.update({"debug": "eos", "logger": logger})

    def stuck(self) -> bool:
        """In ``send_offsets_to_transaction`` for over :data:`COPIER_STUCK_AFTER` seconds: the
        endless wait of the class docstring (librdkafka bounds the call by its timeout else)."""
        since = self.sending_offsets_since
        return since is not None and time.monotonic() - since > COPIER_STUCK_AFTER

    def debug_tail(self) -> list[str]:
        """Serve the queued log lines from this thread (the copier's own is blocked)."""
        with contextlib.suppress(Exception):
            if self.producer is not None:
                self.producer.poll(0)
        return list(self.debug)

    def _run(self) -> None:
        from confluent_kafka import Consumer

        self.consumer = Consumer(_consumer_config(self.bootstrap, "read_committed", COPIER_GROUP))
        try:
            self._assign()
            super()._run()
        finally:
            self.consumer.close()

    def _assign(self) -> None:
        from confluent_kafka import TopicPartition

        self.consumer.assign([TopicPartition(self.source, p, o) for p, o in self.positions.items()])

    def _transaction(self, producer: Any) -> Any:
        from confluent_kafka import KafkaException, TopicPartition

        if self.rewind and not self._rewind():
            return producer
        batch = []
        deadline = time.monotonic() + 0.3
        while len(batch) < 20 and time.monotonic() < deadline:
            msg = self.consumer.poll(0.05)
            if msg is not None and not msg.error():
                batch.append(msg)
        if not batch:
            return producer
        after = dict(self.positions)
        outcome: TxnOutcome = "aborted"
        try:
            producer.begin_transaction()
            for msg in batch:
                producer.produce(self.output, msg.value(), partition=msg.partition())
                after[msg.partition()] = msg.offset() + 1
            offsets = [TopicPartition(self.source, p, o) for p, o in after.items()]
            metadata = self.consumer.consumer_group_metadata()
            self.sending_offsets_since = time.monotonic()
            try:
                producer.send_offsets_to_transaction(offsets, metadata, CALL_TIMEOUT)
            finally:
                self.sending_offsets_since = None
            outcome = "unknown"
            producer.commit_transaction(CALL_TIMEOUT)
            outcome = "committed"
        except KafkaException as exc:
            outcome, producer = self._recover(exc, producer, outcome)
        self.outcomes[outcome] = self.outcomes.get(outcome, 0) + 1
        if outcome == "committed":
            self.positions = after
        elif outcome == "aborted":
            self._assign()  # read the batch again
        else:
            self.rewind = True
        return producer

    def _rewind(self) -> bool:
        """Go back to the group's committed offsets (a commit's outcome is unknown)."""
        from confluent_kafka import KafkaException, TopicPartition

        asked = [TopicPartition(self.source, p) for p in self.positions]
        try:
            committed = self.consumer.committed(asked, CALL_TIMEOUT)
        except KafkaException as exc:
            self._count(exc)
            return False
        self.positions = {tp.partition: max(tp.offset, 0) for tp in committed}
        self._assign()
        self.rewind = False
        return True


class _Reader(threading.Thread):
    """A ``read_committed`` consumer of every partition from offset 0 until stopped."""

    def __init__(self, bootstrap: str, topics: list[str]) -> None:
        super().__init__(name="txn-reader", daemon=True)
        self.bootstrap, self.topics = bootstrap, topics
        self.reads: list[Read] = []
        self.stop = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        from confluent_kafka import Consumer

        try:
            consumer = Consumer(_consumer_config(self.bootstrap, "read_committed", "concurrent"))
            try:
                consumer.assign(_assignment(self.topics))
                while not self.stop.is_set():
                    msg = consumer.poll(0.2)
                    if msg is not None and not msg.error():
                        self.reads.append(_read_of(msg))
            finally:
                consumer.close()
        except BaseException as exc:
            self.error = exc


def _consumer_config(bootstrap: str, isolation: str, name: str) -> dict[str, Any]:
    return {
        "bootstrap.servers": bootstrap,
        "group.id": f"jepsen-txn-{name}",
        "isolation.level": isolation,
        "enable.auto.commit": False,
        "enable.partition.eof": True,
        "auto.offset.reset": "earliest",
        "socket.timeout.ms": 5_000,
        "socket.connection.setup.timeout.ms": 2_000,
        "reconnect.backoff.max.ms": 500,
        "topic.metadata.refresh.interval.ms": 1_000,
        "log_level": 3,
    }


def _assignment(topics: list[str]) -> list[Any]:
    """Every partition of ``topics`` from offset 0."""
    from confluent_kafka import TopicPartition

    return [TopicPartition(t, p, 0) for t in topics for p in range(PARTITIONS_PER_TOPIC)]


def _read_of(msg: Any) -> Read:
    return Read(f"{msg.topic()}-{msg.partition()}", msg.offset(), msg.value().decode())


def _wait_stable(cluster: FaultCluster, topics: list[str], timeout: float = 60.0) -> dict[str, int]:
    """Wait (bounded) until every partition's last stable offset equals its high watermark --
    every transaction ended -- and answer those offsets."""
    from confluent_kafka import IsolationLevel, TopicPartition
    from confluent_kafka.admin import AdminClient, OffsetSpec

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers, "log_level": 3})
    partitions = [TopicPartition(t, p) for t in topics for p in range(PARTITIONS_PER_TOPIC)]
    ends: dict[str, int] = {}

    def offsets(level: Any) -> dict[str, int]:
        futures = admin.list_offsets(
            {tp: OffsetSpec.latest() for tp in partitions}, isolation_level=level, request_timeout=5
        )
        return {f"{tp.topic}-{tp.partition}": f.result(10).offset for tp, f in futures.items()}

    def stable() -> bool:
        try:
            committed = offsets(IsolationLevel.READ_COMMITTED)
            high = offsets(IsolationLevel.READ_UNCOMMITTED)
        except Exception:
            return False
        ends.update(high)
        return committed == high

    cluster.cluster.wait_for(stable, "every transaction ended (LSO == HW)", timeout)
    return ends


def _read_all(
    cluster: FaultCluster, topics: list[str], isolation: str, ends: dict[str, int],
    timeout: float = 60.0,
) -> list[Read]:  # fmt: skip
    """Every record ``isolation`` shows of every partition, from offset 0 to ``ends``."""
    config = _consumer_config(cluster.bootstrap_servers, isolation, f"final-{isolation}")
    partitions = [(t, p) for t in topics for p in range(PARTITIONS_PER_TOPIC)]
    until = {(t, p): ends[f"{t}-{p}"] for t, p in partitions}
    return [_read_of(msg) for msg in read_to_end(config, partitions, until, timeout)]


def _compare_replicas(cluster: FaultCluster, topics: list[str], result: TxnTrialResult) -> None:
    for name in _partition_names(topics):
        topic, p = _split(name)
        try:
            cluster.cluster.wait_for(
                lambda: len({cluster.log_bytes(b, topic, p) for b in cluster.ids}) == 1,  # noqa: B023
                f"{name} replicas identical", 20.0,
            )  # fmt: skip
        except TimeoutError:
            result.replica_mismatch.append(name)


def _create_topics(cluster: FaultCluster, topics: list[str]) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    futures = admin.create_topics([
        NewTopic(t, PARTITIONS_PER_TOPIC, 3, config=SAFE_TOPIC_CONFIG) for t in topics
    ])  # fmt: skip
    for t in topics:
        futures[t].result(30)
        cluster.wait_fully_replicated(t)


def run_txn_trial(zookeeper: ZooKeeperServer, config: TrialConfig) -> TxnTrialResult:
    """One trial (module docstring); never raises for what it finds, only records it."""
    schedule = make_txn_schedule(config.seed, config.duration, config.faults)
    result = TxnTrialResult(config, schedule)
    topics = [f"jepsen-txn-{config.seed}-{t}" for t in TOPICS]
    output = f"jepsen-txn-{config.seed}-copy"
    with recorded(result):
        cluster = _SignallingCluster(zookeeper, properties=TXN_PROPERTIES)
        cluster.hooks = _Hooks()
        with cluster:
            _create_topics(cluster, [*topics, output])
            txns, readers = _run_workload(config, cluster, topics, output, result)
            for t in [*topics, output]:
                cluster.wait_fully_replicated(t)
            ends = _wait_stable(cluster, [*topics, output])
            mine = {k: v for k, v in ends.items() if _split(k)[0] in topics}
            final = _read_all(cluster, topics, "read_committed", mine)
            readers.append(Reader("read_committed", True, final, "final-rc"))
            uncommitted = _read_all(cluster, topics, "read_uncommitted", mine)
            readers.append(Reader("read_uncommitted", True, uncommitted, "final-ru"))
            copies = {k: v for k, v in ends.items() if _split(k)[0] == output}
            copied = _read_all(cluster, [output], "read_committed", copies)
            committed = _group_offsets(cluster, topics[0])
            _compare_replicas(cluster, [*topics, output], result)
        result.report = check(txns, readers)
        source = [r for r in final if _split(r.partition)[0] == topics[0]]
        partition_of = {f"{output}-{p}": f"{topics[0]}-{p}" for p in range(PARTITIONS_PER_TOPIC)}
        if not result.copier_stuck:
            check_copy(result.report, source, copied, committed, partition_of)
        result.summary = result.report.summary()
    return result


def _group_offsets(cluster: FaultCluster, source: str, timeout: float = 60.0) -> dict[str, int]:
    """The copier group's committed offsets (stable: KIP-447), partition name -> offset."""
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    consumer = Consumer(_consumer_config(cluster.bootstrap_servers, "read_committed", COPIER_GROUP))
    found: dict[str, int] = {}

    def fetched() -> bool:
        asked = [TopicPartition(source, p) for p in range(PARTITIONS_PER_TOPIC)]
        try:
            committed = consumer.committed(asked, 10)
        except KafkaException:
            return False
        found.update({f"{tp.topic}-{tp.partition}": max(tp.offset, 0) for tp in committed})
        return True

    try:
        cluster.cluster.wait_for(fetched, "the copier group's committed offsets", timeout)
    finally:
        consumer.close()
    return found


def _run_workload(
    config: TrialConfig,
    cluster: _SignallingCluster,
    topics: list[str],
    output: str,
    result: TxnTrialResult,
) -> tuple[list[Txn], list[Reader]]:
    """Steps 2-4 of the module docstring, then heal."""
    t0 = time.monotonic()
    end = t0 + config.duration
    bootstrap = cluster.bootstrap_servers
    producers = [
        _TxnProducer(i, config, bootstrap, topics, end, cluster.hooks) for i in range(PRODUCERS)
    ]
    copier = _Copier(config, bootstrap, topics[0], output, end)
    workers = [*producers, copier]
    reader = _Reader(bootstrap, topics)
    nemesis = _TxnNemesis(cluster, topics, result.schedule, t0, end, [w.txn_id for w in workers])
    threads: list[threading.Thread] = [reader, *workers, nemesis]
    for thread in threads:
        thread.start()
    try:
        for w in workers:
            # A transaction's calls are bounded by CALL_TIMEOUT each, its recovery by 4 of them;
            # the copier's send_offsets_to_transaction is not always (_Copier).
            _join(w, config.duration + 10 * CALL_TIMEOUT, copier.stuck if w is copier else None)
    except BaseException:
        nemesis.halted.set()
        for w in workers:
            w.halted.set()
        raise
    finally:
        nemesis.join(60)
        result.played = nemesis.played
        result.hooked = nemesis.hooked
        reader.stop.set()
        reader.join(30)
    cluster.heal()
    for thread, error in [(nemesis, nemesis.error), (reader, reader.error)] + [
        (w, w.error) for w in workers
    ]:
        if error is not None:
            raise RuntimeError(f"{thread.name} failed") from error
        if thread.is_alive():
            frame = sys._current_frames().get(thread.ident or 0)
            where = "".join(traceback.format_stack(frame)[-4:]) if frame else "?"
            if thread is copier:
                # Stuck inside librdkafka (send_offsets_to_transaction past its timeout: _Copier):
                # the copy is not judged; the transactions are. Reported with librdkafka's log.
                copier.halted.set()  # no new transaction if the call ever returns
                result.copier_stuck = "\n".join([where, *copier.debug_tail()])
                continue
            raise TimeoutError(f"{thread.name} did not finish; it is at:\n{where}")
    for w in workers:
        for name, count in w.errors.items():
            result.producer_errors[name] = result.producer_errors.get(name, 0) + count
        result.reinits += w.reinits
        result.hooked_commits.extend(w.hooked_commits)
    result.copier = copier.outcomes
    txns = [t for p in producers for t in p.txns]
    return txns, [Reader("read_committed", False, reader.reads, "concurrent-rc")]


def _join(worker: threading.Thread, timeout: float, stuck: Callable[[], bool] | None) -> None:
    """Wait for ``worker`` to end, bounded by ``timeout`` -- and, given ``stuck``, no longer
    once it answers True."""
    deadline = time.monotonic() + timeout
    while worker.is_alive() and not (stuck is not None and stuck()):
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return
        worker.join(remaining if stuck is None else min(remaining, 0.5))


# --- many trials ------------------------------------------------------------------------------


def aggregate_txn(results: list[TxnTrialResult]) -> dict[str, Any]:
    totals: dict[str, int] = {}
    for r in results:
        for k, v in r.summary.items():
            totals[k] = totals.get(k, 0) + v
    played = [p for r in results for p in r.played]
    return {
        "workload": "txn",
        "trials": len(results),
        "invalid": [r.config.seed for r in results if not r.valid],
        "errors": [r.config.seed for r in results if r.error],
        "replica_mismatch_trials": sum(1 for r in results if r.replica_mismatch),
        "copier_stuck_trials": [r.config.seed for r in results if r.copier_stuck],
        **totals,
        "reinits": sum(r.reinits for r in results),
        "copier": {
            k: sum(r.copier.get(k, 0) for r in results) for k in ("committed", "aborted", "unknown")
        },
        "hooked": {
            k: sum(r.hooked.get(k, 0) for r in results) for k in ("mid_commit", "before_end")
        },
        #: Hooked commits that took over a second: the fault caught them in flight.
        "hooked_commits_over_1s": {
            k: sum(1 for r in results for p, t in r.hooked_commits if p == k and t > 1.0)
            for k in ("mid_commit", "before_end")
        },
        "faults": len(played),
        "faults_by_target": {t: sum(1 for p in played if p["target"] == t) for t in TXN_TARGETS},
        "seconds": round(sum(r.seconds for r in results), 1),
    }


def format_txn_line(result: TxnTrialResult) -> str:
    if result.error:
        return f"seed {result.config.seed}: ERROR {result.error.strip().splitlines()[-1]}"
    s = result.summary
    played = " ".join(f"{p['fault']}:{p['target']}@{p['broker']}" for p in result.played)
    return (
        f"seed {result.config.seed}: {'ok' if result.valid else 'INVALID'} "
        f"committed={s.get('committed', 0)} aborted={s.get('aborted', 0)} "
        f"unknown={s.get('unknown', 0)} (whole={s.get('unknown_committed', 0)}) "
        f"g1a={s.get('g1a', 0)} g1b={s.get('g1b', 0)} non_atomic={s.get('non_atomic', 0)} "
        f"lost={s.get('lost', 0)} copied={s.get('copied', 0)} (commits="
        f"{result.copier.get('committed', 0)} dup={s.get('copy_duplicate', 0)} "
        f"missing={s.get('copy_missing', 0)} ahead={s.get('copy_ahead', 0)} "
        f"foreign={s.get('copy_foreign', 0)}{' STUCK' if result.copier_stuck else ''}) "
        f"mismatch={result.replica_mismatch} "
        f"[{played}] {result.seconds:.0f}s"
    )


def dumps_txn(result: TxnTrialResult) -> str:
    return json.dumps(result.record(), sort_keys=True)
