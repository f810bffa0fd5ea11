"""What transactions cost the partition log (``python -m bench txn_storage [--quick]``).

* appends: idempotent batches against transactional ones with a COMMIT marker every
  ``--commit-every`` batches (``Log.append_as_leader`` + ``Log.append_end_txn_marker``), per batch;
* a segment roll, which writes the producer snapshot at the new segment's base offset (Kafka's
  ``takeSnapshot`` in ``roll``), with 0 to ``--producers`` producer ids in the state, against the
  same roll without the snapshot (what a roll cost before);
* the stable-offset questions a read_committed Fetch asks: the first ``last_stable_offset`` of a
  log opened without a producer snapshot (the producer state is built from every batch header),
  the same after a clean restart (from the snapshot), and then per call; a read bounded by the
  LSO against one bounded by HW.

Figures and their reading: bench/NOTES.md, "bench.txn_storage".
"""

from __future__ import annotations

import argparse
import logging
import shutil
import tempfile
import time
from pathlib import Path

import structlog

from sluice.protocol import records as rec
from sluice.server.storage.log import Isolation, Log
from sluice.server.storage.log_config import LogConfig
from sluice.server.storage.producer_state import snapshot_files

CONFIG = LogConfig(segment_bytes=64 << 20)


def _batch(pid: int, seq: int, transactional: bool, now: int) -> bytes:
    return rec.build_batch(
        [(now, None, b"x" * 100)] * 10,
        producer_id=pid,
        producer_epoch=0,
        base_sequence=seq,
        is_transactional=transactional,
    )


def appends(directory: Path, batches: int, commit_every: int, transactional: bool) -> float:
    """Microseconds per appended data batch (markers included in the time)."""
    log = Log.open(directory, CONFIG)
    now = int(time.time() * 1000)
    data = [_batch(1, 10 * i, transactional, now) for i in range(batches)]
    started = time.perf_counter()
    for i, batch in enumerate(data):
        log.append_as_leader(batch, leader_epoch=0)
        if transactional and (i + 1) % commit_every == 0:
            log.append_end_txn_marker(1, 0, 0, commit=True, leader_epoch=0)
    elapsed = time.perf_counter() - started
    log.close()
    shutil.rmtree(directory)
    return elapsed / batches * 1e6


def rolls(directory: Path, producers: int, count: int, snapshot: bool) -> float:
    """CPU microseconds (user + system of this process: what the event loop spends, robust on
    a shared machine) per ``Log.roll`` of a log whose producer state holds ``producers`` ids
    (0: a log without idempotent writes, whose state is known empty), a plain batch appended
    between rolls; ``snapshot`` False times the roll with the snapshot left out."""
    log = Log.open(directory, CONFIG)
    now = int(time.time() * 1000)
    for pid in range(producers):
        log.append_as_leader(_batch(1000 + pid * 7919, 0, False, now), leader_epoch=0)
    plain = rec.build_batch([(now, None, b"x" * 100)])
    if not snapshot:
        log._take_snapshot = lambda offset, sync: None  # type: ignore[method-assign]
    elapsed = 0.0
    for _ in range(count):
        log.append_as_leader(plain, leader_epoch=0)
        started = time.process_time()
        log.roll()
        elapsed += time.process_time() - started
    log.close()
    shutil.rmtree(directory)
    return elapsed / count * 1e6


def stable_offsets(directory: Path, batches: int) -> dict[str, float]:
    log = Log.open(directory, CONFIG)
    now = int(time.time() * 1000)
    plain = rec.build_batch([(now, None, b"x" * 1000)] * 10)
    for _ in range(batches):
        log.append_as_leader(plain, leader_epoch=0)
    log.maybe_increment_high_watermark(log.log_end_offset)
    hw = log.high_watermark
    log.close()
    for _offset, path in snapshot_files(directory):
        path.unlink()  # as a log written before producer state was kept
    out: dict[str, float] = {}
    log = Log.open(directory, CONFIG, high_watermark=hw)
    started = time.perf_counter()
    _ = log.last_stable_offset
    out["first LSO, no snapshot (ms)"] = (time.perf_counter() - started) * 1e3
    log.close()  # writes the snapshot
    log = Log.open(directory, CONFIG, high_watermark=hw)
    started = time.perf_counter()
    _ = log.last_stable_offset
    out["first LSO, snapshot (ms)"] = (time.perf_counter() - started) * 1e3
    calls = 10_000
    started = time.perf_counter()
    for _ in range(calls):
        _ = log.last_stable_offset
    out["LSO per call (us)"] = (time.perf_counter() - started) / calls * 1e6
    for name, isolation in (("HW", Isolation.HIGH_WATERMARK), ("LSO", Isolation.TXN_COMMITTED)):
        started = time.perf_counter()
        for _ in range(1000):
            log.read(0, 1 << 20, isolation)
        out[f"read bounded by {name} (us)"] = (time.perf_counter() - started) / 1000 * 1e6
    out["log (MiB)"] = log.size_in_bytes / (1 << 20)
    log.close()
    shutil.rmtree(directory)
    return out


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench txn_storage", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="small sizes (a few seconds)")
    parser.add_argument("--commit-every", type=int, default=10, help="batches per transaction")
    parser.add_argument("--producers", type=int, default=10_000, help="most producer ids in a roll")
    args = parser.parse_args(argv)
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    batches = 5_000 if args.quick else 50_000
    root = Path(tempfile.mkdtemp(prefix="bench-txn-"))
    try:
        idem = appends(root / "idem-0", batches, args.commit_every, transactional=False)
        txn = appends(root / "txn-0", batches, args.commit_every, transactional=True)
        print(
            f"append of a 10-record batch: idempotent {idem:.2f} us, transactional with a "
            f"COMMIT every {args.commit_every} batches {txn:.2f} us ({txn / idem:.2f}x)"
        )
        count = 20 if args.quick else 100
        for producers in sorted({0, 1, 100, args.producers}):
            with_snap = rolls(root / f"roll-{producers}", producers, count, snapshot=True)
            without = rolls(root / f"roll-{producers}", producers, count, snapshot=False)
            print(
                f"roll with {producers} producer ids: {with_snap:.0f} us CPU with the snapshot, "
                f"{without:.0f} us without ({with_snap - without:+.0f} us)"
            )
        for name, value in stable_offsets(root / "lso-0", batches).items():
            print(f"{name}: {value:.2f}")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0
