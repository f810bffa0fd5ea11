"""``python -m tests.faults``: the single-node fault suite's figures (:mod:`tests.faults.suite`).

    python -m tests.faults --trials 30                  # kill -9 trials, disk full, fuzz, conns
    python -m tests.faults --trials 3 --fuzz-frames 5000 --connections 1000 --seed 7
    python -m tests.faults --trials 6 --scenarios roll --kill-only  # only roll trials

Prints one line per kill -9 trial (with the evidence when one is not clean), then a JSON table
of the figures. Exit status 1 when anything acknowledged was lost or duplicated, a log was
corrupt, a start failed, the broker logged a traceback or stopped uncleanly.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from tests.faults.suite import (
    SCENARIOS,
    KillTrial,
    connections,
    disk_full,
    fuzz,
    kill_figures,
    kill_trial,
)


def problems(figures: dict[str, Any]) -> list[str]:
    """What in the figures breaks a promise (empty: a clean run)."""
    out = []
    kills = figures["kill -9"]
    for key in ("lost", "duplicated", "inconsistent", "corrupt", "start_failures",
                "read_failures", "unclean_stops", "tracebacks"):  # fmt: skip
        if kills[key]:
            out.append(f"kill -9: {key} {kills[key]}")
    if "disk full" not in figures:  # --kill-only
        return out
    full = figures["disk full"]
    if "skipped" not in full:
        for key in ("lost", "duplicated", "inconsistent", "corrupt", "tracebacks"):
            if full.get(key):
                out.append(f"disk full: {key} {full[key]}")
        if "start_failure" in full:
            out.append("disk full: the restart failed")
        if full.get("sigterm_on_full_disk_status") or full.get("restart_stop_status"):
            out.append("disk full: unclean stop")
        if not full.get("acknowledged_after_space_returned"):
            out.append("disk full: appends did not resume")
    fz = figures["fuzz"]
    if not fz["serving_after"] or fz["tracebacks"] or fz["corrupt"] or fz["stop_status"]:
        out.append(f"fuzz: {fz}")
    conns = figures["connections"]
    if not conns["serving_after"] or conns["tracebacks"] or conns["stop_status"]:
        out.append(f"connections: {conns}")
    return out


def run(
    trials: int,
    seed: int,
    fuzz_frames: int,
    conns: int,
    work: Path,
    scenarios: list[str] | None = None,
    kill_only: bool = False,
) -> dict[str, Any]:
    import random

    rnd = random.Random(seed)
    names = scenarios or list(SCENARIOS)
    results = []
    for i in range(trials):
        try:
            result = kill_trial(work, i, names[i % len(names)], rnd)
        except Exception as exc:  # counted as a failed read; the run goes on
            result = KillTrial(i, names[i % len(names)], read_error=f"{type(exc).__name__}: {exc}")
        results.append(result)
        print(
            f"trial {i:3} {result.scenario:9} killed after {result.killed_after_s:4.2f}s: "
            f"acked {result.acknowledged:6} (retention deleted {result.deleted_by_retention}), "
            f"lost {result.lost}, dup {result.duplicated}, corrupt {len(result.corrupt)}, "
            f"segments {result.segments}, rss {result.rss_kb // 1024} MB"
            + ("" if result.valid else f"  NOT CLEAN: {result}"),
            flush=True,
        )
    figures: dict[str, Any] = {"kill -9": kill_figures(results)}
    figures["kill -9"]["acknowledged_per_s"] = {
        name: round(
            sum(r.acknowledged for r in results if r.scenario == name)
            / max(sum(r.killed_after_s for r in results if r.scenario == name), 1e-9)
        )
        for name in names
    }
    if kill_only:
        return figures
    figures["disk full"] = disk_full(work)
    figures["fuzz"] = fuzz(work, fuzz_frames, seed)
    figures["connections"] = connections(work, conns)
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.faults", description=(__doc__ or "").split("\n")[0]
    )
    parser.add_argument("--trials", type=int, default=30, help="kill -9 trials")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--fuzz-frames", type=int, default=100_000)
    parser.add_argument("--connections", type=int, default=1000)
    parser.add_argument(
        "--scenarios",
        type=lambda text: text.split(","),
        default=None,
        help=f"kill -9 scenarios to rotate, comma-separated (default: {','.join(SCENARIOS)})",
    )
    parser.add_argument(
        "--kill-only", action="store_true", help="only the kill -9 trials (no disk full, ...)"
    )
    args = parser.parse_args(argv)
    for name in args.scenarios or ():
        if name not in SCENARIOS:
            parser.error(f"unknown scenario {name!r}; known: {', '.join(SCENARIOS)}")
    with tempfile.TemporaryDirectory(prefix="sluice-faults-") as tmp:
        figures = run(
            args.trials,
            args.seed,
            args.fuzz_frames,
            args.connections,
            Path(tmp),
            args.scenarios,
            args.kill_only,
        )
    print(json.dumps(figures, indent=1), flush=True)
    found = problems(figures)
    for line in found:
        print("PROBLEM:", line, flush=True)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
