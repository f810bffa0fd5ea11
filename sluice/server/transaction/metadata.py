"""One transactional id's state and its transitions (Kafka's ``TransactionMetadata``).

States (ids as Kafka writes them to ``__transaction_state``)::

    Empty --AddPartitions--> Ongoing --EndTxn(commit)--> PrepareCommit --markers--> CompleteCommit
                             Ongoing --EndTxn(abort) / timeout / InitProducerId--> PrepareAbort
                                          --markers--> CompleteAbort
    Empty / CompleteCommit / CompleteAbort --InitProducerId--> Empty (epoch bumped)
    Empty / CompleteCommit / CompleteAbort --AddPartitions--> Ongoing
    Empty / CompleteCommit / CompleteAbort --expiry--> Dead (a tombstone; forgotten)
    Ongoing --InitProducerId or timeout--> PrepareEpochFence (never written: the epoch is bumped
                                          in memory, then the abort is written with it)

**Two-phase transitions** (Kafka's ``prepareTransitionTo`` / ``completeTransitionTo``): a
``prepare_*`` method checks the move, records the target as :attr:`TxnMetadata.pending` and
returns a :class:`Transit` (the state to write); the coordinator writes it to the log and only
then applies it with :meth:`TxnMetadata.complete` (or drops it with :meth:`TxnMetadata.abandon`
when the write failed). While a transition is pending every other request on the id gets
CONCURRENT_TRANSACTIONS, so the state in memory never runs ahead of the log.

Pure data, no I/O: the state machine is unit-tested without a broker.
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass, field

from sluice.server.transaction.state_log import TxnLogValue

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
#: Kafka's ``Short.MaxValue``: an epoch at ``MAX_EPOCH - 1`` is exhausted (the next InitProducerId
#: takes a new producer id), so fencing can still bump it once.
MAX_EPOCH = 32767


class TxnState(enum.IntEnum):
    """Kafka's ``TransactionState``, by the id it is written with."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def kafka_name(self) -> str:
        """What DescribeTransactions / ListTransactions call it (``Ongoing``...)."""
        return _NAMES[self]

    @classmethod
    def from_kafka_name(cls, name: str) -> TxnState | None:
        return _BY_NAME.get(name)


_NAMES = {
    TxnState.EMPTY: "Empty",
    TxnState.ONGOING: "Ongoing",
    TxnState.PREPARE_COMMIT: "PrepareCommit",
    TxnState.PREPARE_ABORT: "PrepareAbort",
    TxnState.COMPLETE_COMMIT: "CompleteCommit",
    TxnState.COMPLETE_ABORT: "CompleteAbort",
    TxnState.DEAD: "Dead",
    TxnState.PREPARE_EPOCH_FENCE: "PrepareEpochFence",
}
_BY_NAME = {name: state for state, name in _NAMES.items()}

_ENDED = frozenset({TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT})
#: Kafka's ``validPreviousStates`` of each state.
VALID_PREVIOUS: dict[TxnState, frozenset[TxnState]] = {
    TxnState.EMPTY: _ENDED,
    TxnState.ONGOING: _ENDED | {TxnState.ONGOING},
    TxnState.PREPARE_COMMIT: frozenset({TxnState.ONGOING}),
    TxnState.PREPARE_ABORT: frozenset({TxnState.ONGOING, TxnState.PREPARE_EPOCH_FENCE}),
    TxnState.COMPLETE_COMMIT: frozenset({TxnState.PREPARE_COMMIT}),
    TxnState.COMPLETE_ABORT: frozenset({TxnState.PREPARE_ABORT}),
    TxnState.DEAD: _ENDED,
    TxnState.PREPARE_EPOCH_FENCE: frozenset({TxnState.ONGOING}),
}


class IllegalTransition(Exception):
    """A move Kafka's state machine forbids (a coordinator bug, never a client's doing)."""


@dataclass(frozen=True)
class Transit:
    """A state to write to the log (Kafka's ``TxnTransitMetadata``)."""

    producer_id: int
    previous_producer_id: int
    producer_epoch: int
    last_producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: frozenset[tuple[str, int]]
    start_ms: int
    last_update_ms: int

    def log_value(self) -> TxnLogValue:
        return TxnLogValue(
            producer_id=self.producer_id,
            producer_epoch=self.producer_epoch,
            timeout_ms=self.timeout_ms,
            state_id=int(self.state),
            partitions=self.partitions,
            last_update_ms=self.last_update_ms,
            start_ms=self.start_ms,
            previous_producer_id=self.previous_producer_id,
        )


def is_epoch_exhausted(epoch: int) -> bool:
    return epoch >= MAX_EPOCH - 1


@dataclass
class TxnMetadata:
    """The coordinator's view of one transactional id (see the module docstring)."""

    transactional_id: str
    producer_id: int
    producer_epoch: int = NO_PRODUCER_EPOCH
    timeout_ms: int = 60000
    state: TxnState = TxnState.EMPTY
    partitions: set[tuple[str, int]] = field(default_factory=set)
    start_ms: int = -1
    last_update_ms: int = -1
    previous_producer_id: int = NO_PRODUCER_ID
    #: The epoch before the last bump (KIP-360: a retried InitProducerId is recognised by it).
    last_producer_epoch: int = NO_PRODUCER_EPOCH
    pending: TxnState | None = None
    #: An epoch fence was bumped in memory but its abort could not be written: the next fence
    #: reuses the epoch instead of bumping again (Kafka's ``hasFailedEpochFence``).
    has_failed_epoch_fence: bool = False

    @classmethod
    def from_log(cls, transactional_id: str, value: TxnLogValue) -> TxnMetadata:
        """Kafka's ``readTxnRecordValue``: partitions only for states other than Empty."""
        state = TxnState(value.state_id)
        return cls(
            transactional_id,
            value.producer_id,
            value.producer_epoch,
            value.timeout_ms,
            state,
            set(value.partitions) if state != TxnState.EMPTY else set(),
            value.start_ms,
            value.last_update_ms,
            value.previous_producer_id,
        )

    @property
    def is_epoch_exhausted(self) -> bool:
        return is_epoch_exhausted(self.producer_epoch)

    def _transit(self, state: TxnState, **changes: object) -> Transit:
        """Kafka's ``prepareTransitionTo``: check the move, mark it pending."""
        if self.pending is not None:
            raise IllegalTransition(
                f"{self.transactional_id}: {state.kafka_name} while "
                f"{self.pending.kafka_name} is pending"
            )
        if self.state not in VALID_PREVIOUS[state]:
            raise IllegalTransition(
                f"{self.transactional_id}: {self.state.kafka_name} -> {state.kafka_name}"
            )
        base = Transit(
            producer_id=self.producer_id,
            previous_producer_id=self.previous_producer_id,
            producer_epoch=self.producer_epoch,
            last_producer_epoch=self.last_producer_epoch,
            timeout_ms=self.timeout_ms,
            state=state,
            partitions=frozenset(self.partitions),
            start_ms=self.start_ms,
            last_update_ms=self.last_update_ms,
        )
        transit = dataclasses.replace(base, **changes)  # type: ignore[arg-type]
        self.pending = state
        return transit

    def complete(self, transit: Transit) -> None:
        """The transit was written: apply it (Kafka's ``completeTransitionTo``)."""
        if self.pending != transit.state:
            raise IllegalTransition(
                f"{self.transactional_id}: completing {transit.state.kafka_name}, pending "
                f"{None if self.pending is None else self.pending.kafka_name}"
            )
        self.producer_id = transit.producer_id
        self.previous_producer_id = transit.previous_producer_id
        self.producer_epoch = transit.producer_epoch
        self.last_producer_epoch = transit.last_producer_epoch
        self.timeout_ms = transit.timeout_ms
        self.state = transit.state
        self.partitions = set(transit.partitions)
        self.start_ms = transit.start_ms
        self.last_update_ms = transit.last_update_ms
        self.pending = None

    def abandon(self) -> None:
        """The transit could not be written: nothing changes."""
        self.pending = None

    # --- the moves (Kafka's prepare* methods) --------------------------------------------

    def prepare_increment_epoch(
        self, timeout_ms: int, expected_epoch: int | None, now_ms: int
    ) -> Transit | None:
        """InitProducerId on an ended transaction: the epoch bumped (or, for a KIP-360 retry
        of the last bump, kept). None: the expected epoch is neither the current nor the last
        one (PRODUCER_FENCED)."""
        bumped = self.producer_epoch + 1
        if expected_epoch is None:
            epoch, last = bumped, NO_PRODUCER_EPOCH
        elif self.producer_epoch == NO_PRODUCER_EPOCH or expected_epoch == self.producer_epoch:
            epoch, last = bumped, self.producer_epoch
        elif expected_epoch == self.last_producer_epoch:
            epoch, last = self.producer_epoch, self.last_producer_epoch
        else:
            return None
        return self._transit(
            TxnState.EMPTY, producer_epoch=epoch, last_producer_epoch=last, timeout_ms=timeout_ms,
            partitions=frozenset(), start_ms=-1, last_update_ms=now_ms,
        )  # fmt: skip

    def prepare_producer_id_rotation(
        self, new_producer_id: int, timeout_ms: int, now_ms: int, record_last_epoch: bool
    ) -> Transit:
        """The epoch is exhausted: a new producer id at epoch 0."""
        return self._transit(
            TxnState.EMPTY, producer_id=new_producer_id, previous_producer_id=self.producer_id,
            producer_epoch=0,
            last_producer_epoch=self.producer_epoch if record_last_epoch else NO_PRODUCER_EPOCH,
            timeout_ms=timeout_ms, partitions=frozenset(), start_ms=-1, last_update_ms=now_ms,
        )  # fmt: skip

    def prepare_fence_epoch(self) -> Transit:
        """An ongoing transaction must be aborted by the coordinator (InitProducerId of a new
        producer instance, or the transaction timed out): the epoch is bumped so that the old
        producer is fenced at every partition by the abort markers."""
        if self.producer_epoch >= MAX_EPOCH:
            raise IllegalTransition(f"{self.transactional_id}: epoch {self.producer_epoch}")
        epoch = self.producer_epoch if self.has_failed_epoch_fence else self.producer_epoch + 1
        return self._transit(
            TxnState.PREPARE_EPOCH_FENCE, producer_epoch=epoch,
            last_producer_epoch=NO_PRODUCER_EPOCH,
        )  # fmt: skip

    def prepare_add_partitions(self, added: set[tuple[str, int]], now_ms: int) -> Transit:
        start = now_ms if self.state in _ENDED else self.start_ms
        return self._transit(
            TxnState.ONGOING, partitions=frozenset(self.partitions | added), start_ms=start,
            last_update_ms=now_ms,
        )  # fmt: skip

    def prepare_end(self, commit: bool, now_ms: int) -> Transit:
        state = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
        return self._transit(state, last_update_ms=now_ms)

    def prepare_complete(self, now_ms: int) -> Transit:
        state = (
            TxnState.COMPLETE_COMMIT
            if self.state == TxnState.PREPARE_COMMIT
            else TxnState.COMPLETE_ABORT
        )
        return self._transit(state, partitions=frozenset(), last_update_ms=now_ms)

    def prepare_dead(self) -> Transit:
        """Expiry: written as a tombstone."""
        return self._transit(TxnState.DEAD, partitions=frozenset())
