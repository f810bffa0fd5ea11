"""The Prometheus endpoint (``sluice.metrics.listener``): Kafka's broker metrics over HTTP.

What is exported, under which names and from which Kafka MBeans: :data:`~sluice.server.metrics.
metrics.METRICS` (and the README's *Monitoring* section). The exposition format, the HTTP
server and content negotiation (text or OpenMetrics, gzip) are ``prometheus_client``'s.

**Threads.** The HTTP server is ``prometheus_client``'s (``wsgiref`` + ``ThreadingMixIn``): it
accepts and answers on threads of its own, so a slow or stuck scraper never blocks the event loop,
and the broker writes no HTTP code. But what a scrape reads -- the counters of
:class:`~sluice.server.metrics.metrics.Metrics`, the ReplicaManager's partitions, the cluster's
metadata cache, the group coordinator's offsets -- belongs to the event loop thread and is not
safe to iterate from another one (a dict changing size under a reader raises). So the broker's
collector is wrapped in :class:`OnLoopCollector`: the HTTP thread asks the loop to build the
metric families (``call_soon_threadsafe``) and waits for them (bounded); the loop spends only the
collection on it -- no socket I/O, no text formatting, which happen back on the HTTP thread.
The alternative, an asyncio HTTP handler calling ``generate_latest`` on the loop, would also
format the text there and need a hand-written HTTP server; an HTTP thread reading the state
directly would race with the loop. The ``process_*`` / ``python_*`` collectors of
``prometheus_client`` read ``/proc`` and the interpreter, so they run on the HTTP thread.

**Scrape-time state.** Nothing here runs per request: partition counts, leaders,
under-replicated and offline partitions, the active controller, consumer-group lag and open
connections are computed from the state when scraped; only events (bytes, records, requests,
errors, latencies, flushes) are counted as they happen, in :class:`Metrics`.

Each ``Server`` has its own registry, so brokers sharing a process (tests) do not mix figures.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import socket
import threading
import time
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any, Protocol, cast
from wsgiref.simple_server import WSGIRequestHandler, make_server

from prometheus_client import (
    GC_COLLECTOR,
    PLATFORM_COLLECTOR,
    PROCESS_COLLECTOR,
    CollectorRegistry,
    make_wsgi_app,
)
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.exposition import ThreadingWSGIServer
from prometheus_client.registry import Collector

from sluice.protocol import messages as m
from sluice.protocol.errors import error_name
from sluice.server.logging import get_logger
from sluice.server.metrics.metrics import METRICS

if TYPE_CHECKING:
    from collections.abc import Sized

    from sluice.server.config import Config, MetricsListener
    from sluice.server.group.coordinator import GroupCoordinator
    from sluice.server.metadata.zk_cluster import ClusterMember
    from sluice.server.metrics.metrics import Metrics
    from sluice.server.replication.replica_manager import ReplicaManager
    from sluice.server.storage.log_manager import LogManager
    from sluice.server.transaction.coordinator import TransactionCoordinator

log = get_logger("sluice.metrics")

#: How long a scrape waits for the event loop to collect (a busy loop answers late, a stuck one
#: makes the scrape fail instead of hanging the scraper's thread forever).
COLLECT_TIMEOUT_S = 10.0


def _family(name: str) -> Any:
    """An empty family of the declared ``name`` (type, help and labels from METRICS)."""
    d = next(d for d in METRICS if d.name == name)
    kind = {"counter": CounterMetricFamily, "gauge": GaugeMetricFamily}.get(d.kind)
    if kind is None:
        return HistogramMetricFamily(d.name, d.doc, labels=d.labels)
    return kind(d.name, d.doc, labels=d.labels)


class _ServedApis(Protocol):
    @property
    def served_api_keys(self) -> frozenset[int]: ...


class BrokerState(Protocol):
    """What the collector reads of a running broker (``sluice.server.server.Server``), read-only:
    the metrics room reads the broker's state, the broker never hands it its internals to own."""

    @property
    def config(self) -> Config: ...
    @property
    def metrics(self) -> Metrics: ...
    @property
    def connections(self) -> Sized: ...
    @property
    def handlers(self) -> _ServedApis | None: ...
    @property
    def cluster(self) -> ClusterMember | None: ...
    @property
    def log_manager(self) -> LogManager | None: ...
    @property
    def replica_manager(self) -> ReplicaManager | None: ...
    @property
    def group_coordinator(self) -> GroupCoordinator | None: ...
    @property
    def transaction_coordinator(self) -> TransactionCoordinator | None: ...


class BrokerCollector(Collector):
    """Every family of METRICS for one broker. Call :meth:`collect` on the event loop thread only
    (:class:`OnLoopCollector` does)."""

    def __init__(self, server: BrokerState) -> None:
        self._server = server

    def describe(self) -> list[Metric]:
        """The families' names, so the registry checks for duplicates without collecting."""
        return [_family(d.name) for d in METRICS]

    def collect(self) -> Iterator[Metric]:
        server = self._server
        metrics = server.metrics
        existing = self._topics()
        if existing is not None:
            metrics.forget_topics(existing)
        for name, table in (
            ("kafka_server_brokertopicmetrics_bytesin", metrics.bytes_in),
            ("kafka_server_brokertopicmetrics_messagesin", metrics.messages_in),
            ("kafka_server_brokertopicmetrics_bytesout", metrics.bytes_out),
        ):
            family = _family(name)
            for topic, value in sorted(table.items()):
                family.add_metric([topic], value)
            yield family
        family = _family("kafka_server_brokertopicmetrics_replicationbytesout")
        family.add_metric([], metrics.replication_bytes_out)
        yield family
        yield from self._requests()
        yield from self._replicas()
        yield from self._controller()
        yield from self._groups()
        yield from self._transactions()
        listener = server.config.listener.name
        family = _family("kafka_server_socket_server_metrics_connection_count")
        family.add_metric([listener], len(server.connections))
        yield family
        for name, counter in (
            ("kafka_server_socket_server_metrics_connection_creation", "connections.accepted"),
            ("kafka_server_socket_server_metrics_connection_close", "connections.closed"),
        ):
            family = _family(name)
            family.add_metric([listener], metrics.get(counter))
            yield family
        family = _family("kafka_log_logflushstats_logflushrateandtime_seconds")
        flush = metrics.log_flush
        family.add_metric([], flush.cumulative(), flush.sum)
        yield family
        yield from self._cleaner()

    def _topics(self) -> set[str] | None:
        """The topics that exist now (None before startup)."""
        server = self._server
        if server.cluster is not None:
            return set(server.cluster.cache.assignments)
        if server.log_manager is None:
            return None
        return set(server.log_manager.topics())

    def _requests(self) -> Iterator[Metric]:
        metrics = self._server.metrics
        handlers = self._server.handlers
        served = handlers.served_api_keys if handlers is not None else frozenset()
        names = {key: api.name for key, api in m.APIS.items()}
        requests = _family("kafka_network_requestmetrics_requests")
        latency = _family("kafka_network_requestmetrics_totaltime_seconds")
        for key in sorted(served, key=names.__getitem__):
            name = names[key]
            requests.add_metric([name], metrics.get(f"requests.{name}"))
            histogram = metrics.request_latency[key]
            latency.add_metric([name], histogram.cumulative(), histogram.sum)
        errors_ = _family("kafka_network_requestmetrics_errors")
        for (key, code), count in sorted(metrics.request_errors.items()):
            errors_.add_metric([names[key], error_name(code)], count)
        yield from (requests, errors_, latency)

    def _replicas(self) -> Iterator[Metric]:
        server = self._server
        replicas = server.replica_manager
        partitions = leaders = under = 0
        if replicas is not None:
            if replicas.standalone:
                # Leader of every log, the only replica: nothing can be under-replicated.
                partitions = leaders = len(replicas.logs.logs)
            else:
                for partition in replicas.partitions():
                    partitions += 1
                    if partition.is_leader:
                        leaders += 1
                        if len(partition.isr) < len(partition.replicas):
                            under += 1
        cluster = server.cluster
        values: list[tuple[str, float]] = [
            ("kafka_server_replicamanager_partitioncount", partitions),
            ("kafka_server_replicamanager_leadercount", leaders),
            ("kafka_server_replicamanager_underreplicatedpartitions", under),
            ("kafka_server_replicamanager_isrshrinks", cluster.isr_shrinks if cluster else 0),
            ("kafka_server_replicamanager_isrexpands", cluster.isr_expands if cluster else 0),
        ]
        if replicas is not None:
            # Kafka's ReplicationQuotaManager sensors (kafka.server:type=LeaderReplication /
            # FollowerReplication, byte-rate): bytes/s of the throttled replicas.
            now = time.monotonic()
            values.append(("kafka_server_leaderreplication_byte_rate",
                           replicas.leader_quota.byte_rate(now)))  # fmt: skip
            values.append(("kafka_server_followerreplication_byte_rate",
                           replicas.follower_quota.byte_rate(now)))  # fmt: skip
        for name, value in values:
            family = _family(name)
            family.add_metric([], value)
            yield family

    def _controller(self) -> Iterator[Metric]:
        cluster = self._server.cluster
        active = offline = 0
        if cluster is None:
            active = 0 if self._server.config.cluster_mode else 1  # standalone: its own controller
        elif cluster.controller is not None and cluster.controller.is_active:
            active = 1
            cache = cluster.cache
            for topic, assignment in cache.assignments.items():
                offline += sum(1 for p in assignment.partitions if cache.leader(topic, p) < 0)
        for name, value in (
            ("kafka_controller_kafkacontroller_activecontrollercount", active),
            ("kafka_controller_kafkacontroller_offlinepartitionscount", offline),
        ):
            family = _family(name)
            family.add_metric([], value)
            yield family

    def _groups(self) -> Iterator[Metric]:
        """Committed offset and lag of every group partition this coordinator holds, against
        the local replica's high watermark (partitions without a replica here are left out)."""
        server = self._server
        current = _family("kafka_consumergroup_current_offset")
        lag = _family("kafka_consumergroup_lag")
        coordinator = server.group_coordinator
        logs = server.log_manager
        if coordinator is not None and logs is not None:
            for group_id, group in sorted(coordinator.groups.items()):
                for (topic, partition), committed in sorted(group.offsets.items()):
                    labels = [group_id, topic, str(partition)]
                    current.add_metric(labels, committed.offset)
                    log_ = logs.get_log(topic, partition)
                    if log_ is not None and not log_.closed:
                        lag.add_metric(labels, max(log_.high_watermark - committed.offset, 0))
        yield from (current, lag)

    def _cleaner(self) -> Iterator[Metric]:
        """Kafka's LogCleaner / LogCleanerManager gauges (zero when the cleaner is off)."""
        logs = self._server.log_manager
        cleaner = logs.cleaner if logs is not None else None
        log_dir = str(logs.log_dir.absolute()) if logs is not None else ""
        values: list[tuple[str, list[str], float]] = []
        if cleaner is None or logs is None:
            names = [d.name for d in METRICS if d.name.startswith(_CLEANER_PREFIXES)]
            values = [(n, [log_dir] if "uncleanable" in n else [], 0) for n in names]
        else:
            open_logs = list(logs.logs.values())
            values = [
                ("kafka_log_logcleaner_max_buffer_utilization_percent", [],
                 cleaner.max_buffer_utilization_percent()),
                ("kafka_log_logcleaner_cleaner_recopy_percent", [], cleaner.recopy_percent()),
                ("kafka_log_logcleaner_max_clean_time_secs", [], cleaner.max_clean_time_secs()),
                ("kafka_log_logcleaner_max_compaction_delay_secs", [],
                 cleaner.max_compaction_delay_secs()),
                ("kafka_log_logcleaner_deadthreadcount", [], logs.cleaner_dead_threads),
                ("kafka_log_logcleanermanager_max_dirty_percent", [], cleaner.max_dirty_percent()),
                ("kafka_log_logcleanermanager_time_since_last_run_ms", [],
                 cleaner.time_since_last_run_ms()),
                ("kafka_log_logcleanermanager_uncleanable_partitions_count", [log_dir],
                 cleaner.uncleanable_partitions_count()),
                ("kafka_log_logcleanermanager_uncleanable_bytes", [log_dir],
                 cleaner.uncleanable_bytes(open_logs)),
                ("sluice_log_cleaner_bytes_read", [], cleaner.bytes_read),
                ("sluice_log_cleaner_bytes_written", [], cleaner.bytes_written),
            ]  # fmt: skip
        for name, labels, value in values:
            family = _family(name)
            family.add_metric(labels, value)
            yield family

    def _transactions(self) -> Iterator[Metric]:
        """The transaction coordinator's state, read when scraped."""
        load = _family("kafka_server_transaction_coordinator_metrics_partition_load_time_max")
        states = _family("kafka_transactions")
        coordinator = self._server.transaction_coordinator
        if coordinator is not None:
            load.add_metric([], coordinator.max_load_time_ms)
            for state, count in sorted(coordinator.state_counts().items()):
                states.add_metric([state], count)
        yield from (load, states)


class OnLoopCollector(Collector):
    """Runs ``inner.collect()`` on ``loop`` for a caller on another thread, and waits for it."""

    def __init__(self, inner: Collector, loop: asyncio.AbstractEventLoop) -> None:
        self._inner = inner
        self._loop = loop

    def describe(self) -> Iterable[Metric]:
        describe = getattr(self._inner, "describe", None)
        return describe() if describe is not None else []

    def collect(self) -> Iterable[Metric]:
        future: concurrent.futures.Future[list[Metric]] = concurrent.futures.Future()

        def run() -> None:
            if not future.set_running_or_notify_cancel():
                return
            try:
                future.set_result(list(self._inner.collect()))
            except BaseException as exc:
                future.set_exception(exc)

        try:
            on_loop = asyncio.get_running_loop() is self._loop
        except RuntimeError:
            on_loop = False
        if on_loop:  # called from the loop itself (a test): no hop, or it would wait for itself
            return list(self._inner.collect())
        self._loop.call_soon_threadsafe(run)
        try:
            return future.result(COLLECT_TIMEOUT_S)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """Scrapes are not logged (every 15 s per scraper would drown the broker's log)."""


class MetricsEndpoint:
    """``GET <path>`` (``/metrics``) on ``listener``: the broker's registry; other paths 404.

    Started by ``Server.start`` after the Kafka listener, stopped first thing at shutdown.
    """

    def __init__(self, listener: MetricsListener, server: BrokerState) -> None:
        self.listener = listener
        self.registry = CollectorRegistry(auto_describe=True)
        loop = asyncio.get_running_loop()
        self.registry.register(OnLoopCollector(BrokerCollector(server), loop))
        for collector in (PROCESS_COLLECTOR, PLATFORM_COLLECTOR, GC_COLLECTOR):
            self.registry.register(collector)
        self._httpd: ThreadingWSGIServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        """The bound port (the one the OS picked for a listener with port 0)."""
        assert self._httpd is not None
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        host = self.listener.host
        host = f"[{host}]" if ":" in host else host
        return f"http://{host}:{self.port}{self.listener.path}"

    def start(self) -> None:
        """Bind and serve on a daemon thread (``OSError`` if the address is taken)."""
        metrics_app = make_wsgi_app(self.registry)
        path = self.listener.path

        def app(environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
            if environ.get("PATH_INFO", "") != path:
                start_response("404 Not Found", [("Content-Type", "text/plain")])
                return [f"not found: the metrics are at {path}\n".encode()]
            return cast("Iterable[bytes]", metrics_app(environ, start_response))

        class Server(ThreadingWSGIServer):
            address_family = socket.AF_INET6 if ":" in self.listener.host else socket.AF_INET

        httpd = make_server(self.listener.host, self.listener.port, app, Server, _QuietHandler)
        thread = threading.Thread(
            target=httpd.serve_forever, name="sluice-metrics", kwargs={"poll_interval": 0.1}
        )
        thread.daemon = True
        thread.start()
        self._httpd, self._thread = httpd, thread
        log.info("metrics endpoint listening", url=self.url)

    async def stop(self) -> None:
        """Stop serving (a scrape in flight finishes on its own thread) and close the socket."""
        httpd, thread = self._httpd, self._thread
        if httpd is None or thread is None:
            return
        self._httpd = self._thread = None
        await asyncio.to_thread(httpd.shutdown)
        httpd.server_close()


#: The cleaner's families (:meth:`BrokerCollector._cleaner`).
_CLEANER_PREFIXES = ("kafka_log_logcleaner", "sluice_log_cleaner")
