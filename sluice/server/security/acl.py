"""Kafka's ACL model: resource patterns, access control entries, bindings and their filters,
the operations each one implies, and which API needs which operation on which resource.

An ACL (Kafka's ``AclBinding``) is a :class:`ResourcePattern` -- resource type, name and pattern
type -- and an :class:`AccessControlEntry` -- principal (``User:alice``, ``User:*`` for
everyone), host (an IP address or ``*``), operation and permission (Allow or Deny). A pattern is
LITERAL (the name, or ``*`` for every resource of the type) or PREFIXED (every resource whose
name starts with it). Filters (DescribeAcls, DeleteAcls) match with ANY / MATCH / ``None`` as
Kafka's ``ResourcePatternFilter`` and ``AccessControlEntryFilter`` do.

How the decision is made from these is :mod:`sluice.server.security.authorizer`. The names in
ZooKeeper's JSON and in paths are Kafka's Pascal-case ones (``Topic``, ``TransactionalId``,
``IdempotentWrite``, ``Allow``), see :func:`name_of` / :func:`parse_name`.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TypeVar

from sluice.protocol.acl import (
    CLUSTER_OPERATIONS,
    GROUP_OPERATIONS,
    TOPIC_OPERATIONS,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from sluice.protocol.errors import (
    ClusterAuthorizationFailed,
    GroupAuthorizationFailed,
    KafkaError,
    TopicAuthorizationFailed,
    TransactionalIdAuthorizationFailed,
)

__all__ = [
    "API_OPERATIONS",
    "CLUSTER_NAME",
    "UNAUTHORIZED_APIS",
    "WILDCARD_HOST",
    "WILDCARD_PRINCIPAL",
    "WILDCARD_RESOURCE",
    "AccessControlEntry",
    "AccessControlEntryFilter",
    "AclBinding",
    "AclBindingFilter",
    "AclOperation",
    "AclPermissionType",
    "ApiAuthorization",
    "PatternType",
    "ResourcePattern",
    "ResourcePatternFilter",
    "ResourceType",
    "authorization_error",
    "implied_by",
    "name_of",
    "operations_for",
    "parse_name",
    "parse_principal",
    "supported_operations",
]

WILDCARD_RESOURCE = "*"
WILDCARD_PRINCIPAL = "User:*"
WILDCARD_HOST = "*"
#: The only name of the CLUSTER resource (Kafka's ``Resource.CLUSTER_NAME``).
CLUSTER_NAME = "kafka-cluster"

E = TypeVar("E", bound=enum.IntEnum)


def name_of(value: enum.IntEnum) -> str:
    """Kafka's ``SecurityUtils`` Pascal-case name: ``TRANSACTIONAL_ID`` -> ``TransactionalId``."""
    return "".join(part.capitalize() for part in value.name.split("_"))


def parse_name(enum_type: type[E], name: str) -> E:
    """The member named ``name`` in Pascal case or upper case (as ``SecurityUtils`` accepts);
    ``UNKNOWN`` for anything else."""
    for member in enum_type:
        if name in (name_of(member), name_of(member).upper(), member.name):
            return member
    return enum_type["UNKNOWN"]


def parse_principal(text: str) -> tuple[str, str]:
    """``"User:alice"`` -> ``("User", "alice")`` (Kafka's ``SecurityUtils.parseKafkaPrincipal``:
    split at the first colon; both parts required)."""
    kind, sep, name = text.partition(":")
    if not sep or not kind or not name:
        raise ValueError(f"Invalid principal: {text!r} (expected <type>:<name>)")
    return kind, name


@dataclass(frozen=True, slots=True)
class ResourcePattern:
    resource_type: ResourceType
    name: str
    pattern_type: PatternType = PatternType.LITERAL

    def __str__(self) -> str:
        return f"{name_of(self.resource_type)}:{self.pattern_type.name}:{self.name}"


@dataclass(frozen=True, slots=True)
class AccessControlEntry:
    principal: str
    host: str
    operation: AclOperation
    permission_type: AclPermissionType

    def to_json(self) -> dict[str, str]:
        """One entry of a ZooKeeper ACL znode (``AclEntry.toMap``)."""
        return {
            "principal": self.principal,
            "permissionType": name_of(self.permission_type),
            "operation": name_of(self.operation),
            "host": self.host,
        }

    @classmethod
    def from_json(cls, obj: dict[str, object]) -> AccessControlEntry:
        def text(key: str) -> str:
            value = obj.get(key)
            if not isinstance(value, str):
                raise ValueError(f"ACL entry: {key!r} must be a string, got {value!r}")
            return value

        principal = text("principal")
        parse_principal(principal)
        return cls(
            principal,
            text("host"),
            parse_name(AclOperation, text("operation")),
            parse_name(AclPermissionType, text("permissionType")),
        )


@dataclass(frozen=True, slots=True)
class AclBinding:
    pattern: ResourcePattern
    entry: AccessControlEntry

    def validation_error(self) -> str | None:
        """Why Kafka refuses to create this binding (``AclApis`` / ``validateAclBinding``), or
        ``None``."""
        p, e = self.pattern, self.entry
        if (
            p.resource_type in (ResourceType.UNKNOWN, ResourceType.ANY)
            or p.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED)
            or e.operation in (AclOperation.UNKNOWN, AclOperation.ANY)
            or e.permission_type in (AclPermissionType.UNKNOWN, AclPermissionType.ANY)
        ):
            return "ACL binding contains unknown elements"
        if p.resource_type == ResourceType.CLUSTER and p.name != CLUSTER_NAME:
            return f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}"
        if not p.name:
            return "Invalid empty resource name"
        if "/" in p.name:
            return f"ACL binding contains invalid resource name: {p.name}"
        try:
            parse_principal(e.principal)
        except ValueError as exc:
            return str(exc)
        return None


@dataclass(frozen=True, slots=True)
class ResourcePatternFilter:
    """``None`` name: any name. ``MATCH``: every pattern that would apply to the resource named
    (literal equal or ``*``, or a prefix of it)."""

    resource_type: ResourceType = ResourceType.ANY
    name: str | None = None
    pattern_type: PatternType = PatternType.ANY

    def matches(self, pattern: ResourcePattern) -> bool:
        if self.resource_type not in (ResourceType.ANY, pattern.resource_type):
            return False
        if self.pattern_type not in (PatternType.ANY, PatternType.MATCH, pattern.pattern_type):
            return False
        if self.name is None:
            return True
        if self.pattern_type in (PatternType.ANY, pattern.pattern_type):
            return self.name == pattern.name
        if pattern.pattern_type == PatternType.LITERAL:
            return pattern.name in (self.name, WILDCARD_RESOURCE)
        return self.name.startswith(pattern.name)  # PREFIXED under MATCH

    def matches_at_most_one(self) -> bool:
        return (
            self.name is not None
            and self.resource_type not in (ResourceType.ANY, ResourceType.UNKNOWN)
            and self.pattern_type in (PatternType.LITERAL, PatternType.PREFIXED)
        )


@dataclass(frozen=True, slots=True)
class AccessControlEntryFilter:
    principal: str | None = None
    host: str | None = None
    operation: AclOperation = AclOperation.ANY
    permission_type: AclPermissionType = AclPermissionType.ANY

    def matches(self, entry: AccessControlEntry) -> bool:
        return (
            self.principal in (None, entry.principal)
            and self.host in (None, entry.host)
            and self.operation in (AclOperation.ANY, entry.operation)
            and self.permission_type in (AclPermissionType.ANY, entry.permission_type)
        )


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    pattern: ResourcePatternFilter = ResourcePatternFilter()
    entry: AccessControlEntryFilter = AccessControlEntryFilter()

    def matches(self, binding: AclBinding) -> bool:
        return self.pattern.matches(binding.pattern) and self.entry.matches(binding.entry)

    def unknown(self) -> bool:
        """A filter with an UNKNOWN element (Kafka answers it with INVALID_REQUEST)."""
        return (
            self.pattern.resource_type == ResourceType.UNKNOWN
            or self.pattern.pattern_type == PatternType.UNKNOWN
            or self.entry.operation == AclOperation.UNKNOWN
            or self.entry.permission_type == AclPermissionType.UNKNOWN
        )


_Op = AclOperation


def implied_by(operation: AclOperation) -> frozenset[AclOperation]:
    """The operations whose Allow ACL allows ``operation`` (``AclAuthorizer.authorizeAction``):
    Read, Write, Delete and Alter imply Describe; AlterConfigs implies DescribeConfigs; an
    operation implies itself. (ALL matches any operation; the authorizer adds it.)"""
    if operation == _Op.DESCRIBE:
        return frozenset({_Op.DESCRIBE, _Op.READ, _Op.WRITE, _Op.DELETE, _Op.ALTER})
    if operation == _Op.DESCRIBE_CONFIGS:
        return frozenset({_Op.DESCRIBE_CONFIGS, _Op.ALTER_CONFIGS})
    return frozenset({operation})


#: ``AclEntry.supportedOperations`` per resource type; topics, groups and the cluster as
#: :mod:`sluice.protocol.acl` defines them for the authorized-operations fields.
_SUPPORTED: dict[ResourceType, frozenset[AclOperation]] = {
    ResourceType.TOPIC: TOPIC_OPERATIONS,
    ResourceType.GROUP: GROUP_OPERATIONS,
    ResourceType.CLUSTER: CLUSTER_OPERATIONS,
    ResourceType.TRANSACTIONAL_ID: frozenset({_Op.DESCRIBE, _Op.WRITE}),
    ResourceType.DELEGATION_TOKEN: frozenset({_Op.DESCRIBE}),
    ResourceType.USER: frozenset({_Op.CREATE_TOKENS, _Op.DESCRIBE_TOKENS}),
}


def supported_operations(resource_type: ResourceType) -> frozenset[AclOperation]:
    return _SUPPORTED[resource_type]


_ERRORS: dict[ResourceType, type[KafkaError]] = {
    ResourceType.TOPIC: TopicAuthorizationFailed,
    ResourceType.GROUP: GroupAuthorizationFailed,
    ResourceType.CLUSTER: ClusterAuthorizationFailed,
    ResourceType.TRANSACTIONAL_ID: TransactionalIdAuthorizationFailed,
}


def authorization_error(resource_type: ResourceType) -> type[KafkaError]:
    """The *_AUTHORIZATION_FAILED error of a resource type (``AclEntry.authorizationError``)."""
    return _ERRORS[resource_type]


@dataclass(frozen=True, slots=True)
class ApiAuthorization:
    """One row of Kafka's "Operations and Resources on Protocols" table."""

    api_key: int
    operation: AclOperation
    resource_type: ResourceType
    when: str = ""


def _rows(*rows: tuple[int, str, str, str] | tuple[int, str, str]) -> tuple[ApiAuthorization, ...]:
    return tuple(
        ApiAuthorization(
            row[0],
            parse_name(AclOperation, row[1]),
            parse_name(ResourceType, row[2]),
            row[3] if len(row) > 3 else "",
        )
        for row in rows
    )


#: Which API needs which operation on which resource (``docs/security.html``, "Operations and
#: Resources on Protocols", checked in ``KafkaApis``). SaslHandshake, SaslAuthenticate and
#: ApiVersions need nothing. ``when`` says when a row applies, if not always.
API_OPERATIONS: tuple[ApiAuthorization, ...] = _rows(
    (0, "Write", "TransactionalId", "the producer has a transactional.id"),
    (0, "IdempotentWrite", "Cluster", "idempotent produce (a producer id, no transactional.id)"),
    (0, "Write", "Topic"),
    (1, "ClusterAction", "Cluster", "a follower's fetch (replica_id >= 0)"),
    (1, "Read", "Topic", "a consumer's fetch"),
    (2, "Describe", "Topic"),
    (3, "Describe", "Topic"),
    (3, "Create", "Cluster", "auto-creating a topic (else Create on the topic)"),
    (3, "Create", "Topic", "auto-creating a topic without Create on the cluster"),
    (7, "ClusterAction", "Cluster"),
    (8, "Read", "Group"),
    (8, "Read", "Topic"),
    (9, "Describe", "Group"),
    (9, "Describe", "Topic", "partitions the principal may not describe are left out"),
    (10, "Describe", "Group", "key type GROUP"),
    (10, "Describe", "TransactionalId", "key type TRANSACTION"),
    (11, "Read", "Group"),
    (12, "Read", "Group"),
    (13, "Read", "Group"),
    (14, "Read", "Group"),
    (15, "Describe", "Group"),
    (16, "Describe", "Cluster", "all groups; otherwise each group listed needs Describe"),
    (16, "Describe", "Group", "groups without Describe are left out"),
    (19, "Create", "Cluster", "or Create on each topic"),
    (19, "Create", "Topic", "without Create on the cluster"),
    (20, "Delete", "Topic"),
    (21, "Delete", "Topic"),
    (22, "Write", "TransactionalId", "with a transactional.id"),
    (22, "IdempotentWrite", "Cluster", "without a transactional.id"),
    (23, "ClusterAction", "Cluster", "or Describe on each topic"),
    (23, "Describe", "Topic", "without ClusterAction on the cluster"),
    (24, "Write", "TransactionalId"),
    (24, "Write", "Topic"),
    (25, "Write", "TransactionalId"),
    (25, "Read", "Group"),
    (26, "Write", "TransactionalId"),
    (27, "ClusterAction", "Cluster", "or Alter on the cluster"),
    (28, "Write", "TransactionalId"),
    (28, "Read", "Group"),
    (28, "Read", "Topic"),
    (29, "Describe", "Cluster"),
    (30, "Alter", "Cluster"),
    (31, "Alter", "Cluster"),
    (32, "DescribeConfigs", "Cluster", "broker configs"),
    (32, "DescribeConfigs", "Topic", "topic configs"),
    (33, "AlterConfigs", "Cluster", "broker configs"),
    (33, "AlterConfigs", "Topic", "topic configs"),
    (34, "Alter", "Cluster"),
    (35, "Describe", "Cluster", "an empty answer when refused"),
    (37, "Alter", "Topic"),
    (42, "Delete", "Group"),
    (43, "Alter", "Cluster", "KafkaApis checks Alter; the docs' table says ClusterAction"),
    (44, "AlterConfigs", "Cluster", "broker configs"),
    (44, "AlterConfigs", "Topic", "topic configs"),
    (45, "Alter", "Cluster"),
    (46, "Describe", "Cluster"),
    (47, "Delete", "Group"),
    (47, "Read", "Topic"),
    (48, "DescribeConfigs", "Cluster"),
    (49, "AlterConfigs", "Cluster"),
    (50, "Describe", "Cluster"),
    (51, "Alter", "Cluster"),
    (60, "Describe", "Cluster"),
    (61, "Read", "Topic"),
    (65, "Describe", "TransactionalId"),
    (66, "Describe", "TransactionalId"),
    (75, "Describe", "Topic", "topics the principal may not describe are left out of all"),
)

#: APIs that need no authorization (authentication itself, version discovery).
UNAUTHORIZED_APIS = frozenset({17, 18, 36})


def operations_for(api_key: int) -> tuple[ApiAuthorization, ...]:
    """The rows of :data:`API_OPERATIONS` for one API."""
    return tuple(row for row in API_OPERATIONS if row.api_key == api_key)
