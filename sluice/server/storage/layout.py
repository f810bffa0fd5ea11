"""Every file and directory name of a data directory, as Kafka lays it out (storage spec §1).

The one place that spells a suffix, a checkpoint name or the 20-digit offset format; the log,
the log manager, the producer-state snapshots, the dump tool and the Spark segment reader all
name and recognise files through here::

    <log.dirs>/
        <topic>-<partition>/                 one Log (topic names may contain '-' and '.')
            00000000000000000000.log         record batches, back to back (authoritative)
            00000000000000000000.index       offset index, derived from the .log
            00000000000000000000.timeindex   time index, derived from the .log
            00000000000000000133.log         next segment: base offset 133 ...
            00000000000000000180.snapshot    producer state at log end offset 180 (derived)
            leader-epoch-checkpoint          first offset of each leader epoch (derived from
                                             the batch headers; see storage.leader_epoch)
            partition.metadata               the topic id (storage.partition_metadata)
            <file>.deleted                   segment being deleted (file.delete.delay.ms)
            <file>.cleaned, <file>.swap      a cleaning's output before and during its swap
                                             (storage.log_cleaner; load removes .cleaned and
                                             completes a <base>.log.swap)
            <file>.tmp                       an atomic write that a crash interrupted
        <topic>-<partition>.<uuid>-delete/   a deleted topic's partition, removed in background
        recovery-point-offset-checkpoint     offsets below which each log is fsynced
        log-start-offset-checkpoint          each log's log start offset
        replication-offset-checkpoint        each log's high watermark (Kafka's name)
        cleaner-offset-checkpoint            each compacted log's first dirty offset
        sluice-topics.json                   partition counts, config overrides and ids of topics
        meta.properties                      cluster id and broker id (storage.meta_properties)
        .kafka_cleanshutdown                 present only after a clean stop
        .sluice_boot_id                      the OS boot the broker last started in (a crash
                                             in another boot may have lost unflushed writes)
        .lock                                flock()ed while a broker has the directory open

Offset-named files (segments, snapshots) carry the offset zero-padded to 20 digits, so a plain
``ls`` sorts them by offset. A partition directory splits at its *last* '-': the partition is
the digits after it, the topic everything before (Kafka's ``UnifiedLog.parseTopicPartitionName``).
A deleted topic's directory gets ``.<uuid>-delete`` appended, which makes it unparsable as a
partition directory, so a restart never loads it as a live log.

Pure functions on names, no I/O, nothing imported but :class:`sluice.protocol.TopicPartition`:
Spark workers import this module to read segment files.
"""

from __future__ import annotations

from sluice.protocol.structs import TopicPartition

# Files inside a partition directory.
LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
SNAPSHOT_SUFFIX = ".snapshot"
TXN_INDEX_SUFFIX = ".txnindex"  # aborted transactions; only segments with an abort have one
SEGMENT_SUFFIXES = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX)
LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
PARTITION_METADATA_FILE = "partition.metadata"

# Suffixes appended to a whole file name (``<base>.log.deleted``).
DELETED_SUFFIX = ".deleted"
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
TMP_SUFFIX = ".tmp"
#: What a crash may leave behind that is never valid data on its own (load removes them; a
#: ``<base>.log.swap`` is the exception the Log completes first).
STRAY_SUFFIXES = (DELETED_SUFFIX, CLEANED_SUFFIX, SWAP_SUFFIX, TMP_SUFFIX)

# Files and directories at the top of a data directory.
RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
HIGH_WATERMARK_CHECKPOINT = "replication-offset-checkpoint"
CLEANER_OFFSET_CHECKPOINT = "cleaner-offset-checkpoint"
CLEAN_SHUTDOWN_MARKER = ".kafka_cleanshutdown"
BOOT_ID_FILE = ".sluice_boot_id"
LOCK_FILE = ".lock"
TOPICS_FILE = "sluice-topics.json"
META_PROPERTIES_FILE = "meta.properties"
DELETE_DIR_SUFFIX = "-delete"

OFFSET_DIGITS = 20


def _is_number(text: str) -> bool:
    # str.isdigit() alone accepts '²' and other non-ASCII digits that int() then refuses.
    return text.isascii() and text.isdigit()


def offset_stem(offset: int) -> str:
    """``00000000000000000133``: Kafka's file-name prefix for an offset."""
    return f"{offset:0{OFFSET_DIGITS}d}"


def offset_file_name(offset: int, suffix: str) -> str:
    """``00000000000000000133.log`` for ``(133, LOG_SUFFIX)``."""
    return offset_stem(offset) + suffix


def segment_file_names(base_offset: int, extra_suffix: str = "") -> tuple[str, str, str]:
    """The ``.log``, ``.index`` and ``.timeindex`` names of a segment, plus ``extra_suffix``
    (``.deleted``, ``.swap``) when given."""
    stem = offset_stem(base_offset)
    return (
        stem + LOG_SUFFIX + extra_suffix,
        stem + INDEX_SUFFIX + extra_suffix,
        stem + TIME_INDEX_SUFFIX + extra_suffix,
    )


def parse_offset_file_name(name: str, suffix: str) -> int | None:
    """The offset an offset-named file ``<digits><suffix>`` carries; None for any other name
    (another suffix, a suffix appended after it, a non-numeric stem)."""
    if not name.endswith(suffix):
        return None
    stem = name[: len(name) - len(suffix)]
    return int(stem) if _is_number(stem) else None


def partition_dir_name(topic: str, partition: int) -> str:
    """``<topic>-<partition>``."""
    return f"{topic}-{partition}"


def parse_partition_dir(name: str) -> TopicPartition:
    """``<topic>-<partition>`` -> (topic, partition); topics may contain '-': split at the last.

    Raises ValueError for a name that is not of that form (this includes the directories of
    deleted topics, ``<topic>-<partition>.<uuid>-delete``).
    """
    topic, sep, partition = name.rpartition("-")
    if not sep or not topic or not _is_number(partition):
        raise ValueError(f"{name!r} is not of the form <topic>-<partition>")
    return TopicPartition(topic, int(partition))


def deleted_partition_dir_name(dir_name: str, unique_id: str) -> str:
    """``<topic>-<partition>.<unique_id>-delete``: what a deleted topic's directory becomes."""
    return f"{dir_name}.{unique_id}{DELETE_DIR_SUFFIX}"


def is_deleted_partition_dir(name: str) -> bool:
    """A directory a topic deletion renamed, to be removed rather than loaded."""
    return name.endswith(DELETE_DIR_SUFFIX)
