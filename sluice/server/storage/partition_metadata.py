"""``partition.metadata``: the topic id a partition directory belongs to (Kafka's
``PartitionMetadataFile``, byte for byte)::

    version: 0
    topic_id: <the topic's Uuid, URL-safe base64 without padding>

A topic deleted and created again under the same name gets a new id, so a log left behind by
the old incarnation (a broker that missed the deletion, a stray directory) is told apart from
the new topic's: the id here is compared with the topic's before the log is served
(:meth:`sluice.server.storage.log.Log.assign_topic_id`), and a mismatch is Kafka's
``InconsistentTopicIdException``. Written once, before the first record is appended; never
rewritten with another id. A directory without the file (written by an older Sluice, or a
crash before the rename) takes the topic's id when the log is next assigned one.

**Not fsynced when written** (no fsync of the file or the directory, no ``.tmp`` + rename):
the id is derived data -- the topic's id is kept by the topic metadata (``sluice-topics.json``
standalone, the topic znode in a cluster) -- and two fsyncs per partition on a real disk
would make creating thousands of partitions slower by tens of seconds (``bench/NOTES.md``
has the figures). The
partition directory is left marked dirty, so the log's next flush fsyncs it with its first
segment files. A power loss before then may leave no file (the id is written again at the
next start) or an empty or torn one (read as unreadable: logged, then written again); never a
wrong id.
"""

from __future__ import annotations

import re
import uuid
from pathlib import Path

from sluice.protocol.types import ZERO_UUID, uuid_from_str, uuid_to_str
from sluice.server.storage.index import StorageError
from sluice.server.storage.layout import PARTITION_METADATA_FILE
from sluice.server.storage.vfs import DEFAULT_VFS, VFS

__all__ = [
    "PARTITION_METADATA_FILE",
    "CorruptPartitionMetadataError",
    "encode_partition_metadata",
    "read_partition_metadata",
    "write_partition_metadata",
]

_VERSION = 0
_MAX_SIZE = 4096  # a valid file has ~45 bytes
# Kafka's PartitionMetadataReadBuffer splits each line on whitespace (WHITE_SPACES_PATTERN).
_WHITE_SPACE = re.compile(r"\s+")


class CorruptPartitionMetadataError(StorageError):
    """``partition.metadata`` is unreadable (Kafka: "Malformed line in checkpoint file")."""


def encode_partition_metadata(topic_id: uuid.UUID) -> bytes:
    """Kafka's ``PartitionMetadata.encode`` (no newline after the id)."""
    return f"version: {_VERSION}\ntopic_id: {uuid_to_str(topic_id)}".encode()


def read_partition_metadata(directory: Path, vfs: VFS = DEFAULT_VFS) -> uuid.UUID | None:
    """The topic id recorded in ``directory``, None without the file. As Kafka's reader: a
    version below 0, a malformed line or the zero id is :class:`CorruptPartitionMetadataError`;
    a higher version is read for its id (downgrade compatibility)."""
    path = directory / PARTITION_METADATA_FILE
    try:
        # One read: the file is ~45 bytes, and a restart reads one per partition (read_file's
        # size and end-of-file calls cost a third more, ~40 us each on a loaded machine).
        file = vfs.open(path, create=False, writable=False)
    except FileNotFoundError:
        return None
    try:
        raw = file.pread(_MAX_SIZE, 0)
    finally:
        file.close()
    if len(raw) >= _MAX_SIZE:
        raise CorruptPartitionMetadataError(f"{path}: longer than {_MAX_SIZE} bytes")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CorruptPartitionMetadataError(f"{path}: not UTF-8 text") from exc
    lines = text.split("\n")
    try:
        version_line = _WHITE_SPACE.split(lines[0].strip())
        if len(version_line) != 2 or int(version_line[1]) < _VERSION:
            raise ValueError(f"malformed line {lines[0]!r}")
        id_line = _WHITE_SPACE.split(lines[1].strip()) if len(lines) > 1 else []
        if len(id_line) != 2:
            raise ValueError(f"malformed line {lines[1] if len(lines) > 1 else ''!r}")
        topic_id = uuid_from_str(id_line[1])
    except ValueError as exc:
        raise CorruptPartitionMetadataError(f"{path}: {exc}") from None
    if topic_id == ZERO_UUID:
        raise CorruptPartitionMetadataError(f"{path}: invalid topic id (zero)")
    return topic_id


def write_partition_metadata(directory: Path, topic_id: uuid.UUID, vfs: VFS = DEFAULT_VFS) -> None:
    """Record ``topic_id`` in ``directory``; not fsynced, and written in place: it is written
    only where no readable file is (a file is never replaced by another id), so a rename
    would protect nothing (see the module docstring)."""
    file = vfs.open(directory / PARTITION_METADATA_FILE, truncate=True)
    try:
        file.pwrite(encode_partition_metadata(topic_id), 0)
    finally:
        file.close()
