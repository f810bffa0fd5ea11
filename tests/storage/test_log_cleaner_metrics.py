"""The log cleaner's gauges, computed as Kafka's ``LogCleaner`` / ``LogCleanerManager`` do
(the values; their export on ``/metrics`` is tested in ``tests/broker/test_metrics.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sluice.server.storage.log_cleaner import LogCleaner, log_to_clean
from sluice.server.storage.log_config import CleanerConfig
from tests.storage.test_log_cleaner import NOW, Clock, open_log, write


async def test_gauges_follow_the_last_cleaning(tmp_path: Path) -> None:
    clock = Clock()
    log = open_log(tmp_path / "t-0", clock)
    for i in range(20):  # 3 keys, 20 updates: the cleaning keeps 3 records of 20
        write(log, [(b"k%d" % (i % 3), b"v" * 50)], NOW)
        if i % 5 == 4:
            log.roll()
    log.update_high_watermark(log.log_end_offset)
    manager = LogCleaner(tmp_path, CleanerConfig(dedupe_buffer_size=24 * 100), clock=clock)
    assert (manager.max_buffer_utilization_percent(), manager.recopy_percent()) == (0, 0)
    clock.now += 250
    assert manager.time_since_last_run_ms() == 250  # counted from construction, as Kafka
    assert await manager.run_once([log])
    stats = manager.last_stats
    assert stats is not None
    # 3 keys in a map of 100 slots
    assert manager.max_buffer_utilization_percent() == 3
    recopy = manager.recopy_percent()
    assert recopy == int(100 * stats.bytes_written / stats.bytes_read) and 0 < recopy < 50
    assert manager.max_clean_time_secs() == int(stats.elapsed) == 0
    assert manager.max_dirty_percent() == 100  # nothing was clean before
    assert manager.time_since_last_run_ms() == 0
    clock.now += 1234
    assert manager.time_since_last_run_ms() == 1234
    assert not await manager.run_once([log])  # looked again: nothing dirty
    assert manager.max_dirty_percent() == 0 and manager.time_since_last_run_ms() == 0
    log.close()


def test_compaction_delay_is_kafkas_max_compaction_delay(tmp_path: Path) -> None:
    clock = Clock()
    log = open_log(tmp_path / "t-0", clock, max_compaction_lag_ms=60_000)
    write(log, [(b"k", b"v")], NOW - 200_000)  # first batch of a dirty segment: 200 s old
    log.roll()
    write(log, [(b"k", b"w")], NOW)
    log.roll()
    log.update_high_watermark(log.log_end_offset)
    # cleanUntilTime = now - lag; delay = cleanUntilTime - earliest dirty timestamp
    ltc = log_to_clean(log, None, NOW)
    assert ltc.compaction_delay_ms == 140_000 and ltc.needs_compaction_now
    manager = LogCleaner(tmp_path, CleanerConfig(), clock=clock)
    manager.grab_filthiest_log([log])
    assert manager.max_compaction_delay_secs() == 140
    assert log_to_clean(log, None, NOW - 150_000).compaction_delay_ms == 0
    log.close()


async def test_uncleanable_partitions_and_their_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = Clock()
    logs = []
    for name in ("a", "b"):
        log = open_log(tmp_path / f"{name}-0", clock)
        for i in range(4):
            write(log, [(b"k", b"v%d" % i)], NOW)
            log.roll()
        log.update_high_watermark(log.log_end_offset)
        logs.append(log)
    manager = LogCleaner(tmp_path, CleanerConfig(), clock=clock)
    assert manager.uncleanable_partitions_count() == 0
    assert manager.uncleanable_bytes(logs) == 0

    def buggy(*_args: object, **_kw: object) -> None:
        raise ValueError("a bug")

    monkeypatch.setattr(manager.cleaner, "write_cleaned", buggy)
    assert not await manager.run_once(logs)
    assert manager.uncleanable_partitions_count() == 1
    (bad,) = [log for log in logs if (log.topic, log.partition) in manager.uncleanable]
    expected = log_to_clean(bad, None, NOW).cleanable_bytes
    assert expected == sum(s.size for s in bad.segments[:-1]) > 0
    assert manager.uncleanable_bytes(logs) == expected
    for log in logs:
        log.close()
