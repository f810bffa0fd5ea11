"""Storage benchmark: the partition Log against raw file I/O on the same bytes, in the same run.

``python -m bench storage [--quick] [--dir DIR]``

For 1 MiB and 16 KiB producer batches (pre-built, uncompressed, 1 KiB values):

* **append**: ``Log.append_as_leader`` (validate: header + CRC-32C; copy the batch, or only
  its header for a single batch >= 256 KiB; assign offsets; roll when due; pwrite; index) +
  ``maybe_increment_high_watermark``, vs ``os.write`` of the same batch bytes, the same number
  of calls, to a plain file. Target: log >= 0.7 x raw.
* **read**: a consumer-style loop of ``Log.read`` (1 MiB max_bytes, HW-bounded) + ``read_bytes``
  (pread: the copying path; the broker can sendfile the slice instead), vs ``os.read`` of the
  segment files in 1 MiB chunks.
* **recovery**: ``Log.open(had_clean_shutdown=False, recovery_point=0)``, which re-validates every
  batch (CRC) and rebuilds every index, vs ``os.read`` of the same files (and read + CRC-32C, the
  floor for any recovery that checks CRCs). Target: >= 0.5 GB/s.
* **open**: a clean ``Log.open`` of the same log with its ``leader-epoch-checkpoint`` (the normal
  start), and with the file removed, so the epoch cache is rebuilt from the batch headers.

Everything runs from the page cache (no fsync: Kafka's default flush policy); numbers are for
this machine and this moment, printed next to the raw figures so the ratio is what matters.

Where a 16 KiB append's time goes, and what was measured and rejected: ``bench/NOTES.md``.
"""

from __future__ import annotations

import argparse
import functools
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import structlog
from crc32c import crc32c

from sluice.protocol import records as rec
from sluice.server.storage.layout import LEADER_EPOCH_CHECKPOINT
from sluice.server.storage.log import Isolation, Log
from sluice.server.storage.log_config import LogConfig

MiB = 1 << 20
VALUE_SIZE = 1024
APPEND_TARGET = 0.7
RECOVERY_TARGET_GBPS = 0.5


@dataclass
class Result:
    name: str
    nbytes: int
    seconds: float
    ops: int

    @property
    def mb_per_s(self) -> float:
        return self.nbytes / MiB / self.seconds if self.seconds > 0 else float("inf")

    @property
    def gb_per_s(self) -> float:
        return self.nbytes / 1e9 / self.seconds if self.seconds > 0 else float("inf")

    @property
    def ops_per_s(self) -> float:
        return self.ops / self.seconds if self.seconds > 0 else float("inf")


def build_batch(size: int) -> bytes:
    """An uncompressed producer batch of 1 KiB values, as close to ``size`` bytes as fits."""
    builder = rec.RecordBatchBuilder()
    value = bytes(range(256)) * (VALUE_SIZE // 256)
    now = time.time_ns() // 1_000_000
    while True:
        builder.append(now, None, value)
        if builder.size_in_bytes + VALUE_SIZE + 16 > size:
            return builder.build()


def timed(fn: Callable[[], int]) -> tuple[float, int]:
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def raw_write(path: Path, batch: bytes, count: int) -> Result:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)

    def run() -> int:
        for _ in range(count):
            os.write(fd, batch)
        return count

    try:
        seconds, ops = timed(run)
    finally:
        os.close(fd)
    return Result("raw os.write", len(batch) * count, seconds, ops)


def log_append(log: Log, batch: bytes, count: int) -> Result:
    def run() -> int:
        append = log.append_as_leader
        advance = log.maybe_increment_high_watermark
        for _ in range(count):
            append(batch)
            advance(log.log_end_offset)
        return count

    seconds, ops = timed(run)
    return Result("Log.append_as_leader", len(batch) * count, seconds, ops)


def log_append_in_place(log: Log, batch: bytes, count: int) -> Result:
    """The broker's path when the Produce frame is writable: headers rewritten, no copy. The
    producer batch is reset to baseOffset 0 before each append (8 bytes)."""
    frame = bytearray(batch)

    def run() -> int:
        append = log.append_as_leader
        advance = log.maybe_increment_high_watermark
        reset = rec.set_base_offset
        for _ in range(count):
            reset(frame, 0)
            append(frame, in_place=True)
            advance(log.log_end_offset)
        return count

    seconds, ops = timed(run)
    return Result("... in_place=True", len(batch) * count, seconds, ops)


def log_read(log: Log, batch_size: int, records_per_batch: int) -> Result:
    """Consumer-style reads. Every batch has the same size and record count, so the next offset
    follows from the slice size: the benchmark measures the Log, not a client's header walk."""

    def run() -> int:
        offset = log.log_start_offset
        reads = 0
        nbytes = 0
        while True:
            info = log.read(offset, MiB, Isolation.HIGH_WATERMARK)
            if info.slice is None:
                break
            data = info.slice.read_bytes()
            reads += 1
            nbytes += len(data)
            offset = info.slice.first_offset + (len(data) // batch_size) * records_per_batch
        run.nbytes = nbytes  # type: ignore[attr-defined]
        return reads

    seconds, ops = timed(run)
    return Result("Log.read + read_bytes", run.nbytes, seconds, ops)  # type: ignore[attr-defined]


def segment_files(directory: Path) -> list[Path]:
    return sorted(directory.glob("*.log"))


def raw_read(files: list[Path], with_crc: bool = False) -> Result:
    def run() -> int:
        reads = 0
        nbytes = 0
        crc = 0
        for path in files:
            fd = os.open(path, os.O_RDONLY)
            try:
                while chunk := os.read(fd, MiB):
                    reads += 1
                    nbytes += len(chunk)
                    if with_crc:
                        crc = crc32c(chunk, crc)
            finally:
                os.close(fd)
        run.nbytes = nbytes  # type: ignore[attr-defined]
        return reads

    seconds, ops = timed(run)
    name = "raw os.read + crc32c" if with_crc else "raw os.read"
    return Result(name, run.nbytes, seconds, ops)  # type: ignore[attr-defined]


def log_recovery(directory: Path, config: LogConfig, batches: int) -> Result:
    holder: list[Log] = []

    def run() -> int:
        log = Log.open(directory, config, had_clean_shutdown=False, recovery_point=0)
        holder.append(log)
        return batches

    seconds, _ = timed(run)
    log = holder[0]
    nbytes = log.size_in_bytes
    log.close()
    return Result("Log.open (recovery)", nbytes, seconds, batches)


def log_open_ms(directory: Path, config: LogConfig, rebuild: bool) -> float:
    if rebuild:
        (directory / LEADER_EPOCH_CHECKPOINT).unlink()
    start = time.perf_counter()
    log = Log.open(directory, config)
    seconds = time.perf_counter() - start
    log.close()
    return seconds * 1000


def row(label: str, mine: Result, raw: Result, extra: str = "") -> str:
    ratio = mine.mb_per_s / raw.mb_per_s if raw.mb_per_s else float("nan")
    return (
        f"{label:<28} {mine.name:<22} {mine.mb_per_s:9.1f} MB/s {mine.ops_per_s:10.0f} ops/s | "
        f"{raw.name:<14} {raw.mb_per_s:9.1f} MB/s | ratio {ratio:5.2f}{extra}"
    )


def best(results: list[Result]) -> Result:
    return min(results, key=lambda r: r.seconds / max(r.nbytes, 1))


def run_case(
    workdir: Path, batch_size: int, total: int, config: LogConfig, rounds: int
) -> list[str]:
    batch = build_batch(batch_size)
    count = max(1, total // len(batch))
    label = f"{batch_size // 1024} KiB batches x {count}"
    lines = []
    # Rounds alternate raw and log on fresh files; the best of each is reported (the machine is
    # shared: the best round is the least disturbed one). The last log is kept for read/recovery.
    directory = workdir / f"bench-{batch_size}-0"
    raws: list[Result] = []
    appends: list[Result] = []
    in_place: list[Result] = []
    scratch = workdir / "inplace-0"
    for round_ in range(rounds + 1):  # round 0 warms up every path and is not counted
        n = count if round_ else min(count, 8)
        shutil.rmtree(directory, ignore_errors=True)
        log = Log.open(directory, config)
        other = Log.open(scratch, config)
        # Rotate which goes first: a writer finds less free page cache (and more dirty pages to
        # wait for) after the others of its round. All three are measured in the same rotation
        # and files are removed only at the end of the round, so no line gets cleaner conditions.
        runs: list[Callable[[], Result]] = [
            functools.partial(raw_write, workdir / "raw.bin", batch, n),
            functools.partial(log_append, log, batch, n),
            functools.partial(log_append_in_place, other, batch, n),
        ]
        shift = round_ % len(runs)
        results: dict[int, Result] = {}
        for i in list(range(shift, len(runs))) + list(range(shift)):
            results[i] = runs[i]()
        (workdir / "raw.bin").unlink()
        other.close()
        shutil.rmtree(scratch)
        if round_:
            raws.append(results[0])
            appends.append(results[1])
            in_place.append(results[2])
        if round_ < rounds:
            log.close()
    raw, appended = best(raws), best(appends)
    lines.append(
        row(f"append {label}", appended, raw, f"  (target >= {APPEND_TARGET:.2f})")
        + ("" if appended.mb_per_s >= APPEND_TARGET * raw.mb_per_s else "  BELOW TARGET")
    )
    fast = best(in_place)
    lines.append(
        row("", fast, raw)
        + ("" if fast.mb_per_s >= APPEND_TARGET * raw.mb_per_s else "  BELOW TARGET")
    )
    files = segment_files(directory)
    records = rec.parse_header(batch).record_count
    read_log = best([log_read(log, len(batch), records) for _ in range(rounds)])
    read_raw = best([raw_read(files) for _ in range(rounds)])
    lines.append(row(f"read   {label}", read_log, read_raw))
    log.close()
    recovered = best([log_recovery(directory, config, count) for _ in range(rounds)])
    raw_again = best([raw_read(files) for _ in range(rounds)])
    raw_crc = best([raw_read(files, with_crc=True) for _ in range(rounds)])
    verdict = "" if recovered.gb_per_s >= RECOVERY_TARGET_GBPS else "  BELOW TARGET"
    lines.append(
        row(f"recover {label}", recovered, raw_again)
        + f"  = {recovered.gb_per_s:.2f} GB/s (target >= {RECOVERY_TARGET_GBPS} GB/s){verdict}"
    )
    lines.append(
        f"{'':<28} {'':<22} {'':>9}      {'':>10}        | {raw_crc.name:<14} "
        f"{raw_crc.mb_per_s:9.1f} MB/s | ratio {recovered.mb_per_s / raw_crc.mb_per_s:5.2f}"
    )
    with_file = min(log_open_ms(directory, config, rebuild=False) for _ in range(rounds))
    rebuilt = min(log_open_ms(directory, config, rebuild=True) for _ in range(rounds))
    lines.append(
        f"{'open ' + label:<28} with leader-epoch-checkpoint {with_file:7.1f} ms | epoch cache "
        f"rebuilt from the headers {rebuilt:7.1f} ms"
    )
    shutil.rmtree(directory)
    return lines


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench storage", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--quick", action="store_true", help="small sizes (a few seconds)")
    parser.add_argument(
        "--dir", type=Path, default=None, help="work directory (default: a temp dir)"
    )
    parser.add_argument("--total-mib", type=int, default=None, help="bytes appended per case")
    parser.add_argument("--rounds", type=int, default=None, help="rounds per measurement (best)")
    args = parser.parse_args(argv)
    # This is an entrypoint: keep the storage layer's info/debug lines out of the figures.
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))

    big_total = (args.total_mib or (128 if args.quick else 1024)) * MiB
    small_total = (args.total_mib or (32 if args.quick else 256)) * MiB
    rounds = args.rounds or (2 if args.quick else 3)
    config = LogConfig()  # Kafka's defaults: 1 GiB segments, 4 KiB index interval
    parent = args.dir
    if parent is not None:
        parent.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix="sluice-bench-", dir=parent))
    started = time.perf_counter()
    try:
        print(f"storage benchmark in {workdir} (page cache, no fsync)")
        for batch_size, total in ((MiB, big_total), (16 * 1024, small_total)):
            for line in run_case(workdir, batch_size, total, config, rounds):
                print(line, flush=True)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print(f"total {time.perf_counter() - started:.1f} s")
    return 0
