"""Broker counters: plain integers and histograms, one registry per Server, cheap on the hot path.

Two kinds of figures, and a rule for where each is computed:

* **events** the broker cannot recompute later -- requests, errors, bytes and records in and out,
  request and flush latencies, connections opened -- are counted where they happen, in plain
  Python ints (a dict item, a :class:`Histogram` bucket): O(1), no lock, no label lookup,
  no object built per request. Only the event loop thread writes them.
* **state** -- partitions, leaders, under-replicated and offline partitions, the active
  controller, consumer-group lag, open connections -- is *not* tracked per request at all: the
  Prometheus collector (:mod:`sluice.server.metrics.prometheus`) reads it from the ReplicaManager,
  the cluster member and the group coordinator when scraped.

Names. The generic counters are dotted (``requests.Produce``, ``connections.closed.bad_frame``);
a request counter carries the API's name from :mod:`sluice.protocol.messages` (``Api.name``),
never its numeric key. ``snapshot()`` copies the counters for tests and the shutdown log line.
What the Prometheus endpoint exports, and under which name, is :data:`METRICS`. What the
counting costs on the produce path: ``bench/NOTES.md``.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import defaultdict
from collections.abc import Container, Iterator
from typing import Any, NamedTuple

from sluice.protocol import messages as m
from sluice.protocol.schema import Message

#: Request latency buckets, seconds: 100 us (a Metadata answered from memory) up to 30 s (a
#: JoinGroup waiting out a rebalance); long-poll Fetches land at their ``max_wait_ms``.
LATENCY_BUCKETS = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
    1.0, 2.5, 5.0, 10.0, 30.0,
)  # fmt: skip
#: Log flush (fsync) latency buckets, seconds.
FLUSH_BUCKETS = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
    2.5, 5.0,
)  # fmt: skip


class Histogram:
    """Observations counted into fixed buckets, plus their sum (Prometheus histogram semantics:
    bucket ``i`` holds the values ``<= bounds[i]`` not in an earlier bucket; the last one the rest).

    ``observe`` is one ``bisect`` and two additions; cumulative counts are built at scrape time.
    """

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.sum += value

    @property
    def count(self) -> int:
        return sum(self.counts)

    def cumulative(self) -> list[tuple[str, float]]:
        """``[(le, count of values <= le)]`` ending with ``+Inf``, as Prometheus exposes them."""
        out = []
        running = 0
        for bound, n in zip((*map(repr, self.bounds), "+Inf"), self.counts, strict=True):
            running += n
            out.append((bound, float(running)))
        return out


class Metrics:
    """A bag of named monotonically increasing counters (and a few gauges set by the server),
    plus the per-topic byte/record counters and the latency histograms.

    Written only on the event loop thread; the collector reads it there too.
    """

    def __init__(self) -> None:
        # defaultdict, not Counter: ``d[k] += n`` costs ~100 ns against ~400 (bench/NOTES.md).
        self._counters: defaultdict[str, int] = defaultdict(int)
        #: Kafka's BrokerTopicMetrics, by topic: bytes appended by Produce, records appended by
        #: Produce, record bytes sent to consumers by Fetch (followers: ``replication_bytes_out``).
        self.bytes_in: defaultdict[str, int] = defaultdict(int)
        self.messages_in: defaultdict[str, int] = defaultdict(int)
        self.bytes_out: defaultdict[str, int] = defaultdict(int)
        self.replication_bytes_out = 0
        #: Responses' error codes other than NONE, by ``(api key, code)`` (one per partition,
        #: topic or group carrying it, as Kafka's ``errorCounts``).
        self.request_errors: defaultdict[tuple[int, int], int] = defaultdict(int)
        #: From a request's dequeue to its response handed to the socket, by API key.
        self.request_latency: dict[int, Histogram] = {
            key: Histogram(LATENCY_BUCKETS) for key in m.APIS
        }
        #: Duration of each log flush that fsynced something (Kafka's LogFlushRateAndTimeMs).
        self.log_flush = Histogram(FLUSH_BUCKETS)

    def inc(self, name: str, amount: int = 1) -> None:
        self._counters[name] += amount

    def set(self, name: str, value: int) -> None:
        self._counters[name] = value

    def get(self, name: str) -> int:
        return self._counters.get(name, 0)

    def snapshot(self) -> dict[str, int]:
        return dict(self._counters)

    def count_errors(self, api_key: int, body: Any) -> None:
        """Count the error codes of a response body (every ``error_code`` field, nested ones
        included; NONE skipped). Used for the APIs whose handlers do not count their own."""
        errors_ = self.request_errors
        for code in error_codes(body):
            errors_[(api_key, code)] += 1

    def forget_topics(self, keep: Container[str]) -> None:
        """Drop the per-topic counters of topics not in ``keep`` (deleted topics leave the
        export, as Kafka's ``BrokerTopicStats.removeMetrics``)."""
        for table in (self.bytes_in, self.messages_in, self.bytes_out):
            for topic in [t for t in table if t not in keep]:
                del table[topic]


#: Per message class: whether it has an ``error_code`` field, and the struct fields through
#: which another ``error_code`` can be reached (derived once from the schema, on first use).
_ERROR_PLANS: dict[type[Message], tuple[bool, tuple[str, ...]]] = {}


def _error_plan(cls: type[Message]) -> tuple[bool, tuple[str, ...]]:
    plan = _ERROR_PLANS.get(cls)
    if plan is None:
        fields = cls._schema.fields
        nested = tuple(
            f.name for f in fields if f.struct is not None and any(_error_plan(f.struct.cls))
        )
        plan = _ERROR_PLANS[cls] = (any(f.name == "error_code" for f in fields), nested)
    return plan


def error_codes(msg: Any) -> Iterator[int]:
    """Every non-zero ``error_code`` in ``msg`` and its nested structs."""
    has, nested = _error_plan(type(msg))
    if has:
        code = msg.error_code
        if code:
            yield code
    for name in nested:
        value = getattr(msg, name)
        if value is None:
            continue
        if isinstance(value, list):
            for item in value:
                yield from error_codes(item)
        else:
            yield from error_codes(value)


class MetricDef(NamedTuple):
    """One exported metric family: its Prometheus name (counters without ``_total``, which the
    exposition adds), type, labels, the Kafka JMX MBean it mirrors, and its help text."""

    name: str
    kind: str  # "counter" | "gauge" | "histogram"
    labels: tuple[str, ...]
    kafka: str
    doc: str


#: Every family the broker exports (besides prometheus_client's ``process_*`` / ``python_*``).
#: Names follow the Prometheus JMX exporter's rules for Kafka (``kafka_<domain>_<type>_<name>``
#: lower-cased; ``...PerSec`` counts become counters, ``...Ms`` timers histograms in seconds), so
#: dashboards and alerts written for Kafka behind the JMX exporter find them. Consumer-group lag
#: has no broker MBean in Kafka; it takes kafka_exporter's names.
METRICS: tuple[MetricDef, ...] = (
    MetricDef(
        "kafka_server_brokertopicmetrics_bytesin", "counter", ("topic",),
        "kafka.server:type=BrokerTopicMetrics,name=BytesInPerSec,topic=T",
        "Bytes of record batches appended by Produce requests.",
    ),
    MetricDef(
        "kafka_server_brokertopicmetrics_messagesin", "counter", ("topic",),
        "kafka.server:type=BrokerTopicMetrics,name=MessagesInPerSec,topic=T",
        "Records appended by Produce requests.",
    ),
    MetricDef(
        "kafka_server_brokertopicmetrics_bytesout", "counter", ("topic",),
        "kafka.server:type=BrokerTopicMetrics,name=BytesOutPerSec,topic=T",
        "Bytes of record batches sent to consumers by Fetch (followers not counted).",
    ),
    MetricDef(
        "kafka_server_brokertopicmetrics_replicationbytesout", "counter", (),
        "kafka.server:type=BrokerTopicMetrics,name=ReplicationBytesOutPerSec",
        "Bytes of record batches sent to follower replicas by Fetch.",
    ),
    MetricDef(
        "kafka_network_requestmetrics_requests", "counter", ("request",),
        "kafka.network:type=RequestMetrics,name=RequestsPerSec,request=R",
        "Requests received, by API name.",
    ),
    MetricDef(
        "kafka_network_requestmetrics_errors", "counter", ("request", "error"),
        "kafka.network:type=RequestMetrics,name=ErrorsPerSec,request=R,error=E",
        "Error codes in responses, by API and Kafka error name (NONE not counted).",
    ),
    MetricDef(
        "kafka_network_requestmetrics_totaltime_seconds", "histogram", ("request",),
        "kafka.network:type=RequestMetrics,name=TotalTimeMs,request=R",
        "Request time from dequeue to the response handed to the socket, by API name.",
    ),
    MetricDef(
        "kafka_server_replicamanager_partitioncount", "gauge", (),
        "kafka.server:type=ReplicaManager,name=PartitionCount",
        "Partitions with a replica on this broker.",
    ),
    MetricDef(
        "kafka_server_replicamanager_leadercount", "gauge", (),
        "kafka.server:type=ReplicaManager,name=LeaderCount",
        "Partitions this broker leads.",
    ),
    MetricDef(
        "kafka_server_replicamanager_underreplicatedpartitions", "gauge", (),
        "kafka.server:type=ReplicaManager,name=UnderReplicatedPartitions",
        "Partitions led here whose ISR is smaller than their replica set.",
    ),
    MetricDef(
        "kafka_server_replicamanager_isrshrinks", "counter", (),
        "kafka.server:type=ReplicaManager,name=IsrShrinksPerSec",
        "Shrinks of the ISR of partitions led here (lagging or dead followers removed).",
    ),
    MetricDef(
        "kafka_server_replicamanager_isrexpands", "counter", (),
        "kafka.server:type=ReplicaManager,name=IsrExpandsPerSec",
        "Expansions of the ISR of partitions led here (followers caught up again).",
    ),
    MetricDef(
        "kafka_server_leaderreplication_byte_rate", "gauge", (),
        "kafka.server:type=LeaderReplication,name=byte-rate",
        "Bytes/s sent to followers for leader-throttled replicas (leader.replication.throttled"
        ".replicas), over the replication quota window.",
    ),
    MetricDef(
        "kafka_server_followerreplication_byte_rate", "gauge", (),
        "kafka.server:type=FollowerReplication,name=byte-rate",
        "Bytes/s fetched for follower-throttled replicas (follower.replication.throttled"
        ".replicas), over the replication quota window.",
    ),
    MetricDef(
        "kafka_controller_kafkacontroller_activecontrollercount", "gauge", (),
        "kafka.controller:type=KafkaController,name=ActiveControllerCount",
        "1 on the active controller, else 0 (a standalone broker is its own controller).",
    ),
    MetricDef(
        "kafka_controller_kafkacontroller_offlinepartitionscount", "gauge", (),
        "kafka.controller:type=KafkaController,name=OfflinePartitionsCount",
        "Partitions without a live leader (reported by the active controller; 0 elsewhere).",
    ),
    MetricDef(
        "kafka_consumergroup_current_offset", "gauge", ("consumergroup", "topic", "partition"),
        "none (kafka_exporter's name)",
        "Committed offset of each group partition coordinated by this broker.",
    ),
    MetricDef(
        "kafka_consumergroup_lag", "gauge", ("consumergroup", "topic", "partition"),
        "none (kafka_exporter's name; kafka-consumer-groups' LAG)",
        "High watermark minus committed offset (partitions with a replica here).",
    ),
    MetricDef(
        "kafka_server_transaction_coordinator_metrics_partition_load_time_max", "gauge", (),
        "kafka.server:type=transaction-coordinator-metrics partition-load-time-max",
        "Longest load of a __transaction_state partition by this broker so far, in ms.",
    ),
    MetricDef(
        "kafka_transactions", "gauge", ("state",),
        "none (kafka-transactions list's TransactionState)",
        "Transactional ids coordinated by this broker, by their transaction's state.",
    ),
    MetricDef(
        "kafka_server_socket_server_metrics_connection_count", "gauge", ("listener",),
        "kafka.server:type=socket-server-metrics,listener=L connection-count",
        "Open client connections.",
    ),
    MetricDef(
        "kafka_server_socket_server_metrics_connection_creation", "counter", ("listener",),
        "kafka.server:type=socket-server-metrics,listener=L connection-creation-total",
        "Client connections accepted.",
    ),
    MetricDef(
        "kafka_server_socket_server_metrics_connection_close", "counter", ("listener",),
        "kafka.server:type=socket-server-metrics,listener=L connection-close-total",
        "Client connections closed.",
    ),
    MetricDef(
        "kafka_log_logflushstats_logflushrateandtime_seconds", "histogram", (),
        "kafka.log:type=LogFlushStats,name=LogFlushRateAndTimeMs",
        "Time of each log flush (fsync of segments and directory).",
    ),
    MetricDef(
        "kafka_log_logcleaner_max_buffer_utilization_percent", "gauge", (),
        "kafka.log:type=LogCleaner,name=max-buffer-utilization-percent",
        "How full the cleaner's offset map was in its last cleaning, percent.",
    ),
    MetricDef(
        "kafka_log_logcleaner_cleaner_recopy_percent", "gauge", (),
        "kafka.log:type=LogCleaner,name=cleaner-recopy-percent",
        "Bytes written / bytes read by the last cleaning, percent (100: nothing removed).",
    ),
    MetricDef(
        "kafka_log_logcleaner_max_clean_time_secs", "gauge", (),
        "kafka.log:type=LogCleaner,name=max-clean-time-secs",
        "Duration of the last cleaning, seconds.",
    ),
    MetricDef(
        "kafka_log_logcleaner_max_compaction_delay_secs", "gauge", (),
        "kafka.log:type=LogCleaner,name=max-compaction-delay-secs",
        "How far past max.compaction.lag.ms the most overdue compacted log is, seconds.",
    ),
    MetricDef(
        "kafka_log_logcleaner_deadthreadcount", "gauge", (),
        "kafka.log:type=LogCleaner,name=DeadThreadCount",
        "Cleaner workers that ended (0 while the cleaner runs; Sluice runs one).",
    ),
    MetricDef(
        "kafka_log_logcleanermanager_max_dirty_percent", "gauge", (),
        "kafka.log:type=LogCleanerManager,name=max-dirty-percent",
        "Dirty ratio of the dirtiest compacted log at the cleaner's last look, percent.",
    ),
    MetricDef(
        "kafka_log_logcleanermanager_time_since_last_run_ms", "gauge", (),
        "kafka.log:type=LogCleanerManager,name=time-since-last-run-ms",
        "Milliseconds since the cleaner last looked for a log to clean.",
    ),
    MetricDef(
        "kafka_log_logcleanermanager_uncleanable_partitions_count", "gauge", ("logDirectory",),
        "kafka.log:type=LogCleanerManager,name=uncleanable-partitions-count,logDirectory=D",
        "Partitions whose cleaning failed unexpectedly, skipped until restart.",
    ),
    MetricDef(
        "kafka_log_logcleanermanager_uncleanable_bytes", "gauge", ("logDirectory",),
        "kafka.log:type=LogCleanerManager,name=uncleanable-bytes,logDirectory=D",
        "Cleanable bytes of the uncleanable partitions.",
    ),
    MetricDef(
        "sluice_log_cleaner_bytes_read", "counter", (),
        "none (Kafka logs it per cleaning)",
        "Bytes of segments the cleaner read (its dirty and clean sections).",
    ),
    MetricDef(
        "sluice_log_cleaner_bytes_written", "counter", (),
        "none (Kafka logs it per cleaning)",
        "Bytes of cleaned segments the cleaner wrote.",
    ),
)  # fmt: skip

METRICS_BY_NAME: dict[str, MetricDef] = {d.name: d for d in METRICS}
