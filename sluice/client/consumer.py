"""The asyncio consumer: explicit assignment, seeks, pipelined fetching, ``async for``.

Usage::

    async with Consumer("127.0.0.1:9092", auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition("events", 0)])
        await consumer.seek_to_timestamp(1_700_000_000_000)      # or seek / seek_to_beginning
        async for record in consumer:                              # ConsumerRecord
            print(record.offset, record.key, record.value)

Fetch pipelining: a background fetcher task keeps one Fetch request in flight per broker for
the assigned partitions whose buffer is below ``max_buffered_records``; decoded records go to
per-partition buffers from which :meth:`Consumer.getmany` / iteration hand them out. So the next
fetch is already travelling while the application processes the current records.

Positions: each partition has the *position* (offset of the next record handed to the
application) and the *fetch position* (next offset to request, ahead by what is buffered). A
seek bumps the partition's epoch, clears its buffer and resets both; fetch responses for an old
epoch are dropped, so nothing from before a seek is ever returned after it. As in Kafka's
consumer, a fetch already parked at the broker (long poll) is not cancelled: records from the new
position can take up to ``fetch_max_wait_ms`` to arrive after a seek.

A partition without a position (just assigned) gets one from ``auto_offset_reset``: "latest"
(default, like Kafka), "earliest", or "none" (raise :class:`NoOffsetForPartitionError` until the
application seeks). The same policy answers OFFSET_OUT_OF_RANGE.

Consumer groups: with a ``group_id``, :meth:`subscribe` joins the group
(:class:`sluice.client.group.GroupMember`: Kafka's classic protocol, range / roundrobin assignors)
and
the group's assignment replaces :meth:`assign`; newly assigned partitions start at the group's
committed offset, else follow ``auto_offset_reset``. :meth:`commit` stores the positions (the
offsets of the next records to hand out) in the group, every ``auto_commit_interval_ms`` when
``enable_auto_commit`` (the default, like Kafka's), before a rebalance takes partitions away and
at :meth:`stop` (which also leaves the group, so its partitions move at once). A consumer with a
``group_id`` that uses :meth:`assign` commits as a standalone member (generation -1).

Records of control batches (transaction markers) are skipped. ``isolation_level`` defaults to
``read_uncommitted``, as Kafka's Java consumer does (librdkafka defaults to ``read_committed``):
with ``read_committed`` the broker bounds each fetch by the partition's last stable offset and
lists its aborted transactions, whose records are skipped (the positions jump the gaps markers
and aborted records leave). Single event loop; not thread-safe.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from bisect import bisect_left
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import repeat
from typing import Any, NamedTuple

from sluice.net.security import ClientSecurity
from sluice.protocol import messages
from sluice.protocol.aborted import AbortedFilter
from sluice.protocol.errors import (
    KafkaError,
    LeaderNotAvailable,
    NotLeaderOrFollower,
    OffsetOutOfRange,
    ProtocolError,
    UnknownTopicOrPartition,
    for_code,
)
from sluice.protocol.records import decode_batch_columns, iter_batches
from sluice.protocol.varint import Buffer

from .cluster import Cluster, TopicPartition
from .errors import (
    ConsumerStoppedError,
    GroupsNotSupportedError,
    KafkaConnectionError,
    KafkaTimeoutError,
    NoOffsetForPartitionError,
)
from .group import GroupMember

__all__ = ["EARLIEST", "LATEST", "Consumer", "ConsumerRecord", "OffsetAndTimestamp"]

FETCH = messages.Fetch.key
FETCH_BY_NAME_MAX_VERSION = 12
LIST_OFFSETS = messages.ListOffsets.key

#: ListOffsets special timestamps.
LATEST = -1
EARLIEST = -2

_METADATA_ERRORS = (UnknownTopicOrPartition, NotLeaderOrFollower, LeaderNotAvailable)


class ConsumerRecord(NamedTuple):
    topic: str
    partition: int
    offset: int
    timestamp: int
    timestamp_type: int  # 0 CreateTime, 1 LogAppendTime
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]


# ConsumerRecord(*fields) built in C: what the NamedTuple's generated __new__ does, without a
# Python frame per record (the fetch path builds one per record of every batch).
_new_record: Callable[[type[ConsumerRecord], tuple[Any, ...]], ConsumerRecord] = tuple.__new__


class OffsetAndTimestamp(NamedTuple):
    offset: int
    timestamp: int


@dataclass(slots=True)
class _PartitionState:
    position: int | None = None  # next offset handed to the application
    fetch_position: int | None = None  # next offset to request
    reset: int | None = None  # pending ListOffsets timestamp to find the position
    epoch: int = 0
    buffer: deque[ConsumerRecord] = field(default_factory=deque)
    high_watermark: int = -1
    log_start_offset: int = -1
    paused: bool = False
    error: BaseException | None = None  # raised to the application by the next getmany


class Consumer:
    """An asyncio Kafka consumer for explicitly assigned partitions.

    Parameters (Java names): ``auto_offset_reset`` ("latest", "earliest", "none"),
    ``fetch_min_bytes``, ``fetch_max_wait_ms``, ``fetch_max_bytes``,
    ``max_partition_fetch_bytes``, ``isolation_level`` ("read_uncommitted" |
    "read_committed"), ``request_timeout_ms``, ``retry_backoff_ms``,
    ``max_buffered_records`` (per partition: the fetcher pauses it above this). ``security``:
    TLS / SASL, as for :class:`~sluice.client.producer.Producer`.
    Groups: ``group_id``, ``enable_auto_commit``, ``auto_commit_interval_ms``,
    ``session_timeout_ms``, ``heartbeat_interval_ms``, ``max_poll_interval_ms`` (the rebalance
    timeout), ``partition_assignment_strategy`` ("range", "roundrobin"), ``group_instance_id``
    (static membership).
    """

    def __init__(
        self,
        bootstrap_servers: str | Sequence[str] = "127.0.0.1:9092",
        *,
        client_id: str | None = "sluice-consumer",
        group_id: str | None = None,
        auto_offset_reset: str = "latest",
        fetch_min_bytes: int = 1,
        fetch_max_wait_ms: int = 500,
        fetch_max_bytes: int = 52_428_800,
        max_partition_fetch_bytes: int = 1_048_576,
        isolation_level: str = "read_uncommitted",
        request_timeout_ms: int = 30_000,
        retry_backoff_ms: int = 100,
        max_buffered_records: int = 10_000,
        enable_auto_commit: bool = True,
        auto_commit_interval_ms: int = 5_000,
        session_timeout_ms: int = 10_000,
        heartbeat_interval_ms: int = 3_000,
        max_poll_interval_ms: int = 300_000,
        partition_assignment_strategy: Sequence[str] = ("range", "roundrobin"),
        group_instance_id: str | None = None,
        security: ClientSecurity | Mapping[str, str] | None = None,
    ) -> None:
        if auto_offset_reset not in ("latest", "earliest", "none"):
            raise ValueError("auto_offset_reset must be latest, earliest or none")
        if isolation_level not in ("read_uncommitted", "read_committed"):
            raise ValueError("isolation_level must be read_uncommitted or read_committed")
        self.auto_offset_reset = auto_offset_reset
        self.fetch_min_bytes = fetch_min_bytes
        self.fetch_max_wait_ms = fetch_max_wait_ms
        self.fetch_max_bytes = fetch_max_bytes
        self.max_partition_fetch_bytes = max_partition_fetch_bytes
        self.isolation = 1 if isolation_level == "read_committed" else 0
        self.request_timeout_ms = request_timeout_ms
        self.retry_backoff_ms = retry_backoff_ms
        self.max_buffered_records = max_buffered_records
        self.group_id = group_id
        self.enable_auto_commit = enable_auto_commit and group_id is not None
        self.auto_commit_interval_ms = auto_commit_interval_ms
        self._group_options: dict[str, Any] = {
            "session_timeout_ms": session_timeout_ms,
            "heartbeat_interval_ms": heartbeat_interval_ms,
            "rebalance_timeout_ms": max_poll_interval_ms,
            "retry_backoff_ms": retry_backoff_ms,
            "assignors": tuple(partition_assignment_strategy),
            "group_instance_id": group_instance_id,
        }
        self._group: GroupMember | None = None
        self._subscribed: list[str] | None = None
        self._auto_committer: asyncio.Task[None] | None = None
        self._last_committed: dict[TopicPartition, int] = {}
        self._leaving: asyncio.Future[None] | None = None  # unsubscribe()'s LeaveGroup
        # A long poll must not look like a dead connection.
        self._cluster = Cluster(
            bootstrap_servers,
            client_id=client_id,
            request_timeout_ms=request_timeout_ms + fetch_max_wait_ms,
            retry_backoff_ms=retry_backoff_ms,
            allow_auto_topic_creation=False,
            security=security,
        )
        self._states: dict[TopicPartition, _PartitionState] = {}
        self._current: _PartitionState | None = None  # partition __anext__ reads from
        self._next_start = 0  # where _take starts scanning: round robin across partitions
        self._fetcher: asyncio.Task[None] | None = None
        self._data = asyncio.Event()  # records buffered or an error stored
        self._wake_fetcher = asyncio.Event()  # assignment / seek / room in a buffer
        self._started = False
        self._closed = False

    # --- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        if self._started:
            return
        await self._cluster.start()
        loop = asyncio.get_running_loop()
        self._fetcher = loop.create_task(self._run_fetcher())
        self._started = True
        if self._subscribed is not None:
            self._membership().start()
        if self.enable_auto_commit:
            self._auto_committer = loop.create_task(self._auto_commit_loop())

    async def stop(self) -> None:
        if self._closed:
            return
        if self._auto_committer is not None:
            self._auto_committer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._auto_committer
        if self._started and self.enable_auto_commit:
            await self._commit_quietly()
        if self._group is not None:
            await self._group.stop(leave=self._subscribed is not None)
        self._closed = True
        self._data.set()
        if self._fetcher is not None:
            self._fetcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._fetcher
        await self._cluster.close()

    async def __aenter__(self) -> Consumer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # --- groups ------------------------------------------------------------------------------

    def _membership(self) -> GroupMember:
        if self.group_id is None:
            raise GroupsNotSupportedError("consumer groups need Consumer(group_id=...)")
        if self._group is None:
            self._group = GroupMember(
                self._cluster,
                self.group_id,
                topics=list(self._subscribed or ()),
                on_assign=self._on_assign,
                on_revoke=self._on_revoke,
                **self._group_options,
            )
        return self._group

    def subscribe(self, topics: Iterable[str] | None = None, *, pattern: str | None = None) -> None:
        """Join ``group_id`` for ``topics``; the group decides which partitions this consumer
        reads (:meth:`assignment` follows every rebalance). Calling it again changes the
        subscription (a rebalance). Pattern subscriptions are not supported."""
        if pattern is not None or topics is None:
            raise GroupsNotSupportedError("subscribe(pattern=...)")
        wanted = sorted(set(topics))
        if not wanted:
            raise ValueError("subscribe() needs at least one topic (unsubscribe() to stop)")
        member = self._membership()
        if self._subscribed is None:
            self._subscribed = wanted
            member.topics = wanted
            if self._started:
                member.start()
        else:
            self._subscribed = wanted
            member.resubscribe(wanted)

    def unsubscribe(self) -> None:
        """Leave the group (in the background) and drop the assignment."""
        if self._group is not None and self._subscribed is not None:
            group, self._group = self._group, None
            self._subscribed = None
            self._leaving = asyncio.ensure_future(group.stop(leave=True))
        self.assign([])

    def subscription(self) -> set[str]:
        return set(self._subscribed or ())

    async def _on_assign(self, partitions: set[TopicPartition]) -> None:
        """The group assigned ``partitions``: start each at its committed offset (fetched
        before the assignment changes, so the fetcher never resolves them by the reset policy
        first), else by ``auto_offset_reset``."""
        committed = await self._membership().committed(partitions) if partitions else {}
        self.assign(partitions)
        for tp, found in committed.items():
            if found is not None:
                self._reposition(self._states[tp], found[0])
                self._last_committed[tp] = found[0]

    async def _on_revoke(self, partitions: set[TopicPartition]) -> None:
        """A rebalance takes the partitions away (eager protocol): commit, then drop them."""
        if self.enable_auto_commit:
            await self._commit_quietly()
        self.assign([])

    def _positions(self) -> dict[TopicPartition, int]:
        return {tp: s.position for tp, s in self._states.items() if s.position is not None}

    async def commit(self, offsets: dict[TopicPartition, int] | None = None) -> None:
        """Commit ``offsets`` (the offset of the *next* record to read, as Kafka), by default
        the current position of every assigned partition. Raises the broker's error (e.g.
        ``RebalanceInProgress``, ``IllegalGeneration`` after losing the group membership)."""
        self._check_running()
        wanted = self._positions() if offsets is None else dict(offsets)
        await self._membership().commit({TopicPartition(*tp): (o, "") for tp, o in wanted.items()})
        self._last_committed.update(wanted)

    async def committed(self, tp: TopicPartition) -> int | None:
        """The group's committed offset of ``tp`` (None when there is none)."""
        self._check_running()
        tp = TopicPartition(*tp)
        found = (await self._membership().committed([tp]))[tp]
        return None if found is None else found[0]

    async def _commit_quietly(self) -> None:
        """Auto-commit: positions that moved since the last commit; errors are logged away
        (the next commit or the rebalance's fresh assignment takes over)."""
        changed = {
            tp: o for tp, o in self._positions().items() if self._last_committed.get(tp) != o
        }
        if not changed:
            return
        with contextlib.suppress(KafkaError, KafkaConnectionError, KafkaTimeoutError):
            await self._membership().commit({tp: (o, "") for tp, o in changed.items()})
            self._last_committed.update(changed)

    async def _auto_commit_loop(self) -> None:
        while True:
            await asyncio.sleep(self.auto_commit_interval_ms / 1000)
            await self._commit_quietly()

    # --- assignment --------------------------------------------------------------------------

    def assign(self, partitions: Iterable[TopicPartition | tuple[str, int]]) -> None:
        """Consume exactly these partitions (replacing any previous assignment). Positions of
        partitions that stay assigned are kept; new ones follow ``auto_offset_reset``."""
        wanted = [TopicPartition(*tp) for tp in partitions]
        old = self._states
        self._states = {}
        self._current = None
        for tp in wanted:
            state = old.get(tp)
            if state is None:
                state = _PartitionState()
                self._apply_reset_policy(state)
            self._states[tp] = state
        self._wake_fetcher.set()

    def assignment(self) -> set[TopicPartition]:
        return set(self._states)

    async def partitions_for_topic(self, topic: str, timeout_ms: int = 30_000) -> list[int]:
        """Partition ids of an existing ``topic`` (the consumer never auto-creates topics: an
        unknown topic raises ``UnknownTopicOrPartition``)."""
        parts = await self._cluster.wait_for_topic(topic, timeout_ms, wait_for_creation=False)
        return [p.partition for p in parts]

    async def topics(self) -> dict[str, int]:
        """Every topic and its partition count."""
        await self._cluster.refresh(None)
        return self._cluster.topics()

    def pause(self, *partitions: TopicPartition) -> None:
        for tp in partitions:
            self._state(tp).paused = True

    def resume(self, *partitions: TopicPartition) -> None:
        for tp in partitions:
            self._state(tp).paused = False
        self._wake_fetcher.set()

    def _state(self, tp: TopicPartition) -> _PartitionState:
        try:
            return self._states[TopicPartition(*tp)]
        except KeyError:
            raise ValueError(f"{tp} is not assigned to this consumer") from None

    # --- positions ---------------------------------------------------------------------------

    def _apply_reset_policy(self, state: _PartitionState) -> None:
        self._reposition(state, None)
        if self.auto_offset_reset == "none":
            state.reset = None
            state.error = None
        else:
            state.reset = EARLIEST if self.auto_offset_reset == "earliest" else LATEST

    def _reposition(self, state: _PartitionState, offset: int | None) -> None:
        state.epoch += 1
        state.buffer.clear()
        state.position = state.fetch_position = offset
        state.reset = None
        state.error = None
        self._wake_fetcher.set()

    def seek(self, tp: TopicPartition, offset: int) -> None:
        """Next record returned for ``tp`` will be the one at ``offset``."""
        if offset < 0:
            raise ValueError(f"offset must be >= 0, not {offset}")
        self._reposition(self._state(tp), offset)

    async def seek_to_beginning(self, *partitions: TopicPartition) -> None:
        """Seek to the log start offset (all assigned partitions when none are given)."""
        await self._seek_to(EARLIEST, partitions)

    async def seek_to_end(self, *partitions: TopicPartition) -> None:
        """Seek to the high watermark: only records produced from now on are returned."""
        await self._seek_to(LATEST, partitions)

    async def seek_to_timestamp(self, timestamp_ms: int, *partitions: TopicPartition) -> None:
        """Seek each partition to its first record with timestamp >= ``timestamp_ms`` (to the end
        when there is none)."""
        tps = list(partitions) or list(self._states)
        found = await self.offsets_for_times({tp: timestamp_ms for tp in tps})
        missing = [tp for tp, v in found.items() if v is None]
        ends = await self.end_offsets(missing) if missing else {}
        for tp in tps:
            hit = found[tp]
            self.seek(tp, hit.offset if hit is not None else ends[tp])

    async def _seek_to(self, timestamp: int, partitions: Sequence[TopicPartition]) -> None:
        tps = list(partitions) or list(self._states)
        for tp in tps:
            self._state(tp)
        offsets = await self._list_offsets({tp: timestamp for tp in tps})
        for tp in tps:
            self.seek(tp, offsets[tp][0])

    def position(self, tp: TopicPartition) -> int | None:
        """Offset of the next record to be returned for ``tp`` (None until known)."""
        return self._state(tp).position

    def highwater(self, tp: TopicPartition) -> int:
        """High watermark of ``tp`` from the last fetch (-1 before any)."""
        return self._state(tp).high_watermark

    async def beginning_offsets(
        self, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, int]:
        found = await self._list_offsets({TopicPartition(*tp): EARLIEST for tp in partitions})
        return {tp: off for tp, (off, _) in found.items()}

    async def end_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        found = await self._list_offsets({TopicPartition(*tp): LATEST for tp in partitions})
        return {tp: off for tp, (off, _) in found.items()}

    async def offsets_for_times(
        self, timestamps: dict[TopicPartition, int]
    ) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        """First offset with timestamp >= the given one per partition (None when none)."""
        found = await self._list_offsets({TopicPartition(*tp): ts for tp, ts in timestamps.items()})
        return {
            tp: OffsetAndTimestamp(off, ts) if off >= 0 else None for tp, (off, ts) in found.items()
        }

    async def _list_offsets(
        self, wanted: dict[TopicPartition, int]
    ) -> dict[TopicPartition, tuple[int, int]]:
        """ListOffsets for each partition at its leader: ``{tp: (offset, timestamp)}``.
        Retries retriable errors (refreshing metadata) within ``request_timeout_ms``."""
        deadline = time.monotonic() + self.request_timeout_ms / 1000
        result: dict[TopicPartition, tuple[int, int]] = {}
        todo = dict(wanted)
        while todo:
            for topic in {tp.topic for tp in todo}:
                await self._cluster.wait_for_topic(topic, self.request_timeout_ms)
            by_node: dict[int, list[TopicPartition]] = {}
            for tp in todo:
                by_node.setdefault(self._cluster.leader_for(tp), []).append(tp)
            retry: BaseException | None = None
            for node, tps in by_node.items():
                try:
                    found = await self._list_offsets_at(node, {tp: todo[tp] for tp in tps})
                except (KafkaConnectionError, KafkaTimeoutError) as exc:
                    retry = exc
                    continue
                for tp, (code, off, ts) in found.items():
                    if code == 0:
                        result[tp] = (off, ts)
                        del todo[tp]
                        continue
                    error = for_code(code)(f"ListOffsets {tp.topic}-{tp.partition}")
                    if not error.retriable:
                        raise error
                    retry = error
            if todo:
                if time.monotonic() >= deadline:
                    raise KafkaTimeoutError(f"ListOffsets did not succeed: {retry}")
                await asyncio.sleep(self.retry_backoff_ms / 1000)
                await self._cluster.refresh([tp.topic for tp in todo])
        return result

    async def _list_offsets_at(
        self, node: int, wanted: dict[TopicPartition, int]
    ) -> dict[TopicPartition, tuple[int, int, int]]:
        conn = await self._cluster.connection(node)
        req = messages.ListOffsetsRequest
        topics: dict[str, list[messages.ListOffsetsRequest.ListOffsetsPartition]] = {}
        for tp, ts in wanted.items():
            topics.setdefault(tp.topic, []).append(
                req.ListOffsetsTopic.ListOffsetsPartition(
                    partition_index=tp.partition, current_leader_epoch=-1, timestamp=ts
                )
            )
        body = req(
            replica_id=-1,
            isolation_level=self.isolation,
            topics=[req.ListOffsetsTopic(name=n, partitions=p) for n, p in topics.items()],
        )
        response = await conn.request(LIST_OFFSETS, body)
        return {
            TopicPartition(t.name, p.partition_index): (p.error_code, p.offset, p.timestamp)
            for t in response.topics
            for p in t.partitions
        }

    # --- consuming ---------------------------------------------------------------------------

    async def getmany(
        self, *partitions: TopicPartition, timeout_ms: float = 0, max_records: int | None = None
    ) -> dict[TopicPartition, list[ConsumerRecord]]:
        """Buffered records per partition, waiting up to ``timeout_ms`` for some to arrive.

        Returns an empty dict on timeout. Raises an error stored for a partition (e.g.
        :class:`NoOffsetForPartitionError`, a non-retriable fetch error) once, and
        :class:`ConsumerStoppedError` when the consumer is stopped.
        """
        self._check_running()
        deadline = time.monotonic() + timeout_ms / 1000
        while True:
            out = self._take(partitions, max_records)
            if out:
                return out
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return {}
            self._data.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(remaining):
                    await self._data.wait()
            self._check_running()

    async def getone(self, *partitions: TopicPartition) -> ConsumerRecord:
        """The next record (waits as long as it takes)."""
        while True:
            got = await self.getmany(*partitions, timeout_ms=1_000, max_records=1)
            for records in got.values():
                return records[0]

    def __aiter__(self) -> Consumer:
        return self

    async def __anext__(self) -> ConsumerRecord:
        """The next record, waiting as long as it takes; iteration ends when the consumer is
        stopped. The position moves past exactly the records returned, so ``break`` loses
        nothing and a ``seek`` in the loop body takes effect with the next record."""
        while True:
            state = self._current
            if state is not None and state.buffer and not state.paused:
                record = state.buffer.popleft()
                state.position = record.offset + 1
                if len(state.buffer) < self.max_buffered_records:
                    self._wake_fetcher.set()
                return record
            try:
                got = await self.getmany(timeout_ms=1_000, max_records=1)
            except ConsumerStoppedError:
                raise StopAsyncIteration from None
            for tp, records in got.items():
                self._current = self._states[tp]
                return records[0]

    def _check_running(self) -> None:
        if self._closed:
            raise ConsumerStoppedError("consumer stopped")
        if not self._started:
            raise ConsumerStoppedError("consumer not started (use `async with` or start())")

    def _take(
        self, partitions: Sequence[TopicPartition], max_records: int | None
    ) -> dict[TopicPartition, list[ConsumerRecord]]:
        tps = [TopicPartition(*tp) for tp in partitions] or list(self._states)
        start = 0
        if len(tps) > 1:  # start where the last call stopped, so no partition starves
            start = self._next_start % len(tps)
            tps = tps[start:] + tps[:start]
        out: dict[TopicPartition, list[ConsumerRecord]] = {}
        budget = max_records if max_records is not None else 1 << 62
        woke = False
        for i, tp in enumerate(tps):
            state = self._states.get(tp)
            if state is None:
                continue
            if state.error is not None and not state.buffer:
                # after the records fetched before the error were handed out
                error, state.error = state.error, None
                raise error
            if not state.buffer or state.paused or budget <= 0:
                continue
            buf = state.buffer
            n = min(len(buf), budget)
            taken = [buf.popleft() for _ in range(n)]
            budget -= n
            state.position = taken[-1].offset + 1
            out[tp] = taken
            self._next_start = start + i + 1
            if len(buf) < self.max_buffered_records:
                woke = True
        if woke:
            self._wake_fetcher.set()
        return out

    # --- fetcher -----------------------------------------------------------------------------

    async def _run_fetcher(self) -> None:
        """Keep one Fetch in flight per broker for every fetchable partition (see module doc)."""
        backoff = self.retry_backoff_ms / 1000
        in_flight: dict[int, asyncio.Task[None]] = {}
        try:
            while True:
                self._wake_fetcher.clear()
                await self._resolve_resets()
                busy = {tp for t in in_flight.values() for tp in getattr(t, "tps", ())}
                by_node: dict[int, list[TopicPartition]] = {}
                unknown = []
                for tp, state in self._states.items():
                    if (
                        tp in busy
                        or state.paused
                        or state.fetch_position is None
                        or state.error is not None
                        or len(state.buffer) >= self.max_buffered_records
                    ):
                        continue
                    node = self._cluster.leader_for(tp)
                    if node < 0:
                        unknown.append(tp)
                    elif node not in in_flight:
                        by_node.setdefault(node, []).append(tp)
                for node, tps in by_node.items():
                    task = asyncio.ensure_future(self._fetch(node, tps))
                    task.tps = tps  # type: ignore[attr-defined]
                    in_flight[node] = task
                if unknown:
                    with contextlib.suppress(KafkaError, KafkaConnectionError, KafkaTimeoutError):
                        await self._cluster.refresh({tp.topic for tp in unknown})
                waits: set[asyncio.Future[Any]] = set(in_flight.values())
                waker = asyncio.ensure_future(self._wake_fetcher.wait())
                waits.add(waker)
                await asyncio.wait(
                    waits,
                    timeout=backoff if unknown else None,
                    return_when=asyncio.FIRST_COMPLETED,
                )
                waker.cancel()
                for node, task in list(in_flight.items()):
                    if task.done():
                        del in_flight[node]
                        if not task.cancelled() and task.exception() is not None:
                            await asyncio.sleep(backoff)  # connection trouble: back off
        finally:
            for task in in_flight.values():
                task.cancel()

    async def _resolve_resets(self) -> None:
        pending: dict[TopicPartition, int] = {}
        for tp, s in self._states.items():
            if s.reset is not None:
                pending[tp] = s.reset
            elif s.position is None and s.error is None:  # auto_offset_reset="none"
                s.error = NoOffsetForPartitionError(
                    f"{tp.topic}-{tp.partition} has no position: seek() first"
                )
                self._data.set()
        if not pending:
            return
        epochs = {tp: self._states[tp].epoch for tp in pending}
        try:
            found = await self._list_offsets(pending)
        except (KafkaError, KafkaConnectionError, KafkaTimeoutError) as exc:
            for tp in pending:
                state = self._states.get(tp)
                if state is not None and state.epoch == epochs[tp] and not _retriable(exc):
                    state.error = exc
                    state.reset = None
                    self._data.set()
            return
        for tp, (offset, _) in found.items():
            state = self._states.get(tp)
            if state is not None and state.epoch == epochs[tp] and state.reset is not None:
                state.reset = None
                state.position = state.fetch_position = offset

    async def _fetch(self, node: int, tps: list[TopicPartition]) -> None:
        conn = await self._cluster.connection(node)
        req = messages.FetchRequest
        sent: dict[TopicPartition, tuple[int, int]] = {}  # tp -> (epoch, fetch offset)
        topics: dict[str, list[messages.FetchRequest.FetchPartition]] = {}
        for tp in tps:
            state = self._states[tp]
            assert state.fetch_position is not None
            sent[tp] = (state.epoch, state.fetch_position)
            topics.setdefault(tp.topic, []).append(
                req.FetchTopic.FetchPartition(
                    partition=tp.partition,
                    current_leader_epoch=-1,
                    fetch_offset=state.fetch_position,
                    log_start_offset=-1,
                    partition_max_bytes=self.max_partition_fetch_bytes,
                )
            )
        body = req(
            replica_id=-1,
            max_wait_ms=self.fetch_max_wait_ms,
            min_bytes=self.fetch_min_bytes,
            max_bytes=self.fetch_max_bytes,
            isolation_level=self.isolation,
            session_id=0,
            session_epoch=-1,
            topics=[req.FetchTopic(topic=n, partitions=p) for n, p in topics.items()],
            forgotten_topics_data=[],
            rack_id="",
        )
        # Fetch v13+ names topics by id only; this client names them (v12 at most).
        version = min(conn.version(FETCH), FETCH_BY_NAME_MAX_VERSION)
        response = await conn.request(FETCH, body, version=version)
        if response.error_code:
            raise for_code(response.error_code)("Fetch")
        stale_metadata = False
        for t in response.responses:
            for p in t.partitions:
                tp = TopicPartition(t.topic, p.partition_index)
                st = self._states.get(tp)
                if st is None or tp not in sent or sent[tp] != (st.epoch, st.fetch_position):
                    continue  # unassigned or re-sought meanwhile: drop
                if p.error_code:
                    stale_metadata |= self._fetch_error(tp, st, p.error_code)
                    continue
                st.high_watermark = p.high_watermark
                st.log_start_offset = p.log_start_offset
                # Decoded records are a slice of the frame or None (a RecordsPart is only set
                # by a broker building a response).
                if isinstance(p.records, Buffer):
                    aborted = p.aborted_transactions if self.isolation else None
                    self._append_records(tp, st, p.records, aborted)
        if stale_metadata:
            with contextlib.suppress(KafkaError, KafkaConnectionError, KafkaTimeoutError):
                await self._cluster.refresh({tp.topic for tp in tps})

    def _fetch_error(self, tp: TopicPartition, state: _PartitionState, code: int) -> bool:
        """Handle a partition error; returns whether metadata should be refreshed."""
        error = for_code(code)(f"Fetch {tp.topic}-{tp.partition} at {state.fetch_position}")
        if isinstance(error, OffsetOutOfRange):
            if self.auto_offset_reset == "none":
                state.error = NoOffsetForPartitionError(str(error))
                self._data.set()
            else:
                self._apply_reset_policy(state)
            return False
        if isinstance(error, _METADATA_ERRORS) or error.retriable:
            return True
        state.error = error
        self._data.set()
        return False

    def _append_records(
        self,
        tp: TopicPartition,
        state: _PartitionState,
        data: Buffer,
        aborted: Sequence[messages.FetchResponse.AbortedTransaction] | None = None,
    ) -> None:
        """Decode a Fetch response's records into the partition's buffer, batch by batch
        (sluice.protocol.records verifies each CRC and decompresses). A corrupt batch stops the
        partition there: its error goes to the application, the position stays before it.

        Control batches (transaction markers) are skipped; with read_committed, so are the
        batches of the answer's aborted transactions (:class:`~sluice.protocol.aborted.
        AbortedFilter`, Kafka's ``CompletedFetch`` rule). The position moves past what is
        skipped (offset gaps are expected)."""
        if not data:
            return
        start = state.fetch_position
        assert start is not None
        buf = state.buffer
        topic, partition = tp
        skip = AbortedFilter((a.producer_id, a.first_offset) for a in aborted or ()).drop
        try:
            for _, header, view in iter_batches(data, allow_partial_tail=True):
                # (every batch goes through the filter: a marker below the position too)
                if skip(header, view) or header.next_offset <= start:
                    state.fetch_position = max(header.next_offset, start)
                    continue
                offsets, timestamps, keys, values, headers = decode_batch_columns(view)
                if header.base_offset < start:
                    # a compressed batch is fetched whole, so it may begin before the position
                    first = bisect_left(offsets, start)
                    offsets, timestamps = offsets[first:], timestamps[first:]
                    keys, values, headers = keys[first:], values[first:], headers[first:]
                n = len(offsets)
                each = zip(
                    repeat(topic, n),
                    repeat(partition, n),
                    offsets,
                    timestamps,
                    repeat(header.timestamp_type, n),
                    keys,
                    values,
                    headers,
                    strict=True,
                )
                buf.extend(map(_new_record, repeat(ConsumerRecord, n), each))
                state.fetch_position = header.next_offset
        except ProtocolError as exc:
            state.error = exc
        if buf or state.error is not None:
            self._data.set()


def _retriable(exc: BaseException) -> bool:
    return bool(getattr(exc, "retriable", False))
