"""Errors of the protocol layer and the Kafka error-code registry.

Two families:

* :class:`ProtocolError` and its subclasses: bytes that do not parse. Raised by every decoder in
  this package for malformed input (truncated frames, bad varints, bad CRCs) with the field and
  byte position that failed. Nothing else (``IndexError``, ``struct.error``) may escape a decoder.
* :class:`KafkaError` subclasses: one class per Kafka error code, carrying ``code`` and
  ``retriable``. The broker raises them from its handlers and converts them to the code in the
  response; the client raises them when a response carries the code. Look one up with
  :func:`for_code`.
"""

from __future__ import annotations

import functools
import re
from typing import ClassVar


class SluiceError(Exception):
    """Base of every error raised by the protocol package."""


class ProtocolError(SluiceError):
    """Bytes that do not follow the Kafka protocol or the RecordBatch format."""


class CorruptRecordError(ProtocolError):
    """A record batch or record that fails validation.

    ``field`` names what was wrong, ``position`` is the byte offset (relative to the start of the
    buffer handed to the decoder) where the problem was found, when known.
    """

    def __init__(self, message: str, *, field: str | None = None, position: int | None = None):
        where = []
        if field is not None:
            where.append(f"field {field}")
        if position is not None:
            where.append(f"byte {position}")
        super().__init__(f"{message} ({', '.join(where)})" if where else message)
        self.field = field
        self.position = position


class KafkaError(SluiceError):
    """A Kafka protocol error code. Subclasses set ``code``, ``retriable`` and a description."""

    code: ClassVar[int] = -1
    retriable: ClassVar[bool] = False
    description: ClassVar[str] = "unknown server error"

    def __init__(self, message: str | None = None):
        super().__init__(message or self.description)

    def __str__(self) -> str:
        return f"[{type(self).__name__} {self.code}] {self.args[0]}"


_REGISTRY: dict[int, type[KafkaError]] = {}


def _define(name: str, code: int, retriable: bool, description: str) -> type[KafkaError]:
    cls = type(
        name,
        (KafkaError,),
        {"code": code, "retriable": retriable, "description": description, "__module__": __name__},
    )
    _REGISTRY[code] = cls
    return cls


UnknownServerError = _define("UnknownServerError", -1, False, "unexpected server error")
OffsetOutOfRange = _define("OffsetOutOfRange", 1, False, "offset out of range")
CorruptMessage = _define("CorruptMessage", 2, True, "corrupt message (bad CRC or format)")
UnknownTopicOrPartition = _define(
    "UnknownTopicOrPartition", 3, True, "this server does not host this topic-partition"
)
InvalidFetchSize = _define("InvalidFetchSize", 4, False, "invalid fetch size")
LeaderNotAvailable = _define("LeaderNotAvailable", 5, True, "leader not available")
NotLeaderOrFollower = _define("NotLeaderOrFollower", 6, True, "not leader or follower")
RequestTimedOut = _define("RequestTimedOut", 7, True, "request timed out")
BrokerNotAvailable = _define("BrokerNotAvailable", 8, False, "broker not available")
MessageTooLarge = _define("MessageTooLarge", 10, False, "message larger than max.message.bytes")
OffsetMetadataTooLarge = _define(
    "OffsetMetadataTooLarge", 12, False, "offset metadata larger than allowed"
)
CoordinatorLoadInProgress = _define("CoordinatorLoadInProgress", 14, True, "coordinator is loading")
CoordinatorNotAvailable = _define("CoordinatorNotAvailable", 15, True, "coordinator not available")
NotCoordinator = _define("NotCoordinator", 16, True, "not the coordinator")
InvalidTopic = _define("InvalidTopic", 17, False, "invalid topic name")
RecordListTooLarge = _define("RecordListTooLarge", 18, False, "record batch too large")
NotEnoughReplicas = _define("NotEnoughReplicas", 19, True, "not enough in-sync replicas")
NotEnoughReplicasAfterAppend = _define(
    "NotEnoughReplicasAfterAppend", 20, True, "written, but fewer in-sync replicas than required"
)
InvalidRequiredAcks = _define("InvalidRequiredAcks", 21, False, "acks must be -1, 0 or 1")
IllegalGeneration = _define("IllegalGeneration", 22, False, "illegal generation")
InconsistentGroupProtocol = _define(
    "InconsistentGroupProtocol", 23, False, "inconsistent group protocol"
)
InvalidGroupId = _define("InvalidGroupId", 24, False, "invalid group id")
UnknownMemberId = _define("UnknownMemberId", 25, False, "unknown member id")
InvalidSessionTimeout = _define("InvalidSessionTimeout", 26, False, "invalid session timeout")
RebalanceInProgress = _define("RebalanceInProgress", 27, False, "rebalance in progress")
InvalidCommitOffsetSize = _define("InvalidCommitOffsetSize", 28, False, "invalid commit size")
TopicAuthorizationFailed = _define(
    "TopicAuthorizationFailed", 29, False, "not authorized to access or change the topic"
)
GroupAuthorizationFailed = _define(
    "GroupAuthorizationFailed", 30, False, "not authorized to access the group"
)
ClusterAuthorizationFailed = _define(
    "ClusterAuthorizationFailed", 31, False, "not authorized for this cluster operation"
)
UnsupportedSaslMechanism = _define(
    "UnsupportedSaslMechanism",
    33,
    False,
    "the broker does not support the requested SASL mechanism",
)
IllegalSaslState = _define(
    "IllegalSaslState", 34, False, "request is not valid given the current SASL state"
)
InvalidTimestamp = _define(
    "InvalidTimestamp", 32, False, "record timestamp out of the topic's accepted range"
)
UnsupportedVersion = _define("UnsupportedVersion", 35, False, "unsupported API version")
TopicAlreadyExists = _define("TopicAlreadyExists", 36, False, "topic already exists")
InvalidPartitions = _define("InvalidPartitions", 37, False, "invalid number of partitions")
InvalidReplicationFactor = _define(
    "InvalidReplicationFactor", 38, False, "invalid replication factor"
)
InvalidReplicaAssignment = _define(
    "InvalidReplicaAssignment", 39, False, "invalid replica assignment"
)
InvalidConfig = _define("InvalidConfig", 40, False, "invalid configuration")
NotController = _define("NotController", 41, True, "this is not the correct controller")
InvalidRequest = _define("InvalidRequest", 42, False, "invalid request")
UnsupportedForMessageFormat = _define(
    "UnsupportedForMessageFormat", 43, False, "unsupported for message format"
)
PolicyViolation = _define("PolicyViolation", 44, False, "policy violation")
OutOfOrderSequenceNumber = _define(
    "OutOfOrderSequenceNumber", 45, False, "out of order sequence number"
)
DuplicateSequenceNumber = _define("DuplicateSequenceNumber", 46, False, "duplicate sequence number")
InvalidProducerEpoch = _define("InvalidProducerEpoch", 47, False, "invalid producer epoch")
InvalidTxnState = _define(
    "InvalidTxnState",
    48,
    False,
    "the producer attempted a transactional operation in an invalid state",
)
InvalidProducerIdMapping = _define(
    "InvalidProducerIdMapping",
    49,
    False,
    "the producer id is not the one the transactional id is mapped to",
)
InvalidTransactionTimeout = _define(
    "InvalidTransactionTimeout",
    50,
    False,
    "the transaction timeout is larger than transaction.max.timeout.ms",
)
ConcurrentTransactions = _define(
    "ConcurrentTransactions",
    51,
    True,
    "the producer's previous transaction is still completing",
)
TransactionCoordinatorFenced = _define(
    "TransactionCoordinatorFenced", 52, False, "a newer transaction coordinator is active"
)
TransactionalIdAuthorizationFailed = _define(
    "TransactionalIdAuthorizationFailed", 53, False, "transactional id authorization failed"
)
SecurityDisabled = _define("SecurityDisabled", 54, False, "security features are disabled")
OperationNotAttempted = _define(
    "OperationNotAttempted", 55, False, "not attempted: another part of the request failed"
)
KafkaStorageError = _define("KafkaStorageError", 56, True, "disk error accessing the log")
SaslAuthenticationFailed = _define(
    "SaslAuthenticationFailed", 58, False, "SASL authentication failed"
)
TopicDeletionDisabled = _define("TopicDeletionDisabled", 73, False, "topic deletion is disabled")
FencedLeaderEpoch = _define("FencedLeaderEpoch", 74, True, "leader epoch older than the broker's")
UnknownLeaderEpoch = _define("UnknownLeaderEpoch", 75, True, "leader epoch newer than the broker's")
UnsupportedCompressionType = _define(
    "UnsupportedCompressionType", 76, False, "unsupported compression type"
)
StaleBrokerEpoch = _define(
    "StaleBrokerEpoch", 77, False, "broker epoch older than the registered one (KIP-380)"
)
OffsetNotAvailable = _define(
    "OffsetNotAvailable", 78, True, "leader's high watermark below its epoch start offset"
)
MemberIdRequired = _define("MemberIdRequired", 79, False, "member id required")
PreferredLeaderNotAvailable = _define(
    "PreferredLeaderNotAvailable", 80, True, "the preferred leader was not available"
)
EligibleLeadersNotAvailable = _define(
    "EligibleLeadersNotAvailable", 83, True, "eligible topic partition leaders are not available"
)
ElectionNotNeeded = _define(
    "ElectionNotNeeded", 84, True, "leader election not needed for topic partition"
)
NoReassignmentInProgress = _define(
    "NoReassignmentInProgress", 85, False, "no partition reassignment is in progress"
)
GroupIdNotFound = _define("GroupIdNotFound", 69, False, "group id not found")
NonEmptyGroup = _define("NonEmptyGroup", 68, False, "group is not empty")
FencedInstanceId = _define(
    "FencedInstanceId", 82, False, "a newer member with this group.instance.id fenced this one"
)
GroupSubscribedToTopic = _define(
    "GroupSubscribedToTopic", 86, False, "the group is subscribed to the topic of the offset"
)
InvalidRecord = _define("InvalidRecord", 87, False, "invalid record")
UnstableOffsetCommit = _define(
    "UnstableOffsetCommit", 88, True, "there are unstable offsets that need to be cleared"
)
ResourceNotFound = _define(
    "ResourceNotFound", 91, False, "a request referred to a resource that does not exist"
)
DuplicateResource = _define(
    "DuplicateResource", 92, False, "a request referred to the same resource twice"
)
UnacceptableCredential = _define(
    "UnacceptableCredential",
    93,
    False,
    "the credential does not meet the criteria for acceptability",
)
MismatchedEndpointType = _define(
    "MismatchedEndpointType", 114, False, "the request was sent to the wrong endpoint type"
)
UnsupportedEndpointType = _define(
    "UnsupportedEndpointType", 115, False, "This endpoint type is not supported yet."
)
UnknownTopicId = _define("UnknownTopicId", 100, True, "unknown topic id")
ProducerFenced = _define(
    "ProducerFenced", 90, False, "a newer producer with the same transactional id fenced this one"
)
TransactionalIdNotFound = _define(
    "TransactionalIdNotFound", 105, False, "the transactional id is not known"
)
InconsistentTopicId = _define(
    "InconsistentTopicId", 103, True, "the log's topic id did not match the topic id in the request"
)


def for_code(code: int) -> type[KafkaError]:
    """The error class for a Kafka error code (``UnknownServerError`` for codes we do not know)."""
    return _REGISTRY.get(code, UnknownServerError)


def all_codes() -> dict[int, type[KafkaError]]:
    """Every registered error code and its class."""
    return dict(_REGISTRY)


@functools.cache
def error_name(code: int) -> str:
    """Kafka's name of an error code (``Errors.name()``: ``NOT_LEADER_OR_FOLLOWER``,
    ``INVALID_CONFIG``), as the broker's metrics label errors and the CLI reports them."""
    cls = _REGISTRY.get(code)
    if cls is None:
        return f"UNKNOWN_CODE_{code}"
    return re.sub(r"(?<!^)(?=[A-Z])", "_", cls.__name__).upper()
