"""The LogManager: every partition log of one data directory, and the background work on them.

**On disk**: one ``<topic>-<partition>`` directory per Log, the checkpoints, the topic metadata,
the clean-shutdown marker and the lock file, named and laid out in
:mod:`sluice.server.storage.layout` (storage spec §1).

Authoritative: the segment files and ``sluice-topics.json`` (Kafka keeps the latter in its
metadata log; Sluice has no controller, so it lives next to the data, written atomically).

**Topic ids**: each topic's id is kept in ``sluice-topics.json`` (standalone: made here when
the topic is created, or by :meth:`assign_missing_topic_ids` for a topic an older Sluice
created; in a cluster: the id ZooKeeper's topic znode holds, given to :meth:`create_log`) and
each partition directory records it in ``partition.metadata``
(:mod:`sluice.server.storage.partition_metadata`) before its first append. A partition
directory whose recorded id differs from its topic's belongs to an earlier topic of the same
name: it is not opened as the topic's log (:attr:`inconsistent_logs`; Kafka answers
INCONSISTENT_TOPIC_ID for it) and is left on disk for the operator.
Checkpoints are hints that make startup cheap: a lost one only costs a longer recovery (recovery
point 0 = scan everything) or an HW that restarts at the log start offset.

**Clean-shutdown marker**: :meth:`open` notes whether the marker is present, loads every log
(recovering the unflushed tail of each if it is absent), then deletes the marker; :meth:`close`
flushes every log, writes the checkpoints and only then writes the marker. A crash anywhere in
between leaves no marker, so the next start recovers. After a clean shutdown nothing is recovered
(Kafka's ``LogLoader`` fast path): each log is listed once, opened as it is, and a directory
whose entries the load did not change counts as synced (its clean close fsynced it), so a restart
of thousands of partitions costs neither a scan nor a directory fsync per partition
(``bench/NOTES.md``; ``python -m bench restart``).

**Concurrency**: asyncio, single-threaded. Every method runs on the event-loop thread; the
background tasks started by :meth:`start` run there too, between requests, and each iteration is
bounded (one pass over the logs). File I/O is synchronous (page cache), with one exception: the
background flusher's fsyncs run in one thread of its own (:meth:`flush_in_background`), as
Kafka's ``kafka-log-flusher`` scheduler thread runs ``Log.flush``, and the log cleaner's
rewriting of compacted logs runs in a thread (:mod:`sluice.server.storage.log_cleaner`; its
plan and swap run on the loop).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import inspect
import json
import os
import re
import resource
import shutil
import time
import uuid
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import structlog

from sluice.protocol.errors import (
    InconsistentTopicId,
    InvalidConfig,
    InvalidPartitions,
    InvalidTopic,
    KafkaError,
    KafkaStorageError,
    TopicAlreadyExists,
    UnknownTopicOrPartition,
)
from sluice.protocol.structs import TopicPartition
from sluice.protocol.types import ZERO_UUID, random_uuid, uuid_from_str, uuid_to_str
from sluice.server.storage.checkpoint import CorruptCheckpointError, OffsetCheckpointFile
from sluice.server.storage.file_cache import OpenFileCache, default_max_open_files, nofile_limit
from sluice.server.storage.index import StorageError
from sluice.server.storage.layout import (
    BOOT_ID_FILE,
    CLEAN_SHUTDOWN_MARKER,
    HIGH_WATERMARK_CHECKPOINT,
    LOCK_FILE,
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    TOPICS_FILE,
    deleted_partition_dir_name,
    is_deleted_partition_dir,
    parse_partition_dir,
    partition_dir_name,
)
from sluice.server.storage.log import Log, PendingFlush
from sluice.server.storage.log_cleaner import LogCleaner
from sluice.server.storage.log_config import (
    SERVER_LOG_CONFIG,
    CleanerConfig,
    LogConfig,
    ProducerStateManagerConfig,
)
from sluice.server.storage.meta_properties import (
    LEGACY_STANDALONE_CLUSTER_ID,
    MetaProperties,
    new_cluster_id,
    read_meta_properties,
    write_meta_properties,
)
from sluice.server.storage.segment import FILES_PER_SEGMENT
from sluice.server.storage.vfs import DEFAULT_VFS, VFS, atomic_write, read_file

logger = structlog.get_logger("sluice.storage")

MAX_TOPIC_NAME_LENGTH = 249  # Kafka: 255 minus room for "-<partition>" and ".<uuid>-delete"
MAX_PARTITIONS = 10_000  # a sanity bound per topic
_LEGAL_TOPIC = re.compile(r"[a-zA-Z0-9._-]+")
_LOAD_PROGRESS_INTERVAL_S = 5.0  # a load taking longer logs "loading logs" (N/M) this often
#: Producers a pass of the expiration check examines between two yields to the event loop
#: (about a millisecond of work).
_EXPIRATION_STEP = 2_000


def _holds_nothing(log_dir: Path) -> bool:
    """Missing, or empty but for a lock file (a start that stopped before writing anything)."""
    try:
        with os.scandir(log_dir) as entries:
            return all(entry.name == LOCK_FILE for entry in entries)
    except FileNotFoundError:
        return True


def _wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class OpenFileLimitError(StorageError):
    """The partitions' active segments alone need more open files than the bound allows."""


class LogManager:
    """Owns the :class:`Log` of every partition in ``log_dir`` and the topics' metadata.

    Call :meth:`open` once, then :meth:`start` from the event loop for the background tasks;
    :meth:`stop` (or :meth:`close` when no loop runs) for a clean shutdown.

    Every file recovery reads (segments, checkpoints, the clean-shutdown marker, producer
    snapshots, the topic metadata) goes through ``vfs`` (default: the OS), so tests can crash
    or fail any step of its write sequence. Partition directories and the lock file do not.

    **Open files** (``sluice.log.open.files.max``, ``max_open_files``; default: the open-file
    limit less a headroom, :func:`~sluice.server.storage.file_cache.default_max_open_files`):
    every log shares one :class:`~sluice.server.storage.file_cache.OpenFileCache`, which
    closes the least recently used inactive segments' files beyond the bound, so the number
    of *old* segments is unbounded by ``ulimit -n``. Active segments stay open, up to
    :data:`~sluice.server.storage.segment.FILES_PER_SEGMENT` files each, so the number of
    *partitions* is bounded: the broker refuses to start (:class:`OpenFileLimitError`) and
    CreateTopics / CreatePartitions refuse to create (KafkaStorageError, nothing created) when
    the partitions' active segments, plus room to read one old segment, would not fit; the
    message names the bound and how to raise it. Why not close idle active segments too: the
    next append to each would pay a reopen on the produce path (an open, a re-extension of
    both preallocated indexes and their maps, the fallocate of their first pages), and the
    bound is generous (a limit of 65,536 leaves room for ~16,000 partitions on Python 3.11,
    ~49,000 where maps keep no descriptor), while a bound on old segments must scale with
    data kept, which nothing else limits.
    """

    def __init__(
        self,
        log_dir: Path | str,
        default_config: LogConfig,
        *,
        retention_check_interval_ms: int = 300_000,
        flush_check_interval_ms: int = 1_000,
        checkpoint_interval_ms: int = 60_000,
        clock: Callable[[], int] = _wall_clock_ms,
        vfs: VFS = DEFAULT_VFS,
        max_open_files: int | None = None,
        cleaner_config: CleanerConfig | None = None,
        producer_config: ProducerStateManagerConfig | None = None,
        producer_id_expiration_check_interval_ms: int | None = None,
    ) -> None:
        self.log_dir = Path(log_dir)
        #: The producer-state settings every log shares (``producer.id.expiration.ms``: the
        #: broker assigns a dynamic change to it, which the logs read at each use).
        self.producer_config = producer_config or ProducerStateManagerConfig()
        self.producer_id_expiration_check_interval_ms: int = (
            SERVER_LOG_CONFIG.default("producer.id.expiration.check.interval.ms")
            if producer_id_expiration_check_interval_ms is None
            else producer_id_expiration_check_interval_ms
        )
        #: The log cleaner's settings (``log.cleaner.*``); the cleaner of compacted topics
        #: runs from :meth:`start` when enabled (:attr:`cleaner`).
        self.cleaner_config = cleaner_config or CleanerConfig()
        self.cleaner: LogCleaner | None = None
        self._max_open_files_given = max_open_files is not None
        #: The bound on the segment files held open (see the class docstring).
        self.file_cache = OpenFileCache(
            default_max_open_files() if max_open_files is None else max_open_files
        )
        self._vfs = vfs
        self.default_config = default_config
        self.retention_check_interval_ms = retention_check_interval_ms
        self.flush_check_interval_ms = flush_check_interval_ms
        self.checkpoint_interval_ms = checkpoint_interval_ms
        self._clock = clock
        self._logs: dict[TopicPartition, Log] = {}
        # topic -> (partition count, overrides as given, validated)
        self._topics: dict[str, tuple[int, dict[str, str]]] = {}
        self._configs: dict[str, LogConfig] = {}
        # Cluster mode: topic -> the partitions with a replica here (absent: all of them).
        self._hosted: dict[str, set[int]] = {}
        # topic -> id and back (topics without an id yet are in neither)
        self._topic_ids: dict[str, uuid.UUID] = {}
        self._topics_by_id: dict[uuid.UUID, str] = {}
        #: Partitions whose ``partition.metadata`` names another topic id than their topic's:
        #: not opened, not served (their directories are left alone); -> the id found there.
        self.inconsistent_logs: dict[TopicPartition, uuid.UUID] = {}
        self._pending_dir_deletes: list[tuple[int, Path]] = []
        self._tasks: list[asyncio.Task[None]] = []
        # The background flusher's thread (see flush_in_background) and its pass in flight.
        self._flusher: ThreadPoolExecutor | None = None
        self._flush_in_flight: asyncio.Future[tuple[int, OSError | None]] | None = None
        self._flush_listener: Callable[[float], None] | None = None
        #: Told ``(topic, partition)`` when one of the logs goes offline (on the event loop):
        #: the cluster member reports it to the controller.
        self.offline_listeners: list[Callable[[str, int], None]] = []
        self._opened = False
        self._closed = False
        self._lock_fd: int | None = None
        self.had_clean_shutdown = False
        #: The cluster id of ``meta.properties``, once :meth:`ensure_meta_properties` ran.
        self.cluster_id: str | None = None
        #: ``log_dir`` was missing or empty at :meth:`open` (a first start): no marker is
        #: expected there, and its absence says nothing about an unclean shutdown.
        self.new_log_dir = False
        #: The previous run stopped uncleanly in another boot of the machine (a power loss, a
        #: kernel crash): what it wrote without an fsync may be gone -- also records below a
        #: high watermark, which replication, not fsync, keeps. A process killed in the same
        #: boot (kill -9, OOM) left its writes in the page cache: nothing of it is lost. The
        #: cluster is told at registration (KIP-966's unclean shutdown, in ZooKeeper mode).
        self.may_have_lost_unflushed = False

    # ------------------------------------------------------------------ files

    def _checkpoint(self, name: str) -> OffsetCheckpointFile:
        return OffsetCheckpointFile(self.log_dir / name, self._vfs)

    def _read_checkpoint(self, name: str) -> dict[tuple[str, int], int]:
        try:
            return self._checkpoint(name).read()
        except CorruptCheckpointError as exc:
            # Kafka does the same: a checkpoint is a hint; without it recovery scans more.
            logger.error("ignoring corrupt checkpoint", file=name, error=str(exc))
            return {}

    def _write_topics_file(self) -> None:
        topics: dict[str, dict[str, object]] = {}
        for name, (count, overrides) in sorted(self._topics.items()):
            entry: dict[str, object] = {"partitions": count, "config": overrides}
            if name in self._topic_ids:
                entry["topic_id"] = uuid_to_str(self._topic_ids[name])
            if name in self._hosted:
                entry["hosted"] = sorted(self._hosted[name])
            topics[name] = entry
        document = {"version": 1, "topics": topics}
        atomic_write(self.log_dir / TOPICS_FILE, json.dumps(document, indent=1).encode(), self._vfs)

    def _read_topics_file(self) -> dict[str, tuple[int, dict[str, str]]]:
        path = self.log_dir / TOPICS_FILE
        try:
            document = json.loads(read_file(path, self._vfs))
            topics: dict[str, tuple[int, dict[str, str]]] = {}
            hosted: dict[str, set[int]] = {}
            ids: dict[str, uuid.UUID] = {}
            for name, entry in document["topics"].items():
                count = int(entry["partitions"])
                overrides = {str(k): str(v) for k, v in entry["config"].items()}
                topics[str(name)] = (count, overrides)
                if "hosted" in entry:
                    hosted[str(name)] = {int(p) for p in entry["hosted"]}
                if "topic_id" in entry:
                    ids[str(name)] = uuid_from_str(str(entry["topic_id"]))
            self._hosted = hosted
            for name, topic_id in ids.items():
                self._remember_topic_id(name, topic_id)
            return topics
        except FileNotFoundError:
            return {}
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            # Written atomically, so this is damage from outside; the partition directories
            # still say which topics exist (with default configs). Say so loudly.
            logger.error(
                "topic metadata unreadable: rebuilding from directories with default configs",
                file=str(path),
                error=str(exc),
            )
            return {}

    def write_recovery_point_checkpoint(self) -> None:
        """Write the recovery-point checkpoint alone (after flushes moved recovery points, or
        a truncation lowered one)."""
        self._checkpoint(RECOVERY_POINT_CHECKPOINT).write(
            {tp: log.recovery_point for tp, log in self._logs.items()}
        )

    def _recovery_point_lowered(self) -> None:
        try:
            self.write_recovery_point_checkpoint()
        except OSError as exc:  # the periodic checkpoint tries again
            logger.warning("recovery-point checkpoint not written", error=str(exc))

    def _attach(self, log: Log) -> None:
        """Hook a log this manager opened up to the manager's listeners."""
        log.flush_listener = self._flush_listener
        log.recovery_point_lowered = self._recovery_point_lowered
        topic, partition = log.topic, log.partition

        def truncated(log_end_offset: int) -> None:
            if self.cleaner is not None:
                self.cleaner.truncated(topic, partition, log_end_offset)

        log.truncated = truncated
        log.went_offline = self._log_went_offline

    def _log_went_offline(self, log: Log) -> None:
        for listener in list(self.offline_listeners):
            try:
                listener(log.topic, log.partition)
            except Exception:
                logger.exception(
                    "offline-log listener failed", topic=log.topic, partition=log.partition
                )

    def offline_logs(self) -> list[TopicPartition]:
        """The logs taken offline by an I/O error since start (:attr:`Log.offline`), sorted."""
        return sorted(tp for tp, log in self._logs.items() if log.offline)

    def write_checkpoints(self) -> None:
        """Write the recovery-point, log-start-offset and HW checkpoints of every log."""
        logs = self._logs
        self._checkpoint(RECOVERY_POINT_CHECKPOINT).write(
            {tp: log.recovery_point for tp, log in logs.items()}
        )
        self._checkpoint(LOG_START_OFFSET_CHECKPOINT).write(
            {tp: log.log_start_offset for tp, log in logs.items()}
        )
        self._checkpoint(HIGH_WATERMARK_CHECKPOINT).write(
            {tp: log.high_watermark for tp, log in logs.items()}
        )

    # ------------------------------------------------------------------ open / close

    def open(self) -> None:
        """Lock ``log_dir`` (``flock`` on ``.lock``: one broker per data dir), then load every
        partition in it:

        1. Note whether the clean-shutdown marker is present.
        2. Read the checkpoints (a corrupt one is logged and ignored) and the topic metadata.
        3. Finish deleting ``*-delete`` directories of deleted topics.
        4. Open each ``<topic>-<partition>`` directory as a Log (recovering it if the marker was
           absent); directories of topics missing from the metadata are adopted with the default
           config; partitions the metadata lists but whose directory is gone are created empty.
        5. Persist the metadata if step 4 changed it, then delete the marker: from now on a
           crash must trigger recovery.
        """
        if self._opened:
            raise RuntimeError("LogManager already opened")
        self.new_log_dir = _holds_nothing(self.log_dir)
        os.makedirs(self.log_dir, exist_ok=True)
        self._lock()
        try:
            self._load()
            cleaner = self.cleaner_config
            if cleaner.enable and cleaner.threads > 0:
                self.cleaner = LogCleaner(self.log_dir, cleaner, vfs=self._vfs, clock=self._clock)
                if cleaner.threads > 1:
                    logger.warning(
                        "log.cleaner.threads > 1: Sluice runs one cleaner per data dir (the "
                        "cleaning is CPU work under Python's GIL); it gets the whole dedupe "
                        "and I/O buffers",
                        log_cleaner_threads=cleaner.threads,
                    )
        except BaseException:
            self._unlock()
            raise

    def _lock(self) -> None:
        # Two brokers appending to the same segment files would interleave batches: refuse.
        fd = os.open(self.log_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise RuntimeError(
                f"{self.log_dir} is in use by another process (lock file {LOCK_FILE})"
            ) from None
        self._lock_fd = fd

    def _unlock(self) -> None:
        if self._lock_fd is not None:
            fd, self._lock_fd = self._lock_fd, None
            os.close(fd)  # releases the flock

    def _check_boot(self) -> None:
        """Set :attr:`may_have_lost_unflushed` from the boot recorded by the previous start,
        and record this one (durably: lost, the next crash counts as one in another boot)."""
        path = self.log_dir / BOOT_ID_FILE
        boot = self._vfs.boot_id()
        recorded = read_file(path, self._vfs).decode().strip() if self._vfs.exists(path) else ""
        unclean = not self.had_clean_shutdown and not self.new_log_dir
        self.may_have_lost_unflushed = unclean and (not boot or recorded != boot)
        if self.may_have_lost_unflushed:
            logger.warning(
                "unclean shutdown in another boot: writes not fsynced may have been lost",
                log_dir=str(self.log_dir),
                previous_boot=recorded or None,
                boot=boot or None,
            )
        if boot != recorded:
            atomic_write(path, boot.encode(), self._vfs)

    def _check_high_watermarks(self, checkpointed: Mapping[tuple[str, int], int]) -> None:
        """After an unclean stop, a log that ends below the high watermark it checkpointed
        lost records it had acknowledged (the checkpoint is fsynced; the log was not): the
        same boot or not, :attr:`may_have_lost_unflushed` (a machine restored from a snapshot,
        a disk that dropped its cache, keep their boot id)."""
        if self.had_clean_shutdown or self.may_have_lost_unflushed:
            return
        short = {
            f"{tp[0]}-{tp[1]}": (hw, log.log_end_offset)
            for tp, log in sorted(self._logs.items())
            if (hw := checkpointed.get((tp[0], tp[1]), 0)) > log.log_end_offset
        }
        if short:
            self.may_have_lost_unflushed = True
            logger.warning(
                "logs end below their checkpointed high watermark: acknowledged records lost",
                log_dir=str(self.log_dir),
                partitions={k: {"high_watermark": hw, "log_end": end} for k, (hw, end) in
                            list(short.items())[:20]},
            )  # fmt: skip

    def _load(self) -> None:
        marker = self.log_dir / CLEAN_SHUTDOWN_MARKER
        self.had_clean_shutdown = self._vfs.exists(marker)
        self._check_boot()
        recovery_points = self._read_checkpoint(RECOVERY_POINT_CHECKPOINT)
        log_starts = self._read_checkpoint(LOG_START_OFFSET_CHECKPOINT)
        hws = self._read_checkpoint(HIGH_WATERMARK_CHECKPOINT)
        self._topics = self._read_topics_file()
        changed = False
        for name, (count, overrides) in list(self._topics.items()):
            try:
                self._configs[name] = LogConfig.from_properties(overrides, self.default_config)
            except InvalidConfig as exc:
                logger.error(
                    "invalid stored topic config: using defaults", topic=name, error=str(exc)
                )
                self._configs[name] = self.default_config
                self._topics[name] = (count, {})
                changed = True

        found: list[TopicPartition] = []
        for entry in sorted(os.scandir(self.log_dir), key=lambda e: e.name):
            if not entry.is_dir():
                continue
            if is_deleted_partition_dir(entry.name):
                logger.info("removing deleted partition directory", dir=entry.name)
                shutil.rmtree(entry.path, ignore_errors=True)
                continue
            try:
                topic, partition = parse_partition_dir(entry.name)
                self.validate_topic_name(topic)
            except (ValueError, InvalidTopic):
                logger.warning("ignoring directory that is not a partition", dir=entry.name)
                continue
            found.append(TopicPartition(topic, partition))
        for topic, partition in found:
            if topic not in self._topics:
                logger.warning("adopting partition directory without metadata", topic=topic)
                self._topics[topic] = (0, {})
                self._configs[topic] = self.default_config
                changed = True
            count, overrides = self._topics[topic]
            if partition >= count:
                self._topics[topic] = (partition + 1, overrides)
                changed = True
            hosted = self._hosted.get(topic)
            if hosted is not None and partition not in hosted:
                hosted.add(partition)
                changed = True

        partitions = sum(
            len(self._partitions_of(topic, count)) for topic, (count, _) in self._topics.items()
        )
        cache = self.file_cache
        logger.info(
            "segment files bounded",
            max_open_files=cache.max_open_files,
            source="sluice.log.open.files.max"
            if self._max_open_files_given
            else "open-file limit less headroom",
            nofile=nofile_limit(),
            files_per_active_segment=FILES_PER_SEGMENT,
            partitions=partitions,
        )
        problem = self._open_file_shortfall(partitions)
        if problem:
            raise OpenFileLimitError(f"cannot load {problem}")
        started = time.monotonic()
        created_dirs = False
        to_load = [
            (topic, partition)
            for topic, (count, _) in sorted(self._topics.items())
            for partition in self._partitions_of(topic, count)
        ]
        next_progress = started + _LOAD_PROGRESS_INTERVAL_S
        for loaded, (topic, partition) in enumerate(to_load):
            if time.monotonic() >= next_progress:  # a long load says how far it is
                logger.info(
                    "loading logs",
                    log_dir=str(self.log_dir),
                    loaded=f"{loaded}/{len(to_load)}",
                    clean_shutdown=self.had_clean_shutdown,
                    seconds=round(time.monotonic() - started, 1),
                )
                next_progress = time.monotonic() + _LOAD_PROGRESS_INTERVAL_S
            tp = TopicPartition(topic, partition)
            directory = self._partition_dir(topic, partition)
            created_dirs = created_dirs or not directory.is_dir()
            loaded_log = Log.open(
                directory,
                self._configs[topic],
                recovery_point=recovery_points.get(tp, 0),
                log_start_offset=log_starts.get(tp, 0),
                high_watermark=hws.get(tp),
                had_clean_shutdown=self.had_clean_shutdown,
                clock=self._clock,
                vfs=self._vfs,
                file_cache=cache,
                producer_config=self.producer_config,
            )
            if topic not in self._topic_ids and loaded_log.topic_id is not None:
                # The topic metadata lost (rebuilt from the directories): the id survives here.
                self._remember_topic_id(topic, loaded_log.topic_id)
                changed = True
            if not self._take_topic_id(loaded_log):
                continue
            self._logs[tp] = loaded_log
            self._attach(loaded_log)
        if created_dirs:
            # Partitions listed in the metadata but missing on disk were created: make their
            # directory entries durable before anything is appended to them (as create_topic).
            self._vfs.fsync_dir(self.log_dir)
        if changed:
            self._write_topics_file()
        self._check_high_watermarks(hws)
        if self.had_clean_shutdown:
            self._vfs.remove(marker)
            self._vfs.fsync_dir(self.log_dir)
        self._opened = True
        logger.info(
            "logs loaded",
            log_dir=str(self.log_dir),
            partitions=len(self._logs),
            # A first start has no marker: "clean_shutdown: false" there read as a crash.
            **(
                {"new_log_dir": True}
                if self.new_log_dir
                else {"clean_shutdown": self.had_clean_shutdown}
            ),
            seconds=round(time.monotonic() - started, 3),
            segments=sum(len(log.segments) for log in self._logs.values()),
            **cache.describe(),
        )

    # ------------------------------------------------------------------ cluster id

    def ensure_meta_properties(self, broker_id: int, cluster_id: str | None = None) -> str:
        """The cluster id of this data directory, from ``meta.properties``
        (:mod:`sluice.server.storage.meta_properties`), written first if missing: with
        ``cluster_id`` (a cluster member: ZooKeeper's), else a new one for a new directory, or
        the id an older Sluice reported for one that holds data already. An existing file is
        kept as it is: a ``cluster_id`` or ``broker_id`` that differs from it is logged as an
        error (Kafka refuses to start -- InconsistentClusterIdException; Sluice keeps a
        broker pointed at another ZooKeeper running with its partitions kept as strays, see
        :mod:`sluice.server.metadata.zk_cluster`), and the stored id is returned."""
        self._check_open()
        stored = read_meta_properties(self.log_dir, self._vfs)
        if stored is None:
            if cluster_id is None:
                cluster_id = new_cluster_id() if self.new_log_dir else LEGACY_STANDALONE_CLUSTER_ID
            write_meta_properties(self.log_dir, MetaProperties(cluster_id, broker_id), self._vfs)
            logger.info("meta.properties written", cluster_id=cluster_id, broker_id=broker_id)
            self.cluster_id = cluster_id
            return cluster_id
        if cluster_id is not None and cluster_id != stored.cluster_id:
            logger.error(
                f"The Cluster ID {cluster_id} doesn't match stored clusterId {stored.cluster_id} "
                "in meta.properties. The broker is trying to join the wrong cluster. Configured "
                "zookeeper.connect may be wrong.",
                log_dir=str(self.log_dir),
            )
        if stored.broker_id not in (-1, broker_id):
            logger.error(
                f"Stored node id {stored.broker_id} doesn't match previous node id {broker_id} "
                "in meta.properties: the data directory was another broker's",
                log_dir=str(self.log_dir),
            )
        self.cluster_id = stored.cluster_id
        return stored.cluster_id

    # ------------------------------------------------------------------ topic ids

    def _remember_topic_id(self, topic: str, topic_id: uuid.UUID) -> None:
        old = self._topic_ids.get(topic)
        if old is not None:
            self._topics_by_id.pop(old, None)
        self._topic_ids[topic] = topic_id
        self._topics_by_id[topic_id] = topic

    def _forget_topic_id(self, topic: str) -> None:
        old = self._topic_ids.pop(topic, None)
        if old is not None:
            self._topics_by_id.pop(old, None)

    def _take_topic_id(self, log: Log) -> bool:
        """Record the topic's id in ``log`` (its ``partition.metadata``) if the topic has one;
        False, with the log closed and the reason logged, if the log belongs to another topic
        id (see the module docstring)."""
        topic_id = self._topic_ids.get(log.topic)
        if topic_id is None:
            return True
        try:
            log.assign_topic_id(topic_id)
        except InconsistentTopicId as exc:
            found = log.topic_id
            assert found is not None
            log.close()
            self.inconsistent_logs[TopicPartition(log.topic, log.partition)] = found
            logger.error(
                "partition directory belongs to an earlier topic of the same name: not served, "
                "left on disk (remove it once sure it is not wanted)",
                topic=log.topic,
                partition=log.partition,
                topic_id=uuid_to_str(topic_id),
                directory_topic_id=uuid_to_str(found),
                error=str(exc),
            )
            return False
        return True

    def topic_id(self, topic: str) -> uuid.UUID | None:
        """The id of ``topic`` (None: unknown here, or not assigned one yet)."""
        return self._topic_ids.get(topic)

    def topic_name(self, topic_id: uuid.UUID) -> str | None:
        """The topic with id ``topic_id``, or None."""
        return self._topics_by_id.get(topic_id)

    def set_topic_id(self, topic: str, topic_id: uuid.UUID) -> list[int]:
        """Give ``topic`` the id its cluster has for it (a cluster's topic znode; standalone
        :meth:`assign_missing_topic_ids`) and record it in each of its open logs; the
        partitions whose log belongs to another id are closed and no longer served (returned;
        see the module docstring). No-op for the id held already."""
        self._check_open()
        if topic not in self._topics:
            raise UnknownTopicOrPartition(f"unknown topic {topic!r}")
        if self._topic_ids.get(topic) != topic_id:
            self._remember_topic_id(topic, topic_id)
            self._write_topics_file()
        refused = []
        count, _ = self._topics[topic]
        for partition in self._partitions_of(topic, count):
            tp = TopicPartition(topic, partition)
            log = self._logs.get(tp)
            if log is not None and not self._take_topic_id(log):
                del self._logs[tp]
                refused.append(partition)
        return refused

    def assign_missing_topic_ids(self) -> dict[str, uuid.UUID]:
        """Standalone: give every topic without an id a new one (topics an older Sluice
        created; Kafka's controller does the same for ZooKeeper topics without one when it
        starts); the ids given."""
        given = {t: random_uuid() for t in sorted(self._topics) if t not in self._topic_ids}
        for topic, topic_id in given.items():
            self.set_topic_id(topic, topic_id)
            logger.info("topic id assigned", topic=topic, topic_id=uuid_to_str(topic_id))
        return given

    def _open_file_shortfall(self, partitions: int) -> str | None:
        """Why ``partitions`` logs do not fit the open-file bound (None if they do): their
        active segments, plus one old segment being read, must fit it."""
        bound = self.file_cache.max_open_files
        needed = (partitions + 1) * FILES_PER_SEGMENT
        if needed <= bound:
            return None
        source = (
            "sluice.log.open.files.max"
            if self._max_open_files_given
            else f"sluice.log.open.files.max, derived from the open-file limit {nofile_limit()}"
        )
        return (
            f"{partitions} partitions: their active segments stay open, {FILES_PER_SEGMENT} "
            f"files each, and with one old segment being read need {needed} open files, more "
            f"than the {bound} allowed ({source}); raise the open-file limit (ulimit -n, "
            "systemd LimitNOFILE=, docker run --ulimit nofile=) or sluice.log.open.files.max"
        )

    def _check_room_for(self, topic: str, new_partitions: int) -> None:
        """Refuse (KafkaStorageError, nothing created) partitions the bound cannot keep open,
        so that no request can create a data dir the next start refuses to load."""
        problem = self._open_file_shortfall(len(self._logs) + new_partitions)
        if problem:
            message = (
                f"Error while creating the logs of {topic} ({new_partitions} partitions): "
                f"this broker would hold {problem}; nothing was created"
            )
            logger.error("topic creation refused", topic=topic, error=message)
            raise KafkaStorageError(message)

    def close(self) -> None:
        """Flush and close every log, write the checkpoints, then the clean-shutdown marker.

        A storage error (``OSError``: the disk full, an I/O error) never makes this raise,
        and every file is closed and the lock released whatever fails; a broker stopped on a
        full disk exits cleanly. What is written depends on what failed:

        * every log flushed and closed: the marker is written, even if the checkpoints could
          not be. They are hints (:meth:`open`): after a clean shutdown each log's recovery
          point is its end, and the older checkpoints cost what a crash at their last write
          would (a log start offset or HW that moved since then is restored lower). The marker
          is an empty file, which a file system with no free blocks still takes;
        * some log failed its flush (its tail may not be on disk), or was taken offline by an
          I/O error (``Log.offline``: a segment swap half done): no marker, so the next
          start recovers every log from its recovery point.

        One log line per kind of failure, with the count of logs it hit.
        """
        if self._closed or not self._opened:
            return
        if self._flusher is not None:  # a flush thread in flight finishes first
            self._flusher.shutdown(wait=True)
            self._flusher = None
        try:
            flush_failures: list[tuple[TopicPartition, OSError]] = []
            offline = [tp for tp, log in self._logs.items() if log.offline]
            for tp, log in self._logs.items():
                try:
                    log.close()  # flushes: recovery point = LEO
                except OSError as exc:
                    flush_failures.append((tp, exc))
            if offline:  # taken offline by an I/O error: the next start recovers them
                logger.error("offline logs at shutdown: the next start recovers every log",
                             logs=[f"{tp.topic}-{tp.partition}" for tp in offline])  # fmt: skip
            if flush_failures:
                first, error = flush_failures[0]
                logger.error("logs not flushed at shutdown: the next start recovers them",
                             logs=len(flush_failures), first=f"{first.topic}-{first.partition}",
                             error=str(error))  # fmt: skip
            try:
                self.write_checkpoints()
            except OSError as exc:
                logger.error("checkpoints not written at shutdown: older ones stay",
                             error=str(exc))  # fmt: skip
            self._run_dir_deletes(2**63 - 1)
            if flush_failures or offline:
                return
            try:
                atomic_write(self.log_dir / CLEAN_SHUTDOWN_MARKER, b"", self._vfs)
            except OSError as exc:
                logger.error("clean-shutdown marker not written: the next start recovers",
                             error=str(exc))  # fmt: skip
                return
            logger.info("logs closed cleanly", log_dir=str(self.log_dir))
        finally:
            self._closed = True
            self._unlock()

    # ------------------------------------------------------------------ topics

    @staticmethod
    def validate_topic_name(name: str) -> None:
        """Kafka's rules: 1-249 characters of ``[a-zA-Z0-9._-]``, not ``.`` or ``..``."""
        if not name:
            raise InvalidTopic("topic name is empty")
        if name in (".", ".."):
            raise InvalidTopic(f"topic name cannot be {name!r}")
        if len(name) > MAX_TOPIC_NAME_LENGTH:
            raise InvalidTopic(
                f"topic name is {len(name)} characters; the maximum is {MAX_TOPIC_NAME_LENGTH}"
            )
        if not _LEGAL_TOPIC.fullmatch(name):
            raise InvalidTopic(
                f"topic name {name!r} may only hold ASCII letters, digits, '.', '_' and '-'"
            )

    @property
    def flush_listener(self) -> Callable[[float], None] | None:
        """Told the duration (seconds) of every log flush that fsynced something (every log's
        :attr:`Log.flush_listener`, those opened later included)."""
        return self._flush_listener

    @flush_listener.setter
    def flush_listener(self, listener: Callable[[float], None] | None) -> None:
        self._flush_listener = listener
        for log in self._logs.values():
            log.flush_listener = listener

    @property
    def logs(self) -> dict[TopicPartition, Log]:
        """Every open log by (topic, partition) (a copy)."""
        return dict(self._logs)

    def get_log(self, topic: str, partition: int) -> Log | None:
        # A plain tuple hashes and compares equal to the NamedTuple key and costs a fifth to
        # build: this runs for every partition of every Produce and Fetch.
        return self._logs.get((topic, partition))  # type: ignore[call-overload, no-any-return]

    def topics(self) -> dict[str, int]:
        """Topic name -> partition count (in cluster mode: the count this broker last heard of;
        it may host only some of them, see :meth:`hosted_partitions`)."""
        return {name: count for name, (count, _) in self._topics.items()}

    def _partitions_of(self, topic: str, count: int) -> list[int]:
        hosted = self._hosted.get(topic)
        return list(range(count)) if hosted is None else sorted(hosted)

    def hosted_partitions(self, topic: str) -> list[int]:
        """The partitions of ``topic`` with a log here (all of them standalone)."""
        entry = self._topics.get(topic)
        return [] if entry is None else self._partitions_of(topic, entry[0])

    def create_log(
        self,
        topic: str,
        partition: int,
        partition_count: int,
        overrides: Mapping[str, str] = {},
        topic_id: uuid.UUID | None = None,
    ) -> Log:
        """Cluster mode: open (creating if new) the log of one partition assigned to this
        broker; the topic's other partitions live elsewhere. The cluster, not this broker,
        validated the topic when it was created; ``overrides`` are its topic config as stored
        there (they replace what is held), ``topic_id`` its id there (recorded in the log
        before it is returned; InconsistentTopicId, nothing opened, if the partition's
        directory belongs to another id). Metadata first, then the directory, as
        :meth:`create_topic`."""
        self._check_open()
        tp = TopicPartition(topic, partition)
        existing = self._logs.get(tp)
        if existing is not None:
            return existing
        config = LogConfig.from_properties(overrides, self.default_config)
        self._check_room_for(topic, 1)
        held = self._topics.get(topic)
        if held is None:
            self._hosted[topic] = set()
        elif topic not in self._hosted:  # a topic created standalone: it hosts all it has
            self._hosted[topic] = set(range(held[0]))
        self._hosted[topic].add(partition)
        count = max(partition_count, partition + 1, held[0] if held else 0)
        self._topics[topic] = (count, {str(k): str(v) for k, v in overrides.items()})
        self._configs[topic] = config
        if topic_id is not None:
            self._remember_topic_id(topic, topic_id)
        self._write_topics_file()
        log = Log.open(
            self._partition_dir(topic, partition),
            config,
            clock=self._clock,
            vfs=self._vfs,
            file_cache=self.file_cache,
            producer_config=self.producer_config,
        )
        if not self._take_topic_id(log):
            wanted = uuid_to_str(self._topic_ids.get(topic, ZERO_UUID))
            raise InconsistentTopicId(
                f"{topic}-{partition}: the partition's directory belongs to topic id "
                f"{uuid_to_str(self.inconsistent_logs[tp])}, not {wanted}"
            )
        self.inconsistent_logs.pop(tp, None)
        self._logs[tp] = log
        self._attach(log)
        self._vfs.fsync_dir(self.log_dir)
        logger.info("partition log created", topic=topic, partition=partition)
        return log

    def topic_config(self, topic: str) -> LogConfig:
        """The effective config of ``topic`` (UnknownTopicOrPartition if it does not exist)."""
        try:
            return self._configs[topic]
        except KeyError:
            raise UnknownTopicOrPartition(f"unknown topic {topic!r}") from None

    def topic_overrides(self, topic: str) -> dict[str, str]:
        """The topic-level settings given at creation (or later), as strings."""
        if topic not in self._topics:
            raise UnknownTopicOrPartition(f"unknown topic {topic!r}")
        return dict(self._topics[topic][1])

    def validate_new_topic(
        self, name: str, num_partitions: int, overrides: Mapping[str, str] = {}
    ) -> LogConfig:
        """Every check :meth:`create_topic` makes, without creating anything (CreateTopics with
        validateOnly). Returns the topic's effective config."""
        self.validate_topic_name(name)
        if name in self._topics:
            raise TopicAlreadyExists(f"topic {name!r} already exists")
        # '.' and '_' collide in metric names, so Kafka refuses topics that differ only there.
        normalized = name.replace(".", "_")
        for existing in self._topics:
            if existing.replace(".", "_") == normalized:
                raise InvalidTopic(f"topic {name!r} collides with existing topic {existing!r}")
        if not 1 <= num_partitions <= MAX_PARTITIONS:
            raise InvalidPartitions(
                f"number of partitions must be in [1, {MAX_PARTITIONS}], not {num_partitions}"
            )
        return LogConfig.from_properties(overrides, self.default_config)

    def create_topic(
        self, name: str, num_partitions: int, overrides: Mapping[str, str] = {}
    ) -> list[Log]:
        """Create ``name`` with ``num_partitions`` empty partitions and the given topic-level
        config overrides. The metadata is persisted before the directories are created, so a
        crash in between leaves a topic whose missing partitions are created at the next load.

        All or nothing while the process lives: if creating a partition's files fails (an
        ``OSError``: the open-file limit, the disk full) the logs made so far are closed and
        removed, the metadata is written back without the topic, and KafkaStorageError says
        what ran out (:meth:`_storage_error`). One request cannot leave a topic behind that
        stops the next start.
        """
        self._check_open()
        config = self.validate_new_topic(name, num_partitions, overrides)
        self._check_room_for(name, num_partitions)
        self._topics[name] = (num_partitions, {str(k): str(v) for k, v in overrides.items()})
        self._configs[name] = config
        self._remember_topic_id(name, random_uuid())
        try:
            self._write_topics_file()
            logs = self._open_new_logs(name, range(num_partitions), config)
        except OSError as exc:
            del self._topics[name], self._configs[name]
            self._forget_topic_id(name)
            self._forget_in_metadata(name)
            raise self._storage_error(name, num_partitions, exc) from exc
        logger.info(
            "topic created",
            topic=name,
            partitions=num_partitions,
            overrides=dict(overrides),
            topic_id=uuid_to_str(self._topic_ids[name]),
        )
        return logs

    def _open_new_logs(self, topic: str, partitions: range, config: LogConfig) -> list[Log]:
        """Open (create) the logs of ``partitions`` and make their directory entries durable;
        if any of it fails, close and remove the ones made before raising."""
        logs: list[Log] = []
        try:
            for partition in partitions:
                log = Log.open(
                    self._partition_dir(topic, partition),
                    config,
                    clock=self._clock,
                    vfs=self._vfs,
                    file_cache=self.file_cache,
                    producer_config=self.producer_config,
                )
                self._logs[TopicPartition(topic, partition)] = log
                self._attach(log)
                logs.append(log)
                topic_id = self._topic_ids.get(topic)
                if topic_id is not None:
                    log.assign_topic_id(topic_id)  # a new directory: nothing to disagree with
            self._vfs.fsync_dir(self.log_dir)
        except OSError:
            for partition in partitions:
                made = self._logs.get(TopicPartition(topic, partition))
                if made is not None:
                    del self._logs[TopicPartition(topic, partition)]
                    with contextlib.suppress(OSError):
                        made.delete()
                # A directory Log.open made before it failed (not in _logs yet).
                shutil.rmtree(self._partition_dir(topic, partition), ignore_errors=True)
            raise
        return logs

    def _forget_in_metadata(self, topic: str) -> None:
        """Rollback of a failed create: the metadata without ``topic``. If even that cannot
        be written, the topic stays listed and its partitions are created at the next start
        (as after a crash at that point): say so."""
        try:
            self._write_topics_file()
        except OSError as exc:
            logger.error("failed topic still listed in the metadata: created at the next start",
                         topic=topic, file=TOPICS_FILE, error=str(exc))  # fmt: skip

    @staticmethod
    def _storage_error(topic: str, partitions: int, exc: OSError) -> KafkaError:
        """What ran out, as the client sees it (Kafka's ``LogManager.getOrCreateLog`` turns an
        ``IOException`` into KafkaStorageException, "Error while creating log for ...")."""
        reason = exc.strerror or str(exc)
        if exc.errno in (errno.EMFILE, errno.ENFILE):
            soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
            reason += (
                f": this broker may open {soft} files (ulimit -n) and each open partition "
                "keeps its segment files open"
            )
        elif exc.errno in (errno.ENOSPC, errno.EDQUOT):
            reason += ": the log directory's file system is full"
        message = (
            f"Error while creating the logs of {topic} ({partitions} partitions): {reason}; "
            "nothing was created"
        )
        logger.error("topic creation failed and was undone", topic=topic, error=message)
        return KafkaStorageError(message)

    def validate_new_partition_count(self, name: str, count: int) -> int:
        """Every check :meth:`add_partitions` makes, without adding anything (CreatePartitions
        with validateOnly; Kafka's messages). Returns the topic's current partition count."""
        entry = self._topics.get(name)
        if entry is None:
            raise UnknownTopicOrPartition(f"The topic '{name}' does not exist.")
        current = entry[0]
        if count < current:
            raise InvalidPartitions(
                f"Topic currently has {current} partitions, which is higher than the requested "
                f"{count}."
            )
        if count == current:
            raise InvalidPartitions(f"Topic already has {current} partitions.")
        if count > MAX_PARTITIONS:
            raise InvalidPartitions(
                f"number of partitions must be in [1, {MAX_PARTITIONS}], not {count}"
            )
        return current

    def add_partitions(self, name: str, count: int) -> list[Log]:
        """Grow ``name`` to ``count`` partitions (standalone CreatePartitions); returns the new
        logs, empty, with the topic's config. As :meth:`create_topic`: the metadata (the new
        count) is persisted first, then the directories are created and made durable, so a
        crash in between leaves the topic at its new count with the missing partitions created
        empty at the next :meth:`open` (its step 4); a crash before the metadata rename leaves
        the old count (no directory was made yet)."""
        self._check_open()
        current = self.validate_new_partition_count(name, count)
        self._check_room_for(name, count - current)
        _, overrides = self._topics[name]
        config = self._configs[name]
        self._topics[name] = (count, overrides)
        if name in self._hosted:  # a cluster's topic: never standalone; kept consistent anyway
            self._hosted[name].update(range(current, count))
        try:
            self._write_topics_file()
            logs = self._open_new_logs(name, range(current, count), config)
        except OSError as exc:  # all or nothing, as create_topic
            self._topics[name] = (current, overrides)
            if name in self._hosted:
                self._hosted[name].difference_update(range(current, count))
            self._forget_in_metadata(name)
            raise self._storage_error(name, count - current, exc) from exc
        logger.info("partitions added", topic=name, partitions=count, previously=current)
        return logs

    def set_default_config(self, default: LogConfig) -> None:
        """A new broker-wide default (a dynamic broker config change, Kafka's
        ``LogManager.reconfigureDefaultLogConfig``): every topic's config is its overrides over
        it again, applied to its open logs."""
        self._check_open()
        self.default_config = default
        for name, (count, overrides) in self._topics.items():
            try:
                config = LogConfig.from_properties(overrides, default)
            except InvalidConfig as exc:  # (validated when stored: cannot happen)
                logger.error("topic config invalid over the new default", topic=name,
                             error=str(exc))  # fmt: skip
                continue
            self._configs[name] = config
            for partition in range(count):
                log = self._logs.get(TopicPartition(name, partition))
                if log is not None:
                    log.update_config(config)

    def alter_topic_config(self, name: str, overrides: Mapping[str, str]) -> LogConfig:
        """Replace ``name``'s overrides (validated) and apply them to its open logs."""
        self._check_open()
        if name not in self._topics:
            raise UnknownTopicOrPartition(f"unknown topic {name!r}")
        config = LogConfig.from_properties(overrides, self.default_config)
        count, _ = self._topics[name]
        self._topics[name] = (count, {str(k): str(v) for k, v in overrides.items()})
        self._configs[name] = config
        self._write_topics_file()
        for partition in range(count):
            log = self._logs.get(TopicPartition(name, partition))
            if log is not None:
                log.update_config(config)
        return config

    def delete_topic(self, name: str) -> None:
        """Delete ``name``: close its logs, rename their directories to
        ``<dir>.<uuid>-delete`` (then invisible to :meth:`open`) and make that durable, then
        forget the topic in the metadata; the directories go ``file.delete.delay.ms`` later (in
        the background).

        Directories first: a crash after the metadata write but before the renames would leave
        partition directories without metadata, which :meth:`open` adopts with the *default*
        config (the topic would come back, its overrides lost). In this order a crash in
        between leaves the topic listed with its config and its partitions recreated empty.
        """
        self._check_open()
        if name not in self._topics:
            raise UnknownTopicOrPartition(f"unknown topic {name!r}")
        count, _ = self._topics[name]
        config = self._configs[name]
        due = self._clock() + config.file_delete_delay_ms
        for partition in self._partitions_of(name, count):
            self._retire(name, partition, due)
        self._vfs.fsync_dir(self.log_dir)
        del self._topics[name]
        del self._configs[name]
        self._hosted.pop(name, None)
        self._forget_topic_id(name)
        for tp in [tp for tp in self.inconsistent_logs if tp.topic == name]:
            del self.inconsistent_logs[tp]
        self._write_topics_file()
        self.write_checkpoints()
        if config.file_delete_delay_ms == 0:
            self._run_dir_deletes(due)
        logger.info("topic deleted", topic=name, partitions=count)

    def delete_partition(self, topic: str, partition: int) -> None:
        """Cluster mode: delete one partition's log here (it was reassigned to other brokers:
        Kafka's StopReplica with ``delete``), as :meth:`delete_topic` does for a whole topic --
        the directory renamed to ``<dir>.<uuid>-delete`` and made durable first, gone
        ``file.delete.delay.ms`` later; the topic is forgotten with its last partition here.
        A partition without a log here is a no-op."""
        self._check_open()
        hosted = self._hosted.get(topic)
        if topic not in self._topics or hosted is None or partition not in hosted:
            return
        config = self._configs[topic]
        due = self._clock() + config.file_delete_delay_ms
        self._retire(topic, partition, due)
        self._vfs.fsync_dir(self.log_dir)
        hosted.discard(partition)
        if not hosted:
            del self._topics[topic]
            del self._configs[topic]
            del self._hosted[topic]
        self._write_topics_file()
        self.write_checkpoints()
        if config.file_delete_delay_ms == 0:
            self._run_dir_deletes(due)
        logger.info("partition log deleted", topic=topic, partition=partition)

    def _retire(self, topic: str, partition: int, due: int) -> None:
        """Close a partition's log and rename its directory ``<dir>.<uuid>-delete`` (removed at
        ``due``); the caller syncs the log dir and updates the metadata."""
        log = self._logs.pop(TopicPartition(topic, partition), None)
        if log is not None:
            log.close()
        if self.cleaner is not None:
            self.cleaner.forget(topic, partition)
        source = self._partition_dir(topic, partition)
        if source.exists():
            target = source.with_name(deleted_partition_dir_name(source.name, uuid.uuid4().hex))
            os.replace(source, target)
            self._pending_dir_deletes.append((due, target))

    def _partition_dir(self, topic: str, partition: int) -> Path:
        return self.log_dir / partition_dir_name(topic, partition)

    def _check_open(self) -> None:
        if not self._opened or self._closed:
            raise RuntimeError("LogManager is not open")

    # ------------------------------------------------------------------ background work

    def run_retention(self, now_ms: int | None = None) -> int:
        """One retention pass over every log; returns the number of segments deleted."""
        now = self._clock() if now_ms is None else now_ms
        total = 0
        for log in list(self._logs.values()):
            if not log.closed:
                total += log.delete_old_segments(now)
        return total

    async def remove_expired_producers(self, now_ms: int | None = None) -> int:
        """Kafka's ``PeriodicProducerExpirationCheck`` (one per log there, one pass over all
        the logs here): forget the producers idle for ``producer.id.expiration.ms``; returns
        how many. A pass yields to the event loop after every :data:`_EXPIRATION_STEP`
        producers (or logs) examined, so thousands of partitions with many producers never
        hold requests up for long (``bench/NOTES.md``, bench.producer_expiration); each log's
        removal is one uninterrupted step (never between an append's check and its update)."""
        now = self._clock() if now_ms is None else now_ms
        removed = examined = 0
        for log in list(self._logs.values()):
            examined += 1 + log.producer_count
            removed += log.remove_expired_producers(now)  # a closed log: 0
            if examined >= _EXPIRATION_STEP:
                examined = 0
                await asyncio.sleep(0)
        if removed:
            logger.info("expired producer ids removed", count=removed)
        return removed

    def run_flushes(self, now_ms: int | None = None) -> int:
        """Flush logs that rolled (the old segments) or whose ``flush.ms`` elapsed, then write
        the recovery-point checkpoint if any was flushed; returns how many logs were flushed.

        Why checkpoint here and not only every ``log.flush.offset.checkpoint.interval.ms``
        (Kafka's only schedule): a recovery point that moved is worth something only once it is
        on disk -- a restart after a crash reads each log from its checkpointed recovery point
        (``Log.open``), so writing it with the flush bounds that read by what was written since
        the last flush instead of since the last checkpoint. One small file per flush pass
        that fsynced something (by default only after rolls, at most once per check interval)."""
        pending = self._plan_flushes(self._clock() if now_ms is None else now_ms)
        return self._finish_flushes(pending, *self._sync(pending))

    async def flush_in_background(self, now_ms: int | None = None) -> int:
        """:meth:`run_flushes` with its fsyncs in the flusher thread: what to flush is decided
        on the event loop (:meth:`Log.begin_flush`), the thread fsyncs the files by path
        (:meth:`PendingFlush.run`), and back on the loop each log's recovery point moves
        (:meth:`Log.finish_flush`: to at most its log end then, not at all if it was
        truncated or closed meanwhile) before the recovery-point checkpoint is written. An
        fsync after a roll can take a second on a loaded disk; on the loop it stalled every
        connection of the broker.

        One dedicated thread (not ``asyncio.to_thread``'s shared default executor): passes
        never overlap, so the fsyncs stay ordered and their number in flight bounded to one
        pass, and name resolution or other users of the default executor never queue behind
        a slow disk. A pass cancelled while its thread runs (:meth:`stop`) is abandoned: the
        thread finishes, nothing is recorded, and :meth:`stop` / :meth:`close` wait for it
        before closing any file.
        """
        pending = self._plan_flushes(self._clock() if now_ms is None else now_ms)
        if not pending:
            return 0
        if self._flusher is None:
            self._flusher = ThreadPoolExecutor(1, thread_name_prefix="sluice-log-flusher")
        future = asyncio.get_running_loop().run_in_executor(self._flusher, self._sync, pending)
        self._flush_in_flight = future
        done, error = await asyncio.shield(future)  # cancelled: stop() waits for the thread
        self._flush_in_flight = None
        return self._finish_flushes(pending, done, error)

    def _plan_flushes(self, now: int) -> list[PendingFlush]:
        """The logs that rolled (up to the roll) or whose ``flush.ms`` elapsed (up to LEO)."""
        pending = []
        for log in list(self._logs.values()):
            if log.closed:
                continue
            if log.pending_flush_offset is not None:
                pending.append(log.begin_flush(log.pending_flush_offset))
            elif (
                now - log.last_flush_ms >= log.config.flush_ms
                and log.log_end_offset > log.recovery_point
            ):
                pending.append(log.begin_flush())
        return pending

    @staticmethod
    def _sync(pending: list[PendingFlush]) -> tuple[int, OSError | None]:
        """Run the flushes in order until one fails; how many succeeded, and the error.
        (The flusher thread; touches no log, see :class:`PendingFlush`.)"""
        for done, flush in enumerate(pending):
            try:
                flush.run()
            except OSError as exc:
                return done, exc
        return len(pending), None

    def _finish_flushes(self, pending: list[PendingFlush], done: int, error: OSError | None) -> int:
        """Record the first ``done`` flushes, checkpoint if any applied, then raise ``error``
        (the first failed flush: its log and the ones after it stay as they were and are
        tried again next pass)."""
        flushed = sum(flush.log.finish_flush(flush) for flush in pending[:done])
        if flushed:
            self.write_recovery_point_checkpoint()
        if error is not None:
            raise error
        return flushed

    def run_delayed_deletes(self, now_ms: int | None = None) -> int:
        """Remove segment files and topic directories whose deletion delay has passed."""
        now = self._clock() if now_ms is None else now_ms
        removed = self._run_dir_deletes(now)
        for log in list(self._logs.values()):
            if not log.closed:
                removed += log.run_delayed_deletes(now)
        return removed

    def _run_dir_deletes(self, now: int) -> int:
        keep = []
        removed = 0
        for due, path in self._pending_dir_deletes:
            if due <= now:
                shutil.rmtree(path, ignore_errors=True)
                removed += 1
            else:
                keep.append((due, path))
        self._pending_dir_deletes = keep
        return removed

    async def start(self) -> None:
        """Start the background tasks (retention, producer expiration, flush, checkpoints,
        delayed deletes)."""
        self._check_open()
        if self._tasks:
            return
        jobs: list[tuple[str, int, Callable[[], object]]] = [
            ("retention", self.retention_check_interval_ms, self.run_retention),
            (
                "producer-expiration",
                self.producer_id_expiration_check_interval_ms,
                self.remove_expired_producers,
            ),
            ("flush", self.flush_check_interval_ms, self.flush_in_background),
            ("checkpoint", self.checkpoint_interval_ms, self.write_checkpoints),
            (
                "delayed-delete",
                min(self.retention_check_interval_ms, 1_000),
                self.run_delayed_deletes,
            ),
        ]
        if self.cleaner is not None:
            jobs.append(("cleaner", self.cleaner_config.backoff_ms, self.run_cleaner))
        for name, interval_ms, job in jobs:
            self._tasks.append(
                asyncio.create_task(self._every(name, interval_ms, job), name=f"log-manager-{name}")
            )

    @property
    def cleaner_dead_threads(self) -> int:
        """Kafka's ``DeadThreadCount``: 1 when the cleaner's task ended while the manager runs
        (it catches every failure of a pass, so only a bug escaping that would end it)."""
        return sum(1 for t in self._tasks if t.get_name() == "log-manager-cleaner" and t.done())

    async def run_cleaner(self, max_cleanings: int = 16) -> int:
        """Clean the filthiest compacted logs, one after the other, until none needs it (or
        ``max_cleanings``); returns how many were cleaned. The background task runs this every
        ``log.cleaner.backoff.ms`` (Kafka's cleaner thread sleeps that long when idle)."""
        cleaned = 0
        while self.cleaner is not None and cleaned < max_cleanings:
            if not await self.cleaner.run_once(list(self._logs.values())):
                break
            cleaned += 1
        return cleaned

    async def _every(self, name: str, interval_ms: int, job: Callable[[], object]) -> None:
        """Run ``job`` every ``interval_ms``. A failing pass must not kill the task: it is
        logged and tried again next time. A storage error (``OSError``: the disk full) is
        logged once per episode, without a traceback: when it starts and, with the count of
        failed passes, when a pass succeeds again. Anything else is a bug: a traceback."""
        interval = max(interval_ms, 1) / 1000
        failed = 0
        while True:
            await asyncio.sleep(interval)
            try:
                result = job()
                if inspect.isawaitable(result):
                    await result
            except OSError as exc:
                if not failed:
                    logger.error("background storage task failing", task=name, error=str(exc))
                failed += 1
                continue
            except Exception:
                logger.exception("background storage task failed", task=name)
                continue
            if failed:
                logger.warning("background storage task recovered", task=name, failed=failed)
                failed = 0

    async def stop(self) -> None:
        """Cancel the background tasks, wait for them and for a flush thread in flight (its
        fsyncs; the pass is abandoned), then :meth:`close`."""
        tasks, self._tasks = self._tasks, []
        if self.cleaner is not None:
            self.cleaner.cleaner.stopping = True  # a cleaning in its thread stops at once
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self.cleaner is not None:
            await self.cleaner.wait_idle()
        in_flight, self._flush_in_flight = self._flush_in_flight, None
        if in_flight is not None:
            await asyncio.wait([in_flight])
            if not in_flight.cancelled():
                in_flight.exception()  # retrieved: close() flushes (and reports) again
        self.close()
