"""``python -m tests.jepsen``: random-fault trials against a 3-broker cluster, and their figures.

    python -m tests.jepsen --trials 100 --seed 1000                 # acks=all, idempotent
    python -m tests.jepsen --trials 100 --seed 2000 --no-idempotence
    python -m tests.jepsen --trials 20 --seed 3000 --acks 1
    python -m tests.jepsen --trials 1 --seed 1042                   # replay one trial
    python -m tests.jepsen --trials 20 --seed 24000 --security sasl_ssl  # every link SASL_SSL
    python -m tests.jepsen --workload compacted --trials 30 --seed 23000  # keyed, compacted
    python -m tests.jepsen --workload txn --trials 100 --seed 26000 # transactions (txn_workload)
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
from typing import Any

from sluice.testing.cluster import interrupt_on_signals
from sluice.testing.security import SECURITY
from sluice.testing.zookeeper import ZooKeeperServer
from tests.jepsen import lone_isr
from tests.jepsen.runner import (
    FAULTS,
    TrialConfig,
    aggregate,
    dumps,
    format_line,
    run_trial,
)
from tests.jepsen.txn_workload import (
    aggregate_txn,
    dumps_txn,
    format_txn_line,
    run_txn_trial,
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
    parser.add_argument(
        "--workload",
        choices=["queue", "compacted", "txn"],
        default="queue",
        help="queue: unique values, every one read (default); compacted: keyed updates and "
        "tombstones on a compacted topic, judged latest per key (tests.jepsen.compacted_workload); "
        "txn: transactions across partitions, judged for aborted, intermediate and non-atomic "
        "reads (tests.jepsen.txn_workload)",
    )
    parser.add_argument("--out", type=Path, help="append one JSON record per trial here")
    parser.add_argument(
        "--faults",
        default=",".join(FAULTS),
        help=f"comma-separated fault kinds to draw from (default: all of {', '.join(FAULTS)}), "
        f"or {lone_isr.FAULT} alone (a targeted nemesis)",
    )
    parser.add_argument(
        "--security", choices=SECURITY, default="plaintext",
        help="sasl_ssl: clients and brokers over SASL_SSL (SCRAM-SHA-512) through the proxies",
    )  # fmt: skip
    args = parser.parse_args(argv)
    args.faults = tuple(f.strip() for f in args.faults.split(",") if f.strip())
    targeted = args.faults == (lone_isr.FAULT,)
    if not targeted and (not args.faults or set(args.faults) - set(FAULTS)):
        parser.error(f"--faults: choose among {', '.join(FAULTS)}, or {lone_isr.FAULT} alone")
    if targeted and args.workload != "queue":
        parser.error(f"--faults {lone_isr.FAULT}: the targeted nemesis runs the queue workload")
    if args.security != "plaintext" and (args.workload != "queue" or targeted):
        parser.error(f"--security {args.security}: only random faults on the queue workload")

    results: list[Any] = []
    interrupt_on_signals(
        "stopping: the trial's brokers, then ZooKeeper (the figures so far follow)"
    )
    try:
        run_trials(args, results)
    except KeyboardInterrupt:
        print(json.dumps(summarise(args, results), indent=1), flush=True)
        return 130
    figures = summarise(args, results)
    print(json.dumps(figures, indent=1), flush=True)
    return 1 if figures["invalid"] else 0


def summarise(args: argparse.Namespace, results: list[Any]) -> dict[str, Any]:
    return aggregate_txn(results) if args.workload == "txn" else aggregate(results)


def run_trials(args: argparse.Namespace, results: list[Any]) -> None:
    txn = args.workload == "txn"
    with ZooKeeperServer() as zookeeper:
        for i in range(args.trials):
            config = TrialConfig(
                seed=args.seed + i,
                acks=args.acks,
                idempotence=args.idempotence,
                duration=args.duration,
                faults=args.faults,
                security=args.security,
            )
            print(f"seed {config.seed}: starting ({config.duration:g}s of faults)", flush=True)
            result: Any
            if txn:
                result = run_txn_trial(zookeeper, config)
            elif args.workload == "compacted":
                from tests.jepsen.compacted_workload import run_compacted_trial

                result = run_compacted_trial(zookeeper, config)
            elif args.faults == (lone_isr.FAULT,):
                result = lone_isr.run_trial(zookeeper, config)
            else:
                result = run_trial(zookeeper, config)
            results.append(result)
            print(format_txn_line(result) if txn else format_line(result), flush=True)
            if not result.valid:
                print(json.dumps(result.record(), indent=1), flush=True)
            if args.out is not None:
                with args.out.open("a") as f:
                    f.write((dumps_txn(result) if txn else dumps(result)) + "\n")


if __name__ == "__main__":
    sys.exit(main())
