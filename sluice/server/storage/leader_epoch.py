"""Leader epochs of one partition: where each leader's term starts in the log (KIP-101, KIP-279).

Every batch a leader appends carries its leader epoch in ``partitionLeaderEpoch``. The
:class:`LeaderEpochFileCache` remembers, per epoch, the first offset written in it (Kafka's
``LeaderEpochFileCache``), so a replica can answer "where did epoch *e* end?"
(OffsetForLeaderEpoch) and a follower can find where its log diverges from the leader's without
trusting its high watermark (:func:`follower_truncation_offset`).

**On disk**: ``<partition dir>/leader-epoch-checkpoint`` (``layout.LEADER_EPOCH_CHECKPOINT``),
Kafka's text format, written with tmp + fsync + rename by
:class:`sluice.server.storage.checkpoint.LeaderEpochCheckpointFile`::

    0               version
    2               number of entries
    0 0             <epoch> <start_offset>, epochs and start offsets strictly increasing
    3 1200

**Derived, not authoritative**: the batch headers are. The Log loads the file when it opens,
repairs it (entries starting past the log end or before the log start go), and rebuilds it from
the batch headers when it is missing or unreadable. One entry may start at the log end with no
batch of its epoch yet: a leader's term begins when it is elected, not at its first append
(KIP-279), so the cache answers for the previous epoch before any new record arrives.

**Invariants** (kept by every method): epochs strictly increase and so do start offsets; every
start offset lies in ``[log start offset, log end offset]`` of the log that owns the cache.

**Persistence order**: :meth:`LeaderEpochFileCache.assign` writes the file *before* it changes
the entries in memory and before the log writes the batch that caused it: a batch on disk always
has its epoch in the file, whatever a crash cuts. The truncations change memory first, then
write: should the write fail, the file holds extra entries, which the next load's repair drops.

**Concurrency**: none; the partition's append, truncation and retention paths (event-loop
thread) are the only writers, the OffsetForLeaderEpoch and ListOffsets paths read.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from typing import NamedTuple

import structlog

from sluice.protocol.records import BatchHeader
from sluice.server.storage.checkpoint import LeaderEpochCheckpointFile

logger = structlog.get_logger("sluice.storage")

#: Kafka's ``UNDEFINED_EPOCH`` / ``UNDEFINED_EPOCH_OFFSET`` (OffsetForLeaderEpoch answers).
UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1


class EpochEntry(NamedTuple):
    """Leader epoch ``epoch`` wrote its first record at ``start_offset``."""

    epoch: int
    start_offset: int


class LeaderEpochFileCache:
    """Epoch -> start offset of one partition, in memory and in its checkpoint file.

    ``checkpoint=None`` keeps the cache in memory only (the dump tool, tests, the pure
    truncation function's callers). ``entries`` are applied with :meth:`assign`'s rules without
    writing the file, so a file whose entries do not increase is repaired as Kafka's load does.
    See the module docstring for the format, the invariants and the write order.
    """

    __slots__ = ("_checkpoint", "_epochs", "_starts", "latest_epoch")

    def __init__(
        self,
        checkpoint: LeaderEpochCheckpointFile | None = None,
        entries: Iterable[tuple[int, int]] = (),
    ) -> None:
        self._checkpoint = checkpoint
        # Two parallel lists rather than a list of entries: bisect on either without a key.
        self._epochs: list[int] = []
        self._starts: list[int] = []
        #: The newest epoch (the one being written), None when the cache is empty. Read-only
        #: for callers: a plain attribute, not a property, because every produce reads it
        #: (~20 ns instead of ~100; see bench/NOTES.md).
        self.latest_epoch: int | None = None
        for epoch, start in entries:
            if self._update_needed(epoch, start):
                self._set(*self._assigned(epoch, start))

    # -- reading -------------------------------------------------------------------------------

    @property
    def entries(self) -> tuple[EpochEntry, ...]:
        return tuple(map(EpochEntry, self._epochs, self._starts))

    @property
    def checkpoint(self) -> LeaderEpochCheckpointFile | None:
        return self._checkpoint

    def __len__(self) -> int:
        return len(self._epochs)

    def __repr__(self) -> str:
        pairs = ", ".join(f"{e}@{o}" for e, o in zip(self._epochs, self._starts, strict=True))
        return f"LeaderEpochFileCache({pairs})"

    def end_offset_for(self, epoch: int, log_end_offset: int) -> tuple[int, int]:
        """What OffsetForLeaderEpoch answers for ``epoch``: ``(epoch found, its end offset)``.

        Kafka's ``LeaderEpochFileCache.endOffsetFor``:

        * ``epoch`` is the latest epoch -> ``(epoch, log_end_offset)`` (it is still being
          written);
        * else the largest cached epoch <= ``epoch``, ending where the next higher epoch
          starts;
        * ``epoch`` below every cached epoch -> ``(epoch, first start offset)``: older data is
          gone from this log, so a follower must not keep anything before that;
        * ``epoch`` above every cached epoch, -1, or an empty cache -> ``(-1, -1)``
          (undefined: the follower falls back to its high watermark).
        """
        epochs = self._epochs
        if epoch == UNDEFINED_EPOCH or not epochs:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if epochs[-1] == epoch:
            return epoch, log_end_offset
        higher = bisect.bisect_right(epochs, epoch)  # first entry with a greater epoch
        if higher == len(epochs):
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if higher == 0:
            return epoch, self._starts[0]
        return epochs[higher - 1], self._starts[higher]

    def epoch_for_offset(self, offset: int) -> int | None:
        """The epoch that wrote ``offset``: the last entry starting at or before it (None below
        the first entry). Offsets past the log end get the latest epoch, as in Kafka."""
        i = bisect.bisect_right(self._starts, offset) - 1
        return self._epochs[i] if i >= 0 else None

    # -- writing -------------------------------------------------------------------------------

    def _update_needed(self, epoch: int, start_offset: int) -> bool:
        # Kafka's isUpdateNeeded: a new epoch, or the latest one starting earlier than recorded.
        if epoch < 0 or start_offset < 0:
            raise ValueError(f"invalid leader epoch entry ({epoch}, {start_offset})")
        epochs = self._epochs
        return not epochs or epochs[-1] != epoch or start_offset < self._starts[-1]

    def _assigned(self, epoch: int, start_offset: int) -> tuple[list[int], list[int]]:
        """The lists after assigning: entries with epoch >= ``epoch`` or start >= ``start_offset``
        removed from the end (they would break monotonicity), then the new entry."""
        epochs, starts = self._epochs[:], self._starts[:]
        while epochs and (epochs[-1] >= epoch or starts[-1] >= start_offset):
            epochs.pop()
            starts.pop()
        epochs.append(epoch)
        starts.append(start_offset)
        return epochs, starts

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that ``epoch`` starts at ``start_offset``; returns whether anything changed.

        A no-op when ``epoch`` is already the latest epoch and starts at or before
        ``start_offset`` (every append of a term but its first pays only this comparison).
        Otherwise entries with an epoch >= ``epoch`` or a start >= ``start_offset`` are dropped
        first (a follower appending after a divergence), then the file is written, then memory
        changes. Raises ValueError for a negative epoch or offset (batches without an epoch,
        -1, are filtered by the caller, as Kafka's Log does).
        """
        if not self._update_needed(epoch, start_offset):
            return False
        epochs, starts = self._assigned(epoch, start_offset)
        dropped = len(self._epochs) - (len(epochs) - 1)
        if dropped > 1 or (dropped == 1 and self._starts[-1] != start_offset):
            # An entry at the same start offset is an epoch that wrote nothing: expected.
            logger.warning(
                "leader epoch entry truncated conflicting entries",
                entry=(epoch, start_offset),
                dropped=list(zip(self._epochs[-dropped:], self._starts[-dropped:], strict=True)),
            )
        self._persist(epochs, starts)
        self._set(epochs, starts)
        return True

    def truncate_from_end(self, end_offset: int) -> bool:
        """The log was truncated to ``end_offset``: drop every entry starting at or after it.
        Returns whether anything was dropped."""
        starts = self._starts
        keep = bisect.bisect_left(starts, end_offset)
        if keep == len(starts):
            return False
        self._set(self._epochs[:keep], starts[:keep])
        self._persist(self._epochs, self._starts)
        return True

    def truncate_from_start(self, start_offset: int) -> bool:
        """The log start moved to ``start_offset``: drop the entries starting at or before it
        and restate the last dropped one as starting at ``start_offset`` (its epoch still holds
        the records from there on). Returns whether anything changed."""
        starts = self._starts
        upto = bisect.bisect_right(starts, start_offset)  # entries starting <= start_offset
        if upto == 0 or (upto == 1 and starts[0] == start_offset):
            return False
        self._set([self._epochs[upto - 1], *self._epochs[upto:]], [start_offset, *starts[upto:]])
        self._persist(self._epochs, self._starts)
        return True

    def clear(self) -> bool:
        """Drop every entry (the log was emptied). Returns whether there was any."""
        if not self._epochs:
            return False
        self._set([], [])
        self._persist(self._epochs, self._starts)
        return True

    def flush(self) -> None:
        """Write the entries as they are (after a load repaired or rebuilt them)."""
        self._persist(self._epochs, self._starts)

    def _set(self, epochs: list[int], starts: list[int]) -> None:
        self._epochs, self._starts = epochs, starts
        self.latest_epoch = epochs[-1] if epochs else None

    def _persist(self, epochs: list[int], starts: list[int]) -> None:
        if self._checkpoint is not None:
            self._checkpoint.write(zip(epochs, starts, strict=True))


def entries_from_batches(
    headers: Iterable[BatchHeader], log_start_offset: int = 0
) -> tuple[EpochEntry, ...]:
    """The entries a cache would hold had it seen every batch append (``headers`` in offset
    order) and the log start move to ``log_start_offset``: what a rebuild writes, what
    ``dump-log --verify`` compares the file with. Batches without an epoch (-1) are skipped."""
    cache = LeaderEpochFileCache()
    for header in headers:
        epoch = header.partition_leader_epoch
        if epoch >= 0:
            cache.assign(epoch, header.base_offset)
    cache.truncate_from_start(log_start_offset)
    return cache.entries


class TruncationState(NamedTuple):
    """Where a follower truncates its log, and whether that ends the truncation phase.

    ``complete=False``: the follower never saw the epoch the leader answered with; after
    truncating to ``offset`` it asks again for its (now older) latest epoch."""

    offset: int
    complete: bool


def follower_truncation_offset(
    follower: LeaderEpochFileCache,
    *,
    leader_epoch: int,
    leader_end_offset: int,
    log_end_offset: int,
    high_watermark: int,
) -> TruncationState:
    """The follower side of KIP-101/279 (Kafka's ``AbstractFetcherThread``
    ``getOffsetTruncationState``), a pure function.

    The follower asked the leader OffsetForLeaderEpoch for its latest epoch and got
    ``(leader_epoch, leader_end_offset)``; ``follower`` is its own cache, ``log_end_offset`` and
    ``high_watermark`` its log's. Spec §4:

    1. The leader's answer is undefined (end offset -1: it knows no epoch that old or the
       follower sent none) -> truncate to the follower's HW, done.
    2. The answer carries no epoch (-1 with an end offset, OffsetForLeaderEpoch v0) -> truncate
       to ``min(leader end, LEO)``, done.
    3. The follower looks ``leader_epoch`` up in its own cache. Undefined there (it has no
       epoch at or below it) -> ``min(leader end, LEO)``, done.
    4. It found a smaller epoch (it never saw ``leader_epoch``): its own data from the next
       epoch on is not the leader's -> truncate to where its own found epoch ends (capped at
       LEO) and ask again, *not* done.
    5. It saw ``leader_epoch``: both logs agree up to where the shorter of the two ends that
       epoch -> ``min(leader end, own end, LEO)``, done.

    Every round of 4 lowers the follower's latest epoch (the truncation drops the entries from
    the truncation offset on; ``Log.truncate_to`` does so even when no record goes), so the
    exchange ends. A follower with no epoch at all does not ask: it truncates to its HW.
    """
    if leader_end_offset == UNDEFINED_EPOCH_OFFSET:
        return TruncationState(min(high_watermark, log_end_offset), True)
    if leader_epoch == UNDEFINED_EPOCH:
        return TruncationState(min(leader_end_offset, log_end_offset), True)
    own_epoch, own_end = follower.end_offset_for(leader_epoch, log_end_offset)
    if own_end == UNDEFINED_EPOCH_OFFSET:
        return TruncationState(min(leader_end_offset, log_end_offset), True)
    if own_epoch != leader_epoch:
        return TruncationState(min(own_end, log_end_offset), False)
    return TruncationState(min(own_end, leader_end_offset, log_end_offset), True)
