"""One handler per Kafka API: decoded request body in, response body out (or None = no response).

Handlers run on the event loop thread, one request at a time per connection (the connection
awaits each before decoding the next), against the single LogManager. This broker is a
single-node cluster: every partition's leader, only replica and only ISR member is ``node.id``,
so the high watermark of a partition is its log end offset after each append (acks=-1 == 1).

Errors: storage raises ``sluice.protocol.errors.KafkaError`` subclasses, which become the
per-partition
or per-topic error code; anything else is a bug, logged with its traceback and answered with
UNKNOWN_SERVER_ERROR (-1) for that partition only.

Fetch long-poll: a fetch that has fewer than ``min_bytes`` waits up to ``max_wait_ms`` on an
:class:`AppendNotifier` future registered on every partition it reads; Produce completes those
futures after appending, so a waiting fetch re-reads at once instead of polling.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from sluice.protocol import errors
from sluice.protocol.framing import (
    UnsupportedVersionError,
    api_versions_response,
    unsupported_version_response,
)
from sluice.protocol.messages import APIS
from sluice.protocol.schema import Message
from sluice.server.group.offsets_store import OFFSETS_TOPIC
from sluice.server.logging import get_logger

if TYPE_CHECKING:
    from sluice.server.core.config import Config
    from sluice.server.core.metrics import Metrics
    from sluice.server.storage.log import Log
    from sluice.server.storage.log_manager import LogManager

log = get_logger("sluice.handlers")

API_PRODUCE = 0
API_FETCH = 1
API_LIST_OFFSETS = 2
API_METADATA = 3
API_OFFSET_COMMIT = 8
API_OFFSET_FETCH = 9
API_FIND_COORDINATOR = 10
API_JOIN_GROUP = 11
API_HEARTBEAT = 12
API_LEAVE_GROUP = 13
API_SYNC_GROUP = 14
API_DESCRIBE_GROUPS = 15
API_LIST_GROUPS = 16
API_API_VERSIONS = 18
API_CREATE_TOPICS = 19
API_DELETE_TOPICS = 20
API_DELETE_RECORDS = 21
API_INIT_PRODUCER_ID = 22
API_DELETE_GROUPS = 42

CLUSTER_ID = "sluice-single-node"
NO_AUTHORIZED_OPERATIONS = -2147483648  # Kafka's "not requested" (INT32 min)
INVALID_REPLICA_ASSIGNMENT = 39
TOPIC_DELETION_DISABLED = 73

TopicPartition = tuple[str, int]

#: A handler result meaning "send nothing and close the connection" (acks=0 produce errors).
CLOSE_CONNECTION: Any = object()


@functools.cache
def _item_cls(cls: type[Message], field_name: str) -> type[Message]:
    """The generated class of the struct items of ``cls.field_name`` (schema-name agnostic)."""
    for f in cls._schema.fields:
        if f.name == field_name and f.struct is not None:
            return f.struct.cls
    raise AttributeError(f"{cls.__name__} has no struct field {field_name}")


def _response_cls(api_key: int) -> type[Message]:
    return APIS[api_key].response.cls


@functools.cache
def _fetch_classes() -> tuple[type[Message], type[Message], type[Message]]:
    """(FetchResponse, its topic struct, its partition struct): resolved once, not per request."""
    cls = _response_cls(API_FETCH)
    topic_cls = _item_cls(cls, "responses")
    return cls, topic_cls, _item_cls(topic_cls, "partitions")


@functools.cache
def _fetch_isolation(isolation_level: int) -> Any:
    """The Log read bound for a Fetch ``isolation_level`` (1 = read_committed)."""
    from sluice.server.storage.log import Isolation  # lazy, as elsewhere in this module

    return Isolation.TXN_COMMITTED if isolation_level == 1 else Isolation.HIGH_WATERMARK


def _code(exc: BaseException) -> int:
    return exc.code if isinstance(exc, errors.KafkaError) else errors.UnknownServerError.code


class AppendNotifier:
    """Wakes fetches waiting on a partition when records are appended to it.

    ``waiter(keys)`` registers one future on several partitions (synchronously, so no append
    can slip between a fetch's read and its registration); ``notify(key)`` completes every future
    registered on ``key``; ``wake_all()`` (shutdown) completes all of them.
    """

    def __init__(self) -> None:
        self._waiters: dict[TopicPartition, set[asyncio.Future[None]]] = {}

    def waiter(self, keys: Iterable[TopicPartition]) -> asyncio.Future[None]:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        for key in keys:
            self._waiters.setdefault(key, set()).add(fut)
        return fut

    def discard(self, fut: asyncio.Future[None], keys: Iterable[TopicPartition]) -> None:
        for key in keys:
            waiters = self._waiters.get(key)
            if waiters is not None:
                waiters.discard(fut)
                if not waiters:
                    del self._waiters[key]

    def notify(self, key: TopicPartition) -> None:
        waiters = self._waiters.pop(key, None)
        if waiters:
            for fut in waiters:
                if not fut.done():
                    fut.set_result(None)

    def wake_all(self) -> None:
        for key in list(self._waiters):
            self.notify(key)

    def waiting(self) -> int:
        """Number of partitions with at least one waiting fetch (tests, metrics)."""
        return len(self._waiters)


class Handlers:
    """Dispatch by API key. Created by ``Server`` once; shared by every connection."""

    def __init__(self, config: Config, log_manager: LogManager, metrics: Metrics) -> None:
        self.config = config
        self.logs = log_manager
        self.metrics = metrics
        self.notifier = AppendNotifier()
        self._stopping = False
        advertised = config.advertised_listener
        self._advertised = (advertised.host, advertised.port)
        self._dispatch: dict[int, Callable[[Any, Any], Any]] = {
            API_API_VERSIONS: self.api_versions,
            API_METADATA: self.metadata,
            API_PRODUCE: self.produce,
            API_FETCH: self.fetch,
            API_LIST_OFFSETS: self.list_offsets,
            API_CREATE_TOPICS: self.create_topics,
            API_DELETE_TOPICS: self.delete_topics,
            API_DELETE_RECORDS: self.delete_records,
            API_INIT_PRODUCER_ID: self.init_producer_id,
            API_FIND_COORDINATOR: self.find_coordinator,
            API_JOIN_GROUP: self.join_group,
            API_SYNC_GROUP: self.sync_group,
            API_HEARTBEAT: self.heartbeat,
            API_LEAVE_GROUP: self.leave_group,
            API_OFFSET_COMMIT: self.offset_commit,
            API_OFFSET_FETCH: self.offset_fetch,
            API_LIST_GROUPS: self.list_groups,
            API_DESCRIBE_GROUPS: self.describe_groups,
            API_DELETE_GROUPS: self.delete_groups,
        }
        # Counter names built once (one per request otherwise).
        self._request_metric = {key: f"requests.{key}" for key in self._dispatch}
        # Consumer groups and committed offsets (sluice.server.group.coordinator): loads
        # __consumer_offsets now, so it must be built on the running loop (Server.start does).
        from sluice.server.group.coordinator import GroupConfig, GroupCoordinator
        from sluice.server.group.offsets_store import OffsetsStore

        group_config = GroupConfig.from_properties(config.properties)
        self.groups = GroupCoordinator(
            OffsetsStore(log_manager, group_config.offsets_topic_num_partitions),
            group_config,
            topic_exists=lambda t, p: log_manager.get_log(t, p) is not None,
        )
        self.groups.load()
        # Producer ids: start at the wall clock in ms so ids stay unique across restarts
        # without persisting a counter (Kafka allocates blocks through its controller).
        self._next_producer_id = int(time.time() * 1000)

    def set_advertised(self, host: str, port: int) -> None:
        self._advertised = (host, port)

    def shutting_down(self) -> None:
        """Server shutdown: long-polls answer now with what they have."""
        self._stopping = True
        self.notifier.wake_all()
        self.groups.shutdown()

    async def handle(self, header: Any, body: Any) -> Any:
        """Response body for ``body``; None: send nothing; :data:`CLOSE_CONNECTION`: close.

        Never raises for a Kafka error (those become error codes in the body).
        """
        result = self.dispatch(header, body)
        if asyncio.iscoroutine(result):
            result = await result
        return result

    def dispatch(self, header: Any, body: Any) -> Any:
        """:meth:`handle` without the coroutine: the result, or a coroutine to await for it
        (handlers that wait: long-poll Fetch, group joins). The connection's per-request path
        calls this, so most requests cost no coroutine at all."""
        api_key = header.api_key
        self.metrics.inc(self._request_metric[api_key])
        return self._dispatch[api_key](header, body)  # callers check serves() first

    @property
    def served_api_keys(self) -> frozenset[int]:
        """API keys with a handler: ApiVersions advertises the codec's versions of exactly these."""
        return frozenset(self._dispatch)

    def serves(self, api_key: int) -> bool:
        """False for an API the codec knows but no handler serves (it is not advertised)."""
        return api_key in self._dispatch

    def unsupported_version(self, exc: UnsupportedVersionError) -> list[Any] | None:
        """Response parts answering an unsupported request, or None = close the connection.

        Only ApiVersions has a defined answer: a v0 body with UNSUPPORTED_VERSION and our
        version list, so the client can pick a version it shares with us (KIP-511).
        """
        self.metrics.inc("requests.unsupported_version")
        return unsupported_version_response(exc, self.served_api_keys)

    # --- ApiVersions (18) ------------------------------------------------------------------------

    def api_versions(self, header: Any, body: Any) -> Message:
        return api_versions_response(0, self.served_api_keys)

    # --- Metadata (3) ----------------------------------------------------------------------------

    def metadata(self, header: Any, body: Any) -> Message:
        cls = _response_cls(API_METADATA)
        broker_cls = _item_cls(cls, "brokers")
        topic_cls = _item_cls(cls, "topics")
        part_cls = _item_cls(topic_cls, "partitions")
        node = self.config.node_id
        host, port = self._advertised
        existing = self.logs.topics()
        names = sorted(existing) if body.topics is None else [t.name for t in body.topics]
        allow_auto = getattr(body, "allow_auto_topic_creation", True)
        topics = []
        for name in names:
            error = 0
            count = existing.get(name) if name is not None else None
            if count is None:
                error = errors.UnknownTopicOrPartition.code
                if name is not None and allow_auto and self.config.auto_create_topics_enable:
                    try:
                        self.logs.create_topic(name, self.config.num_partitions)
                        count = self.config.num_partitions
                        error = 0
                        self.metrics.inc("topics.auto_created")
                        log.info("auto-created topic", topic=name, partitions=count)
                    except errors.KafkaError as exc:
                        error = exc.code
                    existing = self.logs.topics()
            partitions = [
                part_cls(
                    error_code=0,
                    partition_index=i,
                    leader_id=node,
                    leader_epoch=0,
                    replica_nodes=[node],
                    isr_nodes=[node],
                    offline_replicas=[],
                )
                for i in range(count or 0)
            ]
            topics.append(
                topic_cls(
                    error_code=error,
                    name=name,
                    is_internal=name == OFFSETS_TOPIC,
                    partitions=partitions,
                    topic_authorized_operations=NO_AUTHORIZED_OPERATIONS,
                )
            )
        return cls(
            throttle_time_ms=0,
            brokers=[broker_cls(node_id=node, host=host, port=port, rack=None)],
            cluster_id=CLUSTER_ID,
            controller_id=node,
            topics=topics,
            cluster_authorized_operations=NO_AUTHORIZED_OPERATIONS,
        )

    # --- Produce (0) -----------------------------------------------------------------------------

    def produce(self, header: Any, body: Any) -> Message | None:
        cls = _response_cls(API_PRODUCE)
        topic_cls = _item_cls(cls, "responses")
        part_cls = _item_cls(topic_cls, "partition_responses")
        acks = body.acks
        bad_acks = acks not in (-1, 0, 1)
        responses = []
        for topic in body.topic_data:
            parts = []
            for pd in topic.partition_data:
                if bad_acks:
                    parts.append(self._produce_error(part_cls, pd.index, 21))
                    continue
                parts.append(self._append(part_cls, topic.name, pd.index, pd.records))
            responses.append(topic_cls(name=topic.name, partition_responses=parts))
        if acks == 0:
            # acks=0: the client expects no response at all (Kafka sends none). On an error
            # Kafka closes the connection instead, the only way such a client can notice.
            self.metrics.inc("produce.acks0")
            failed = [p for t in responses for p in t.partition_responses if p.error_code]
            if failed:
                log.info("acks=0 produce failed: closing the connection", errors=len(failed))
                return CLOSE_CONNECTION
            return None
        return cls(responses=responses, throttle_time_ms=0)

    @staticmethod
    def _produce_error(
        part_cls: type[Message], index: int, code: int, msg: str | None = None
    ) -> Message:
        return part_cls(
            index=index,
            error_code=code,
            base_offset=-1,
            log_append_time_ms=-1,
            log_start_offset=-1,
            error_message=msg,
        )

    def _append(self, part_cls: type[Message], topic: str, index: int, records: Any) -> Message:
        log_ = self.logs.get_log(topic, index)
        if log_ is None:
            return self._produce_error(part_cls, index, errors.UnknownTopicOrPartition.code)
        if records is None or len(records) == 0:
            return self._produce_error(part_cls, index, errors.InvalidRecord.code, "no records")
        try:
            info = log_.append_as_leader(records)
        except errors.KafkaError as exc:
            self.metrics.inc("produce.errors")
            log.info("produce rejected", topic=topic, partition=index, error=str(exc))
            return self._produce_error(part_cls, index, exc.code, str(exc))
        except Exception as exc:
            log.exception("append failed", topic=topic, partition=index)
            return self._produce_error(part_cls, index, -1, type(exc).__name__)
        # Single replica: every appended record is committed as soon as it is in the log.
        log_.maybe_increment_high_watermark(log_.log_end_offset)
        self.notifier.notify((topic, index))
        self.metrics.inc("produce.records", info.record_count)
        return part_cls(
            index=index,
            error_code=0,
            base_offset=info.first_offset,
            log_append_time_ms=info.log_append_time,
            log_start_offset=log_.log_start_offset,
            error_message=None,
        )

    # --- Fetch (1) -------------------------------------------------------------------------------

    def fetch(self, header: Any, body: Any) -> Any:
        """The response, or a coroutine for it when the request has to wait (long poll).

        Not a coroutine function: the usual fetch (data there, or ``max_wait_ms`` 0) is answered
        without creating and driving a coroutine; :meth:`handle` awaits what needs awaiting.
        """
        isolation = _fetch_isolation(body.isolation_level)
        wanted = [
            (t.topic, p.partition, p.fetch_offset, p.partition_max_bytes)
            for t in body.topics
            for p in t.partitions
        ]
        deadline = time.monotonic() + max(body.max_wait_ms, 0) / 1000
        response, size, had_error = self._read_fetch(body, wanted, isolation)
        if size >= body.min_bytes or had_error or not wanted or self._stopping:
            return response
        if time.monotonic() >= deadline:
            return response
        return self._fetch_wait(body, wanted, isolation, deadline)

    async def _fetch_wait(
        self, body: Any, wanted: list[tuple[str, int, int, int]], isolation: Any, deadline: float
    ) -> Message:
        """Long poll: wait for an append to a wanted partition (or the deadline), re-read."""
        keys = [(topic, part) for topic, part, _, _ in wanted]
        while True:
            fut = self.notifier.waiter(keys)
            try:
                await asyncio.wait({fut}, timeout=max(deadline - time.monotonic(), 0))
            finally:
                self.notifier.discard(fut, keys)
                fut.cancel()
            if not fut.done() or fut.cancelled():
                # timed out: one last read, whatever it holds
                return self._read_fetch(body, wanted, isolation)[0]
            self.metrics.inc("fetch.woken")
            response, size, had_error = self._read_fetch(body, wanted, isolation)
            if (
                size >= body.min_bytes
                or had_error
                or self._stopping
                or time.monotonic() >= deadline
            ):
                return response

    def _read_fetch(
        self, body: Any, wanted: list[tuple[str, int, int, int]], isolation: Any
    ) -> tuple[Message, int, bool]:
        # Hot path (every Fetch, every partition): classes resolved once, the log looked up
        # through the manager's dict, one response object per partition.
        cls, topic_cls, part_cls = _fetch_classes()
        get_log = self.logs.get_log
        budget = body.max_bytes if body.max_bytes > 0 else 0
        min_one = True  # Kafka: the first partition with data may exceed the limits (KIP-74)
        total = 0
        had_error = False
        topics: dict[str, list[Message]] = {}
        for topic, part, offset, part_max in wanted:
            log_ = get_log(topic, part)
            entry: Message
            if log_ is None:
                had_error = True
                entry = part_cls(
                    partition_index=part,
                    error_code=errors.UnknownTopicOrPartition.code,
                    high_watermark=-1,
                    last_stable_offset=-1,
                    log_start_offset=-1,
                    aborted_transactions=None,
                    preferred_read_replica=-1,
                    records=b"",  # Kafka sends empty (not null) records with an error
                )
            else:
                limit = max(min(part_max, budget - total), 0)
                try:
                    info = log_.read(offset, limit, isolation, min_one_message=min_one)
                except Exception as exc:
                    if not isinstance(exc, errors.KafkaError):
                        log.exception("fetch read failed", topic=topic, partition=part)
                    had_error = True
                    entry = part_cls(
                        partition_index=part,
                        error_code=_code(exc),
                        high_watermark=log_.high_watermark,
                        last_stable_offset=log_.high_watermark,
                        log_start_offset=log_.log_start_offset,
                        aborted_transactions=None,
                        preferred_read_replica=-1,
                        records=b"",  # Kafka sends empty (not null) records with an error
                    )
                else:
                    records = info.slice
                    hw = info.high_watermark
                    size = records.size if records is not None else 0
                    if size:
                        total += size
                        min_one = False
                    entry = part_cls(
                        partition_index=part,
                        error_code=0,
                        high_watermark=hw,
                        last_stable_offset=hw,
                        log_start_offset=info.log_start_offset,
                        aborted_transactions=None,
                        preferred_read_replica=-1,
                        records=records if size else b"",
                    )
            entries = topics.get(topic)
            if entries is None:
                topics[topic] = [entry]
            else:
                entries.append(entry)
        response = cls(
            throttle_time_ms=0,
            error_code=0,
            session_id=0,
            responses=[topic_cls(topic=name, partitions=parts) for name, parts in topics.items()],
        )
        return response, total, had_error

    # --- ListOffsets (2) -------------------------------------------------------------------------

    def list_offsets(self, header: Any, body: Any) -> Message:
        from sluice.server.storage.log import Isolation

        cls = _response_cls(API_LIST_OFFSETS)
        topic_cls = _item_cls(cls, "topics")
        part_cls = _item_cls(topic_cls, "partitions")
        isolation = (
            Isolation.TXN_COMMITTED
            if getattr(body, "isolation_level", 0) == 1
            else Isolation.HIGH_WATERMARK
        )
        topics = []
        for topic in body.topics:
            parts = []
            for p in topic.partitions:
                log_ = self.logs.get_log(topic.name, p.partition_index)
                code, ts, offset = 0, -1, -1
                if log_ is None:
                    code = errors.UnknownTopicOrPartition.code
                else:
                    try:
                        found = log_.fetch_offset_by_timestamp(p.timestamp, isolation)
                    except Exception as exc:
                        if not isinstance(exc, errors.KafkaError):
                            log.exception("list offsets failed", topic=topic.name)
                        code = _code(exc)
                    else:
                        if found is not None:
                            ts, offset = found.timestamp, found.offset
                parts.append(
                    part_cls(
                        partition_index=p.partition_index,
                        error_code=code,
                        timestamp=ts,
                        offset=offset,
                        leader_epoch=0 if code == 0 and offset >= 0 else -1,
                    )
                )
            topics.append(topic_cls(name=topic.name, partitions=parts))
        return cls(throttle_time_ms=0, topics=topics)

    # --- CreateTopics (19) -----------------------------------------------------------------------

    def create_topics(self, header: Any, body: Any) -> Message:
        cls = _response_cls(API_CREATE_TOPICS)
        result_cls = _item_cls(cls, "topics")
        seen: dict[str, int] = {}
        for t in body.topics:
            seen[t.name] = seen.get(t.name, 0) + 1
        results = []
        for t in body.topics:
            code, message = 0, None
            try:
                if seen[t.name] > 1:
                    raise errors.InvalidRequest(f"topic {t.name!r} appears more than once")
                partitions = self._partitions_for(t)
                configs = {c.name: c.value for c in t.configs}
                if any(v is None for v in configs.values()):
                    raise errors.InvalidConfig("null config value")
                if body.validate_only:
                    self.logs.validate_new_topic(t.name, partitions, configs)
                else:
                    self.logs.create_topic(t.name, partitions, configs)
                    log.info("created topic", topic=t.name, partitions=partitions)
            except _RawError as exc:
                code, message = exc.code, str(exc)
            except errors.KafkaError as exc:
                code, message = exc.code, str(exc.args[0])
            except Exception as exc:
                log.exception("create topic failed", topic=t.name)
                code, message = -1, type(exc).__name__
            results.append(result_cls(name=t.name, error_code=code, error_message=message))
        return cls(throttle_time_ms=0, topics=results)

    def _partitions_for(self, t: Any) -> int:
        node = self.config.node_id
        if t.assignments:
            if t.num_partitions != -1 or t.replication_factor != -1:
                raise errors.InvalidRequest(
                    "num_partitions and replication_factor must be -1 with assignments"
                )
            for a in t.assignments:
                if list(a.broker_ids) != [node]:
                    raise _RawError(
                        INVALID_REPLICA_ASSIGNMENT,
                        f"single broker: every partition's replicas must be [{node}]",
                    )
            return len(t.assignments)
        rf = t.replication_factor
        if rf == -1:
            rf = self.config.default_replication_factor
        if rf != 1:
            raise errors.InvalidReplicationFactor(
                f"replication factor {rf}: a single broker supports only 1"
            )
        n = t.num_partitions
        if n == -1:
            n = self.config.num_partitions
        if n <= 0:
            raise errors.InvalidPartitions(f"number of partitions must be > 0, got {n}")
        return int(n)

    # --- DeleteTopics (20) -----------------------------------------------------------------------

    def delete_topics(self, header: Any, body: Any) -> Message:
        cls = _response_cls(API_DELETE_TOPICS)
        result_cls = _item_cls(cls, "responses")
        results = []
        for name in body.topic_names:
            code = 0
            if not self.config.delete_topic_enable:
                code = TOPIC_DELETION_DISABLED
            else:
                count = self.logs.topics().get(name, 0)
                try:
                    self.logs.delete_topic(name)
                    log.info("deleted topic", topic=name)
                except Exception as exc:
                    if not isinstance(exc, errors.KafkaError):
                        log.exception("delete topic failed", topic=name)
                    code = _code(exc)
                else:
                    for i in range(count):  # waiting fetches answer (with an error) now
                        self.notifier.notify((name, i))
            results.append(result_cls(name=name, error_code=code))
        return cls(throttle_time_ms=0, responses=results)

    # --- DeleteRecords (21) ----------------------------------------------------------------------

    def delete_records(self, header: Any, body: Any) -> Message:
        cls = _response_cls(API_DELETE_RECORDS)
        topic_cls = _item_cls(cls, "topics")
        part_cls = _item_cls(topic_cls, "partitions")
        topics = []
        for topic in body.topics:
            parts = []
            for p in topic.partitions:
                log_: Log | None = self.logs.get_log(topic.name, p.partition_index)
                code, low = 0, -1
                if log_ is None:
                    code = errors.UnknownTopicOrPartition.code
                else:
                    try:
                        low = log_.delete_records(p.offset)
                    except Exception as exc:
                        if not isinstance(exc, errors.KafkaError):
                            log.exception("delete records failed", topic=topic.name)
                        code = _code(exc)
                parts.append(
                    part_cls(partition_index=p.partition_index, low_watermark=low, error_code=code)
                )
            topics.append(topic_cls(name=topic.name, partitions=parts))
        return cls(throttle_time_ms=0, topics=topics)

    # --- InitProducerId (22) ---------------------------------------------------------------------

    def init_producer_id(self, header: Any, body: Any) -> Message:
        """A fresh producer id, epoch 0, for an idempotent producer.

        Transactions are not implemented: a transactional id gets INVALID_REQUEST. Sequence and
        epoch checks on append are the storage layer's (sluice.server.storage.producer_state via
        Log).
        """
        cls = _response_cls(API_INIT_PRODUCER_ID)
        if body.transactional_id is not None:
            return cls(throttle_time_ms=0, error_code=errors.InvalidRequest.code,
                       producer_id=-1, producer_epoch=-1)  # fmt: skip
        producer_id = self._next_producer_id
        self._next_producer_id += 1
        self.metrics.inc("producer_ids.allocated")
        return cls(throttle_time_ms=0, error_code=0, producer_id=producer_id, producer_epoch=0)

    # --- Consumer groups (10-16, 42) and committed offsets (8, 9): sluice.server.group.coordinator
    # --

    def find_coordinator(self, header: Any, body: Any) -> Message:
        """This broker coordinates every group (key type 0); transactions (1) are not served."""
        cls = _response_cls(API_FIND_COORDINATOR)
        host, port = self._advertised
        code = self.groups.ensure_ready() if body.key_type == 0 else 15
        if code:
            message = "transactions are not supported" if body.key_type else None
            return cls(throttle_time_ms=0, error_code=code, error_message=message, node_id=-1,
                       host="", port=-1)  # fmt: skip
        return cls(throttle_time_ms=0, error_code=0, error_message=None,
                   node_id=self.config.node_id, host=host, port=port)  # fmt: skip

    async def join_group(self, header: Any, body: Any) -> Message:
        cls = _response_cls(API_JOIN_GROUP)
        member_cls = _item_cls(cls, "members")
        result = await self.groups.join_group(
            group_id=body.group_id,
            member_id=body.member_id,
            group_instance_id=body.group_instance_id,
            client_id=header.client_id or "",
            client_host="",
            session_timeout_ms=body.session_timeout_ms,
            rebalance_timeout_ms=body.rebalance_timeout_ms,
            protocol_type=body.protocol_type,
            protocols=[(p.name, bytes(p.metadata)) for p in body.protocols],
            require_known_member_id=header.api_version >= 4,
        )
        self.metrics.inc("groups.joins")
        return cls(
            throttle_time_ms=0,
            error_code=result.error_code,
            generation_id=result.generation_id,
            protocol_name=result.protocol_name,
            leader=result.leader,
            member_id=result.member_id,
            members=[
                member_cls(member_id=m, group_instance_id=i, metadata=md)
                for m, i, md in result.members
            ],
        )

    async def sync_group(self, header: Any, body: Any) -> Message:
        code, assignment = await self.groups.sync_group(
            group_id=body.group_id,
            generation_id=body.generation_id,
            member_id=body.member_id,
            group_instance_id=body.group_instance_id,
            assignments=[(a.member_id, bytes(a.assignment)) for a in body.assignments],
        )
        return _response_cls(API_SYNC_GROUP)(
            throttle_time_ms=0, error_code=code, assignment=assignment
        )

    def heartbeat(self, header: Any, body: Any) -> Message:
        code = self.groups.heartbeat(
            group_id=body.group_id,
            generation_id=body.generation_id,
            member_id=body.member_id,
            group_instance_id=body.group_instance_id,
        )
        return _response_cls(API_HEARTBEAT)(throttle_time_ms=0, error_code=code)

    def leave_group(self, header: Any, body: Any) -> Message:
        cls = _response_cls(API_LEAVE_GROUP)
        member_cls = _item_cls(cls, "members")
        if header.api_version >= 3:
            who = [(m.member_id, m.group_instance_id) for m in body.members]
        else:
            who = [(body.member_id, None)]
        code, results = self.groups.leave_group(body.group_id, who)
        if header.api_version < 3 and code == 0 and results:
            code = results[0]
        return cls(
            throttle_time_ms=0,
            error_code=code,
            members=[
                member_cls(member_id=m, group_instance_id=i, error_code=c)
                for (m, i), c in zip(who, results, strict=False)
            ],
        )

    def offset_commit(self, header: Any, body: Any) -> Message:
        cls = _response_cls(API_OFFSET_COMMIT)
        topic_cls = _item_cls(cls, "topics")
        part_cls = _item_cls(topic_cls, "partitions")
        wanted = [
            (t.name, p.partition_index, p.committed_offset, p.committed_leader_epoch,
             p.committed_metadata)
            for t in body.topics
            for p in t.partitions
        ]  # fmt: skip
        codes = self.groups.commit_offsets(
            group_id=body.group_id,
            generation_id=body.generation_id_or_member_epoch,
            member_id=body.member_id,
            group_instance_id=body.group_instance_id,
            offsets=wanted,
        )
        self.metrics.inc("groups.offset_commits")
        topics: dict[str, list[Message]] = {}
        for (topic, part, *_rest), code in zip(wanted, codes, strict=True):
            topics.setdefault(topic, []).append(part_cls(partition_index=part, error_code=code))
        return cls(
            throttle_time_ms=0,
            topics=[topic_cls(name=n, partitions=ps) for n, ps in topics.items()],
        )

    def offset_fetch(self, header: Any, body: Any) -> Message:
        cls = _response_cls(API_OFFSET_FETCH)
        topic_cls = _item_cls(cls, "topics")
        part_cls = _item_cls(topic_cls, "partitions")
        wanted = (
            None
            if body.topics is None
            else [(t.name, p) for t in body.topics for p in t.partition_indexes]
        )
        try:
            found = self.groups.fetch_offsets(body.group_id, wanted)
        except Exception as exc:
            return cls(throttle_time_ms=0, topics=[], error_code=_code(exc))
        topics: dict[str, list[Message]] = {}
        for topic, part, value in found:
            topics.setdefault(topic, []).append(
                part_cls(
                    partition_index=part,
                    committed_offset=value.offset if value else -1,
                    committed_leader_epoch=value.leader_epoch if value else -1,
                    metadata=value.metadata if value else "",
                    error_code=0,
                )
            )
        return cls(
            throttle_time_ms=0,
            topics=[topic_cls(name=n, partitions=ps) for n, ps in topics.items()],
            error_code=0,
        )

    def list_groups(self, header: Any, body: Any) -> Message:
        cls = _response_cls(API_LIST_GROUPS)
        group_cls = _item_cls(cls, "groups")
        return cls(
            throttle_time_ms=0,
            error_code=0,
            groups=[group_cls(group_id=g, protocol_type=t) for g, t in self.groups.list_groups()],
        )

    def describe_groups(self, header: Any, body: Any) -> Message:
        cls = _response_cls(API_DESCRIBE_GROUPS)
        group_cls = _item_cls(cls, "groups")
        member_cls = _item_cls(group_cls, "members")
        described = []
        for group_id in body.groups:
            group = self.groups.describe_group(group_id)
            if group is None:
                # Kafka (v0-5): an unknown group is described as Dead, without an error.
                described.append(
                    group_cls(error_code=0, group_id=group_id, group_state="Dead", members=[])
                )
                continue
            stable = group.state.value == "Stable"
            protocol = group.protocol_name or ""
            described.append(
                group_cls(
                    error_code=0,
                    group_id=group_id,
                    group_state=group.state.value,
                    protocol_type=group.protocol_type or "",
                    protocol_data=protocol if stable else "",
                    members=[
                        member_cls(
                            member_id=m.member_id,
                            group_instance_id=m.group_instance_id,
                            client_id=m.client_id,
                            client_host=m.client_host,
                            member_metadata=m.metadata_for(protocol) if stable else b"",
                            member_assignment=m.assignment if stable else b"",
                        )
                        for m in group.members.values()
                    ],
                )
            )
        return cls(throttle_time_ms=0, groups=described)

    def delete_groups(self, header: Any, body: Any) -> Message:
        cls = _response_cls(API_DELETE_GROUPS)
        result_cls = _item_cls(cls, "results")
        codes = self.groups.delete_groups(list(body.groups_names))
        return cls(
            throttle_time_ms=0,
            results=[
                result_cls(group_id=g, error_code=c)
                for g, c in zip(body.groups_names, codes, strict=True)
            ],
        )


class _RawError(Exception):
    """A Kafka error code sluice.protocol.errors has no class for (e.g.
    INVALID_REPLICA_ASSIGNMENT)."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
