"""Followers copy their leaders' logs: one fetcher per leader broker (Kafka's ReplicaFetcherThread).

``shared/spec/replication.md`` §4. A follower broker runs one :class:`ReplicaFetcher` task for
each broker it follows partitions on; the task holds one connection and carries every such
partition in each request, in two phases per partition (Kafka's ``AbstractFetcherThread``):

1. **Truncating** (after it starts following, or after a leader epoch change): ask the leader
   with OffsetForLeaderEpoch (API 23, v3, ``replica_id`` = this broker) where this replica's
   latest epoch ends on the leader, and truncate the local log there
   (:func:`sluice.server.storage.leader_epoch.follower_truncation_offset`, KIP-101/279). If the
   follower never saw the epoch the leader answered with, it truncates to its own end of that
   epoch and asks again with its (now older) latest epoch.
2. **Fetching**: Fetch v11 (``replica_id`` = this broker, ``current_leader_epoch``), from LEO --
   the fetch offset *is* the follower's LEO, which the leader uses to advance HW and the ISR.
   Returned batches are appended as they are, through :meth:`Partition.append_as_follower` (the
   leader's offsets and epochs; the fetcher writes the log only through ``Partition``); the
   follower's HW becomes ``min(leader HW, LEO)``.

Errors per partition (Kafka's handling): FENCED_LEADER_EPOCH means this broker's state is older
than the leader's -- the partition waits for the newer state (its ``follow`` call restarts it);
UNKNOWN_LEADER_EPOCH / NOT_LEADER_OR_FOLLOWER / UNKNOWN_TOPIC_OR_PARTITION: the leader has not
caught up with the state yet, retry after ``replica.fetch.backoff.ms``; OFFSET_OUT_OF_RANGE:
the leader's log starts after our LEO (retention ran there), so start over at its log start.
A broken connection is retried after the backoff; the partitions keep their phase.

**Who calls what**: the cluster's partition-state watcher calls
:meth:`ReplicaFetcherManager.follow` after :meth:`ReplicaManager.apply_partition_state` made
this broker a follower, and :meth:`ReplicaFetcherManager.unfollow` when it leads or stops
hosting the partition. Everything runs on the event loop; the only awaits are network calls,
and every partition's state is re-checked after them (the partition may have changed hands).
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sluice.net.connection import Connection
from sluice.net.errors import KafkaConnectionError, KafkaTimeoutError
from sluice.net.security import ClientSecurity
from sluice.protocol import errors
from sluice.protocol import messages as m
from sluice.server.config import BROKER_CONFIG
from sluice.server.logging import get_logger
from sluice.server.replication.throttle import is_throttled
from sluice.server.storage.leader_epoch import follower_truncation_offset

if TYPE_CHECKING:
    from sluice.server.replication.partition import Partition, PartitionKey
    from sluice.server.replication.replica_manager import ReplicaManager

log = get_logger("sluice.replica_fetcher")

#: Where a broker listens: ``broker id -> (host, port)``, or None if it is not registered.
BrokerAddress = Callable[[int], "tuple[str, int] | None"]


_setting = BROKER_CONFIG.setting
_BUFFERS = (bytes, bytearray, memoryview)


@dataclass(frozen=True)
class FetcherConfig:
    """Kafka's ``replica.fetch.*`` settings (defaults: the broker's declarations)."""

    wait_max_ms: int = _setting("replica.fetch.wait.max.ms")
    min_bytes: int = _setting("replica.fetch.min.bytes")
    max_bytes: int = _setting("replica.fetch.max.bytes")  # per partition
    response_max_bytes: int = _setting("replica.fetch.response.max.bytes")
    backoff_ms: int = _setting("replica.fetch.backoff.ms")
    request_timeout_ms: int = _setting("replica.socket.timeout.ms")
    #: TLS and SASL towards the leaders' inter-broker listener (None: PLAINTEXT).
    security: ClientSecurity | None = None


class Phase(enum.Enum):
    TRUNCATING = "truncating"
    FETCHING = "fetching"
    FENCED = "fenced"  # our state is older than the leader's: wait for a newer one


class _FetchState:
    __slots__ = ("caught_up", "leader_epoch", "phase", "retry_at")

    def __init__(self, leader_epoch: int) -> None:
        self.leader_epoch = leader_epoch
        self.phase = Phase.TRUNCATING
        self.retry_at = 0.0
        #: Our LEO reached the leader's HW at the last fetch (Kafka's isReplicaInSync): a
        #: caught-up replica is never follower-throttled.
        self.caught_up = False


class ReplicaFetcher:
    """Copies the partitions this broker follows on one leader broker (module docstring)."""

    def __init__(
        self,
        replicas: ReplicaManager,
        leader_id: int,
        address: BrokerAddress,
        config: FetcherConfig,
    ) -> None:
        self.replicas = replicas
        self.leader_id = leader_id
        self._address = address
        self._config = config
        self._states: dict[PartitionKey, _FetchState] = {}
        self._changed = asyncio.Event()
        self._conn: Connection | None = None
        self._task: asyncio.Task[None] | None = None
        self._stopping = False

    def __repr__(self) -> str:
        return f"ReplicaFetcher(leader={self.leader_id}, partitions={len(self._states)})"

    @property
    def partitions(self) -> dict[PartitionKey, Phase]:
        return {key: state.phase for key, state in self._states.items()}

    def add(self, key: PartitionKey, leader_epoch: int) -> None:
        """Fetch ``key`` at ``leader_epoch``, starting with truncation (a new epoch or a new
        partition always truncates first: the follower may hold records the leader never had)."""
        state = self._states.get(key)
        if state is None or state.leader_epoch != leader_epoch or state.phase is Phase.FENCED:
            self._states[key] = _FetchState(leader_epoch)
            self._changed.set()
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(
                self._run(), name=f"replica-fetcher-{self.leader_id}"
            )

    def remove(self, key: PartitionKey) -> None:
        self._states.pop(key, None)

    async def stop(self) -> None:
        self._stopping = True
        self._changed.set()
        if self._conn is not None:
            self._conn.close()
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    # --- the loop ---------------------------------------------------------------------------

    async def _run(self) -> None:
        backoff = self._config.backoff_ms / 1000
        while not self._stopping:
            if not self._states:
                self._changed.clear()
                await self._changed.wait()
                continue
            try:
                conn = await self._connection()
                did = await self._truncate(conn)
                did = await self._fetch(conn) or did
            except (KafkaConnectionError, KafkaTimeoutError, OSError) as exc:
                log.warning("replica fetch failed", leader=self.leader_id, error=str(exc))
                self._drop_connection()
                did = False
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("replica fetcher error", leader=self.leader_id)
                self._drop_connection()
                did = False
            if not did:
                # Nothing could be asked now (all backing off or fenced): wait for a change or
                # the backoff, whichever first.
                self._changed.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._changed.wait(), backoff)

    async def _connection(self) -> Connection:
        if self._conn is not None and not self._conn.closed:
            return self._conn
        address = self._address(self.leader_id)
        if address is None:
            raise KafkaConnectionError(f"broker {self.leader_id} is not registered")
        self._conn = await Connection.open(
            *address,
            client_id=f"replica-fetcher-{self.replicas.local_id}-{self.leader_id}",
            request_timeout_ms=self._config.request_timeout_ms + self._config.wait_max_ms,
            security=self._config.security,
        )
        return self._conn

    def _drop_connection(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _due(self, phase: Phase) -> list[tuple[PartitionKey, _FetchState, Partition]]:
        now = asyncio.get_running_loop().time()
        due = []
        for key, state in list(self._states.items()):
            if state.phase is not phase or state.retry_at > now:
                continue
            partition = self._still(key, state)
            if partition is None:
                continue  # changed hands: the watcher re-adds or removes it
            due.append((key, state, partition))
        return due

    def _back_off(self, state: _FetchState) -> None:
        state.retry_at = asyncio.get_running_loop().time() + self._config.backoff_ms / 1000

    def _still(self, key: PartitionKey, state: _FetchState) -> Partition | None:
        """The partition, if ``state`` is still the one tracked for it and it still follows the
        same leader at the same epoch (re-checked after every await)."""
        if self._states.get(key) is not state:
            return None
        partition = self.replicas.get_partition(*key)
        if (
            partition is None
            or partition.leader_id != self.leader_id
            or partition.leader_epoch != state.leader_epoch
        ):
            return None
        return partition

    # --- phase 1: truncation ----------------------------------------------------------------

    async def _truncate(self, conn: Connection) -> bool:
        due = self._due(Phase.TRUNCATING)
        if not due:
            return False
        req = m.OffsetForLeaderEpochRequest
        part_cls = req.OffsetForLeaderTopic.OffsetForLeaderPartition
        by_topic: dict[
            str, list[m.OffsetForLeaderEpochRequest.OffsetForLeaderTopic.OffsetForLeaderPartition]
        ] = {}
        asked = []
        for key, state, partition in due:
            latest = partition.log.latest_epoch
            if latest is None:
                # No epoch at all (a new replica): nothing to compare; keep what is below HW.
                self._truncate_to(key, state, partition, partition.log.high_watermark, "no epoch")
                state.phase = Phase.FETCHING
                continue
            asked.append((key, state, partition))
            by_topic.setdefault(key[0], []).append(
                part_cls(
                    partition=key[1],
                    current_leader_epoch=state.leader_epoch,
                    leader_epoch=latest,
                )
            )
        if not asked:
            return True
        body = req(
            replica_id=self.replicas.local_id,
            topics=[req.OffsetForLeaderTopic(topic=t, partitions=p) for t, p in by_topic.items()],
        )
        response = await conn.request(m.OffsetForLeaderEpoch.key, body, version=3)
        states = {key: state for key, state, _ in asked}
        for topic_result in response.topics:
            for answer in topic_result.partitions:
                key = (topic_result.topic, answer.partition)
                asked_state = states.get(key)
                if asked_state is None:
                    continue
                current = self._still(key, asked_state)
                if current is None:
                    continue
                if answer.error_code != 0:
                    self._on_error(key, asked_state, answer.error_code, "OffsetForLeaderEpoch")
                    continue
                self._apply_truncation(
                    key, asked_state, current, answer.leader_epoch, answer.end_offset
                )
        return True

    def _apply_truncation(
        self,
        key: PartitionKey,
        state: _FetchState,
        partition: Partition,
        leader_epoch: int,
        end_offset: int,
    ) -> None:
        log_ = partition.log
        offset, complete = follower_truncation_offset(
            log_.leader_epoch_cache,
            leader_epoch=leader_epoch,
            leader_end_offset=end_offset,
            log_end_offset=log_.log_end_offset,
            high_watermark=log_.high_watermark,
        )
        self._truncate_to(
            key, state, partition, offset, f"leader epoch {leader_epoch} ends at {end_offset}"
        )
        if complete:
            state.phase = Phase.FETCHING

    def _truncate_to(
        self, key: PartitionKey, state: _FetchState, partition: Partition, offset: int, why: str
    ) -> None:
        log_ = partition.log
        if offset < log_.log_end_offset:
            log.info(
                "truncating follower log",
                topic=key[0],
                partition=key[1],
                leader=self.leader_id,
                leader_epoch=state.leader_epoch,
                from_offset=log_.log_end_offset,
                to_offset=offset,
                reason=why,
            )
        partition.truncate_to(offset)

    # --- phase 2: fetching ------------------------------------------------------------------

    async def _fetch(self, conn: Connection) -> bool:
        due = self._due(Phase.FETCHING)
        if not due:
            return False
        req = m.FetchRequest
        cfg = self._config
        by_topic: dict[str, list[m.FetchRequest.FetchTopic.FetchPartition]] = {}
        sent: dict[PartitionKey, tuple[_FetchState, int]] = {}
        quota = self.replicas.follower_quota
        throttling = quota.exceeded(asyncio.get_running_loop().time())
        for key, state, partition in due:
            if throttling and not state.caught_up and self._throttled(partition):
                continue  # Kafka's shouldFollowerThrottle: left out of this fetch
            leo = partition.log.log_end_offset
            sent[key] = (state, leo)
            by_topic.setdefault(key[0], []).append(
                req.FetchTopic.FetchPartition(
                    partition=key[1],
                    current_leader_epoch=state.leader_epoch,
                    fetch_offset=leo,
                    log_start_offset=partition.log.log_start_offset,
                    partition_max_bytes=cfg.max_bytes,
                )
            )
        if not sent:
            return False  # every due partition throttled: wait (the backoff, or a change)
        body = req(
            replica_id=self.replicas.local_id,
            max_wait_ms=cfg.wait_max_ms,
            min_bytes=cfg.min_bytes,
            max_bytes=cfg.response_max_bytes,
            isolation_level=0,
            session_id=0,
            session_epoch=-1,
            topics=[req.FetchTopic(topic=t, partitions=p) for t, p in by_topic.items()],
            forgotten_topics_data=[],
            rack_id="",
        )
        # v11 names topics. Kafka's ZooKeeper-mode fetcher sends ids (v13) once the
        # inter-broker protocol allows; here the follower hosts a partition only after checking
        # its log's id against the topic znode's (ClusterMember._apply), and a topic deleted
        # and created again is a new log on both sides, so names lose nothing between brokers.
        response = await conn.request(m.Fetch.key, body, version=11)
        if response.error_code != 0:
            raise errors.for_code(response.error_code)(f"Fetch from {self.leader_id} failed")
        for topic_result in response.responses:
            for data in topic_result.partitions:
                key = (topic_result.topic, data.partition_index)
                entry = sent.get(key)
                if entry is None:
                    continue
                fetch_state, fetched_at = entry
                current = self._still(key, fetch_state)
                if current is None:
                    continue
                if data.error_code != 0:
                    self._on_error(
                        key, fetch_state, data.error_code, "Fetch", data.log_start_offset
                    )
                    continue
                self._append(
                    key, current, fetched_at, data.records, data.high_watermark,
                    data.log_start_offset,
                )  # fmt: skip
                fetch_state.caught_up = current.log.log_end_offset >= data.high_watermark
                records = data.records  # decoded: a slice of the frame
                if quota.throttling and self._throttled(current):
                    size = len(records) if isinstance(records, _BUFFERS) else 0
                    quota.record(size, asyncio.get_running_loop().time())
        return True

    def _throttled(self, partition: Partition) -> bool:
        """The topic's ``follower.replication.throttled.replicas`` names this replica."""
        text = partition.log.config.follower_replication_throttled_replicas
        return is_throttled(text, partition.index, self.replicas.local_id)

    def _append(
        self,
        key: PartitionKey,
        partition: Partition,
        fetched_at: int,
        records: object,
        leader_hw: int,
        leader_log_start: int = -1,
    ) -> None:
        # False when truncated meanwhile (cannot happen on one loop; cheap to be sure)
        hw_before = partition.log.high_watermark
        try:
            partition.append_as_follower(fetched_at, records, leader_hw, leader_log_start)
        except errors.KafkaStorageError as exc:
            # The local log went offline (an I/O error, Log._go_offline): Kafka's
            # markPartitionFailed. This partition stops fetching until it is followed again
            # (a restart recovers the log); the fetcher's other partitions fetch on.
            log.error("replica fetching stopped: the local log is offline", topic=key[0],
                      partition=key[1], leader=self.leader_id, error=str(exc))  # fmt: skip
            self.remove(key)
            return
        if partition.log.high_watermark != hw_before:
            # Consumers reading from this follower (KIP-392) wait for its HW: wake them, as
            # Kafka's fetcher completes delayed fetches of the partitions whose HW moved.
            self.replicas.fetch_purgatory.check_and_complete(key)

    def _on_error(
        self,
        key: PartitionKey,
        state: _FetchState,
        code: int,
        request: str,
        leader_log_start: int = -1,
    ) -> None:
        error = errors.for_code(code)
        if error is errors.FencedLeaderEpoch:
            # The leader is at a newer epoch than our state: wait for it (follow() restarts us).
            log.info(
                "follower state is older than the leader's",
                topic=key[0],
                partition=key[1],
                leader=self.leader_id,
                leader_epoch=state.leader_epoch,
            )
            state.phase = Phase.FENCED
            return
        if error is errors.OffsetOutOfRange and request == "Fetch":
            partition = self.replicas.get_partition(*key)
            if partition is not None and leader_log_start > partition.log.log_end_offset:
                log.warning(
                    "follower behind the leader's log start: starting over there",
                    topic=key[0],
                    partition=key[1],
                    leader=self.leader_id,
                    log_end_offset=partition.log.log_end_offset,
                    leader_log_start_offset=leader_log_start,
                )
                partition.truncate_fully_and_start_at(leader_log_start)
                return
            state.phase = Phase.TRUNCATING  # diverged: find out where by epoch again
            return
        log.info(
            "replica fetch error, retrying",
            topic=key[0],
            partition=key[1],
            leader=self.leader_id,
            request=request,
            error=error.__name__,
        )
        self._back_off(state)


class ReplicaFetcherManager:
    """The fetchers of this broker, one per leader broker (Kafka's ``ReplicaFetcherManager``)."""

    def __init__(
        self, replicas: ReplicaManager, address: BrokerAddress, config: FetcherConfig
    ) -> None:
        self.replicas = replicas
        self._address = address
        self._config = config
        self._fetchers: dict[int, ReplicaFetcher] = {}
        self._leader_of: dict[PartitionKey, int] = {}

    @property
    def fetchers(self) -> dict[int, ReplicaFetcher]:
        return dict(self._fetchers)

    def follow(self, key: PartitionKey, leader_id: int, leader_epoch: int) -> None:
        """Replicate ``key`` from ``leader_id`` at ``leader_epoch`` (truncating first)."""
        old = self._leader_of.get(key)
        if old is not None and old != leader_id:
            self._fetchers[old].remove(key)
        fetcher = self._fetchers.get(leader_id)
        if fetcher is None:
            fetcher = self._fetchers[leader_id] = ReplicaFetcher(
                self.replicas, leader_id, self._address, self._config
            )
        self._leader_of[key] = leader_id
        fetcher.add(key, leader_epoch)

    def unfollow(self, keys: Iterable[PartitionKey]) -> None:
        for key in keys:
            leader = self._leader_of.pop(key, None)
            if leader is not None:
                self._fetchers[leader].remove(key)

    async def shutdown(self) -> None:
        fetchers, self._fetchers = list(self._fetchers.values()), {}
        self._leader_of.clear()
        await asyncio.gather(*(f.stop() for f in fetchers))
