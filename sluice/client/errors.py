"""Errors the client raises.

Layering (STYLE item 7): a Kafka error code from a response becomes its
:class:`sluice.protocol.errors.KafkaError` subclass (``for_code``), re-exported here; problems that
happen on the client's side of the wire (cannot connect, timed out, used after close, a feature
the broker or this client does not have yet) are :class:`ClientError` subclasses. Both derive from
:class:`sluice.protocol.errors.SluiceError`, so ``except SluiceError`` catches everything Sluice
raises. The connection's own errors (:mod:`sluice.net.errors`) are re-exported here.
"""

from __future__ import annotations

from sluice.net.errors import (
    ClientError,
    KafkaConnectionError,
    KafkaTimeoutError,
    UnsupportedVersionError,
)
from sluice.protocol.errors import KafkaError, ProtocolError, SluiceError, for_code

__all__ = [
    "ClientError",
    "ConsumerStoppedError",
    "GroupsNotSupportedError",
    "KafkaConnectionError",
    "KafkaError",
    "KafkaTimeoutError",
    "NoOffsetForPartitionError",
    "ProducerClosedError",
    "ProtocolError",
    "RecordTooLargeError",
    "SluiceError",
    "UnsupportedVersionError",
    "for_code",
    "is_retriable",
]


class ProducerClosedError(ClientError):
    """``send`` on a producer that is stopped (or stopping)."""


class ConsumerStoppedError(ClientError):
    """The consumer was stopped while a ``getmany``/iteration was waiting."""


class NoOffsetForPartitionError(ClientError):
    """A partition has no position and ``auto_offset_reset="none"`` (or the broker reported
    OFFSET_OUT_OF_RANGE with that policy): the application must ``seek`` first."""


class RecordTooLargeError(ClientError, ValueError):
    """A single record that cannot fit a request of ``max_request_size`` bytes."""


class GroupsNotSupportedError(ClientError, NotImplementedError):
    """A group operation this consumer cannot do: ``subscribe``/``commit``/``committed``
    without a ``group_id``, or a pattern subscription (not supported). Raised instead of being
    silently ignored."""

    def __init__(self, operation: str) -> None:
        super().__init__(
            f"{operation} (not supported here: give Consumer a group_id for subscribe/commit, "
            "or use assign() and seek())"
        )


def is_retriable(exc: BaseException) -> bool:
    """Whether retrying the same request later may succeed (Kafka's ``retriable`` flag, plus
    broken connections and timeouts)."""
    return isinstance(exc, KafkaError | ClientError) and bool(exc.retriable)
