"""A :class:`~sluice.server.storage.vfs.VFS` whose disk can fill up: real files, and while
:attr:`FullDiskVFS.full` is set every write that needs space fails with ``errno`` (ENOSPC by
default; EIO, EDQUOT...), the way a full file system answers ``pwrite``.

What needs no space still works, as on a real full disk: opening and creating files (the
inodes are not exhausted), empty writes, growing a file with ``ftruncate`` (sparse), renames,
removals, fsyncs (what was written is already allocated). ``allocate`` (``posix_fallocate``)
fails while full. ``fail_fsync`` also fails fsyncs (a file system that allocates at writeback,
or EIO); ``fail_allocate`` fails only allocations (the log's last page had room, an index page
has none). ``failures`` counts the injected errors.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

from sluice.server.storage.vfs import OSVFS, Buffer, OSFile


class FullDiskVFS(OSVFS):
    def __init__(self, error: int = errno.ENOSPC) -> None:
        self.full = False
        self.fail_fsync = False
        self.fail_allocate = False
        self.errno = error
        self.failures = 0

    def fail(self, path: Path) -> OSError:
        self.failures += 1
        return OSError(self.errno, os.strerror(self.errno), str(path))

    def open(
        self, path: Path, *, create: bool = True, writable: bool = True, truncate: bool = False
    ) -> OSFile:
        real = super().open(path, create=create, writable=writable, truncate=truncate)
        return FullDiskFile(self, real)


class FullDiskFile(OSFile):
    __slots__ = ("vfs",)

    def __init__(self, vfs: FullDiskVFS, real: OSFile) -> None:
        super().__init__(real.path, real.fileno())
        self.vfs = vfs

    def pwrite(self, data: Buffer, offset: int) -> None:
        if self.vfs.full and len(memoryview(data)):
            raise self.vfs.fail(self.path)
        super().pwrite(data, offset)

    def allocate(self, offset: int, length: int) -> None:
        if self.vfs.full or self.vfs.fail_allocate:
            raise self.vfs.fail(self.path)
        super().allocate(offset, length)

    def fsync(self) -> None:
        if self.vfs.fail_fsync:
            raise self.vfs.fail(self.path)
        super().fsync()
