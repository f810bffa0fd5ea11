"""Offset checkpoint files: Kafka's ``recovery-point-offset-checkpoint`` format.

Format (text, one data dir holds several such files, each a map partition -> offset)::

    0                       version
    <n>                     number of entries
    <topic> <partition> <offset>        n lines

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

from collections.abc import Mapping
from pathlib import Path

from sluice.protocol.errors import SluiceError
from sluice.server.storage.vfs import DEFAULT_VFS, VFS, atomic_write, read_file

VERSION = 0


class CorruptCheckpointError(SluiceError):
    """A checkpoint file whose content does not follow the format."""


class OffsetCheckpointFile:
    """One checkpoint file mapping ``(topic, partition)`` to an offset."""

    def __init__(self, path: Path | str, vfs: VFS = DEFAULT_VFS):
        self.path = Path(path)
        self._vfs = vfs

    def write(self, offsets: Mapping[tuple[str, int], int]) -> None:
        """Replace the file's content with ``offsets`` (atomic, durable)."""
        lines = [str(VERSION), str(len(offsets))]
        for (topic, partition), offset in sorted(offsets.items()):
            if not topic or any(c.isspace() for c in topic):
                raise ValueError(f"topic name {topic!r} cannot be checkpointed")
            lines.append(f"{topic} {int(partition)} {int(offset)}")
        atomic_write(self.path, ("\n".join(lines) + "\n").encode(), self._vfs)

    def read(self) -> dict[tuple[str, int], int]:
        """The stored map; empty if the file does not exist.

        Raises CorruptCheckpointError if the content is malformed (wrong version, count that does
        not match the lines, a line that does not parse).
        """
        try:
            text = read_file(self.path, self._vfs).decode("utf-8")
        except FileNotFoundError:
            return {}
        except UnicodeDecodeError as exc:
            raise CorruptCheckpointError(f"{self.path}: not UTF-8 text") from exc
        if not text.endswith("\n"):
            raise CorruptCheckpointError(f"{self.path}: last line not terminated (torn write?)")
        lines = text.split("\n")
        lines.pop()
        if len(lines) < 2:
            raise CorruptCheckpointError(f"{self.path}: missing version or count line")
        if lines[0].strip() != str(VERSION):
            raise CorruptCheckpointError(f"{self.path}: unsupported version {lines[0]!r}")
        try:
            count = int(lines[1])
        except ValueError:
            raise CorruptCheckpointError(f"{self.path}: bad count line {lines[1]!r}") from None
        entries = lines[2:]
        if count != len(entries):
            raise CorruptCheckpointError(
                f"{self.path}: expected {count} entries, found {len(entries)}"
            )
        result: dict[tuple[str, int], int] = {}
        for line in entries:
            parts = line.split(" ")
            if len(parts) != 3:
                raise CorruptCheckpointError(f"{self.path}: malformed line {line!r}")
            try:
                result[(parts[0], int(parts[1]))] = int(parts[2])
            except ValueError:
                raise CorruptCheckpointError(f"{self.path}: malformed line {line!r}") from None
        return result
