"""The asyncio producer: facade -> accumulator -> sender -> connection (STYLE item 8).

Usage::

    async with Producer("127.0.0.1:9092", linger_ms=5, compression="lz4") as producer:
        fut = await producer.send("events", b"value", key=b"user-1")   # queued
        meta = await fut                                                 # delivered
        meta = await producer.send_and_wait("events", b"other")
        await producer.flush()

* :meth:`Producer.send` picks the partition (explicit, else Kafka's murmur2 of the key, else
  sticky-random), appends the record to that partition's open batch in the
  :class:`~sluice.client.accumulator.RecordAccumulator` and returns a delivery future resolving to a
  :class:`~sluice.client.accumulator.RecordMetadata`. It awaits only when the buffer is full
  (backpressure) or the topic's metadata is not known yet.
* One sender task drains ready batches (full, lingered, retried, flushing), groups them by the
  partition leader and sends one Produce request per broker, with up to
  ``max_in_flight_requests_per_connection`` requests pipelined on each connection.
* Retriable errors (Kafka's ``retriable`` flag, broken connections, timeouts) put the batch back
  in front of its partition after ``retry_backoff_ms`` (doubling up to
  ``retry_backoff_max_ms``), refreshing metadata when the leader may have moved, until
  ``retries`` or ``delivery_timeout_ms`` run out. Other errors fail the batch's futures with the
  :class:`sluice.protocol.errors.KafkaError` subclass of the code.

Ordering: records of one partition are sent in order. As with Kafka's non-idempotent producer,
a retried batch may land after a later batch of the same partition when several requests are in
flight; set ``max_in_flight_requests_per_connection=1`` for strict order under retries.

Idempotence (``enable_idempotence=True``, needs ``acks=-1``): the producer gets a producer id
and epoch (InitProducerId) and numbers each partition's batches (``baseSequence``) when they are
first built; a retry resends the same bytes, which the broker recognises (it answers with the
original offset), so a request whose response was lost is never written twice. One batch per
partition is in flight at a time (requests to a broker still pipeline across partitions), which
keeps each partition's sequences in order under retries. A batch that fails for good leaves a
hole in its partition's sequence: the producer then takes a fresh producer id (sequences
restart at 0), as Kafka's producer resets its state.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Iterable, Mapping, Sequence

from sluice.net.security import ClientSecurity
from sluice.protocol import messages
from sluice.protocol.errors import (
    KafkaError,
    LeaderNotAvailable,
    NotLeaderOrFollower,
    UnknownTopicOrPartition,
    for_code,
)
from sluice.protocol.records import (
    COMPRESSION_GZIP,
    COMPRESSION_LZ4,
    COMPRESSION_NONE,
    COMPRESSION_SNAPPY,
    COMPRESSION_ZSTD,
)

from .accumulator import ProducerBatch, RecordAccumulator, RecordMetadata
from .cluster import Cluster, TopicPartition
from .errors import (
    KafkaConnectionError,
    KafkaTimeoutError,
    ProducerClosedError,
    is_retriable,
)
from .partitioner import StickyPartitioner, default_partition

__all__ = ["COMPRESSION_CODECS", "Producer", "RecordMetadata"]

PRODUCE = messages.Produce.key
DUPLICATE_SEQUENCE_NUMBER = 46

#: ``compression=`` names -> RecordBatch codec ids.
COMPRESSION_CODECS = {
    None: COMPRESSION_NONE,
    "none": COMPRESSION_NONE,
    "gzip": COMPRESSION_GZIP,
    "snappy": COMPRESSION_SNAPPY,
    "lz4": COMPRESSION_LZ4,
    "zstd": COMPRESSION_ZSTD,
}

# Errors after which the partition's leader may have changed (or the topic appeared/vanished).
_METADATA_ERRORS = (UnknownTopicOrPartition, NotLeaderOrFollower, LeaderNotAvailable)

Bytes = bytes | bytearray | memoryview | str


def _as_bytes(data: Bytes | None) -> bytes | None:
    if data is None or isinstance(data, bytes):
        return data
    if isinstance(data, str):
        return data.encode("utf-8")
    return bytes(data)


class Producer:
    """An asyncio Kafka producer. ``async with Producer(...)`` or ``start()`` / ``stop()``.

    Parameters follow the Java producer's names: ``acks`` (0, 1, -1 or "all"), ``linger_ms``,
    ``batch_size`` (bytes), ``compression`` (None, "gzip", "snappy", "lz4", "zstd"),
    ``retries``, ``retry_backoff_ms``, ``retry_backoff_max_ms``, ``request_timeout_ms``,
    ``delivery_timeout_ms``, ``max_block_ms``, ``buffer_memory``, ``max_request_size``,
    ``max_in_flight_requests_per_connection``. ``max_queued_batches_per_partition`` (0: no
    limit, only ``buffer_memory``) bounds the full batches waiting per partition: ``send`` waits
    beyond it, which keeps delivery latency low when the application outruns the broker.
    ``partitioner(key, num_partitions) -> int`` replaces the murmur2 default for keyed records.
    ``security``: TLS / SASL, as :class:`sluice.net.security.ClientSecurity` or Kafka's client
    properties (``{"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
    "sasl.username": ..., "sasl.password": ..., "ssl.ca.location": ...}``).
    """

    def __init__(
        self,
        bootstrap_servers: str | Sequence[str] = "127.0.0.1:9092",
        *,
        client_id: str | None = "sluice-producer",
        acks: int | str = -1,
        linger_ms: float = 5,
        batch_size: int = 16_384,
        compression: str | None = None,
        retries: int = 2_147_483_647,
        retry_backoff_ms: int = 100,
        retry_backoff_max_ms: int = 1_000,
        request_timeout_ms: int = 30_000,
        delivery_timeout_ms: int = 120_000,
        max_block_ms: int = 60_000,
        buffer_memory: int = 32 * 1024 * 1024,
        max_request_size: int = 1_048_576,
        max_in_flight_requests_per_connection: int = 5,
        max_queued_batches_per_partition: int = 3,
        partitioner: Callable[[bytes, int], int] = default_partition,
        enable_idempotence: bool = False,
        security: ClientSecurity | Mapping[str, str] | None = None,
    ) -> None:
        if acks == "all":
            acks = -1
        if acks not in (-1, 0, 1):
            raise ValueError(f"acks must be 0, 1, -1 or 'all', not {acks!r}")
        if compression not in COMPRESSION_CODECS:
            raise ValueError(f"unknown compression {compression!r}")
        self.acks = int(acks)
        if enable_idempotence and (self.acks != -1 or retries < 1):
            raise ValueError("enable_idempotence needs acks=-1 (all) and retries > 0")
        self.enable_idempotence = enable_idempotence
        self.producer_id = -1
        self.producer_epoch = -1
        self._sequences: dict[TopicPartition, int] = {}  # next base sequence per partition
        self._busy: set[TopicPartition] = set()  # idempotent: partitions with a batch in flight
        self._reset_producer_id = False
        self.retries = retries
        self.retry_backoff_ms = retry_backoff_ms
        self.retry_backoff_max_ms = retry_backoff_max_ms
        self.request_timeout_ms = request_timeout_ms
        self.delivery_timeout_ms = delivery_timeout_ms
        self.max_block_ms = max_block_ms
        self.max_in_flight = max(1, max_in_flight_requests_per_connection)
        self.partitioner = partitioner
        self._cluster = Cluster(
            bootstrap_servers,
            client_id=client_id,
            request_timeout_ms=request_timeout_ms,
            retry_backoff_ms=retry_backoff_ms,
            security=security,
        )
        self._accumulator_args = {
            "batch_size": batch_size,
            "linger_ms": linger_ms,
            "compression": COMPRESSION_CODECS[compression],
            "buffer_memory": buffer_memory,
            "max_request_size": max_request_size,
            "max_queued_batches": max_queued_batches_per_partition,
        }
        self._accumulator: RecordAccumulator | None = None
        self._sticky = StickyPartitioner()
        self._sender: asyncio.Task[None] | None = None
        self._in_flight: dict[int, int] = {}  # node -> requests in flight
        self._requests: set[asyncio.Task[None]] = set()
        self._metadata_stale = False
        self._closed = False
        self._started = False

    # --- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        """Connect to the cluster and start the sender task."""
        if self._started:
            return
        self._accumulator = RecordAccumulator(**self._accumulator_args)  # type: ignore[arg-type]
        await self._cluster.start()
        if self.enable_idempotence:
            await self._init_producer_id()
        self._sender = asyncio.get_running_loop().create_task(self._run_sender())
        self._started = True

    async def stop(self, timeout: float | None = None) -> None:
        """Send what is buffered (bounded by ``timeout`` seconds, default delivery_timeout_ms),
        then close. Records still unsent after that fail with :class:`ProducerClosedError`."""
        if self._closed:
            return
        self._closed = True
        acc = self._accumulator
        if acc is not None and self._sender is not None:
            acc.closing = True
            acc.wakeup.set()
            bound = timeout if timeout is not None else self.delivery_timeout_ms / 1000
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(bound):
                    await asyncio.shield(self._sender)
            self._sender.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sender
            closed = ProducerClosedError("producer closed before the record was sent")
            acc.abort_all(closed)
            for batch in acc.pending():
                batch.fail(closed)
        for task in list(self._requests):
            task.cancel()
        await self._cluster.close()

    async def __aenter__(self) -> Producer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # --- sending -----------------------------------------------------------------------------

    async def partitions_for(self, topic: str) -> list[int]:
        """Partition ids of ``topic`` (fetches metadata; the broker may auto-create it)."""
        parts = await self._cluster.wait_for_topic(topic, self.max_block_ms)
        return [p.partition for p in parts]

    async def send(
        self,
        topic: str,
        value: Bytes | None = None,
        key: Bytes | None = None,
        *,
        partition: int | None = None,
        timestamp_ms: int | None = None,
        headers: Iterable[tuple[str, Bytes | None]] | None = None,
    ) -> asyncio.Future[RecordMetadata]:
        """Queue one record; return its delivery future (await it for the offset).

        ``value``/``key``/header values: bytes-like, str (UTF-8) or None. Raises
        :class:`ProducerClosedError` after ``stop()``, :class:`KafkaTimeoutError` when metadata or
        buffer room is not available within ``max_block_ms``, and the topic's error (e.g.
        InvalidTopic) when the broker reports one.
        """
        if self._closed or not self._started:
            raise ProducerClosedError("producer is not running (use `async with` or start())")
        acc = self._accumulator
        assert acc is not None
        key_b = _as_bytes(key)
        value_b = _as_bytes(value)
        hdrs = [(k, _as_bytes(v)) for k, v in headers] if headers else []
        n = self._cluster.partition_count(topic)
        if n is None:
            n = len(await self._cluster.wait_for_topic(topic, self.max_block_ms))
        if partition is None:
            if key_b is not None:
                partition = self.partitioner(key_b, n)
            else:
                partition = self._sticky.partition(topic, n)
                if not acc.has_open_batch(TopicPartition(topic, partition)):
                    # the sticky partition's batch was sent (or never opened): move on
                    partition = self._sticky.next(topic, n)
        elif not 0 <= partition < n:
            raise ValueError(f"topic {topic!r} has {n} partitions; {partition} is not one")
        if timestamp_ms is None:
            timestamp_ms = int(time.time() * 1000)
        return await acc.append(
            TopicPartition(topic, partition),
            timestamp_ms,
            key_b,
            value_b,
            hdrs,
            max_block_ms=self.max_block_ms,
        )

    async def send_and_wait(
        self,
        topic: str,
        value: Bytes | None = None,
        key: Bytes | None = None,
        *,
        partition: int | None = None,
        timestamp_ms: int | None = None,
        headers: Iterable[tuple[str, Bytes | None]] | None = None,
    ) -> RecordMetadata:
        """``send`` and wait for delivery."""
        fut = await self.send(
            topic, value, key, partition=partition, timestamp_ms=timestamp_ms, headers=headers
        )
        return await fut

    async def flush(self, timeout: float | None = None) -> None:
        """Send everything buffered now (ignoring linger) and wait until it is acknowledged or
        failed (errors are reported on the delivery futures, not here)."""
        acc = self._accumulator
        if acc is None:
            return
        pending = [f for b in acc.pending() for f, _, _, _ in b.records]
        if not pending:
            return
        acc.begin_flush()
        try:
            await asyncio.wait(pending, timeout=timeout)
        finally:
            acc.end_flush()

    # --- idempotence -------------------------------------------------------------------------

    async def _init_producer_id(self) -> None:
        """InitProducerId (no transactional id), retried within ``request_timeout_ms``."""
        deadline = time.monotonic() + self.request_timeout_ms / 1000
        body = messages.InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=-1)
        while True:
            try:
                conn = await self._cluster.any_connection()
                resp = await conn.request(messages.InitProducerId.key, body)
                if resp.error_code == 0:
                    self.producer_id, self.producer_epoch = resp.producer_id, resp.producer_epoch
                    self._sequences.clear()
                    return
                error: BaseException = for_code(resp.error_code)("InitProducerId")
                if not getattr(error, "retriable", False):
                    raise error
            except (KafkaConnectionError, KafkaTimeoutError) as exc:
                error = exc
            if time.monotonic() >= deadline:
                raise KafkaTimeoutError(f"InitProducerId did not succeed: {error}")
            await asyncio.sleep(self.retry_backoff_ms / 1000)

    def _stamp(self, batch: ProducerBatch) -> None:
        """Give a batch built for the first time its producer id, epoch and base sequence."""
        builder = batch.builder
        seq = self._sequences.get(batch.tp, 0)
        builder.producer_id = self.producer_id
        builder.producer_epoch = self.producer_epoch
        builder.base_sequence = seq
        self._sequences[batch.tp] = (seq + len(builder)) & 0x7FFFFFFF

    # --- sender ------------------------------------------------------------------------------

    async def _run_sender(self) -> None:
        try:
            await self._sender_loop()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            # A bug must not leave delivery futures hanging forever: fail them all, refuse sends.
            self._closed = True
            acc = self._accumulator
            assert acc is not None
            acc.abort_all(exc)
            for batch in acc.pending():
                batch.fail(exc)
            raise

    async def _sender_loop(self) -> None:
        acc = self._accumulator
        assert acc is not None
        delivery_timeout = self.delivery_timeout_ms / 1000
        while True:
            now = time.monotonic()
            for batch in acc.expired(now, delivery_timeout):
                batch.fail(
                    KafkaTimeoutError(
                        f"{batch.tp}: not delivered within delivery_timeout_ms "
                        f"({self.delivery_timeout_ms})"
                    )
                )
                acc.done(batch)
                if self.enable_idempotence and batch.payload is not None:
                    self._reset_producer_id = True  # it had a sequence: now a hole
            if self._reset_producer_id:
                self._reset_producer_id = False
                with contextlib.suppress(KafkaError, KafkaConnectionError, KafkaTimeoutError):
                    await self._init_producer_id()
            if self._metadata_stale:
                self._metadata_stale = False
                with contextlib.suppress(KafkaError, KafkaConnectionError, KafkaTimeoutError):
                    await self._cluster.refresh([])
            ready, next_in = acc.ready(now)
            by_node: dict[int, list[ProducerBatch]] = {}
            unknown_leader = False
            idempotent = self.enable_idempotence
            for tp in ready:
                if idempotent and tp in self._busy:
                    continue  # one batch per partition in flight: sequences stay in order
                node = self._cluster.leader_for(tp)
                if node < 0:
                    unknown_leader = True
                    continue
                if self._in_flight.get(node, 0) >= self.max_in_flight:
                    continue
                if idempotent:
                    self._busy.add(tp)
                    by_node.setdefault(node, []).append(acc.drain(tp, self._stamp))
                else:
                    by_node.setdefault(node, []).append(acc.drain(tp))
            for node, batches in by_node.items():
                self._in_flight[node] = self._in_flight.get(node, 0) + 1
                task = asyncio.get_running_loop().create_task(self._send_batches(node, batches))
                self._requests.add(task)
                task.add_done_callback(self._requests.discard)
            if unknown_leader:
                self._metadata_stale = True
                next_in = min(next_in or 1.0, self.retry_backoff_ms / 1000)
            if acc.closing and not acc.pending():
                return
            if by_node:
                continue  # more may be ready (another node, the next batch of a partition)
            acc.wakeup.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(next_in):
                    await acc.wakeup.wait()

    async def _send_batches(self, node: int, batches: list[ProducerBatch]) -> None:
        acc = self._accumulator
        assert acc is not None
        try:
            try:
                response = await self._produce(node, batches)
            except (KafkaConnectionError, KafkaTimeoutError) as exc:
                for batch in batches:
                    self._retry_or_fail(batch, exc)
                self._metadata_stale = True
                return
            except Exception as exc:  # encoding bug, unsupported version: not retriable
                for batch in batches:
                    batch.fail(exc)
                    acc.done(batch)
                return
            if response is None:  # acks=0
                for batch in batches:
                    batch.complete(-1, -1)
                    acc.done(batch)
                return
            results = {
                (t.name, p.index): p for t in response.responses for p in t.partition_responses
            }
            for batch in batches:
                p = results.get(batch.tp)
                if p is None:
                    self._retry_or_fail(batch, KafkaConnectionError(f"no response for {batch.tp}"))
                elif p.error_code == DUPLICATE_SEQUENCE_NUMBER and self.enable_idempotence:
                    # Written before (the broker no longer knows where): delivered.
                    batch.complete(-1, -1)
                    acc.done(batch)
                elif p.error_code:
                    error = for_code(p.error_code)(p.error_message or None)
                    if isinstance(error, _METADATA_ERRORS):
                        self._metadata_stale = True
                    self._retry_or_fail(batch, error)
                else:
                    batch.complete(p.base_offset, p.log_append_time_ms)
                    acc.done(batch)
        finally:
            self._in_flight[node] -= 1
            for batch in batches:
                self._busy.discard(batch.tp)
            acc.wakeup.set()

    async def _produce(
        self, node: int, batches: list[ProducerBatch]
    ) -> messages.ProduceResponse | None:
        conn = await self._cluster.connection(node)
        req = messages.ProduceRequest
        topics: dict[str, list[messages.ProduceRequest.PartitionProduceData]] = {}
        for batch in batches:
            topics.setdefault(batch.tp.topic, []).append(
                req.TopicProduceData.PartitionProduceData(
                    index=batch.tp.partition, records=batch.build()
                )
            )
        body = req(
            transactional_id=None,
            acks=self.acks,
            timeout_ms=self.request_timeout_ms,
            topic_data=[
                req.TopicProduceData(name=name, partition_data=parts)
                for name, parts in topics.items()
            ],
        )
        return await conn.request(PRODUCE, body, expect_response=self.acks != 0)

    def _retry_or_fail(self, batch: ProducerBatch, exc: BaseException) -> None:
        acc = self._accumulator
        assert acc is not None
        now = time.monotonic()
        expired = now - batch.created > self.delivery_timeout_ms / 1000
        if is_retriable(exc) and batch.attempts < self.retries and not expired:
            backoff = min(
                self.retry_backoff_ms * (2 ** min(batch.attempts, 16)), self.retry_backoff_max_ms
            )
            acc.reenqueue(batch, now + backoff / 1000)
        else:
            batch.fail(exc)
            acc.done(batch)
            if self.enable_idempotence and batch.builder.base_sequence >= 0:
                self._reset_producer_id = True  # a hole in this partition's sequences
