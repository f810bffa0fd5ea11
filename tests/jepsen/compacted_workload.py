"""The fault suite's keyed workload on a compacted topic (``python -m tests.jepsen --workload
compacted``), and its latest-per-key checker.

The queue workload (:mod:`tests.jepsen.runner`) checks that every acknowledged value is read; on a
compacted topic the cleaner removes superseded values by design, so the promise is about keys:

* a topic of 3 partitions, RF 3, min ISR 2, ``cleanup.policy=compact`` with segments of a few
  kilobytes rolled every 200 ms, ``min.cleanable.dirty.ratio`` 0.01, ``delete.retention.ms`` 500
  and the brokers' ``log.cleaner.backoff.ms`` 50: every replica cleans, on its own, many times
  a trial while the nemesis plays the same schedules as the queue workload;
* one idempotent confluent-kafka producer writes updates (a unique value) and, one send in
  :data:`TOMBSTONE_SHARE`, tombstones (a null value) to :data:`KEYS` keys, a key always to the
  same partition (``key index % 3``), every send recorded ok (with its offset) or unknown;
* after healing: every partition read from offset 0 to its high watermark, judged by
  :func:`check_latest` (below), and the replicas of each partition compared by their compacted
  view (:func:`compacted_view` of each replica's segment files): the latest non-tombstone record
  of every key, with its offset. Bytes are not compared: each replica cleans on its own schedule,
  so which superseded records and which tombstones remain differs between them (Kafka's
  replicas differ the same way).

The latest-per-key promise (:func:`check_latest`): for every key, let *A* be its acknowledged
send with the highest offset. The last record of the key in the read must be *A* itself (same
value, at A's offset) or a send of that key made after A whose outcome is unknown (it may have
been written); when that candidate is a tombstone, the key may also be absent (the cleaner drops
tombstones after ``delete.retention.ms``). A key with no acknowledged send may end with any of its
unknown sends, or be absent. Anything else is an anomaly, by kind:

* ``lost`` -- the key ends earlier than A (an older value, or absent while A is a value): an
  acknowledged write lost in a way that changes the latest;
* ``resurrected`` -- A (or the allowed later candidate) is a tombstone but the key ends with an
  older value: the delete was lost, or the tombstone dropped before the value it hid;
* ``phantom`` -- a record whose value was never sent, sent under another key, or definitely failed;
* ``inconsistent_offsets`` -- one offset read with two records, or an acknowledged value read at
  another offset than its acknowledgement's;
* ``duplicate`` -- one value read at two offsets;
* ``nonmonotonic`` -- a reader saw a partition's offsets go backwards or repeat (a compacted log
  has gaps; they must still strictly increase).
"""

from __future__ import annotations

import random
import time
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sluice.protocol.records import iter_batches, iter_records
from sluice.testing.zookeeper import ZooKeeperServer
from tests.broker_util import read_to_end
from tests.jepsen.checker import Outcome
from tests.jepsen.harness import SAFE_TOPIC_CONFIG, FaultCluster
from tests.jepsen.runner import (
    PARTITIONS,
    TrialConfig,
    TrialResult,
    _batches,
    _classify_duplicates,
    _Nemesis,
    _producer_config,
    _windows,
    make_schedule,
    recorded,
    with_nemesis,
)

KEYS = 60
TOMBSTONE_SHARE = 0.1

#: The topic: compacted, small segments rolled often, tombstones kept briefly.
COMPACTED_TOPIC_CONFIG = {
    **SAFE_TOPIC_CONFIG,
    "cleanup.policy": "compact",
    # Above the producer's batch.size (PRODUCER_OVERRIDES): a batch larger than a segment is
    # refused (RECORD_LIST_TOO_LARGE), as Kafka refuses it.
    "segment.bytes": "16384",
    "segment.ms": "200",
    "min.cleanable.dirty.ratio": "0.01",
    "min.compaction.lag.ms": "0",
    "delete.retention.ms": "500",
}

#: The producer: batches well under a segment.
PRODUCER_OVERRIDES = {"batch.size": 8192}

#: The brokers: a cleaner that looks for work every 50 ms.
COMPACTED_BROKER_PROPERTIES = {"log.cleaner.backoff.ms": "50"}


# --- the history and its judge (pure) ---------------------------------------------------------


@dataclass(frozen=True)
class KeyedSend:
    """One produce: ``value`` None is a tombstone. ``index`` orders the sends (one producer)."""

    index: int
    key: str
    value: str | None
    outcome: Outcome
    partition: int | None = None
    offset: int | None = None

    @property
    def name(self) -> str:
        return self.value if self.value is not None else f"tombstone#{self.index}({self.key})"


@dataclass(frozen=True)
class KeyedObservation:
    """One record a reader consumed (``value`` None: a tombstone)."""

    partition: int
    offset: int
    key: str
    value: str | None


@dataclass
class CompactedReport:
    acknowledged: int = 0
    failed: int = 0
    unknown: int = 0
    tombstones: int = 0
    read: int = 0
    keys_read: int = 0
    lost: dict[str, str] = field(default_factory=dict)
    resurrected: dict[str, str] = field(default_factory=dict)
    phantom: list[str] = field(default_factory=list)
    inconsistent_offsets: dict[tuple[int, int], list[str]] = field(default_factory=dict)
    duplicate: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    nonmonotonic: list[tuple[int, int, int, int]] = field(default_factory=list)
    #: Keys whose latest read is a send of unknown outcome made after the last acknowledged one.
    recovered: list[str] = field(default_factory=list)

    @property
    def valid(self) -> bool:
        return not (
            self.lost or self.resurrected or self.phantom or self.inconsistent_offsets
            or self.duplicate or self.nonmonotonic
        )  # fmt: skip

    def summary(self) -> dict[str, int]:
        return {
            "acknowledged": self.acknowledged,
            "failed": self.failed,
            "unknown": self.unknown,
            "tombstones": self.tombstones,
            "read": self.read,
            "keys_read": self.keys_read,
            "lost": len(self.lost),
            "resurrected": len(self.resurrected),
            "phantom": len(self.phantom),
            "inconsistent_offsets": len(self.inconsistent_offsets),
            "duplicate": len(self.duplicate),
            "nonmonotonic": len(self.nonmonotonic),
            "recovered": len(self.recovered),
        }

    def evidence(self) -> dict[str, Any]:
        return {
            "lost": dict(list(self.lost.items())[:20]),
            "resurrected": dict(list(self.resurrected.items())[:20]),
            "phantom": self.phantom[:20],
            "inconsistent_offsets": {
                f"{p}@{o}": v for (p, o), v in list(self.inconsistent_offsets.items())[:20]
            },
            "duplicate": dict(list(self.duplicate.items())[:20]),
            "nonmonotonic": self.nonmonotonic[:20],
        }


def check_latest(
    sends: Iterable[KeyedSend], readers: Iterable[Sequence[KeyedObservation]]
) -> CompactedReport:
    """Judge a keyed history on a compacted topic (module docstring). Every update's value is
    unique; ``readers``: each reader's observations in the order it saw them."""
    report = CompactedReport()
    by_value: dict[str, KeyedSend] = {}
    by_key: dict[str, list[KeyedSend]] = defaultdict(list)
    for send in sorted(sends, key=lambda s: s.index):
        if send.value is not None:
            if send.value in by_value:
                raise ValueError(f"value {send.value!r} sent twice: values must be unique")
            by_value[send.value] = send
        else:
            report.tombstones += 1
        by_key[send.key].append(send)
        if send.outcome == "ok":
            report.acknowledged += 1
        elif send.outcome == "fail":
            report.failed += 1
        else:
            report.unknown += 1

    at: dict[tuple[int, int], set[str]] = defaultdict(set)  # across readers
    where: dict[str, set[tuple[int, int]]] = defaultdict(set)
    for observations in readers:
        last_offset: dict[int, int] = {}
        latest: dict[str, KeyedObservation] = {}
        for obs in observations:
            report.read += 1
            previous = last_offset.get(obs.partition)
            if previous is not None and obs.offset <= previous:
                report.nonmonotonic.append((obs.partition, previous, obs.offset, report.read))
            last_offset[obs.partition] = obs.offset
            shown = obs.value if obs.value is not None else f"tombstone({obs.key})"
            at[(obs.partition, obs.offset)].add(shown)
            current = latest.get(obs.key)
            if current is None or obs.offset > current.offset:
                latest[obs.key] = obs
            if obs.value is None:
                continue
            where[obs.value].add((obs.partition, obs.offset))
            sent = by_value.get(obs.value)
            if sent is None or sent.key != obs.key or sent.outcome == "fail":
                why = "never sent" if sent is None else (
                    "definitely failed" if sent.outcome == "fail" else f"sent under {sent.key}"
                )  # fmt: skip
                report.phantom.append(f"{obs.value} read under {obs.key} at "
                                      f"{obs.partition}@{obs.offset}: {why}")  # fmt: skip
        report.keys_read = len(latest)
        for key in sorted(set(by_key) | set(latest)):
            _judge_key(key, by_key.get(key, []), latest.get(key), by_value, report)
    for position, values in sorted(at.items()):
        if len(values) > 1:
            report.inconsistent_offsets[position] = sorted(values)
    for value, positions in where.items():
        if len(positions) > 1:
            report.duplicate[value] = sorted(positions)
        sent = by_value.get(value)
        if sent is not None and sent.outcome == "ok" and sent.offset is not None:
            acked = (sent.partition or 0, sent.offset)
            if acked not in positions:
                report.inconsistent_offsets.setdefault(acked, []).append(
                    f"{value} acknowledged here, read at {sorted(positions)}"
                )
    return report


def _judge_key(
    key: str,
    sends: list[KeyedSend],
    last: KeyedObservation | None,
    by_value: dict[str, KeyedSend],
    report: CompactedReport,
) -> None:
    """One key's latest record against its last acknowledged send and the later unknown ones."""
    acked = [s for s in sends if s.outcome == "ok" and s.offset is not None]
    a = max(acked, key=lambda s: s.offset or 0) if acked else None
    later = [s for s in sends if s.outcome == "unknown" and (a is None or s.index > a.index)]
    candidates = ([a] if a is not None else []) + later
    may_be_absent = a is None or any(s.value is None for s in candidates)
    if last is None:
        if not may_be_absent:
            assert a is not None
            report.lost[key] = f"absent; last acknowledged {a.name} at {a.partition}@{a.offset}"
        return
    a_at = f"last acknowledged {a.name} at {a.partition}@{a.offset}" if a else "none acknowledged"
    if last.value is None:  # ends with a tombstone
        if a is not None and a.offset is not None and last.offset <= a.offset:
            if last.offset < a.offset or a.value is not None:
                report.lost[key] = f"ends with a tombstone at {last.offset}; {a_at}"
        elif not any(s.value is None for s in later):
            report.lost[key] = f"ends with a tombstone at {last.offset} never sent after; {a_at}"
        return
    sent = by_value.get(last.value)
    if sent is None or sent.key != key:
        return  # a phantom, reported as such
    if sent in candidates:
        if sent is not a:
            report.recovered.append(key)
        return
    # An earlier send than the last acknowledged one: that one (and every later) was lost.
    assert a is not None
    target = report.resurrected if a.value is None else report.lost
    target[key] = f"ends with {last.value} at {last.partition}@{last.offset}; {a_at}"


# --- reading replicas ---------------------------------------------------------------------------


def compacted_view(partition_dir: Path) -> dict[bytes, tuple[int, int, bytes]]:
    """A replica's compacted view from its segment files: key -> (offset, leader epoch, value)
    of the key's last record, tombstoned keys left out (one replica may still hold a tombstone
    another has already dropped). Control batches are skipped."""
    latest: dict[bytes, tuple[int, int, bytes | None]] = {}
    for path in sorted(partition_dir.glob("*.log")):
        try:
            data = path.read_bytes()
        except FileNotFoundError:  # swapped out by a cleaning meanwhile: the caller retries
            continue
        for header, record in iter_records(data):
            if header.is_control or record.key is None:
                continue
            latest[record.key] = (record.offset, header.partition_leader_epoch, record.value)
    return {k: (o, e, v) for k, (o, e, v) in latest.items() if v is not None}


def epochs_disagree_with_batches(checkpoint: str, partition_dir: Path) -> list[str]:
    """Where a replica's leader-epoch cache disagrees with its own batches: each batch must
    carry the epoch the cache gives its base offset.

    Replicas' caches are not compared with each other on a compacted topic: a follower records
    an epoch at its first batch *it fetched*, and when the leader had already cleaned away that
    epoch's first batches, the follower's entry starts later (Kafka's followers too:
    ``LeaderEpochFileCache.assign`` from ``appendAsFollower``). Nothing lies between the two
    starts in either log, so truncation by either cache agrees."""
    lines = checkpoint.split("\n")[2:]
    entries = sorted(tuple(int(x) for x in line.split()) for line in lines if line.strip())
    wrong: list[str] = []
    for path in sorted(partition_dir.glob("*.log")):
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            continue
        for _, header, _ in iter_batches(data):
            if not entries or header.base_offset < entries[0][1]:
                continue  # before the cache's first entry (or no cache): nothing to say
            epoch = max((e for e in entries if e[1] <= header.base_offset), key=lambda e: e[1])
            if epoch[0] != header.partition_leader_epoch:
                wrong.append(
                    f"batch at {header.base_offset} of epoch {header.partition_leader_epoch}, "
                    f"cache says {epoch[0]}"
                )
    return wrong


# --- the trial ------------------------------------------------------------------------------------


@dataclass
class CompactedTrialResult(TrialResult):
    """A :class:`TrialResult` judged by :func:`check_latest`; ``replica_mismatch`` lists the
    partitions whose replicas' compacted views disagree."""

    compacted: CompactedReport | None = None
    #: Per partition whose replicas disagree: up to 10 keys with each broker's (offset, leader
    #: epoch, value) of the key, the evidence for ``replica_mismatch``.
    view_diffs: dict[int, dict[str, dict[int, Any]]] = field(default_factory=dict)
    #: Cleanings the brokers logged during the trial, all replicas together (evidence that the
    #: cleaner ran under the faults).
    cleanings: int = 0

    @property
    def valid(self) -> bool:
        if self.error or self.compacted is None or self.replica_mismatch:
            return False
        c = self.compacted
        if c.lost or c.resurrected or c.phantom or c.inconsistent_offsets or c.nonmonotonic:
            return False
        # A value written twice under two producer identities was sent twice by the client
        # (librdkafka after an epoch bump; see runner._classify_duplicates): allowed, unless
        # it changed a key's latest (then it is in ``lost``).
        return not (self.config.idempotence and self.duplicate_rewritten)

    def record(self) -> dict[str, Any]:
        out = super().record()
        out["workload"] = "compacted"
        out["cleanings"] = self.cleanings
        if self.compacted is not None and not self.valid:
            out["evidence"] = self.compacted.evidence()
            out["view_diffs"] = {str(p): d for p, d in self.view_diffs.items()}
        return out


def key_name(i: int) -> str:
    return f"k{i:03d}"


def run_compacted_trial(zookeeper: ZooKeeperServer, config: TrialConfig) -> CompactedTrialResult:
    """One trial of the keyed workload (module docstring); records what it finds, never raises
    for it."""
    schedule = make_schedule(config.seed, config.duration, faults=config.faults)
    result = CompactedTrialResult(config, schedule)
    topic = f"jepsen-compacted-{config.seed}"
    with recorded(result):
        with FaultCluster(zookeeper, properties=COMPACTED_BROKER_PROPERTIES) as cluster:
            _create_topic(cluster, topic)
            t0 = time.monotonic()
            nemesis = _Nemesis(cluster, topic, schedule, t0)
            history, acked_at = with_nemesis(nemesis, result, lambda: _produce_and_heal(
                config, cluster, topic, t0, nemesis, result
            ))  # fmt: skip
            cluster.wait_fully_replicated(topic)
            observations = _read(cluster, topic)
            compare_compacted_replicas(cluster, topic, result)
            result.cleanings = _cleanings_logged(cluster, topic)
            headers = {
                p: [h for b in cluster.ids for h in _batches(cluster.log_bytes(b, topic, p))]
                for p in range(PARTITIONS)
            }
        result.compacted = check_latest(history, [observations])
        result.summary = result.compacted.summary()
        _classify_duplicates(result.compacted, headers, result)  # type: ignore[arg-type]
        result.windows = _windows(acked_at, config.duration)
    return result


def compare_compacted_replicas(
    cluster: FaultCluster, topic: str, result: TrialResult, timeout: float = 20.0
) -> None:
    """Wait (bounded) for the replicas of each partition to agree on their compacted view; each
    replica's leader-epoch cache must agree with its own batches
    (:func:`epochs_disagree_with_batches`)."""
    for p in range(PARTITIONS):
        dirs = [cluster.cluster.data_dir(b) / f"{topic}-{p}" for b in cluster.ids]

        def same(dirs: list[Path] = dirs) -> bool:
            views = [compacted_view(d) for d in dirs]
            return all(v == views[0] for v in views[1:])

        try:
            cluster.cluster.wait_for(same, f"{topic}-{p} replicas' compacted views equal", timeout)
        except TimeoutError:
            result.replica_mismatch.append(p)
            if isinstance(result, CompactedTrialResult):
                result.view_diffs[p] = _view_diff(cluster.ids, [compacted_view(d) for d in dirs])
        if any(
            epochs_disagree_with_batches(cluster.epoch_checkpoint(b, topic, p), d)
            for b, d in zip(cluster.ids, dirs, strict=True)
        ):
            result.epoch_cache_mismatch.append(p)


def _view_diff(
    ids: list[int], views: list[dict[bytes, tuple[int, int, bytes]]]
) -> dict[str, dict[int, Any]]:
    diff: dict[str, dict[int, Any]] = {}
    for key in sorted(set().union(*views)):
        found = [v.get(key) for v in views]
        if len(set(found)) > 1:
            diff[key.decode(errors="replace")] = {
                b: None if f is None else [f[0], f[1], f[2].decode(errors="replace")]
                for b, f in zip(ids, found, strict=True)
            }
        if len(diff) >= 10:
            break
    return diff


def _cleanings_logged(cluster: FaultCluster, topic: str) -> int:
    """How many cleanings of the topic's partitions the brokers' logs show, all replicas."""
    count = 0
    for b in cluster.ids:
        path = cluster.cluster.broker(b).log_path
        if path is None or not path.exists():
            continue
        for line in path.read_text(errors="replace").splitlines():
            count += "cleaned log" in line and topic in line
    return count


def _create_topic(cluster: FaultCluster, topic: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    new = NewTopic(topic, PARTITIONS, 3, config=COMPACTED_TOPIC_CONFIG)
    admin.create_topics([new])[topic].result(30)
    cluster.wait_fully_replicated(topic)


def _produce_and_heal(
    config: TrialConfig,
    cluster: FaultCluster,
    topic: str,
    t0: float,
    nemesis: _Nemesis,
    result: TrialResult,
) -> tuple[list[KeyedSend], dict[int, list[float]]]:
    from confluent_kafka import KafkaError, KafkaException, Producer

    rng = random.Random(config.seed)
    planned: dict[int, KeyedSend] = {}
    outcomes: dict[int, KeyedSend] = {}
    acked_at: dict[int, list[float]] = {p: [] for p in range(PARTITIONS)}
    errors: dict[str, int] = {}

    def on_delivery(index: int) -> Any:
        def delivered(err: KafkaError | None, msg: Any) -> None:
            send = planned[index]
            if err is None:
                outcomes[index] = KeyedSend(
                    index, send.key, send.value, "ok", msg.partition(), msg.offset()
                )
                acked_at[msg.partition()].append(time.monotonic() - t0)
            else:
                errors[err.name()] = errors.get(err.name(), 0) + 1

        return delivered

    producer = Producer({
        **_producer_config(config, cluster.bootstrap_servers), **PRODUCER_OVERRIDES
    })  # fmt: skip
    i = 0
    next_at = time.monotonic()
    end = t0 + config.duration
    try:
        while (now := time.monotonic()) < end:
            if now < next_at:
                producer.poll(next_at - now)
                continue
            next_at += config.interval
            k = rng.randrange(KEYS)
            value = None if rng.random() < TOMBSTONE_SHARE else f"{config.seed}-{i}"
            send = KeyedSend(i, key_name(k), value, "unknown")
            try:
                producer.produce(
                    topic,
                    value.encode() if value is not None else None,
                    send.key.encode(),
                    partition=k % PARTITIONS,
                    on_delivery=on_delivery(i),
                )
                planned[i] = send
                i += 1
            except BufferError:
                pass
            except KafkaException as exc:
                if exc.args[0].fatal():
                    raise
                errors[exc.args[0].name()] = errors.get(exc.args[0].name(), 0) + 1
            producer.poll(0)
    except (KafkaException, SystemError) as exc:
        cause = exc if isinstance(exc, KafkaException) else exc.__cause__
        if not isinstance(cause, KafkaException) or not cause.args[0].fatal():
            raise
        result.producer_fatal = str(cause.args[0])
    nemesis.join(60)
    cluster.heal()
    if not result.producer_fatal:
        try:
            producer.flush(60)
        except (KafkaException, SystemError) as exc:
            cause = exc if isinstance(exc, KafkaException) else exc.__cause__
            if not isinstance(cause, KafkaException) or not cause.args[0].fatal():
                raise
            result.producer_fatal = str(cause.args[0])
    result.producer_errors = errors
    return [outcomes.get(j, s) for j, s in sorted(planned.items())], acked_at


def _read(cluster: FaultCluster, topic: str, timeout: float = 60.0) -> list[KeyedObservation]:
    """Every record of every partition from offset 0 to its high watermark, tombstones too."""
    config = {"bootstrap.servers": cluster.bootstrap_servers}
    partitions = [(topic, p) for p in range(PARTITIONS)]
    return [keyed_observation(msg) for msg in read_to_end(config, partitions, timeout=timeout)]


def keyed_observation(msg: Any) -> KeyedObservation:
    """A confluent-kafka message read back (a tombstone's value None)."""
    value = msg.value()
    return KeyedObservation(
        msg.partition(), msg.offset(), msg.key().decode(), None if value is None else value.decode()
    )
