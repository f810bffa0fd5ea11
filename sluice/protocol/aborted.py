"""What a read_committed reader drops from a Fetch answer: Kafka's ``CompletedFetch`` rule over
the answer's ``aborted_transactions``, shared by the Sluice consumer and the Spark source.

The broker lists, for the batches it returns, each aborted transaction as (producer id, first
offset). Walking the batches in offset order, a producer becomes *aborted* at the first of its
batches whose last offset reaches a listed first offset, and stays so until its ABORT marker;
its transactional batches meanwhile are aborted data. Control batches (markers) are never
data. The reader's position moves past whatever is dropped: offsets have gaps.
"""

from __future__ import annotations

from collections.abc import Iterable

from .records import BatchHeader, end_txn_marker_of
from .varint import Buffer

__all__ = ["AbortedFilter"]


class AbortedFilter:
    """Feed it every batch of one partition's answer, in order: :meth:`drop` says whether the
    batch holds no records for the application (a control batch, or aborted data).
    ``aborted`` is the answer's ``(producer_id, first_offset)`` list (None or empty under
    read_uncommitted: only control batches are dropped then)."""

    __slots__ = ("_aborting", "_pending")

    def __init__(self, aborted: Iterable[tuple[int, int]] | None = None) -> None:
        # (first offset, producer id), smallest first offset last: popped from the end
        self._pending = sorted(((f, p) for p, f in aborted or ()), reverse=True)
        self._aborting: set[int] = set()

    def drop(self, header: BatchHeader, batch: Buffer) -> bool:
        """Whether to skip this batch (``batch``: its bytes, read only for a marker)."""
        pid = header.producer_id
        pending = self._pending
        if pending and pid >= 0:
            last = header.next_offset - 1
            while pending and pending[-1][0] <= last:
                self._aborting.add(pending.pop()[1])
        if header.is_control:
            if pid in self._aborting:
                marker = end_txn_marker_of(batch)
                if marker is not None and not marker.commit:
                    self._aborting.discard(pid)
            return True
        return header.is_transactional and pid in self._aborting
