"""The single-node fault suite (:mod:`tests.faults.suite`) at a small count, so CI runs every
part of it: three kill -9 trials (one per scenario: produce, roll, retention), the disk-full run
(root only), 3,000 fuzzed frames, 1,000 connections. ``python -m tests.faults`` runs the same
with more trials and frames and prints the figures (``bench/NOTES.md``)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from tests.faults.suite import SCENARIOS, connections, disk_full, fuzz, kill_trial

pytestmark = pytest.mark.slow  # broker processes, killed and restarted


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_kill_9_loses_and_duplicates_nothing_acknowledged(tmp_path: Path, scenario: str) -> None:
    result = kill_trial(tmp_path, 0, scenario, random.Random(scenario))
    assert result.valid, result
    assert result.acknowledged > 0
    if scenario != "produce":
        assert result.segments > 1  # the kill landed among rolls
    if scenario == "retention":
        assert result.deleted_by_retention > 0


def test_disk_full(tmp_path: Path) -> None:
    figures = disk_full(tmp_path)
    if "skipped" in figures:
        pytest.skip(figures["skipped"])
    assert figures["storage_errors"].get("KAFKA_STORAGE_ERROR", 0) > 0, figures
    assert set(figures["storage_errors"]) == {"KAFKA_STORAGE_ERROR"}, figures
    assert figures["acknowledged_after_space_returned"] > 0, figures
    assert figures["sigterm_on_full_disk_status"] == 0, figures
    assert "start_failure" not in figures, figures
    for key in ("lost", "duplicated", "inconsistent", "corrupt", "tracebacks"):
        assert figures[key] == 0, figures


def test_fuzzed_frames_leave_the_broker_serving(tmp_path: Path) -> None:
    figures = fuzz(tmp_path, 3000, seed=13)
    assert figures["frames"] == 3000
    assert figures["serving_after"], figures
    assert figures["tracebacks"] == 0 and figures["corrupt"] == 0, figures
    assert figures["stop_status"] == 0, figures


def test_a_thousand_connections(tmp_path: Path) -> None:
    figures = connections(tmp_path, 1000)
    assert figures["serving_after"], figures
    assert figures["tracebacks"] == 0 and figures["stop_status"] == 0, figures
