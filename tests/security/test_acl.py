"""The ACL model: Kafka's names, filters, validation, implications and the API table."""

from __future__ import annotations

from pathlib import Path

import pytest

from sluice.protocol import messages as m
from sluice.protocol.acl import AclOperation as Op
from sluice.protocol.acl import AclPermissionType as Perm
from sluice.protocol.acl import PatternType as PT
from sluice.protocol.acl import ResourceType as RT
from sluice.protocol.errors import error_name
from sluice.server.security.acl import (
    API_OPERATIONS,
    UNAUTHORIZED_APIS,
    AccessControlEntry,
    AccessControlEntryFilter,
    AclBinding,
    ResourcePattern,
    ResourcePatternFilter,
    authorization_error,
    implied_by,
    name_of,
    operations_for,
    parse_name,
    parse_principal,
    supported_operations,
)


def test_kafkas_pascal_case_names() -> None:
    values = (RT.TRANSACTIONAL_ID, Op.IDEMPOTENT_WRITE, Perm.ALLOW, PT.PREFIXED)
    assert [name_of(x) for x in values] == [
        "TransactionalId",
        "IdempotentWrite",
        "Allow",
        "Prefixed",
    ]
    assert parse_name(Op, "DescribeConfigs") is Op.DESCRIBE_CONFIGS
    assert parse_name(Op, "DESCRIBECONFIGS") is Op.DESCRIBE_CONFIGS
    assert parse_name(RT, "TRANSACTIONAL_ID") is RT.TRANSACTIONAL_ID
    assert parse_name(Perm, "Maybe") is Perm.UNKNOWN
    assert parse_principal("User:CN=a,O=b") == ("User", "CN=a,O=b")
    with pytest.raises(ValueError):
        parse_principal("alice")


def test_entry_json_is_kafkas() -> None:
    entry = AccessControlEntry("User:alice", "*", Op.READ, Perm.ALLOW)
    assert entry.to_json() == {
        "principal": "User:alice", "permissionType": "Allow", "operation": "Read", "host": "*"
    }  # fmt: skip
    assert list(entry.to_json()) == ["principal", "permissionType", "operation", "host"]
    assert AccessControlEntry.from_json(entry.to_json()) == entry
    with pytest.raises(ValueError):
        AccessControlEntry.from_json({"principal": "alice", "host": "*", "operation": "Read",
                                      "permissionType": "Allow"})  # fmt: skip


def test_implications() -> None:
    assert implied_by(Op.DESCRIBE) == {Op.DESCRIBE, Op.READ, Op.WRITE, Op.DELETE, Op.ALTER}
    assert implied_by(Op.DESCRIBE_CONFIGS) == {Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS}
    assert implied_by(Op.READ) == {Op.READ}


PATTERNS = {
    "lit": ResourcePattern(RT.TOPIC, "orders", PT.LITERAL),
    "star": ResourcePattern(RT.TOPIC, "*", PT.LITERAL),
    "pre": ResourcePattern(RT.TOPIC, "ord", PT.PREFIXED),
    "other": ResourcePattern(RT.TOPIC, "payments", PT.LITERAL),
    "group": ResourcePattern(RT.GROUP, "orders", PT.LITERAL),
}


@pytest.mark.parametrize(
    ("pattern_filter", "expected"),
    [
        (ResourcePatternFilter(), {"lit", "star", "pre", "other", "group"}),
        (ResourcePatternFilter(RT.TOPIC), {"lit", "star", "pre", "other"}),
        (ResourcePatternFilter(RT.ANY, "orders"), {"lit", "group"}),
        (ResourcePatternFilter(RT.TOPIC, "orders", PT.LITERAL), {"lit"}),
        (ResourcePatternFilter(RT.TOPIC, "ord", PT.PREFIXED), {"pre"}),
        (ResourcePatternFilter(RT.TOPIC, None, PT.PREFIXED), {"pre"}),
        # MATCH: everything that applies to the topic "orders"
        (ResourcePatternFilter(RT.TOPIC, "orders", PT.MATCH), {"lit", "star", "pre"}),
        (ResourcePatternFilter(RT.TOPIC, "ordinal", PT.MATCH), {"star", "pre"}),
    ],
)
def test_pattern_filters_match_as_kafkas(
    pattern_filter: ResourcePatternFilter, expected: set[str]
) -> None:
    assert {k for k, p in PATTERNS.items() if pattern_filter.matches(p)} == expected


def test_entry_filter() -> None:
    entry = AccessControlEntry("User:alice", "10.0.0.1", Op.WRITE, Perm.DENY)
    assert AccessControlEntryFilter().matches(entry)
    assert AccessControlEntryFilter("User:alice", None, Op.WRITE, Perm.DENY).matches(entry)
    assert not AccessControlEntryFilter("User:*").matches(entry)  # no wildcard in filters
    assert not AccessControlEntryFilter(operation=Op.ALL).matches(entry)
    assert not AccessControlEntryFilter(host="*").matches(entry)


@pytest.mark.parametrize(
    ("pattern", "entry", "error"),
    [
        (ResourcePattern(RT.TOPIC, "t"), ("User:a", "*", Op.READ, Perm.ALLOW), None),
        (ResourcePattern(RT.CLUSTER, "kafka-cluster"), ("User:a", "*", Op.ALTER, Perm.ALLOW), None),
        (ResourcePattern(RT.CLUSTER, "c"), ("User:a", "*", Op.ALTER, Perm.ALLOW),
         "The only valid name for the CLUSTER resource is kafka-cluster"),
        (ResourcePattern(RT.TOPIC, "a/b"), ("User:a", "*", Op.READ, Perm.ALLOW),
         "ACL binding contains invalid resource name: a/b"),
        (ResourcePattern(RT.ANY, "t"), ("User:a", "*", Op.READ, Perm.ALLOW),
         "ACL binding contains unknown elements"),
        (ResourcePattern(RT.TOPIC, "t", PT.MATCH), ("User:a", "*", Op.READ, Perm.ALLOW),
         "ACL binding contains unknown elements"),
        (ResourcePattern(RT.TOPIC, "t"), ("User:a", "*", Op.ANY, Perm.ALLOW),
         "ACL binding contains unknown elements"),
        (ResourcePattern(RT.TOPIC, "t"), ("alice", "*", Op.READ, Perm.ALLOW),
         "Invalid principal: 'alice' (expected <type>:<name>)"),
    ],
)  # fmt: skip
def test_binding_validation(pattern: ResourcePattern, entry: tuple, error: str | None) -> None:  # type: ignore[type-arg]
    assert AclBinding(pattern, AccessControlEntry(*entry)).validation_error() == error


def test_authorization_errors_are_kafkas() -> None:
    types = (RT.TOPIC, RT.GROUP, RT.CLUSTER, RT.TRANSACTIONAL_ID)
    assert [error_name(authorization_error(t).code) for t in types] == [
        "TOPIC_AUTHORIZATION_FAILED", "GROUP_AUTHORIZATION_FAILED",
        "CLUSTER_AUTHORIZATION_FAILED", "TRANSACTIONAL_ID_AUTHORIZATION_FAILED",
    ]  # fmt: skip


def test_api_table() -> None:
    for row in API_OPERATIONS:
        assert row.operation in supported_operations(row.resource_type), row
    # every API Sluice serves is either authorization-free or in the table
    for key in m.APIS:
        assert (key in UNAUTHORIZED_APIS) != bool(operations_for(key)), m.APIS[key].name
    assert [(r.operation, r.resource_type) for r in operations_for(m.Produce.key)] == [
        (Op.WRITE, RT.TRANSACTIONAL_ID), (Op.IDEMPOTENT_WRITE, RT.CLUSTER), (Op.WRITE, RT.TOPIC)
    ]  # fmt: skip
    assert [(r.operation, r.resource_type) for r in operations_for(m.CreateAcls.key)] == [
        (Op.ALTER, RT.CLUSTER)
    ]


def test_every_served_api_has_a_row_in_the_authorization_table() -> None:
    """A handler added without deciding its authorization fails here: each API the broker
    serves is either in Kafka's table (the handler checks those rows) or needs nothing."""
    from sluice.server.api import handlers
    from sluice.server.security.acl import UNAUTHORIZED_APIS, operations_for

    source = Path(handlers.__file__).read_text()
    served = [api for api in m.APIS.values() if f"register(m.{api.name}, " in source]
    assert len(served) > 30
    unchecked = [a for a in served if a.key not in UNAUTHORIZED_APIS]
    missing = [a.name for a in unchecked if not operations_for(a.key)]
    assert missing == []
