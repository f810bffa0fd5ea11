"""ACL codes as the protocol encodes them (Kafka's ``AclOperation``, ``ResourceType``,
``PatternType``, ``AclPermissionType``), sans-I/O.

The broker's ACL model and authorizer live in :mod:`sluice.server.security`. Kafka without an
authorizer answers a request for *authorized operations*
(Metadata v8+, DescribeGroups v3+, DescribeCluster) with every operation the resource type
supports (``AuthHelper.authorizedOperations`` -> ``AclEntry.supportedOperations``), as a 32-bit
field with bit ``code`` set per operation (``Utils.to32BitField``). A request that does not ask
gets :data:`NOT_REQUESTED` (INT32 min), the schema default.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable

NOT_REQUESTED = -(2**31)


class AclOperation(enum.IntEnum):
    """Kafka's ``org.apache.kafka.common.acl.AclOperation`` codes."""

    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class ResourceType(enum.IntEnum):
    """Kafka's ``org.apache.kafka.common.resource.ResourceType`` codes."""

    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(enum.IntEnum):
    """Kafka's ``org.apache.kafka.common.resource.PatternType`` codes (ANY and MATCH only in
    filters)."""

    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclPermissionType(enum.IntEnum):
    """Kafka's ``org.apache.kafka.common.acl.AclPermissionType`` codes."""

    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


_Op = AclOperation

#: ``AclEntry.supportedOperations`` of the resource types Sluice describes. (Kafka 3.8+ adds
#: DESCRIBE_CONFIGS and ALTER_CONFIGS to groups for KIP-848 group configs, which Sluice does not
#: have; it reports the group operations it serves, as Kafka 2.3-3.7 did.)
TOPIC_OPERATIONS = frozenset(
    {_Op.READ, _Op.WRITE, _Op.CREATE, _Op.DESCRIBE, _Op.DELETE, _Op.ALTER,
     _Op.DESCRIBE_CONFIGS, _Op.ALTER_CONFIGS}
)  # fmt: skip
GROUP_OPERATIONS = frozenset({_Op.READ, _Op.DESCRIBE, _Op.DELETE})
CLUSTER_OPERATIONS = frozenset(
    {_Op.CREATE, _Op.CLUSTER_ACTION, _Op.DESCRIBE_CONFIGS, _Op.ALTER_CONFIGS,
     _Op.IDEMPOTENT_WRITE, _Op.ALTER, _Op.DESCRIBE}
)  # fmt: skip


def to_bitfield(operations: Iterable[AclOperation]) -> int:
    """The int32 field of a response: bit ``op`` set for each operation."""
    field = 0
    for op in operations:
        field |= 1 << int(op)
    return field


def from_bitfield(field: int) -> set[AclOperation]:
    """The operations of a response field (empty for :data:`NOT_REQUESTED`)."""
    if field == NOT_REQUESTED:
        return set()
    return {op for op in AclOperation if field & (1 << int(op))}


TOPIC_AUTHORIZED = to_bitfield(TOPIC_OPERATIONS)
GROUP_AUTHORIZED = to_bitfield(GROUP_OPERATIONS)
CLUSTER_AUTHORIZED = to_bitfield(CLUSTER_OPERATIONS)
