"""The transactional checker finds each anomaly it names, and nothing in a clean history; and one
short transactional trial (producers and a consume-transform-produce copier) runs against a
faulted cluster."""

from __future__ import annotations

import json
import random
import threading
import time

import pytest

from sluice.testing.zookeeper import ZooKeeperServer
from tests.jepsen.runner import TrialConfig
from tests.jepsen.txn_checker import (
    Read,
    Reader,
    Txn,
    TxnOutcome,
    TxnReport,
    Write,
    check,
    check_copy,
)
from tests.jepsen.txn_workload import (
    COPIER_STUCK_AFTER,
    TXN_TARGETS,
    _Copier,
    _join,
    format_txn_line,
    make_txn_schedule,
    run_txn_trial,
)

PARTS = ("a-0", "a-1", "b-0", "b-1")
#: A seed whose 6 s schedule of kills is a coordinator mid-commit, then a partition leader
#: between a transaction's records and its EndTxn.
SEED = 26155
PLAYED = [("kill", "mid_commit"), ("kill", "before_end")]


def txn(txn_id: str, outcome: TxnOutcome, *partitions: str) -> Txn:
    n = len(partitions)
    return Txn(
        txn_id, outcome, tuple(Write(p, f"{txn_id}:{i}/{n}") for i, p in enumerate(partitions))
    )


class Log:
    """Partitions as a broker would fill them: each transaction's writes appended in order."""

    def __init__(self) -> None:
        self.partitions: dict[str, list[str]] = {p: [] for p in PARTS}

    def append(self, t: Txn) -> None:
        for w in t.writes:
            self.partitions[w.partition].append(w.value)

    def reader(
        self, visible: set[str], isolation: str = "read_committed", final: bool = True
    ) -> Reader:
        reads = [
            Read(p, offset, value)
            for p, values in self.partitions.items()
            for offset, value in enumerate(values)
            if value in visible
        ]
        return Reader(isolation, final, reads)  # type: ignore[arg-type]


def clean_history(seed: int) -> tuple[list[Txn], list[Reader]]:
    rng = random.Random(seed)
    log, txns, committed, everything = Log(), [], set(), set()
    for n in range(100):
        parts = [p for p in PARTS for _ in range(rng.randint(0, 2))] or ["a-0"]
        outcome: TxnOutcome = rng.choice(["committed", "committed", "aborted", "unknown"])
        t = txn(f"t{n}", outcome, *parts)
        txns.append(t)
        log.append(t)
        values = {w.value for w in t.writes}
        everything |= values
        if outcome == "committed" or (outcome == "unknown" and rng.random() < 0.5):
            committed |= values
    concurrent = log.reader(committed, final=False)
    # the concurrent reader stopped part way into a partition: a prefix of what is visible
    cut = [r for r in concurrent.reads if r.partition != "b-1" or r.offset < 5]
    concurrent.reads = cut
    return txns, [
        concurrent,
        log.reader(committed),
        log.reader(everything, "read_uncommitted"),
    ]


@pytest.mark.parametrize("seed", range(5))
def test_a_clean_history_is_valid(seed: int) -> None:
    txns, readers = clean_history(seed)
    report = check(txns, readers)
    assert report.valid, report.summary()
    s = report.summary()
    assert s["committed"] + s["aborted"] + s["unknown"] == 100
    assert s["unknown_committed"] + s["unknown_aborted"] == s["unknown"]
    assert s["aborted_in_log"] == s["aborted"]


def test_an_aborted_read_is_g1a() -> None:
    """A value of a transaction the producer never asked to commit, read with read_committed
    -- during the run or at the end -- is G1a; read with read_uncommitted it is not."""
    ok, aborted = txn("ok", "committed", "a-0", "b-0"), txn("ab", "aborted", "a-1", "b-1")
    log = Log()
    log.append(ok)
    log.append(aborted)
    both = {w.value for t in (ok, aborted) for w in t.writes}
    committed = {w.value for w in ok.writes}
    assert check([ok, aborted], [log.reader(committed), log.reader(both, "read_uncommitted")]).valid
    during = log.reader(committed | {"ab:0/2"}, final=False)
    report = check([ok, aborted], [during, log.reader(committed)])
    assert report.g1a == ["ab"] and not report.valid
    at_end = check([ok, aborted], [log.reader(both)])
    assert at_end.g1a == ["ab"]


def test_a_partial_transaction_in_one_partition_is_an_intermediate_read() -> None:
    """Seeing part of a transaction's writes to one partition and reading on past the rest
    (or not its first writes) is G1b; a reader whose stream ends inside it is not."""
    t1 = txn("t1", "committed", "a-0", "a-0", "a-0")
    t2 = txn("t2", "committed", "a-0")
    history = [t1, t2]

    def reader(*values_offsets: tuple[str, int]) -> Reader:
        return Reader("read_committed", False, [Read("a-0", o, v) for v, o in values_offsets])

    final = Reader("read_committed", True, [
        Read("a-0", 0, "t1:0/3"), Read("a-0", 1, "t1:1/3"), Read("a-0", 2, "t1:2/3"),
        Read("a-0", 3, "t2:0/1"),
    ])  # fmt: skip
    assert check(history, [final, reader(("t1:0/3", 0), ("t1:1/3", 1))]).valid  # stopped inside
    skipped = check(history, [final, reader(("t1:0/3", 0), ("t1:1/3", 1), ("t2:0/1", 3))])
    assert skipped.g1b == ["t1"] and not skipped.valid
    not_prefix = check(history, [final, reader(("t1:1/3", 1), ("t1:2/3", 2))])
    assert not_prefix.g1b == ["t1"]


def test_a_commit_visible_in_some_partitions_only_is_non_atomic() -> None:
    t = txn("t", "committed", "a-0", "b-1")
    u = txn("u", "unknown", "a-1", "b-0")
    log = Log()
    log.append(t)
    log.append(u)
    whole = {w.value for x in (t, u) for w in x.writes}
    report = check([t, u], [log.reader(whole - {"t:1/2", "u:0/2"})])
    assert sorted(report.non_atomic) == ["t", "u"] and not report.valid
    assert check([t, u], [log.reader(whole)]).unknown_committed == ["u"]
    # an unknown outcome found absent is allowed; a committed one is lost
    absent = check([t, u], [log.reader(set())])
    assert absent.lost == ["t"] and absent.unknown_aborted == ["u"] and not absent.valid
    # a concurrent reader seeing one partition of a commit before the other is no anomaly
    assert check([t, u], [log.reader({"t:0/2"}, final=False), log.reader(whole)]).valid


def test_read_committed_sees_a_subset_of_read_uncommitted_at_the_same_offsets() -> None:
    t = txn("t", "committed", "a-0")
    rc = Reader("read_committed", True, [Read("a-0", 0, "t:0/1")])
    moved = Reader("read_uncommitted", True, [Read("a-0", 1, "t:0/1")])
    report = check([t], [rc, moved])
    assert report.committed_not_uncommitted == ["t:0/1"]
    assert report.duplicate == {"t:0/1": [("a-0", 0), ("a-0", 1)]}
    assert not report.valid


def test_offsets_and_strangers() -> None:
    t = txn("t", "committed", "a-0", "a-0")
    backwards = Reader("read_committed", True, [Read("a-0", 1, "t:1/2"), Read("a-0", 0, "t:0/2")])
    report = check([t], [backwards])
    assert report.nonmonotonic == [("", "a-0", 1, 0)] and report.g1b == ["t"]
    rewound = Reader("read_committed", False, [
        Read("a-0", 0, "t:0/2"), Read("a-0", 1, "t:1/2"), Read("a-0", 0, "t:0/2"),
    ])  # fmt: skip
    report = check([t], [rewound])
    assert report.valid and report.rewinds == 1
    clash = Reader("read_committed", True, [Read("a-0", 0, "t:0/2"), Read("a-0", 1, "zz")])
    report = check([t], [clash, Reader("read_committed", False, [Read("a-0", 1, "t:1/2")])])
    assert report.inconsistent_offsets == {("a-0", 1): ["t:1/2", "zz"]}
    assert report.foreign == 1 and not report.valid


def test_values_and_transactions_must_be_unique() -> None:
    with pytest.raises(ValueError, match="unique"):
        check(
            [
                Txn("a", "committed", (Write("a-0", "v"),)),
                Txn("b", "aborted", (Write("a-0", "v"),)),
            ],
            [],
        )
    with pytest.raises(ValueError, match="twice"):
        check([txn("a", "committed", "a-0"), txn("a", "aborted", "a-1")], [])


def test_a_copier_copies_each_committed_input_exactly_once_up_to_its_offsets() -> None:
    """Consume-transform-produce: the output holds each input value below the group's committed
    offset once, and nothing at or above it, and nothing that is no committed input."""
    source = [Read("in-0", o, f"v{o}") for o in range(4)] + [Read("in-1", 0, "w0")]
    partition_of = {"out-0": "in-0", "out-1": "in-1"}

    def judge(output: list[tuple[str, str]], committed: dict[str, int]) -> TxnReport:
        report = TxnReport()
        reads = [Read(p, o, v) for o, (p, v) in enumerate(output)]
        check_copy(report, source, reads, committed, partition_of)
        return report

    exact = judge([("out-0", "v0"), ("out-0", "v1"), ("out-1", "w0")], {"in-0": 2, "in-1": 1})
    assert exact.valid and exact.copied == 3
    assert judge([], {}).valid  # nothing committed, nothing copied
    twice = judge([("out-0", "v0"), ("out-0", "v0")], {"in-0": 1})
    assert twice.copy_duplicate == ["v0"] and not twice.valid
    missing = judge([("out-0", "v0")], {"in-0": 2})
    assert missing.copy_missing == ["v1"] and not missing.valid
    ahead = judge([("out-0", "v0"), ("out-0", "v1")], {"in-0": 1})
    assert ahead.copy_ahead == ["v1"] and not ahead.valid
    foreign = judge([("out-0", "aborted"), ("out-1", "v0")], {"in-0": 1})
    assert foreign.copy_foreign == ["aborted", "v0"] and not foreign.valid


def test_the_schedule_aims_at_transactional_targets_by_seed() -> None:
    faults = ("kill", "pause")
    assert make_txn_schedule(7, 30.0, faults) == make_txn_schedule(7, 30.0, faults)
    targets = {s.target for seed in range(20) for s in make_txn_schedule(seed, 30.0, faults)}
    assert targets == set(TXN_TARGETS)


def test_a_copier_stuck_in_send_offsets_is_not_waited_for() -> None:
    """librdkafka's endless ``send_offsets_to_transaction`` (``txn_workload._Copier``): the trial
    stops waiting for the copier once that call is :data:`COPIER_STUCK_AFTER` seconds old, and
    keeps its bound otherwise (a call within its timeout, or none)."""
    copier = _Copier(TrialConfig(seed=1), "127.0.0.1:9", "in", "out", time.monotonic())
    release = threading.Event()
    blocked = threading.Thread(target=release.wait, args=(60,), daemon=True)
    blocked.start()
    try:
        for since in (None, time.monotonic() - 1):
            copier.sending_offsets_since = since
            started = time.monotonic()
            _join(blocked, 0.6, copier.stuck)
            assert blocked.is_alive() and time.monotonic() - started >= 0.6
        copier.sending_offsets_since = time.monotonic() - COPIER_STUCK_AFTER - 0.1
        started = time.monotonic()
        _join(blocked, 60, copier.stuck)
        assert blocked.is_alive() and time.monotonic() - started < 5
    finally:
        release.set()  # the call returns
        copier.sending_offsets_since = None
    started = time.monotonic()
    _join(blocked, 60, copier.stuck)  # a worker that ends is waited for until it has
    assert not blocked.is_alive() and time.monotonic() - started < 5


@pytest.mark.slow
def test_a_transactional_trial_under_faults(sluice_zookeeper: ZooKeeperServer) -> None:
    """One short trial: a coordinator killed mid-commit, then a transaction's partition leader
    killed between its records and its EndTxn (:data:`SEED`'s schedule); nothing aborted read,
    nothing partial, nothing lost.

    The copier's librdkafka hang (``txn_workload._Copier``) is not a property of the seed: the
    seed fixes the kinds and times of the kills, the brokers they hit are whichever coordinates
    or leads at that moment, and the hang needs the copier's group coordinator among them at the
    wrong time. Measured on a loaded 2-core machine (2026-11-27): this seed, 10 trials, 2 hung
    (27-31 s, the copier abandoned after ``COPIER_STUCK_AFTER``; the others 9-10 s); seed 26372
    (the same kills, 3 s apart instead of 1.6 s), 3 of 10. So the seed stays, and a hung copier
    costs ~20 s, not a failure."""
    result = run_txn_trial(sluice_zookeeper, TrialConfig(seed=SEED, duration=6.0, faults=("kill",)))
    print(format_txn_line(result))
    assert not result.error, result.error
    assert [(p["fault"], p["target"]) for p in result.played] == PLAYED
    assert result.hooked == {"mid_commit": 1, "before_end": 1}
    assert sorted(p for p, _ in result.hooked_commits) == ["before_end", "mid_commit"]
    assert result.summary["committed"] > 5 and result.summary["aborted_in_log"] > 0
    if not result.copier_stuck:
        assert result.copier["committed"] > 0 and result.summary["copied"] > 0
    # else librdkafka's send_offsets_to_transaction waited without end across a coordinator
    # failover (txn_workload._Copier; ~7 % of trials): the copy is not judged, the rest is.
    assert result.valid, json.dumps(result.record(), indent=1)
