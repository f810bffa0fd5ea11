"""The seam between the storage layer and the file system.

Every file recovery relies on is reached through a :class:`VFS`: the segment files (``.log``,
``.index``, ``.timeindex``) and the small files whose write ordering recovery trusts, which go
through :func:`atomic_write` / :func:`read_file` (offset checkpoints, the clean-shutdown marker,
producer-state snapshots, the topic metadata). Tests swap in a file system that tears writes,
fails any operation or forgets what was not fsynced (``tests/storage/crashfs.py``,
``tests/storage/test_segment_recovery.py``), the way hashicorp/raft-wal's ``types/vfs.go``
does. The default, :data:`DEFAULT_VFS`, is a thin layer over ``os.*`` calls, issuing the same
system calls as direct ``os`` use would.

Only positional I/O is offered (``pread``/``pwrite``): there is no shared file position, so a
reader (fetch) and the writer (append) of the same file never disturb each other.

Memory maps: index files are mapped with :mod:`mmap` over :meth:`VFSFile.fileno`; a fault-injecting
VFS still hands out real descriptors, so injected faults cover the ``open``/``truncate``/``fsync``/
``rename``/``allocate`` of index files but not stores into the map (an index is derived data,
rebuilt from the log when it is found inconsistent). Stores into the map only reach pages
:meth:`VFSFile.allocate` gave storage to first (``AbstractIndex.reserve``): on a full disk a store
into an unbacked page of a sparse file is SIGBUS, the process killed.

Concurrency: the broker's asyncio thread makes every call but one kind: the background flusher
(``LogManager``'s ``sluice-log-flusher`` thread, see ``PendingFlush``) calls ``open``, ``fsync``,
``close`` and ``fsync_dir`` from its own thread, on files the loop may be appending to, renaming
or deleting meanwhile. A VFS must allow that (the OS does: an fsync covers what was written
before it began). Calls block (page cache).
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Protocol

Buffer = bytes | bytearray | memoryview

BOOT_ID_PATH = "/proc/sys/kernel/random/boot_id"


class VFSFile(Protocol):
    """An open file. ``fileno()`` must stay valid (and refer to this file) until ``close()``."""

    @property
    def path(self) -> Path: ...

    def fileno(self) -> int: ...

    def size(self) -> int: ...

    def pread(self, size: int, offset: int) -> bytes:
        """Up to ``size`` bytes at ``offset``; fewer only at end of file."""
        ...

    def pwrite(self, data: Buffer, offset: int) -> None:
        """Write all of ``data`` at ``offset`` (loops over short writes) or raise OSError."""
        ...

    def truncate(self, size: int) -> None: ...

    def allocate(self, offset: int, length: int) -> None:
        """Give ``[offset, offset + length)`` storage without changing the content or
        shrinking the file (``posix_fallocate``); OSError (ENOSPC) if there is none."""
        ...

    def fsync(self) -> None: ...

    def close(self) -> None: ...

    @property
    def closed(self) -> bool: ...


class VFS(Protocol):
    """File-system operations used by the storage layer."""

    def open(
        self, path: Path, *, create: bool = True, writable: bool = True, truncate: bool = False
    ) -> VFSFile:
        """Open ``path``; create it empty if ``create`` and it is missing, else raise
        FileNotFoundError. ``truncate`` empties an existing file (``O_TRUNC``)."""
        ...

    def exists(self, path: Path) -> bool: ...

    def listdir(self, path: Path) -> list[str]: ...

    def rename(self, src: Path, dst: Path) -> None:
        """Atomic rename (replaces ``dst``)."""
        ...

    def remove(self, path: Path) -> None:
        """Remove ``path``; a missing file is not an error."""
        ...

    def mtime_ms(self, path: Path) -> int: ...

    def set_mtime_ms(self, path: Path, mtime_ms: int) -> None: ...

    def boot_id(self) -> str:
        """An id of the running operating-system boot ("" if unknown): the page cache, and with
        it everything written but not fsynced, survives a process's death but not a new boot."""
        ...

    def fsync_dir(self, path: Path) -> None:
        """Make a rename or create in directory ``path`` durable."""
        ...


def as_path(path: Path | str) -> Path:
    """``path`` as a Path, not copied when it is one: ``Path(p)`` of a Path re-parses it (tens
    of microseconds on Python 3.11), paid for every file a log load opens (issue 27: ~6 per
    partition, a second per 5,000 partitions)."""
    return path if isinstance(path, Path) else Path(path)


class OSFile:
    """A real file: an OS descriptor used only through positional calls."""

    __slots__ = ("_fd", "_path")

    def __init__(self, path: Path, fd: int) -> None:
        self._path = path
        self._fd: int | None = fd

    @property
    def path(self) -> Path:
        return self._path

    @property
    def closed(self) -> bool:
        return self._fd is None

    def fileno(self) -> int:
        if self._fd is None:
            # Never hand out a stale number: the OS may have reused it for another file.
            raise ValueError(f"I/O on closed file {self._path}")
        return self._fd

    def size(self) -> int:
        return os.fstat(self.fileno()).st_size

    def pread(self, size: int, offset: int) -> bytes:
        return os.pread(self.fileno(), size, offset)

    def pwrite(self, data: Buffer, offset: int) -> None:
        # Hot path (every append): one call when the kernel takes everything, as it does for
        # regular files short of an error; the loop is for short writes (e.g. a signal).
        fd = self._fd
        if fd is None:
            fd = self.fileno()  # raises
        written = os.pwrite(fd, data, offset)
        if written == (data.nbytes if isinstance(data, memoryview) else len(data)):
            return
        view = memoryview(data).cast("B")[written:]
        while view:
            offset += written
            written = os.pwrite(fd, view, offset)
            view = view[written:]

    def truncate(self, size: int) -> None:
        os.ftruncate(self.fileno(), size)

    def allocate(self, offset: int, length: int) -> None:
        if hasattr(os, "posix_fallocate"):  # (not on macOS: nothing reserved there)
            os.posix_fallocate(self.fileno(), offset, length)

    def fsync(self) -> None:
        os.fsync(self.fileno())

    def close(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)

    def __repr__(self) -> str:
        return f"OSFile({str(self._path)!r}, fd={self._fd})"


class OSVFS:
    """The default :class:`VFS`: real files via ``os.*``."""

    def open(
        self, path: Path, *, create: bool = True, writable: bool = True, truncate: bool = False
    ) -> OSFile:
        flags = os.O_RDWR if writable else os.O_RDONLY
        if create:
            flags |= os.O_CREAT
        if truncate:
            flags |= os.O_TRUNC
        flags |= getattr(os, "O_CLOEXEC", 0)
        return OSFile(as_path(path), os.open(path, flags, 0o644))

    def exists(self, path: Path) -> bool:
        return os.path.exists(path)

    def listdir(self, path: Path) -> list[str]:
        return sorted(os.listdir(path))

    def rename(self, src: Path, dst: Path) -> None:
        os.replace(src, dst)

    def remove(self, path: Path) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.remove(path)

    def mtime_ms(self, path: Path) -> int:
        return os.stat(path).st_mtime_ns // 1_000_000

    def set_mtime_ms(self, path: Path, mtime_ms: int) -> None:
        ns = mtime_ms * 1_000_000
        os.utime(path, ns=(ns, ns))

    def boot_id(self) -> str:
        """Linux's ``/proc/sys/kernel/random/boot_id`` (a new random UUID at every boot)."""
        try:
            with open(BOOT_ID_PATH) as f:
                return f.read().strip()
        except OSError:
            return ""

    def fsync_dir(self, path: Path) -> None:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


DEFAULT_VFS: VFS = OSVFS()


def atomic_write(path: Path, data: Buffer, vfs: VFS = DEFAULT_VFS) -> None:
    """Replace ``path`` by a file holding ``data``, atomically and durably (Kafka's order):

    1. write ``<name>.tmp`` (created or emptied),
    2. fsync it: its bytes are on disk before any name can refer to them,
    3. rename it over ``path``: a reader sees the old file or the new one, never a mix,
    4. fsync the directory: the rename itself survives a power loss.

    A crash before 3 leaves the old file and a stray ``.tmp`` (never read; the next write
    empties it); between 3 and 4 a power loss may bring the old file back, never a torn one.
    Without step 2 a file system may persist the rename before the data, and the old name
    would then hold a torn or empty file.
    """
    tmp = path.with_name(path.name + ".tmp")
    file = vfs.open(tmp, truncate=True)
    try:
        file.pwrite(data, 0)
        file.fsync()
    finally:
        file.close()
    vfs.rename(tmp, path)
    vfs.fsync_dir(path.parent)


def read_file(path: Path, vfs: VFS = DEFAULT_VFS) -> bytes:
    """The whole content of ``path`` (FileNotFoundError if it is missing)."""
    file = vfs.open(path, create=False, writable=False)
    try:
        chunks = []
        offset, size = 0, file.size()
        # Bounded by the end of file: pread returns b"" there.
        while chunk := file.pread(max(size - offset, 1 << 16), offset):
            chunks.append(chunk)
            offset += len(chunk)
        return b"".join(chunks)
    finally:
        file.close()
