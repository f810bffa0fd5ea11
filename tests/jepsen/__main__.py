"""``python -m tests.jepsen``: random-fault trials against a 3-broker cluster, and their figures.

    python -m tests.jepsen --trials 100 --seed 1000                 # acks=all, idempotent
    python -m tests.jepsen --trials 100 --seed 2000 --no-idempotence
    python -m tests.jepsen --trials 20 --seed 3000 --acks 1
    python -m tests.jepsen --trials 1 --seed 1042                   # replay one trial
    python -m tests.jepsen --trials 50 --seed 27000 --faults lone_isr_power_loss  # targeted

``--faults lone_isr_power_loss`` (alone) plays :mod:`tests.jepsen.lone_isr` instead of a random
schedule: every trial drives the sole in-sync replica into a power loss.

Trial ``i`` runs with seed ``seed + i``; a failing trial prints its seed, the schedule as played
and the evidence, and replays with ``--trials 1 --seed <its seed>``. ``--out`` appends one JSON
record per trial. Ctrl-C (or SIGTERM) stops the running trial's brokers, then ZooKeeper, prints
the figures of the trials done and exits with 130. The exit status is otherwise 1 when any
trial broke its configuration's promise (:attr:`tests.jepsen.runner.TrialResult.valid`) or
could not run.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from sluice.testing.cluster import interrupt_on_signals
from sluice.testing.zookeeper import ZooKeeperServer
from tests.jepsen import lone_isr
from tests.jepsen.runner import (
    FAULTS,
    TrialConfig,
    TrialResult,
    aggregate,
    dumps,
    format_line,
    run_trial,
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.jepsen", description=(__doc__ or "").split("\n")[0]
    )
    parser.add_argument("--trials", type=int, default=10)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--acks", choices=["all", "1"], default="all")
    parser.add_argument("--no-idempotence", dest="idempotence", action="store_false")
    parser.add_argument("--duration", type=float, default=10.0, help="workload seconds per trial")
    parser.add_argument("--out", type=Path, help="append one JSON record per trial here")
    parser.add_argument(
        "--faults",
        default=",".join(FAULTS),
        help=f"comma-separated fault kinds to draw from (default: all of {', '.join(FAULTS)}), "
        f"or {lone_isr.FAULT} alone (a targeted nemesis)",
    )
    args = parser.parse_args(argv)
    args.faults = tuple(f.strip() for f in args.faults.split(",") if f.strip())
    targeted = args.faults == (lone_isr.FAULT,)
    if not targeted and (not args.faults or set(args.faults) - set(FAULTS)):
        parser.error(f"--faults: choose among {', '.join(FAULTS)}, or {lone_isr.FAULT} alone")

    results: list[TrialResult] = []
    interrupt_on_signals(
        "stopping: the trial's brokers, then ZooKeeper (the figures so far follow)"
    )
    try:
        run_trials(args, results)
    except KeyboardInterrupt:
        print(json.dumps(aggregate(results), indent=1), flush=True)
        return 130
    figures = aggregate(results)
    print(json.dumps(figures, indent=1), flush=True)
    return 1 if figures["invalid"] else 0


def run_trials(args: argparse.Namespace, results: list[TrialResult]) -> None:
    with ZooKeeperServer() as zookeeper:
        for i in range(args.trials):
            config = TrialConfig(
                seed=args.seed + i,
                acks=args.acks,
                idempotence=args.idempotence,
                duration=args.duration,
                faults=args.faults,
            )
            print(f"seed {config.seed}: starting ({config.duration:g}s of faults)", flush=True)
            trial = lone_isr.run_trial if args.faults == (lone_isr.FAULT,) else run_trial
            result = trial(zookeeper, config)
            results.append(result)
            print(format_line(result), flush=True)
            if not result.valid:
                print(json.dumps(result.record(), indent=1), flush=True)
            if args.out is not None:
                with args.out.open("a") as f:
                    f.write(dumps(result) + "\n")


if __name__ == "__main__":
    sys.exit(main())
