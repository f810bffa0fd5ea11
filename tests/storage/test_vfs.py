"""sluice.server.storage.vfs.OSFile: positional writes complete even when the kernel takes fewer
bytes."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sluice.server.storage.vfs import OSVFS


@pytest.mark.parametrize("data", [b"0123456789" * 7, bytearray(b"abcdefgh" * 9)])
def test_pwrite_loops_over_short_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, data: bytes | bytearray
) -> None:
    real = os.pwrite
    calls: list[int] = []

    def short_pwrite(fd: int, chunk: bytes | memoryview, offset: int) -> int:
        calls.append(offset)
        return real(fd, bytes(chunk)[:7], offset)  # at most 7 bytes per call

    file = OSVFS().open(tmp_path / "f")
    monkeypatch.setattr(os, "pwrite", short_pwrite)
    file.pwrite(memoryview(data)[3:], 100)
    monkeypatch.undo()
    body = bytes(data[3:])
    assert calls == list(range(100, 100 + len(body), 7))
    assert file.pread(len(body) + 10, 100) == body
    assert file.size() == 100 + len(body)
    file.close()
    with pytest.raises(ValueError, match="closed"):
        file.pwrite(b"x", 0)


def test_pwrite_of_a_wide_memoryview_writes_every_byte(tmp_path: Path) -> None:
    file = OSVFS().open(tmp_path / "f")
    words = memoryview(bytearray(range(64))).cast("I")  # 16 items, 64 bytes
    file.pwrite(words, 0)
    assert file.pread(100, 0) == bytes(range(64))
    file.close()
