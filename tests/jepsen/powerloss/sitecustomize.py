"""Power-loss bookkeeping for the fault suite's broker processes (never part of Sluice itself).

Python imports ``sitecustomize`` at start-up from ``sys.path``; the fault harness puts this
directory on a broker's ``PYTHONPATH`` together with ``SLUICE_SYNC_JOURNAL=<file>``. The broker's
file system seam (:mod:`sluice.server.storage.vfs`, the default :class:`OSVFS`) then appends one
line per durable step to that journal, with a plain ``write`` (it survives a kill -9 in the page
cache, like everything the broker wrote):

* ``sync <path> <size>`` -- after an fsync of ``<path>``: its first ``<size>`` bytes are durable;
* ``rename <src> <dst>`` -- the durable prefix moves with the name.

After a kill -9 the harness (:meth:`tests.jepsen.harness.FaultCluster.apply`, fault
``lose_unflushed``) cuts every segment file back to its last durable size: what a power loss
leaves of data that was never fsynced. A power loss also starts a new boot of the machine: the
harness writes a new boot id to ``<journal>.boot``, which the broker then reads as its
``VFS.boot_id`` (the real one until the first simulated power loss). (Simplifications: bytes
rewritten inside a durable prefix keep their new value, and a directory entry counts as durable
once created.)
"""

from __future__ import annotations

import os

_JOURNAL = os.environ.get("SLUICE_SYNC_JOURNAL")

if _JOURNAL:
    from pathlib import Path

    from sluice.server.storage import vfs as _vfs

    _fd = os.open(_JOURNAL, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    _real_fsync = _vfs.OSFile.fsync
    _real_rename = _vfs.OSVFS.rename

    def _fsync(self: _vfs.OSFile) -> None:
        # The size before the fsync: the background flusher fsyncs on its own thread while the
        # loop goes on appending, and bytes written after the fsync began are not covered.
        size = self.size()
        _real_fsync(self)
        os.write(_fd, f"sync\t{self.path}\t{size}\n".encode())

    def _rename(self: _vfs.OSVFS, src: Path, dst: Path) -> None:
        _real_rename(self, src, dst)
        os.write(_fd, f"rename\t{src}\t{dst}\n".encode())

    def _boot_id(self: _vfs.OSVFS) -> str:
        try:
            return Path(f"{_JOURNAL}.boot").read_text().strip()
        except FileNotFoundError:
            return _real_boot_id(self)

    _real_boot_id = _vfs.OSVFS.boot_id
    _vfs.OSVFS.boot_id = _boot_id  # type: ignore[method-assign]
    _vfs.OSFile.fsync = _fsync  # type: ignore[method-assign]
    _vfs.OSVFS.rename = _rename  # type: ignore[method-assign]
