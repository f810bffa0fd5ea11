"""Producer id expiration: what the periodic check costs the event loop.

``python -m bench producer_expiration [--producers 10000,100000] [--partitions 2000]
[--per-partition 20]``

1. One partition's state holding N producers, half of them expired:
   ``ProducerStateManager.remove_expired`` (one uninterrupted step on the loop).
2. A LogManager with P partitions of K producers each, half expired: one pass of
   ``LogManager.remove_expired_producers`` (the background task's), its duration and the longest
   time the event loop waited for it (it yields every ``_EXPIRATION_STEP`` producers).

In-process, nothing written but the empty partitions' files. A 2-core machine shared with other
work: figures vary run to run. Figures: ``bench/NOTES.md``.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time

from sluice.protocol.records import BatchHeader
from sluice.server.storage.log_config import LogConfig, ProducerStateManagerConfig
from sluice.server.storage.log_manager import LogManager
from sluice.server.storage.producer_state import ProducerStateManager

NOW_MS = 1_700_000_000_000
EXPIRATION_MS = 1_000


def _header(pid: int, expired: bool) -> BatchHeader:
    ts = 0 if expired else NOW_MS
    return BatchHeader(0, 100, 0, 2, 0, 0, 0, ts, ts, pid, 0, 0, 1)


def one_partition(producers: int) -> float:
    """Seconds ``remove_expired`` takes over ``producers`` producers, half expired."""
    state = ProducerStateManager()
    for pid in range(producers):
        state.update(_header(pid, pid % 2 == 1), pid)
    started = time.perf_counter()
    state.remove_expired(NOW_MS, EXPIRATION_MS)
    return time.perf_counter() - started


async def many_partitions(partitions: int, per_partition: int) -> tuple[int, float, float]:
    """(producers removed, seconds of the pass, longest event-loop stall in seconds)."""
    with tempfile.TemporaryDirectory() as directory:
        manager = LogManager(
            directory,
            LogConfig(),
            producer_config=ProducerStateManagerConfig(EXPIRATION_MS),
            clock=lambda: NOW_MS,
        )
        manager.open()
        try:
            manager.create_topic("t", partitions)
            for partition in range(partitions):
                log = manager.get_log("t", partition)
                assert log is not None
                state = log.producer_state()
                for i in range(per_partition):
                    state.update(_header(partition * per_partition + i, i % 2 == 1), i)
            stalls: list[float] = []

            async def ticker() -> None:
                last = time.perf_counter()
                while True:
                    await asyncio.sleep(0)
                    now = time.perf_counter()
                    stalls.append(now - last)
                    last = now

            task = asyncio.create_task(ticker())
            await asyncio.sleep(0)
            started = time.perf_counter()
            removed = await manager.remove_expired_producers(NOW_MS)
            elapsed = time.perf_counter() - started
            task.cancel()
            return removed, elapsed, max(stalls, default=elapsed)
        finally:
            manager.close()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench producer_expiration")
    parser.add_argument("--producers", default="10000,100000")
    parser.add_argument("--partitions", type=int, default=2000)
    parser.add_argument("--per-partition", type=int, default=20)
    args = parser.parse_args(argv)
    for n in (int(x) for x in args.producers.split(",")):
        print(f"one partition, {n:,} producers, half expired: {one_partition(n) * 1000:.1f} ms")
    removed, elapsed, stall = asyncio.run(many_partitions(args.partitions, args.per_partition))
    print(
        f"{args.partitions:,} partitions x {args.per_partition} producers, {removed:,} expired: "
        f"pass {elapsed * 1000:.1f} ms, longest loop stall {stall * 1000:.1f} ms"
    )
    return 0
