"""Restart benchmark: how long a broker holding many empty partitions takes to come back after a
clean shutdown (a rolling restart's step).

``python -m bench restart [--partitions 500,2000,5000] [--per-topic 100] [--unclean]
[--profile FILE] [--tree DIR]``

For each partition count: a ``python -m sluice.server`` subprocess on a fresh data dir creates
the partitions (CreateTopics, ``--per-topic`` partitions per topic), is stopped with SIGTERM (a
clean shutdown: the marker is written), and is started again on the same data dir. The figure is
the time from that second process's start until it accepts connections and has answered a
Metadata request (all topics) listing every partition -- imports, config, loading the logs and
binding the listener included. The broker's own "logs loaded" seconds are printed beside it.
``--unclean`` stops the first broker with SIGKILL instead (no marker: every log is recovered).
``--profile FILE`` runs the restarted broker of the last count under cProfile and prints its top
functions. ``--tree DIR`` runs both brokers from another checkout (e.g. ``git archive`` of the
commit to compare with).

The broker's open-file limit is raised to the hard limit and ``sluice.log.open.files.max`` set
to fit the partitions (three files per active segment). Target: 5,000 partitions in < 3 s.
This is a 2-core machine shared with other work: figures vary run to run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import pstats
import resource
import shutil
import signal
import tempfile
import time
from pathlib import Path

from sluice.protocol.messages import CreateTopicsRequest, MetadataRequest
from tests.broker_util import BrokerProcess, WireClient, start_broker

TARGET_S = 3.0
TARGET_PARTITIONS = 5_000
_CREATE_TOPICS_PER_REQUEST = 10


def _overrides(partitions: int) -> list[str]:
    return [f"sluice.log.open.files.max={partitions * 3 + 500}"]


def _nofile() -> int:
    return int(resource.getrlimit(resource.RLIMIT_NOFILE)[1])


async def _create(broker: BrokerProcess, partitions: int, per_topic: int) -> None:
    client = await WireClient.connect(broker.host, broker.port)
    try:
        topics = []
        left, i = partitions, 0
        while left > 0:
            count = min(per_topic, left)
            topics.append(
                CreateTopicsRequest.CreatableTopic(
                    name=f"restart-{i}",
                    num_partitions=count,
                    replication_factor=1,
                    assignments=[],
                    configs=[],
                )
            )
            left -= count
            i += 1
        for start in range(0, len(topics), _CREATE_TOPICS_PER_REQUEST):
            body = CreateTopicsRequest(
                topics=topics[start : start + _CREATE_TOPICS_PER_REQUEST],
                timeout_ms=120_000,
                validate_only=False,
            )
            response = await client.request(19, 4, body, timeout=300.0)
            errors = [(t.name, t.error_code) for t in response.topics if t.error_code]
            if errors:
                raise RuntimeError(f"CreateTopics failed: {errors}")
    finally:
        await client.close()


async def _metadata_partitions(broker: BrokerProcess) -> int:
    client = await WireClient.connect(broker.host, broker.port)
    try:
        response = await client.request(3, 1, MetadataRequest(topics=None), timeout=120.0)
        return sum(len(t.partitions) for t in response.topics)
    finally:
        await client.close()


def _logs_loaded_seconds(broker: BrokerProcess) -> float | None:
    for line in broker.log_text().splitlines():
        if '"logs loaded"' in line:
            return float(json.loads(line).get("seconds", 0.0))
    return None


def measure(
    workdir: Path,
    partitions: int,
    per_topic: int,
    *,
    unclean: bool,
    profile: Path | None,
    tree: Path | None = None,
) -> tuple[float, float | None]:
    """Create ``partitions``, stop the broker, time the restart (seconds, logs-loaded seconds)."""
    data = workdir / f"data-{partitions}"
    nofile = _nofile()
    first = start_broker(
        data, overrides=_overrides(partitions), nofile=nofile, timeout=120.0, source_tree=tree
    )
    try:
        asyncio.run(_create(first, partitions, per_topic))
    finally:
        first.stop(signal.SIGKILL if unclean else signal.SIGTERM, timeout=300.0)
    started = time.monotonic()
    second = start_broker(
        data,
        overrides=_overrides(partitions),
        nofile=nofile,
        timeout=300.0,
        python_args=("-m", "cProfile", "-o", str(profile)) if profile else (),
        source_tree=tree,
    )
    try:
        seen = asyncio.run(_metadata_partitions(second))
        elapsed = time.monotonic() - started
        if seen != partitions:
            raise RuntimeError(f"Metadata listed {seen} partitions, expected {partitions}")
        return elapsed, _logs_loaded_seconds(second)
    finally:
        second.stop(timeout=300.0)
        shutil.rmtree(data, ignore_errors=True)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench restart", description=__doc__)
    parser.add_argument("--partitions", default="500,2000,5000")
    parser.add_argument("--per-topic", type=int, default=100)
    parser.add_argument("--unclean", action="store_true", help="SIGKILL instead of SIGTERM")
    parser.add_argument("--profile", type=Path, default=None)
    parser.add_argument("--tree", type=Path, default=None, help="run the brokers from DIR")
    args = parser.parse_args(argv)
    counts = [int(x) for x in args.partitions.split(",") if x]
    print(f"restart after {'an unclean' if args.unclean else 'a clean'} shutdown")
    print(f"{'partitions':>10} {'restart s':>10} {'ms/partition':>13} {'logs loaded s':>14}")
    status = 0
    with tempfile.TemporaryDirectory(prefix="sluice-bench-restart-") as tmp:
        for n, count in enumerate(counts):
            profile = args.profile if args.profile and n == len(counts) - 1 else None
            seconds, loaded = measure(
                Path(tmp),
                count,
                args.per_topic,
                unclean=args.unclean,
                profile=profile,
                tree=args.tree,
            )
            print(
                f"{count:>10} {seconds:>10.2f} {seconds * 1000 / count:>13.2f} "
                f"{'-' if loaded is None else f'{loaded:.2f}':>14}",
                flush=True,
            )
            if count >= TARGET_PARTITIONS and not args.unclean and seconds >= TARGET_S:
                print(f"  above the target: {TARGET_PARTITIONS} partitions in < {TARGET_S} s")
                status = 1
    if args.profile:
        stats = pstats.Stats(str(args.profile))
        stats.sort_stats("cumulative").print_stats(30)
        stats.sort_stats("tottime").print_stats(20)
    return status
