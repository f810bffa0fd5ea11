"""A fault-injecting :class:`~sluice.server.storage.vfs.VFS` for crash tests.

:class:`CrashVFS` works on real files under a root directory and numbers every operation that
changes the disk, one *step* each: an ``open`` that creates or empties a file, ``pwrite``,
``truncate``, ``fsync``, ``rename``, ``remove``, ``fsync_dir``. :attr:`CrashVFS.steps` is the
trace; a dry run of a code path gives its steps, and a test then replays the path with one step

* failing (``fail_at``): an ``OSError`` (EIO, ENOSPC, ...) instead of the operation; the
  process lives on, so the caller's error handling is what is tested;
* crashing (``crash_at``): the operation is not done (a ``pwrite`` writes only its first
  ``tear`` bytes), :class:`Crash` is raised and every later step raises it again: the process
  is dead, nothing more reaches the disk.

After a crash, two images of the disk can be taken, then reopened with the real OS VFS:

* :meth:`CrashVFS.process_crash_image`: a killed process (``kill -9``); the page cache
  survives, so the files are exactly as they are now;
* :meth:`CrashVFS.power_loss_image`: a power loss; a file's content as of its last ``fsync``
  (empty if never fsynced), and a create, rename or unlink only once its directory was
  fsynced. Pessimistic: real file systems often keep more, never less.

Real fsyncs are not issued: the model alone decides what a power loss keeps, and a test that
replays an operation at each of its steps stays fast.

Not modelled: stores into index mmaps (derived data; they reach the durable model when an
fsync of that file is issued), directory creation and removal outside the VFS (assumed
durable), renames of directories. Files present when the VFS is built count as durable.
"""

from __future__ import annotations

import errno as errno_module
import os
import shutil
from pathlib import Path
from typing import NamedTuple

from sluice.server.storage.vfs import OSVFS, Buffer, OSFile


class Crash(BaseException):
    """The simulated death of the process. A BaseException, so no ``except Exception`` or
    ``except OSError`` in the code under test can swallow it and carry on."""


class Step(NamedTuple):
    kind: str  # create, truncate, pwrite, ftruncate, fsync, rename, remove, fsync_dir
    path: Path


class CrashVFS(OSVFS):
    """See the module docstring. Single-threaded, like the storage layer."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.steps: list[Step] = []
        self.crash_at: int | None = None
        self.tear = 0
        self.fail_at: int | None = None
        self.fail_errno = errno_module.EIO
        self.crashed = False
        self._files: list[CrashFile] = []
        self._inodes = 0
        self._live: dict[Path, int] = {}  # path -> inode, as the process sees it
        self._durable_dirs: dict[Path, dict[str, int]] = {}  # as of each directory's fsync
        self._durable_data: dict[int, bytes] = {}  # inode -> content as of its last fsync
        for directory, _dirs, names in os.walk(self.root):
            entries = self._durable_dirs.setdefault(Path(directory), {})
            for name in names:
                path = Path(directory) / name
                inode = self._new_inode(path)
                entries[name] = inode
                self._durable_data[inode] = path.read_bytes()

    def _new_inode(self, path: Path) -> int:
        self._inodes += 1
        self._live[path] = self._inodes
        return self._inodes

    def step(self, kind: str, path: Path) -> bool:
        """Count one step; raise if it is the failing or crashing one. True = crash here
        (the caller tears its write first, then raises :class:`Crash`)."""
        if self.crashed:
            raise Crash(f"already crashed; {kind} {path}")
        index = len(self.steps)
        self.steps.append(Step(kind, Path(path)))
        if index == self.fail_at:
            raise OSError(self.fail_errno, f"injected {os.strerror(self.fail_errno)}", str(path))
        if index == self.crash_at:
            self.crashed = True
            return True
        return False

    def crash(self, kind: str, path: Path) -> None:
        if self.step(kind, path):
            raise Crash(f"crash at step {len(self.steps) - 1}: {kind} {path}")

    # -- VFS ---------------------------------------------------------------------------------

    def open(
        self, path: Path, *, create: bool = True, writable: bool = True, truncate: bool = False
    ) -> OSFile:
        path = Path(path)
        exists = os.path.exists(path)
        if create and not exists:
            self.crash("create", path)
        elif truncate:
            self.crash("truncate", path)
        real = super().open(path, create=create, writable=writable, truncate=truncate)
        inode = self._live.get(path)
        if inode is None:
            inode = self._new_inode(path)
            if exists:  # made outside the VFS: count it as durable
                self._durable_dirs.setdefault(path.parent, {})[path.name] = inode
                self._durable_data[inode] = path.read_bytes()
        file = CrashFile(self, path, real, inode)
        self._files.append(file)
        return file

    def rename(self, src: Path, dst: Path) -> None:
        self.crash("rename", src)
        super().rename(src, dst)
        inode = self._live.pop(Path(src), None)
        if inode is not None:
            self._live[Path(dst)] = inode

    def remove(self, path: Path) -> None:
        self.crash("remove", path)
        super().remove(path)
        self._live.pop(Path(path), None)

    def fsync_dir(self, path: Path) -> None:
        self.crash("fsync_dir", path)
        path = Path(path)
        self._durable_dirs[path] = {p.name: i for p, i in self._live.items() if p.parent == path}

    # -- after the crash ---------------------------------------------------------------------

    def release(self) -> None:
        """Close every descriptor still open (the dead process's), without touching the disk."""
        for file in self._files:
            OSFile.close(file)
        self._files.clear()

    def process_crash_image(self, into: Path) -> Path:
        """Copy of the files as they are now: what a killed process leaves."""
        shutil.copytree(self.root, into)
        return into

    def power_loss_image(self, into: Path) -> Path:
        """What survives a power loss now, per the model in the module docstring."""
        for directory, _dirs, _names in os.walk(self.root):
            target = into / Path(directory).relative_to(self.root)
            target.mkdir(parents=True, exist_ok=True)
            for name, inode in self._durable_dirs.get(Path(directory), {}).items():
                (target / name).write_bytes(self._durable_data.get(inode, b""))
        return into

    def synced(self, file: CrashFile) -> None:
        fd = file.fileno()
        self._durable_data[file.inode] = os.pread(fd, os.fstat(fd).st_size, 0)


class CrashFile(OSFile):
    """A real file whose changing calls are steps of its :class:`CrashVFS`."""

    __slots__ = ("inode", "vfs")

    def __init__(self, vfs: CrashVFS, path: Path, real: OSFile, inode: int) -> None:
        super().__init__(path, real.fileno())
        self.vfs = vfs
        self.inode = inode

    def pwrite(self, data: Buffer, offset: int) -> None:
        if self.vfs.step("pwrite", self.path):
            view = memoryview(data).cast("B")
            if self.vfs.tear:
                super().pwrite(view[: self.vfs.tear], offset)
            raise Crash(f"torn write of {self.path} after {min(self.vfs.tear, len(view))} bytes")
        super().pwrite(data, offset)

    def truncate(self, size: int) -> None:
        self.vfs.crash("ftruncate", self.path)
        super().truncate(size)

    def fsync(self) -> None:
        self.vfs.crash("fsync", self.path)
        self.vfs.synced(self)
