"""Cluster metadata and the connections to its brokers, shared by Producer, Consumer and Admin.

:class:`Cluster` knows the brokers (node id -> host:port) and, for each topic it was asked
about, the partitions and their leaders, from Metadata responses. It owns one
:class:`~sluice.net.connection.Connection` per node, opened on first use and re-opened after it
breaks. Refreshes are coalesced: concurrent callers of :meth:`Cluster.refresh` share one Metadata
request. Everything runs on one event loop; nothing here is thread-safe.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from sluice.net.connection import Connection
from sluice.net.security import ClientSecurity
from sluice.protocol import messages
from sluice.protocol.errors import KafkaError, LeaderNotAvailable, UnknownTopicOrPartition, for_code
from sluice.protocol.structs import TopicPartition

from .errors import KafkaConnectionError, KafkaTimeoutError

__all__ = ["BrokerInfo", "Cluster", "PartitionInfo", "TopicPartition", "parse_bootstrap"]

METADATA = messages.Metadata.key


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    node_id: int
    host: str
    port: int
    rack: str | None = None


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    """One partition as Metadata describes it (``leader`` -1 when none is available)."""

    topic: str
    partition: int
    leader: int
    replicas: tuple[int, ...] = ()
    isr: tuple[int, ...] = ()
    error_code: int = 0
    #: Replicas on brokers that are not alive (Metadata v5+).
    offline: tuple[int, ...] = ()


@dataclass(slots=True)
class _TopicMeta:
    error_code: int
    partitions: dict[int, PartitionInfo] = field(default_factory=dict)


def parse_bootstrap(servers: str | Sequence[str]) -> list[tuple[str, int]]:
    """``"host:port,host2:port2"`` (or a list of ``host:port``) -> ``[(host, port), ...]``.
    A missing port means 9092, like Kafka's clients."""
    items = servers.split(",") if isinstance(servers, str) else list(servers)
    out = []
    for item in (s.strip() for s in items):
        if not item:
            continue
        host, sep, port = item.rpartition(":")
        if not sep:
            host, port = item, "9092"
        try:
            out.append((host.strip("[]") or "127.0.0.1", int(port)))
        except ValueError:
            raise ValueError(f"bad bootstrap server {item!r}: expected host:port") from None
    if not out:
        raise ValueError("no bootstrap servers given")
    return out


class Cluster:
    """Metadata cache + connection pool. ``await start()`` before use, ``await close()`` after."""

    def __init__(
        self,
        bootstrap_servers: str | Sequence[str],
        *,
        client_id: str | None = "sluice",
        request_timeout_ms: int = 30_000,
        connect_timeout_ms: int = 10_000,
        retry_backoff_ms: int = 100,
        allow_auto_topic_creation: bool = True,
        security: ClientSecurity | Mapping[str, str] | None = None,
    ) -> None:
        self.bootstrap = parse_bootstrap(bootstrap_servers)
        #: TLS / SASL of every connection: a :class:`ClientSecurity`, or Kafka's client
        #: properties (``security.protocol``, ``sasl.mechanism``, ``sasl.username``, ...).
        self.security = (
            ClientSecurity.from_properties(security) if isinstance(security, Mapping) else security
        )
        self.client_id = client_id
        self.request_timeout_ms = request_timeout_ms
        self.connect_timeout_ms = connect_timeout_ms
        self.retry_backoff_ms = retry_backoff_ms
        self.allow_auto_topic_creation = allow_auto_topic_creation
        self.brokers: dict[int, BrokerInfo] = {}
        self.controller_id = -1
        self.cluster_id: str | None = None
        self._topics: dict[str, _TopicMeta] = {}
        self._connections: dict[int, Connection] = {}
        self._connecting: dict[int, asyncio.Future[Connection]] = {}
        self._bootstrap_conn: Connection | None = None
        self._refreshing: asyncio.Future[None] | None = None
        self._closed = False

    # --- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        """Connect to a bootstrap server and learn the brokers. Raises
        :class:`KafkaConnectionError` when none of them answers."""
        await self.refresh(())

    async def close(self) -> None:
        self._closed = True
        conns = list(self._connections.values())
        if self._bootstrap_conn is not None:
            conns.append(self._bootstrap_conn)
        self._connections.clear()
        self._bootstrap_conn = None
        for conn in conns:
            conn.close()
        for conn in conns:
            await conn.wait_closed()

    # --- connections -------------------------------------------------------------------------

    async def connection(self, node_id: int) -> Connection:
        """The open connection to ``node_id`` (opened now if needed; concurrent callers share
        one attempt)."""
        conn = self._connections.get(node_id)
        if conn is not None and not conn.closed:
            return conn
        pending = self._connecting.get(node_id)
        if pending is None:
            broker = self.brokers.get(node_id)
            if broker is None:
                raise KafkaConnectionError(f"unknown broker node {node_id}")
            pending = asyncio.ensure_future(self._open(broker.host, broker.port))
            self._connecting[node_id] = pending
            try:
                conn = await pending
            finally:
                del self._connecting[node_id]
            self._connections[node_id] = conn
            return conn
        return await asyncio.shield(pending)

    async def _open(self, host: str, port: int) -> Connection:
        return await Connection.open(
            host,
            port,
            client_id=self.client_id,
            connect_timeout_ms=self.connect_timeout_ms,
            request_timeout_ms=self.request_timeout_ms,
            security=self.security,
        )

    async def any_connection(self) -> Connection:
        """A connection to some broker: a known node first, else a bootstrap server."""
        for node_id in sorted(self.brokers, key=lambda _: random.random()):
            with contextlib.suppress(KafkaConnectionError):
                return await self.connection(node_id)
        if self._bootstrap_conn is not None and not self._bootstrap_conn.closed:
            return self._bootstrap_conn
        errors = []
        for host, port in self.bootstrap:
            try:
                self._bootstrap_conn = await self._open(host, port)
                return self._bootstrap_conn
            except KafkaConnectionError as exc:
                errors.append(str(exc))
        raise KafkaConnectionError("no broker reachable: " + "; ".join(errors))

    async def controller_connection(self) -> Connection:
        """Where CreateTopics/DeleteTopics go (the controller; any broker if unknown)."""
        if self.controller_id in self.brokers:
            return await self.connection(self.controller_id)
        return await self.any_connection()

    # --- metadata ----------------------------------------------------------------------------

    async def refresh(self, topics: Iterable[str] | None = None) -> None:
        """Fetch metadata for ``topics`` (None: every topic; empty: brokers only), merged with
        the topics already known. Concurrent calls share one request in flight."""
        wanted = None if topics is None else set(topics) | set(self._topics)
        if self._refreshing is not None and wanted is not None:
            # Piggy-back on the refresh in flight; its answer covers the known topics.
            await asyncio.shield(self._refreshing)
            if wanted <= set(self._topics):
                return
        fut = asyncio.ensure_future(self._refresh(wanted))
        self._refreshing = fut
        try:
            await fut
        finally:
            if self._refreshing is fut:
                self._refreshing = None

    async def _refresh(self, topics: set[str] | None) -> None:
        conn = await self.any_connection()
        cls = messages.MetadataRequest
        body = cls(
            topics=None if topics is None else [cls.MetadataRequestTopic(name=t) for t in topics],
            allow_auto_topic_creation=self.allow_auto_topic_creation,
        )
        response = await conn.request(METADATA, body)
        self._apply(response, replace_all=topics is None)

    def _apply(self, response: messages.MetadataResponse, *, replace_all: bool) -> None:
        self.brokers = {
            b.node_id: BrokerInfo(b.node_id, b.host, b.port, b.rack) for b in response.brokers
        }
        self.controller_id = response.controller_id
        self.cluster_id = response.cluster_id
        for node_id in [n for n in self._connections if n not in self.brokers]:
            self._connections.pop(node_id).close()
        fresh: dict[str, _TopicMeta] = {}
        for t in response.topics:
            if t.name is None:  # only for a topic asked for by id, which this client never does
                continue
            meta = _TopicMeta(t.error_code)
            for p in t.partitions:
                meta.partitions[p.partition_index] = PartitionInfo(
                    t.name,
                    p.partition_index,
                    p.leader_id,
                    tuple(p.replica_nodes),
                    tuple(p.isr_nodes),
                    p.error_code,
                    tuple(getattr(p, "offline_replicas", None) or ()),
                )
            fresh[t.name] = meta
        if replace_all:
            self._topics = fresh
        else:
            self._topics.update(fresh)

    def forget(self, topic: str) -> None:
        """Drop what is known about ``topic`` (after deleting it)."""
        self._topics.pop(topic, None)

    def topics(self) -> dict[str, int]:
        """Known topics without error and their partition counts."""
        return {n: len(m.partitions) for n, m in self._topics.items() if m.error_code == 0}

    def partitions_for(self, topic: str) -> list[PartitionInfo] | None:
        """The partitions of ``topic`` (sorted), or None when unknown or in error."""
        meta = self._topics.get(topic)
        if meta is None or meta.error_code:
            return None
        return [meta.partitions[i] for i in sorted(meta.partitions)]

    def partition_count(self, topic: str) -> int | None:
        """Number of partitions of ``topic`` if known and without error (the producer's hot
        path: no list built)."""
        meta = self._topics.get(topic)
        if meta is None or meta.error_code or not meta.partitions:
            return None
        return len(meta.partitions)

    def topic_error(self, topic: str) -> KafkaError | None:
        meta = self._topics.get(topic)
        return for_code(meta.error_code)() if meta is not None and meta.error_code else None

    def leader_for(self, tp: TopicPartition) -> int:
        """Leader node of ``tp``, or -1 when unknown."""
        meta = self._topics.get(tp.topic)
        if meta is None:
            return -1
        info = meta.partitions.get(tp.partition)
        return info.leader if info is not None and info.leader in self.brokers else -1

    async def wait_for_topic(
        self, topic: str, timeout_ms: int, *, wait_for_creation: bool = True
    ) -> list[PartitionInfo]:
        """Partitions of ``topic`` with leaders, refreshing metadata (with backoff) until it is
        known or ``timeout_ms`` passes. Non-retriable topic errors raise at once; so does
        UNKNOWN_TOPIC_OR_PARTITION unless ``wait_for_creation`` (a producer waits for
        auto-creation; a consumer asking for a topic that does not exist gets the error)."""
        deadline = time.monotonic() + timeout_ms / 1000
        backoff = self.retry_backoff_ms / 1000
        while True:
            parts = self.partitions_for(topic)
            if parts and all(p.leader >= 0 for p in parts):
                return parts
            error = self.topic_error(topic)
            if error is not None and (
                not error.retriable
                or (not wait_for_creation and isinstance(error, UnknownTopicOrPartition))
            ):
                raise error
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                what = error or (LeaderNotAvailable() if parts else UnknownTopicOrPartition())
                raise KafkaTimeoutError(f"metadata for topic {topic!r} not ready: {what}")
            if parts is not None or error is not None:
                await asyncio.sleep(min(backoff, remaining))
            try:
                async with asyncio.timeout(remaining):
                    await self.refresh([topic])
            except TimeoutError:
                continue
            except KafkaConnectionError:
                await asyncio.sleep(min(backoff, max(deadline - time.monotonic(), 0)))


async def find_coordinator(
    cluster: Cluster, key: str, key_type: int, what: str, timeout_ms: int, retry_backoff_ms: int
) -> tuple[int, Connection]:
    """FindCoordinator for ``key`` (key type 0: a group, 1: a transactional id): the
    coordinator's node id and a connection to it. Retriable errors (loading, not available)
    are retried every ``retry_backoff_ms`` for ``timeout_ms`` at most -- a broker that keeps
    answering one must not hang a commit or a stop() forever; ``what`` names the key in
    the timeout's message."""
    deadline = time.monotonic() + timeout_ms / 1000
    while True:
        any_conn = await cluster.any_connection()
        body = messages.FindCoordinatorRequest(key=key, key_type=key_type)
        resp = await any_conn.request(messages.FindCoordinator.key, body)
        if resp.error_code == 0:
            break
        error = for_code(resp.error_code)(resp.error_message or "FindCoordinator")
        if not error.retriable:
            raise error
        if time.monotonic() >= deadline:
            raise KafkaTimeoutError(
                f"no coordinator for {what} within {timeout_ms} ms (last error: {error})"
            )
        await asyncio.sleep(retry_backoff_ms / 1000)
    if resp.node_id not in cluster.brokers:
        await cluster.refresh([])
    return resp.node_id, await cluster.connection(resp.node_id)
