"""Random-fault trials: a seeded schedule of faults against a producing cluster, then a check.

One trial (:func:`run_trial`) is Jepsen's queue workload on a :class:`FaultCluster`:

1. a topic of 3 partitions, RF 3, min ISR 2, unclean election off;
2. a confluent-kafka producer (``acks`` and ``enable.idempotence`` as configured) sends unique
   values at a steady pace for ``duration`` seconds, every send recorded ok (with the partition
   and offset of its delivery report) or unknown (any error: librdkafka does not tell a
   definitely-failed send from a possibly-written one);
3. meanwhile a nemesis thread plays the schedule (:func:`make_schedule`, a pure function of the
   seed): one fault at a time on one broker -- the leader of a partition, the controller or a
   broker chosen by the seed -- held for a while and undone;
4. then everything is healed, the producer flushed (every send resolves within
   ``message.timeout.ms``), the cluster waited on until every partition has its full ISR, every
   partition read from offset 0 to its high watermark with a confluent-kafka consumer, and the
   three replicas of each partition compared byte for byte;
5. :func:`tests.jepsen.checker.check` judges the history.

The schedule's targets are resolved when a step runs (who leads then), so a replay with the same
seed plays the same faults in the same order against the same roles; the resolved broker ids are
in the trial's record. Every wait is bounded; every broker is stopped by its PID.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import random
import statistics
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any, TypeVar

from sluice.protocol.records import BatchHeader, iter_batches
from sluice.testing.zookeeper import ZooKeeperServer
from tests.broker_util import read_to_end
from tests.jepsen.checker import Observation, Report, Send, check
from tests.jepsen.harness import SAFE_TOPIC_CONFIG, FaultCluster

T = TypeVar("T")

FAULTS = ("kill", "pause", "isolate", "isolate_zk", "reset", "lose_unflushed")
TARGETS = ("leader", "controller", "random")
PARTITIONS = 3
#: A partition that acknowledged nothing for longer than this while values were being sent to it
#: is counted as an unavailability window.
GAP = 0.5


@dataclass(frozen=True)
class Step:
    at: float  # seconds after the workload starts
    fault: str
    target: str  # "leader" (of ``partition``), "controller" or "random" (then ``broker``)
    hold: float  # seconds before it is undone
    partition: int = 0
    broker: int = 0


@dataclass
class TrialConfig:
    seed: int
    acks: str = "all"
    idempotence: bool = True
    duration: float = 10.0
    interval: float = 0.002  # seconds between sends
    #: The fault kinds drawn from (all of :data:`FAULTS` by default; ``--faults``).
    faults: tuple[str, ...] = FAULTS
    #: ``plaintext`` or ``sasl_ssl`` (every proxied link; ``--security``).
    security: str = "plaintext"


@dataclass
class TrialResult:
    config: TrialConfig
    schedule: list[Step]
    played: list[dict[str, Any]] = field(default_factory=list)
    summary: dict[str, int] = field(default_factory=dict)
    windows: list[float] = field(default_factory=list)
    replica_mismatch: list[int] = field(default_factory=list)
    epoch_cache_mismatch: list[int] = field(default_factory=list)
    #: Duplicates whose copies carry one producer id, epoch and sequence: the broker wrote one
    #: sequence twice (its idempotence failed).
    duplicate_rewritten: list[str] = field(default_factory=list)
    #: Duplicates whose copies carry different (producer id, epoch, sequence): the client sent
    #: the value again as new data (a retry without idempotence, or librdkafka re-sequencing
    #: possibly-persisted messages after an epoch bump; see :func:`_classify_duplicates`).
    duplicate_resent: list[str] = field(default_factory=list)
    producer_errors: dict[str, int] = field(default_factory=dict)
    #: librdkafka's fatal error, if the idempotent producer gave up (the trial goes on to heal
    #: and check what was acknowledged until then).
    producer_fatal: str = ""
    #: Partitions whose only in-sync replica lost its unflushed writes (``lose_unflushed``
    #: on the sole ISR member): KIP-966's "last replica standing" window, which ZooKeeper-mode
    #: Kafka has -- the replicas that left the ISR hold the acknowledged records, but only the
    #: one that lost them may lead with unclean election off. Sluice elects one of those
    #: eligible replicas instead (``sluice.server.controller.election``), so a loss there
    #: fails the trial like any other; these are reported to show the window was exercised.
    kip966_partitions: list[int] = field(default_factory=list)
    #: Acknowledged values lost in those partitions (also in ``lost``).
    lost_in_kip966_window: list[str] = field(default_factory=list)
    error: str = ""
    seconds: float = 0.0
    report: Report | None = None

    @property
    def valid(self) -> bool:
        """The promise for this configuration held (acks=1 may lose; offsets never disagree)."""
        if self.error or self.report is None or self.replica_mismatch:
            return False
        r = self.report
        if r.inconsistent_offsets or r.nonmonotonic or r.g1a:
            return False
        if self.config.acks == "all" and r.lost:
            return False
        return not (self.config.idempotence and self.duplicate_rewritten)

    def record(self) -> dict[str, Any]:
        out = {
            "config": asdict(self.config),
            "valid": self.valid,
            "summary": self.summary,
            "windows": [round(w, 3) for w in self.windows],
            "replica_mismatch": self.replica_mismatch,
            "epoch_cache_mismatch": self.epoch_cache_mismatch,
            "duplicate_rewritten": len(self.duplicate_rewritten),
            "duplicate_resent": len(self.duplicate_resent),
            "producer_fatal": self.producer_fatal,
            "kip966_partitions": self.kip966_partitions,
            "lost_in_kip966_window": len(self.lost_in_kip966_window),
            "producer_errors": self.producer_errors,
            "schedule": [asdict(s) for s in self.schedule],
            "played": self.played,
            "error": self.error,
            "seconds": round(self.seconds, 1),
        }
        if self.report is not None and not self.valid:
            r = self.report
            out["evidence"] = {
                "lost": r.lost[:20],
                "duplicate": dict(list(r.duplicate.items())[:20]),
                "inconsistent_offsets": {
                    f"{p}@{o}": v for (p, o), v in list(r.inconsistent_offsets.items())[:20]
                },
                "nonmonotonic": r.nonmonotonic[:20],
                "g1a": r.g1a[:20],
            }
        return out


def make_schedule(
    seed: int, duration: float, size: int = 3, faults: tuple[str, ...] = FAULTS
) -> list[Step]:
    """The faults of a trial: a pure function of the seed and the fault kinds (one fault at a
    time)."""
    rng = random.Random(seed)
    steps: list[Step] = []
    t = rng.uniform(0.5, 1.5)
    while t < duration - 1.0:
        fault = rng.choice(faults)
        hold = 0.0 if fault == "reset" else rng.uniform(0.5, 5.0)
        steps.append(Step(
            at=round(t, 3),
            fault=fault,
            target=rng.choice(TARGETS),
            hold=round(hold, 3),
            partition=rng.randrange(PARTITIONS),
            broker=rng.randint(1, size),
        ))  # fmt: skip
        t += hold + rng.uniform(0.5, 2.5)
    return steps


class _Nemesis(threading.Thread):
    """Plays a schedule against the cluster; records what it did and when."""

    def __init__(self, cluster: FaultCluster, topic: str, steps: list[Step], t0: float) -> None:
        super().__init__(name="nemesis", daemon=True)
        self.cluster, self.topic, self.steps, self.t0 = cluster, topic, steps, t0
        self.played: list[dict[str, Any]] = []
        self.error: BaseException | None = None
        #: Set when the trial is interrupted: no further fault starts, a held one ends now.
        self.halted = threading.Event()

    def run(self) -> None:
        try:
            for step in self.steps:
                delay = self.t0 + step.at - time.monotonic()
                # The schedule's own clock, not synchronisation.
                if self.halted.wait(max(delay, 0.0)):
                    return
                broker = self._resolve(step)
                sole = self._sole_isr(broker) if step.fault == "lose_unflushed" else []
                started = time.monotonic() - self.t0
                self.cluster.apply(step.fault, broker)
                if step.hold:
                    self.halted.wait(step.hold)
                self.cluster.undo(step.fault, broker)
                self.played.append({
                    "fault": step.fault, "target": step.target, "broker": broker,
                    "from": round(started, 3), "to": round(time.monotonic() - self.t0, 3),
                    **({"sole_isr": sole} if sole else {}),
                })  # fmt: skip
        except BaseException as exc:  # reported by the trial
            self.error = exc

    def _sole_isr(self, broker: int) -> list[int]:
        """Partitions ``broker`` leads with an ISR of itself alone, as its peers see it now."""
        try:
            states = self.cluster.partitions(self.topic)
        except (OSError, ConnectionError, TimeoutError, RuntimeError):
            return []
        return sorted(
            p for p, s in states.items() if s.leader_id == broker and list(s.isr_nodes) == [broker]
        )

    def _resolve(self, step: Step) -> int:
        if step.target == "random":
            return step.broker
        try:
            if step.target == "controller":
                meta = self.cluster.cluster.metadata(via=self.cluster._observer())
                if meta.controller_id > 0:
                    return int(meta.controller_id)
            else:
                leader = self.cluster.partitions(self.topic)[step.partition].leader_id
                if leader > 0:
                    return int(leader)
        except (OSError, ConnectionError, TimeoutError, RuntimeError, KeyError):
            pass
        return step.broker  # nobody leads right now: the seed's broker


def _producer_config(config: TrialConfig, bootstrap: str) -> dict[str, Any]:
    return {
        "bootstrap.servers": bootstrap,
        "acks": config.acks,
        "enable.idempotence": config.idempotence,
        # librdkafka's advice: a message timeout longer than any outage, so that in-flight
        # messages are retried under their own sequence rather than timed out (the epoch bump
        # that follows a timeout may send possibly-written messages again as new ones).
        "message.timeout.ms": 30_000,
        "request.timeout.ms": 4_000,
        # How long a request in flight may go unanswered (librdkafka's default 60 s; Produce
        # uses the lesser of it and the message's remaining timeout): a request lost in a
        # black-holed link is only noticed this way. Without it, every send caught in a 4 s
        # partition waited the full message.timeout.ms after the link came back, then failed.
        "socket.timeout.ms": 5_000,
        "retry.backoff.ms": 100,
        "linger.ms": 2,
        "topic.metadata.refresh.interval.ms": 1_000,
        "socket.connection.setup.timeout.ms": 2_000,
        "reconnect.backoff.max.ms": 500,
        "log_level": 3,  # errors only: disconnects are what the faults are for
    }


def _read(cluster: FaultCluster, topic: str, timeout: float = 60.0) -> list[Observation]:
    """Every record of every partition from offset 0 to its high watermark."""
    config = {**cluster.client_security, "bootstrap.servers": cluster.bootstrap_servers}
    partitions = [(topic, p) for p in range(PARTITIONS)]
    return [
        Observation(msg.partition(), msg.offset(), msg.value().decode())
        for msg in read_to_end(config, partitions, timeout=timeout)
    ]


def _compare_replicas(cluster: FaultCluster, topic: str, result: TrialResult) -> None:
    """Wait (bounded) for the replicas of each partition to hold identical bytes."""
    for p in range(PARTITIONS):
        try:
            cluster.cluster.wait_for(
                lambda p=p: len({cluster.log_bytes(b, topic, p) for b in cluster.ids}) == 1,
                f"{topic}-{p} replicas identical", 20.0,
            )  # fmt: skip
        except TimeoutError:
            result.replica_mismatch.append(p)
        caches = {
            _settled_epochs(cluster.epoch_checkpoint(b, topic, p), cluster.log_bytes(b, topic, p))
            for b in cluster.ids
        }
        if len(caches) != 1:
            result.epoch_cache_mismatch.append(p)


def _settled_epochs(checkpoint: str, log: bytes) -> tuple[tuple[int, int], ...]:
    """A replica's leader-epoch entries, less a last one that starts at its log end: a leader
    records its epoch when elected (KIP-279), followers only once a batch of it arrives, so
    after a fault the leader alone may hold an epoch with nothing written yet."""
    lines = checkpoint.split("\n")[2:]
    entries = [tuple(int(x) for x in line.split()) for line in lines if line.strip()]
    headers = _batches(log)
    end = headers[-1].base_offset + headers[-1].last_offset_delta + 1 if headers else 0
    if entries and entries[-1][1] == end:
        entries.pop()
    return tuple((e[0], e[1]) for e in entries)


def _batches(data: bytes) -> list[BatchHeader]:
    return [header for _, header, _ in iter_batches(data)]


def _classify_duplicates(
    report: Report, headers: dict[int, list[BatchHeader]], result: TrialResult
) -> None:
    """Tell the broker's duplicates from the client's, by the batches holding each copy.

    An idempotent producer's record is identified by (producer id, epoch, sequence). Two copies
    under one identity mean the broker accepted a sequence twice -- its bug. Copies under
    different identities were sent twice by the client: without idempotence any retry does
    that; with it, librdkafka does it when messages time out (``message.timeout.ms``) after an
    in-flight request failed as *possibly persisted*: it bumps the epoch, restarts the
    sequence at the first message still queued, and that may be one the broker already wrote
    (librdkafka's INTRODUCTION.md, "Message timeout considerations"; a broker cannot tell a
    new epoch's sequence 0 from new data, Kafka's neither)."""

    def identity(partition: int, offset: int) -> tuple[int, int, int] | None:
        for h in headers.get(partition, []):
            if h.base_offset <= offset <= h.base_offset + h.last_offset_delta:
                if h.producer_id < 0:
                    return None
                return (h.producer_id, h.producer_epoch, h.base_sequence + offset - h.base_offset)
        return None

    for value, positions in report.duplicate.items():
        ids = [identity(p, o) for p, o in positions]
        if None not in ids and len(set(ids)) < len(ids):
            result.duplicate_rewritten.append(value)
        else:
            result.duplicate_resent.append(value)


def _classify_losses(report: Report, history: list[Send], result: TrialResult) -> None:
    """Losses in a partition whose sole in-sync replica lost its unflushed writes (the
    nemesis notes such partitions in ``played[...]["sole_isr"]``) are KIP-966's window."""
    result.kip966_partitions = sorted({p for e in result.played for p in e.get("sole_isr", [])})
    acked_in = {s.value: s.partition for s in history if s.outcome == "ok"}
    result.lost_in_kip966_window = [
        v for v in report.lost if acked_in.get(v) in result.kip966_partitions
    ]


def _windows(acked_at: dict[int, list[float]], duration: float) -> list[float]:
    """Per partition, the stretches longer than :data:`GAP` with no acknowledgement, from the
    start of the workload to its end (values were being sent to every partition throughout)."""
    out: list[float] = []
    for times in acked_at.values():
        marks = [0.0, *sorted(t for t in times if t <= duration), duration]
        out.extend(b - a for a, b in itertools.pairwise(marks) if b - a > GAP)
    return out


@contextlib.contextmanager
def recorded(result: Any) -> Iterator[None]:
    """A trial's body: what it raises (but Ctrl-C) is recorded as the trial's ``error`` (the
    end of its traceback), never raised -- a trial records what it finds; its ``seconds`` are
    recorded either way."""
    started = time.monotonic()
    try:
        yield
    except BaseException as exc:
        if isinstance(exc, KeyboardInterrupt):
            raise
        result.error = "".join(traceback.format_exception(exc))[-3000:]
    finally:
        result.seconds = time.monotonic() - started


def with_nemesis(nemesis: _Nemesis, result: Any, work: Callable[[], T], join_s: float = 60.0) -> T:
    """``work()`` while ``nemesis`` (started here) plays its faults. Interrupted (Ctrl-C), the
    nemesis stops faulting before the cluster stops; what it played is added to
    ``result.played`` also when the trial fails (what led there); its own error is raised."""
    nemesis.start()
    try:
        out = work()
    except BaseException:
        nemesis.halted.set()
        raise
    finally:
        nemesis.join(join_s)
        result.played += nemesis.played
    if nemesis.error is not None:
        raise nemesis.error
    return out


def run_trial(zookeeper: ZooKeeperServer, config: TrialConfig) -> TrialResult:
    """One trial (module docstring); never raises for what it finds, only records it."""
    schedule = make_schedule(config.seed, config.duration, faults=config.faults)
    result = TrialResult(config, schedule)
    topic = f"jepsen-{config.seed}"
    with recorded(result):
        with FaultCluster(zookeeper, security=config.security) as cluster:
            _create_topic(cluster, topic)
            t0 = time.monotonic()
            nemesis = _Nemesis(cluster, topic, schedule, t0)
            history, acked_at = with_nemesis(nemesis, result, lambda: _produce_and_heal(
                config, cluster, topic, t0, nemesis, result
            ))  # fmt: skip
            cluster.wait_fully_replicated(topic)
            observations = _read(cluster, topic)
            _compare_replicas(cluster, topic, result)
            headers = {p: _batches(cluster.log_bytes(1, topic, p)) for p in range(PARTITIONS)}
        result.report = check(history, [observations])
        result.summary = result.report.summary()
        _classify_duplicates(result.report, headers, result)
        _classify_losses(result.report, history, result)
        result.windows = _windows(acked_at, config.duration)
    return result


def _produce_and_heal(
    config: TrialConfig,
    cluster: FaultCluster,
    topic: str,
    t0: float,
    nemesis: _Nemesis,
    result: TrialResult,
) -> tuple[list[Send], dict[int, list[float]]]:
    from confluent_kafka import KafkaError, KafkaException, Producer

    outcomes: dict[str, Send] = {}
    acked_at: dict[int, list[float]] = {p: [] for p in range(PARTITIONS)}
    errors: dict[str, int] = {}

    def delivered(err: KafkaError | None, msg: Any) -> None:
        value = msg.value().decode()
        if err is None:
            outcomes[value] = Send(value, "ok", msg.partition(), msg.offset())
            acked_at[msg.partition()].append(time.monotonic() - t0)
        else:
            outcomes[value] = Send(value, "unknown")
            errors[err.name()] = errors.get(err.name(), 0) + 1

    producer = Producer(
        {**cluster.client_security, **_producer_config(config, cluster.bootstrap_servers)}
    )
    sent: list[str] = []
    i = 0
    next_at = time.monotonic()
    end = t0 + config.duration

    def fatal(exc: BaseException) -> bool:
        """A fatal producer error (librdkafka's idempotence gave up): recorded, the producer
        is done; whatever it had not reported stays unknown. (Raised from a callback, it can
        surface as a SystemError chained to the KafkaException.)"""
        cause = exc if isinstance(exc, KafkaException) else exc.__cause__
        if not isinstance(cause, KafkaException) or not cause.args[0].fatal():
            return False
        result.producer_fatal = str(cause.args[0])
        return True

    try:
        while (now := time.monotonic()) < end:
            if now < next_at:
                producer.poll(next_at - now)  # serves delivery reports; may return early
                continue
            next_at += config.interval
            value = f"{config.seed}-{i}"
            try:
                # Explicit round robin: every partition sees a steady stream, so a gap in its
                # acknowledgements is a window without a writable leader.
                producer.produce(
                    topic, value.encode(), partition=i % PARTITIONS, on_delivery=delivered
                )
                sent.append(value)
                i += 1
            except BufferError:
                pass  # the local queue is full (a long outage): try again after polling
            except KafkaException as exc:
                if exc.args[0].fatal():
                    raise
                name = exc.args[0].name()
                errors[name] = errors.get(name, 0) + 1
            producer.poll(0)
    except (KafkaException, SystemError) as exc:
        if not fatal(exc):
            raise
    nemesis.join(60)  # let the last fault be undone on its own schedule
    cluster.heal()
    if not result.producer_fatal:
        try:
            producer.flush(60)  # message.timeout.ms bounds every send
        except (KafkaException, SystemError) as exc:
            if not fatal(exc):
                raise
    result.producer_errors = errors
    history = [outcomes.get(v, Send(v, "unknown")) for v in sent]
    return history, acked_at


def _create_topic(cluster: FaultCluster, topic: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({**cluster.client_security, "bootstrap.servers": cluster.bootstrap_servers})
    futures = admin.create_topics([NewTopic(topic, PARTITIONS, 3, config=SAFE_TOPIC_CONFIG)])
    futures[topic].result(30)
    cluster.wait_fully_replicated(topic)


# --- many trials ------------------------------------------------------------------------------


def percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def aggregate(results: list[TrialResult]) -> dict[str, Any]:
    totals: dict[str, int] = {}
    for r in results:
        for k, v in r.summary.items():
            totals[k] = totals.get(k, 0) + v
    windows = [w for r in results for w in r.windows]
    return {
        "trials": len(results),
        "invalid": [r.config.seed for r in results if not r.valid],
        "errors": [r.config.seed for r in results if r.error],
        "replica_mismatch_trials": sum(1 for r in results if r.replica_mismatch),
        "producer_fatal_trials": [r.config.seed for r in results if r.producer_fatal],
        "kip966_window_trials": [r.config.seed for r in results if r.kip966_partitions],
        "lost_in_kip966_window": sum(len(r.lost_in_kip966_window) for r in results),
        "duplicate_rewritten": sum(len(r.duplicate_rewritten) for r in results),
        "duplicate_resent": sum(len(r.duplicate_resent) for r in results),
        "epoch_cache_mismatch_trials": sum(1 for r in results if r.epoch_cache_mismatch),
        **totals,
        "faults": sum(len(r.played) for r in results),
        "windows": len(windows),
        "window_p50_s": round(statistics.median(windows), 2) if windows else 0.0,
        "window_p99_s": round(percentile(windows, 0.99), 2),
        "window_max_s": round(max(windows), 2) if windows else 0.0,
        "seconds": round(sum(r.seconds for r in results), 1),
    }


def format_line(result: TrialResult) -> str:
    s = result.summary
    verdict = "ok" if result.valid else "INVALID"
    played = " ".join(f"{p['fault']}@{p['broker']}" for p in result.played)
    if result.error:
        return f"seed {result.config.seed}: ERROR {result.error.strip().splitlines()[-1]}"
    return (
        f"seed {result.config.seed}: {verdict} acked={s.get('acknowledged', 0)} "
        f"unknown={s.get('unknown', 0)} lost={s.get('lost', 0)} dup={s.get('duplicate', 0)} "
        f"(rewritten={len(result.duplicate_rewritten)}) "
        f"{'kip966=' + str(result.kip966_partitions) + ' ' if result.kip966_partitions else ''}"
        f"{'FATAL ' if result.producer_fatal else ''}"
        f"inconsistent={s.get('inconsistent_offsets', 0)} mismatch={result.replica_mismatch} "
        f"[{played}] {result.seconds:.0f}s"
    )


def dumps(result: TrialResult) -> str:
    return json.dumps(result.record(), sort_keys=True)
