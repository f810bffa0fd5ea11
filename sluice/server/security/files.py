"""The one way the security room writes a file: atomically and privately.

Credentials and ACLs of a standalone broker are small JSON documents rewritten whole. Write a
temporary file next to the target (mode 0600: it holds secrets), fsync it, rename it over the
target, fsync the directory: after a crash the file is the old document or the new one, never a
mix, and never readable by other users.
"""

from __future__ import annotations

import os
from pathlib import Path


def write_atomically(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
