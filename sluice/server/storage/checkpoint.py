"""Checkpoint files: Kafka's ``recovery-point-offset-checkpoint`` format and its
``leader-epoch-checkpoint`` sibling.

Format (text; a data dir holds several offset checkpoints, each a map partition -> offset)::

    0                       version
    <n>                     number of entries
    <topic> <partition> <offset>        n lines

A partition's ``leader-epoch-checkpoint`` has the same version and count lines, then
``<epoch> <start_offset>`` per line (:class:`LeaderEpochCheckpointFile`).

Topic names cannot contain spaces (see ``LogManager.validate_topic_name``), so a line splits
unambiguously. Writes go through :func:`sluice.server.storage.vfs.atomic_write` (tmp, fsync,
rename, directory fsync), so a reader sees either the old or the new file; a leftover ``.tmp``
(crash mid-write) is never read and the next write overwrites it.

Every line ends in ``\n`` (Kafka's writer ends each with ``newLine()``) and the reader requires
it: should a file system still hand back a torn file, one cut inside its last number
(``u 0 1`` of ``u 0 12``) would otherwise parse as a smaller offset; a smaller log start
offset would resurrect deleted records. A malformed file is treated as absent by the caller.

Not thread-safe; the LogManager calls it from the event loop only.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

from sluice.protocol.errors import SluiceError
from sluice.server.storage.vfs import DEFAULT_VFS, VFS, as_path, atomic_write, read_file

VERSION = 0


class CorruptCheckpointError(SluiceError):
    """A checkpoint file whose content does not follow the format."""


def _write_lines(path: Path, entries: list[str], vfs: VFS) -> None:
    """Version line, count line, one line per entry; atomically and durably."""
    lines = [str(VERSION), str(len(entries)), *entries]
    atomic_write(path, ("\n".join(lines) + "\n").encode(), vfs)


def _read_lines(path: Path, vfs: VFS) -> list[str] | None:
    """The entry lines of a checkpoint file (version and count checked); None if it is missing.

    Raises CorruptCheckpointError for a wrong version, a count that does not match the lines, a
    last line not terminated, or bytes that are not UTF-8."""
    try:
        text = read_file(path, vfs).decode("utf-8")
    except FileNotFoundError:
        return None
    except UnicodeDecodeError as exc:
        raise CorruptCheckpointError(f"{path}: not UTF-8 text") from exc
    if not text.endswith("\n"):
        raise CorruptCheckpointError(f"{path}: last line not terminated (torn write?)")
    lines = text.split("\n")
    lines.pop()
    if len(lines) < 2:
        raise CorruptCheckpointError(f"{path}: missing version or count line")
    if lines[0].strip() != str(VERSION):
        raise CorruptCheckpointError(f"{path}: unsupported version {lines[0]!r}")
    try:
        count = int(lines[1])
    except ValueError:
        raise CorruptCheckpointError(f"{path}: bad count line {lines[1]!r}") from None
    entries = lines[2:]
    if count != len(entries):
        raise CorruptCheckpointError(f"{path}: expected {count} entries, found {len(entries)}")
    return entries


class OffsetCheckpointFile:
    """One checkpoint file mapping ``(topic, partition)`` to an offset."""

    def __init__(self, path: Path | str, vfs: VFS = DEFAULT_VFS):
        self.path = as_path(path)
        self._vfs = vfs

    def write(self, offsets: Mapping[tuple[str, int], int]) -> None:
        """Replace the file's content with ``offsets`` (atomic, durable)."""
        entries = []
        for (topic, partition), offset in sorted(offsets.items()):
            if not topic or any(c.isspace() for c in topic):
                raise ValueError(f"topic name {topic!r} cannot be checkpointed")
            entries.append(f"{topic} {int(partition)} {int(offset)}")
        _write_lines(self.path, entries, self._vfs)

    def read(self) -> dict[tuple[str, int], int]:
        """The stored map; empty if the file does not exist.

        Raises CorruptCheckpointError if the content is malformed (wrong version, count that does
        not match the lines, a line that does not parse).
        """
        entries = _read_lines(self.path, self._vfs)
        result: dict[tuple[str, int], int] = {}
        for line in entries or ():
            parts = line.split(" ")
            if len(parts) != 3:
                raise CorruptCheckpointError(f"{self.path}: malformed line {line!r}")
            try:
                result[(parts[0], int(parts[1]))] = int(parts[2])
            except ValueError:
                raise CorruptCheckpointError(f"{self.path}: malformed line {line!r}") from None
        return result


class LeaderEpochCheckpointFile:
    """A partition's ``leader-epoch-checkpoint``: ``<epoch> <start_offset>`` per line, in the
    order given (Kafka's ``LeaderEpochCheckpointFile``; same version and count lines)."""

    def __init__(self, path: Path | str, vfs: VFS = DEFAULT_VFS):
        self.path = as_path(path)
        self._vfs = vfs

    def write(self, entries: Iterable[tuple[int, int]]) -> None:
        """Replace the file's content with ``(epoch, start_offset)`` pairs (atomic, durable)."""
        _write_lines(self.path, [f"{int(e)} {int(o)}" for e, o in entries], self._vfs)

    def read(self) -> list[tuple[int, int]] | None:
        """The stored ``(epoch, start_offset)`` pairs, None if the file does not exist.

        Raises CorruptCheckpointError if the content is malformed (including a negative number:
        neither an epoch nor an offset in the file can be)."""
        lines = _read_lines(self.path, self._vfs)
        if lines is None:
            return None
        result = []
        for line in lines:
            parts = line.split(" ")
            try:
                if len(parts) != 2:
                    raise ValueError
                epoch, offset = int(parts[0]), int(parts[1])
                if epoch < 0 or offset < 0:
                    raise ValueError
            except ValueError:
                raise CorruptCheckpointError(f"{self.path}: malformed line {line!r}") from None
            result.append((epoch, offset))
        return result
