"""Log cleaner benchmark: cleaning throughput against a raw read of the same bytes, same run.

``python -m bench cleaner [--quick] [--dir DIR] [--codec N]``

A compacted partition of ``--mib`` MiB of dirty log (batches of 100 records, 100-byte values,
keys drawn from 10,000, so each key is rewritten many times), in 16 MiB segments, everything
below the active segment dirty. Measured, from the page cache:

* **raw read**: ``os.read`` of the segment files in 1 MiB chunks (the floor for any cleaner);
* **read + decode**: the same bytes split into batches and every record decoded with
  :func:`sluice.protocol.records.decode_batch_columns` (what any Python cleaner must do once
  per pass: the offset map reads every dirty record);
* **clean**: :meth:`sluice.server.storage.log_cleaner.Cleaner.clean`: offset map of the dirty
  section, then every segment rewritten into ``.cleaned`` files (fsynced), swapped in, the
  directory fsynced. MB/s of dirty log in.

* **produce while cleaning**: on the event loop, 16 KiB appends to another partition for as
  long as a cleaning of the same dirty log takes in its thread (``LogCleaner.run_once``, as the
  broker runs it), against the same appends with no cleaning: what the cleaner's thread, which
  shares the GIL with the loop, costs the produce path. Appends per second and the worst gap
  between two appends.

Figures for this machine and this moment; the ratios are what matter (``bench/NOTES.md``).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import random
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import structlog

from sluice.protocol import records as rec
from sluice.server.storage.log import Log
from sluice.server.storage.log_cleaner import Cleaner, LogCleaner, log_to_clean
from sluice.server.storage.log_config import CleanerConfig, LogConfig

MiB = 1 << 20
NOW = 1_700_000_000_000


def build(directory: Path, mib: int, codec: int, keys: int) -> Log:
    config = LogConfig(cleanup_policy="compact", segment_bytes=16 * MiB, file_delete_delay_ms=0)
    log = Log.open(directory, config, clock=lambda: NOW)
    rng = random.Random(7)
    value = b"v" * 100
    while log.size_in_bytes < mib * MiB:
        batch = [(NOW, b"key-%d" % rng.randrange(keys), value) for _ in range(100)]
        log.append_as_leader(rec.build_batch(batch, compression=codec))
    log.roll()
    log.append_as_leader(rec.build_batch([(NOW, b"last", value)]))
    log.maybe_increment_high_watermark(log.log_end_offset)
    return log


def raw_read(paths: list[Path]) -> float:
    started = time.perf_counter()
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            while os.read(fd, MiB):
                pass
        finally:
            os.close(fd)
    return time.perf_counter() - started


def read_and_decode(paths: list[Path]) -> float:
    started = time.perf_counter()
    for path in paths:
        data = path.read_bytes()
        for _position, _header, view in rec.iter_batches(data):
            rec.decode_batch_columns(view)
    return time.perf_counter() - started


async def _produce_for(other: Log, done: Callable[[], bool]) -> tuple[int, float, float]:
    """Append 16 KiB batches to ``other`` until ``done()``; (appends, seconds, worst gap)."""
    payload = rec.build_batch([(NOW, b"p", b"x" * 16_000)])
    appends, worst = 0, 0.0
    started = last = time.perf_counter()
    while not done():
        other.append_as_leader(payload)
        other.maybe_increment_high_watermark(other.log_end_offset)
        appends += 1
        await asyncio.sleep(0)  # a turn of the loop, as between two Produce requests
        now = time.perf_counter()
        worst, last = max(worst, now - last), now
    return appends, time.perf_counter() - started, worst


async def produce_while_cleaning(root: Path, mib: int, codec: int, keys: int) -> list[str]:
    lines = []
    for cleaning in (False, True):
        directory = root / f"p{int(cleaning)}"
        log = build(directory / "t-0", mib, codec, keys)
        other = Log.open(directory / "o-0", LogConfig(segment_bytes=64 * MiB), clock=lambda: NOW)
        cleaner = LogCleaner(directory, CleanerConfig(), clock=lambda: NOW)
        seconds = 0.0
        if cleaning:
            task = asyncio.ensure_future(cleaner.run_once([log]))
            appends, seconds, worst = await _produce_for(other, task.done)
            assert await task, "the log was not cleaned"
        else:
            deadline = time.perf_counter() + 3.0
            appends, seconds, worst = await _produce_for(
                other, lambda end=deadline: time.perf_counter() > end
            )
        what = "while cleaning" if cleaning else "alone         "
        lines.append(
            f"  produce {what} {appends / seconds:10.0f} appends/s, worst gap "
            f"{worst * 1000:.1f} ms ({seconds:.1f} s)"
        )
        log.close()
        other.close()
    return lines


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench cleaner")
    parser.add_argument("--quick", action="store_true", help="16 MiB instead of --mib")
    parser.add_argument("--mib", type=int, default=128, help="dirty log size")
    parser.add_argument("--codec", type=int, default=0, help="0 none, 1 gzip, 3 lz4, 4 zstd")
    parser.add_argument("--keys", type=int, default=10_000)
    parser.add_argument("--dir", type=Path, default=None)
    args = parser.parse_args(argv)
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    mib = 16 if args.quick else args.mib
    root = Path(tempfile.mkdtemp(prefix="bench-cleaner-", dir=args.dir))
    try:
        log = build(root / "t-0", mib, args.codec, args.keys)
        paths = [s.log_path for s in log.segments[:-1]]
        dirty = sum(p.stat().st_size for p in paths)
        raw_read(paths)  # warm the page cache
        raw = raw_read(paths)
        decode = read_and_decode(paths)
        ltc = log_to_clean(log, None, NOW)
        cleaner = Cleaner(CleanerConfig())
        started = time.perf_counter()
        cleaner.clean(log, ltc.first_dirty, ltc.first_uncleanable, NOW)
        cleaning = time.perf_counter() - started
        after = sum(s.size for s in log.segments[:-1])
        log.close()
        produce = asyncio.run(produce_while_cleaning(root, mib, args.codec, args.keys))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    mb = dirty / 1e6
    print(f"dirty log: {dirty / MiB:.1f} MiB, codec {args.codec}, {args.keys} keys")
    print(f"  raw read        {mb / raw:10.1f} MB/s")
    print(f"  read + decode   {mb / decode:10.1f} MB/s  ({raw / decode:.3f} x raw)")
    print(f"  clean           {mb / cleaning:10.1f} MB/s  ({raw / cleaning:.3f} x raw, "
          f"{decode / cleaning:.2f} x read+decode); {after / MiB:.2f} MiB left")  # fmt: skip
    print("\n".join(produce))
    return 0
