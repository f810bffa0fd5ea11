"""Offset checkpoint files: Kafka's format, atomic replace, torn tmp ignored."""

from __future__ import annotations

from pathlib import Path

import pytest

from sluice.server.storage.checkpoint import CorruptCheckpointError, OffsetCheckpointFile


def test_round_trip_and_exact_format(tmp_path: Path) -> None:
    cp = OffsetCheckpointFile(tmp_path / "recovery-point-offset-checkpoint")
    assert cp.read() == {}
    cp.write({("orders-eu", 1): 42, ("a", 0): 7})
    assert (tmp_path / "recovery-point-offset-checkpoint").read_text() == (
        "0\n2\na 0 7\norders-eu 1 42\n"
    )
    assert cp.read() == {("orders-eu", 1): 42, ("a", 0): 7}
    assert not (tmp_path / "recovery-point-offset-checkpoint.tmp").exists()


def test_torn_tmp_file_is_ignored(tmp_path: Path) -> None:
    cp = OffsetCheckpointFile(tmp_path / "cp")
    cp.write({("t", 0): 10})
    # A crash during the next write leaves a half-written tmp file behind.
    (tmp_path / "cp.tmp").write_text("0\n3\nt 0 11\nt 1")
    assert cp.read() == {("t", 0): 10}
    cp.write({("t", 0): 12})
    assert cp.read() == {("t", 0): 12}


@pytest.mark.parametrize(
    "content",
    [
        "",
        "1\n0\n",
        "0\n2\nt 0 1\n",
        "0\nx\n",
        "0\n1\nt 0\n",
        "0\n1\nt zero 1\n",
        "0\n1\nt 0 1 2\n",
        "0\n1\nt 0 12",  # cut before the newline: 12 may have been 123
        "0\n0",
    ],
)
def test_malformed_content_raises(tmp_path: Path, content: str) -> None:
    (tmp_path / "cp").write_text(content)
    with pytest.raises(CorruptCheckpointError):
        OffsetCheckpointFile(tmp_path / "cp").read()


def test_refuses_unwritable_topic_names(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        OffsetCheckpointFile(tmp_path / "cp").write({("has space", 0): 1})
