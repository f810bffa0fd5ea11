"""The checker of the Jepsen-style fault suite: what a history of sends and reads proves.

Jepsen's queue workload, adapted to a log (``shared/spec/replication.md`` §6). Every value sent is
unique; each send ends **ok** (acknowledged, with the partition and offset the broker gave it),
**fail** (definitely not written: a non-retriable error before any write could happen) or
**unknown** (timed out, connection lost: it may or may not be in the log). After healing every
fault, readers consume every partition from the start; each reader's observations are kept in
the order it saw them. From that:

* ``lost`` -- acknowledged, never read. The one the promise is about.
* ``duplicate`` -- one value read at two offsets (the broker wrote it twice).
* ``inconsistent_offsets`` -- one (partition, offset) read with two values (replicas diverged
  and readers saw both), or a value acknowledged at one offset and read at another.
* ``nonmonotonic`` -- a reader saw offsets of a partition go backwards or repeat.
* ``g1a`` -- a definitely failed send that is visible (an aborted write read).
* ``recovered`` / ``unseen`` -- unknown-outcome sends that were / were not read (both allowed).

A clean run has the first five empty. :func:`check` is pure: the fault suite records, this judges.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

Outcome = Literal["ok", "fail", "unknown"]


@dataclass(frozen=True)
class Send:
    """One produce of ``value``: its outcome and, when acknowledged, where the broker put it."""

    value: str
    outcome: Outcome
    partition: int | None = None
    offset: int | None = None


@dataclass(frozen=True)
class Observation:
    """One record a reader consumed."""

    partition: int
    offset: int
    value: str


@dataclass
class Report:
    acknowledged: int = 0
    failed: int = 0
    unknown: int = 0
    read: int = 0
    lost: list[str] = field(default_factory=list)
    duplicate: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    inconsistent_offsets: dict[tuple[int, int], list[str]] = field(default_factory=dict)
    nonmonotonic: list[tuple[int, int, int, int]] = field(default_factory=list)
    g1a: list[str] = field(default_factory=list)
    recovered: list[str] = field(default_factory=list)
    unseen: list[str] = field(default_factory=list)

    @property
    def valid(self) -> bool:
        """Nothing lost, duplicated, inconsistent, out of order or wrongly visible."""
        return not (
            self.lost or self.duplicate or self.inconsistent_offsets or self.nonmonotonic
            or self.g1a
        )  # fmt: skip

    def summary(self) -> dict[str, int]:
        return {
            "acknowledged": self.acknowledged,
            "failed": self.failed,
            "unknown": self.unknown,
            "read": self.read,
            "lost": len(self.lost),
            "duplicate": len(self.duplicate),
            "inconsistent_offsets": len(self.inconsistent_offsets),
            "nonmonotonic": len(self.nonmonotonic),
            "g1a": len(self.g1a),
            "recovered": len(self.recovered),
            "unseen": len(self.unseen),
        }


def check(sends: Iterable[Send], readers: Iterable[Sequence[Observation]]) -> Report:
    """Judge a history (module docstring). ``readers``: each reader's observations, in order."""
    report = Report()
    by_value: dict[str, Send] = {}
    for send in sends:
        if send.value in by_value:
            raise ValueError(f"value {send.value!r} sent twice: values must be unique")
        by_value[send.value] = send
        if send.outcome == "ok":
            report.acknowledged += 1
        elif send.outcome == "fail":
            report.failed += 1
        else:
            report.unknown += 1

    at: dict[tuple[int, int], set[str]] = defaultdict(set)  # (partition, offset) -> values
    where: dict[str, set[tuple[int, int]]] = defaultdict(set)  # value -> (partition, offset)s
    for observations in readers:
        last: dict[int, int] = {}
        for obs in observations:
            report.read += 1
            previous = last.get(obs.partition)
            if previous is not None and obs.offset <= previous:
                report.nonmonotonic.append((obs.partition, previous, obs.offset, report.read))
            last[obs.partition] = obs.offset
            at[(obs.partition, obs.offset)].add(obs.value)
            where[obs.value].add((obs.partition, obs.offset))

    for position, values in sorted(at.items()):
        if len(values) > 1:
            report.inconsistent_offsets[position] = sorted(values)
    for value, positions in where.items():
        if len(positions) > 1:
            report.duplicate[value] = sorted(positions)
        sent = by_value.get(value)
        if sent is None:
            continue  # not ours (another run's leftovers are the caller's business)
        if sent.outcome == "ok" and sent.partition is not None and sent.offset is not None:
            acked = (sent.partition, sent.offset)
            if acked not in positions:
                report.inconsistent_offsets.setdefault(acked, []).append(
                    f"{value} acknowledged here, read at {sorted(positions)}"
                )
        elif sent.outcome == "fail":
            report.g1a.append(value)
        elif sent.outcome == "unknown":
            report.recovered.append(value)
    for value, send in by_value.items():
        if value in where:
            continue
        if send.outcome == "ok":
            report.lost.append(value)
        elif send.outcome == "unknown":
            report.unseen.append(value)
    return report
