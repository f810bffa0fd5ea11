"""The checker of the transactional workload: what a history of transactions and reads proves.

A producer runs transactions; each writes unique values to several partitions (of several
topics) and ends in one of three **outcomes**, as the producer saw it:

* ``committed`` -- ``commit_transaction`` returned: the coordinator wrote PrepareCommit, so every
  write of the transaction must become visible to ``read_committed`` readers;
* ``aborted`` -- ``commit_transaction`` was never called (the seed chose to abort, or a produce
  failed first): only EndTxn(commit) can commit a transaction, so none of its writes may ever be
  visible to a ``read_committed`` reader (whether the abort was acknowledged or the coordinator
  aborted it later for its timeout or a fencing ``InitProducerId``);
* ``unknown`` -- ``commit_transaction`` was called and did not return success (a timeout, a lost
  coordinator, a fatal error, fencing): it may be committed or aborted, but all or nothing.

Readers consume every partition from offset 0, each keeping what it saw per partition in order:
one or more ``read_committed`` readers run *during* the faults, and after every fault is healed
and every transaction has ended (the last stable offset reached the high watermark) a **final**
``read_committed`` reader and a final ``read_uncommitted`` reader read everything. From that:

* ``g1a`` (aborted read) -- a value of an ``aborted`` transaction read by any ``read_committed``
  reader, during the run or at the end.
* ``g1b`` (intermediate read) -- a ``read_committed`` reader saw *part* of a transaction's writes
  to one partition: it saw some of them, not as a prefix in produce order, or saw some and then
  went on reading that partition past them without seeing the rest. (In one partition a
  transaction becomes visible all at once, with its marker; a reader that stops right after
  some of them -- the end of its run -- is not an anomaly.) Across partitions a concurrent reader
  may see a transaction in one partition before another: Kafka writes the markers one partition
  at a time and promises no cross-partition snapshot to a reader, so that is not counted; what
  must hold across partitions is checked on the final read:
* ``non_atomic`` -- in the final ``read_committed`` read, a ``committed`` or ``unknown``
  transaction with some but not all of its writes visible (a commit that did not reach every
  partition, or an abort that did not).
* ``lost`` -- a ``committed`` transaction none of whose writes is in the final read.
* ``duplicate`` -- one value read at two positions; ``inconsistent_offsets`` -- one position
  read with two values; ``nonmonotonic`` -- a final reader's offsets in a partition went
  backwards or repeated (concurrent readers restart from an earlier offset when librdkafka
  resets them; each restart begins a new stream, counted in ``rewinds``).
* ``committed_not_uncommitted`` -- a value the final ``read_committed`` read has that the final
  ``read_uncommitted`` read has not at the same position (``read_committed`` sees a subset).
* consume-transform-produce (:func:`check_copy`): a transactional copier reads a topic with
  ``read_committed``, writes each value to an output topic and commits its consumer offsets in
  the same transaction (``send_offsets_to_transaction``). Against the final reads of input and
  output and the group's committed offsets: ``copy_duplicate`` -- a value copied twice (not
  exactly once); ``copy_missing`` -- an input value below the committed offset not in the output
  (offsets committed without their output); ``copy_ahead`` -- an input value at or above the
  committed offset in the output (output committed without its offsets: it will be copied
  again); ``copy_foreign`` -- an output value that is no committed input value (the copier read
  aborted data, or wrote data of an aborted transaction of its own).
* ``unknown_committed`` / ``unknown_aborted`` -- ``unknown`` transactions found whole / absent
  (both allowed); ``aborted_in_log`` -- ``aborted`` transactions with writes in the final
  ``read_uncommitted`` read: evidence that the G1a check had aborted data to hide.

:func:`check` is pure: the workload records, this judges.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

TxnOutcome = Literal["committed", "aborted", "unknown"]
Isolation = Literal["read_committed", "read_uncommitted"]


@dataclass(frozen=True)
class Write:
    """One record of a transaction: ``value`` produced to ``partition`` (``topic-index``)."""

    partition: str
    value: str


@dataclass(frozen=True)
class Txn:
    """One transaction: its writes in produce order and its outcome as the producer saw it."""

    txn_id: str
    outcome: TxnOutcome
    writes: tuple[Write, ...]


@dataclass(frozen=True)
class Read:
    """One record a reader consumed."""

    partition: str
    offset: int
    value: str


@dataclass
class Reader:
    """What one consumer saw, in order. ``final``: read after every fault healed and every
    transaction ended, to the end of every partition."""

    isolation: Isolation
    final: bool
    reads: Sequence[Read] = ()
    name: str = ""


@dataclass
class TxnReport:
    committed: int = 0
    aborted: int = 0
    unknown: int = 0
    writes: int = 0
    read: int = 0
    g1a: list[str] = field(default_factory=list)  # transaction ids
    g1b: list[str] = field(default_factory=list)
    non_atomic: list[str] = field(default_factory=list)
    lost: list[str] = field(default_factory=list)
    duplicate: dict[str, list[tuple[str, int]]] = field(default_factory=dict)
    inconsistent_offsets: dict[tuple[str, int], list[str]] = field(default_factory=dict)
    nonmonotonic: list[tuple[str, str, int, int]] = field(default_factory=list)
    committed_not_uncommitted: list[str] = field(default_factory=list)
    unknown_committed: list[str] = field(default_factory=list)
    unknown_aborted: list[str] = field(default_factory=list)
    aborted_in_log: int = 0
    copied: int = 0
    copy_duplicate: list[str] = field(default_factory=list)
    copy_missing: list[str] = field(default_factory=list)
    copy_ahead: list[str] = field(default_factory=list)
    copy_foreign: list[str] = field(default_factory=list)
    rewinds: int = 0
    foreign: int = 0  # values of no transaction of this history

    @property
    def valid(self) -> bool:
        return not (
            self.g1a or self.g1b or self.non_atomic or self.lost or self.duplicate
            or self.inconsistent_offsets or self.nonmonotonic or self.committed_not_uncommitted
            or self.foreign or self.copy_duplicate or self.copy_missing or self.copy_ahead
            or self.copy_foreign
        )  # fmt: skip

    def summary(self) -> dict[str, int]:
        return {
            "committed": self.committed,
            "aborted": self.aborted,
            "unknown": self.unknown,
            "writes": self.writes,
            "read": self.read,
            "g1a": len(self.g1a),
            "g1b": len(self.g1b),
            "non_atomic": len(self.non_atomic),
            "lost": len(self.lost),
            "duplicate": len(self.duplicate),
            "inconsistent_offsets": len(self.inconsistent_offsets),
            "nonmonotonic": len(self.nonmonotonic),
            "committed_not_uncommitted": len(self.committed_not_uncommitted),
            "unknown_committed": len(self.unknown_committed),
            "unknown_aborted": len(self.unknown_aborted),
            "aborted_in_log": self.aborted_in_log,
            "copied": self.copied,
            "copy_duplicate": len(self.copy_duplicate),
            "copy_missing": len(self.copy_missing),
            "copy_ahead": len(self.copy_ahead),
            "copy_foreign": len(self.copy_foreign),
            "rewinds": self.rewinds,
            "foreign": self.foreign,
        }


def check(txns: Iterable[Txn], readers: Iterable[Reader]) -> TxnReport:
    """Judge a history (module docstring)."""
    report = TxnReport()
    by_id: dict[str, Txn] = {}
    owner: dict[str, Txn] = {}  # value -> its transaction
    for txn in txns:
        if txn.txn_id in by_id:
            raise ValueError(f"transaction {txn.txn_id!r} recorded twice")
        by_id[txn.txn_id] = txn
        setattr(report, txn.outcome, getattr(report, txn.outcome) + 1)
        for w in txn.writes:
            if w.value in owner:
                raise ValueError(f"value {w.value!r} written twice: values must be unique")
            owner[w.value] = txn
            report.writes += 1

    readers = list(readers)
    at: dict[tuple[str, int], set[str]] = defaultdict(set)
    where: dict[str, set[tuple[str, int]]] = defaultdict(set)
    g1a: set[str] = set()
    g1b: set[str] = set()
    for reader in readers:
        report.read += len(reader.reads)
        for stream in _streams(reader, report):
            _intermediate_reads(stream, owner, g1b)
        for r in reader.reads:
            at[(r.partition, r.offset)].add(r.value)
            where[r.value].add((r.partition, r.offset))
            txn = owner.get(r.value)
            if txn is None:
                report.foreign += 1
            elif reader.isolation == "read_committed" and txn.outcome == "aborted":
                g1a.add(txn.txn_id)
    for position, values in sorted(at.items()):
        if len(values) > 1:
            report.inconsistent_offsets[position] = sorted(values)
    for value, positions in where.items():
        if len(positions) > 1:
            report.duplicate[value] = sorted(positions)

    final_rc = [r for r in readers if r.final and r.isolation == "read_committed"]
    final_ru = [r for r in readers if r.final and r.isolation == "read_uncommitted"]
    if final_rc:
        visible = {r.value for reader in final_rc for r in reader.reads}
        for txn in by_id.values():
            seen = sum(1 for w in txn.writes if w.value in visible)
            if txn.outcome == "aborted" or not txn.writes:
                continue  # visible aborted writes are g1a
            if 0 < seen < len(txn.writes):
                report.non_atomic.append(txn.txn_id)
            elif seen == 0 and txn.outcome == "committed":
                report.lost.append(txn.txn_id)
            elif txn.outcome == "unknown":
                (report.unknown_committed if seen else report.unknown_aborted).append(txn.txn_id)
    if final_ru:
        logged = {r.value for x in final_ru for r in x.reads}
        report.aborted_in_log = sum(
            1
            for txn in by_id.values()
            if txn.outcome == "aborted" and any(w.value in logged for w in txn.writes)
        )
    if final_rc and final_ru:
        uncommitted = {(r.partition, r.offset, r.value) for x in final_ru for r in x.reads}
        for reader in final_rc:
            for r in reader.reads:
                if (r.partition, r.offset, r.value) not in uncommitted:
                    report.committed_not_uncommitted.append(r.value)
    report.g1a = sorted(g1a)
    report.g1b = sorted(g1b)
    return report


def check_copy(
    report: TxnReport,
    source: Sequence[Read],
    output: Sequence[Read],
    committed: dict[str, int],
    partition_of: dict[str, str],
) -> None:
    """Judge a consume-transform-produce copier (module docstring) into ``report``.

    ``source``: the final ``read_committed`` read of its input topic; ``output``: that of its
    output topic; ``committed``: the group's committed offset per input partition (absent:
    nothing committed); ``partition_of``: output partition -> the input partition it copies."""
    at = {r.value: r for r in source}
    copies: dict[str, int] = defaultdict(int)
    for r in output:
        copies[r.value] += 1
        origin = at.get(r.value)
        report.copied += 1
        if origin is None or partition_of.get(r.partition) != origin.partition:
            report.copy_foreign.append(r.value)
        elif origin.offset >= committed.get(origin.partition, 0):
            report.copy_ahead.append(r.value)
    report.copy_duplicate.extend(sorted(v for v, n in copies.items() if n > 1))
    report.copy_missing.extend(
        r.value
        for r in source
        if r.offset < committed.get(r.partition, 0) and r.value not in copies
    )


def _streams(reader: Reader, report: TxnReport) -> list[list[Read]]:
    """A reader's reads of each partition as streams of increasing offsets. A final reader's
    offsets going back is an anomaly (``nonmonotonic``); a concurrent reader's starts a new
    stream (librdkafka reset its position after an error)."""
    streams: dict[str, list[list[Read]]] = defaultdict(lambda: [[]])
    for r in reader.reads:
        current = streams[r.partition][-1]
        if current and r.offset <= current[-1].offset:
            if reader.final:
                report.nonmonotonic.append((reader.name, r.partition, current[-1].offset, r.offset))
            else:
                report.rewinds += 1
                streams[r.partition].append(current := [])
        current.append(r)
    return [s for per in streams.values() for s in per if s]


def _intermediate_reads(stream: list[Read], owner: dict[str, Txn], g1b: set[str]) -> None:
    """G1b in one partition's stream (module docstring)."""
    seen: dict[str, list[int]] = defaultdict(list)  # txn id -> indexes in the stream
    for i, r in enumerate(stream):
        txn = owner.get(r.value)
        if txn is not None:
            seen[txn.txn_id].append(i)
    partition = stream[0].partition
    for txn_id, indexes in seen.items():
        txn = next(owner[stream[i].value] for i in indexes[:1])
        expected = [w.value for w in txn.writes if w.partition == partition]
        got = [stream[i].value for i in indexes]
        if got != expected[: len(got)]:
            g1b.add(txn_id)  # out of order, or not a prefix
        elif len(got) < len(expected) and indexes[-1] != len(stream) - 1:
            g1b.add(txn_id)  # read past the rest of it
