"""AclAuthorizer: the decision against a small model of Kafka's rules (hypothesis), worked
examples, the admin operations, and the ZooKeeper layout against a real ZooKeeper."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sluice.protocol.acl import AclOperation as Op
from sluice.protocol.acl import AclPermissionType as Perm
from sluice.protocol.acl import PatternType as PT
from sluice.protocol.acl import ResourceType as RT
from sluice.server.config import Config, ConfigError
from sluice.server.security.acl import (
    AccessControlEntry,
    AccessControlEntryFilter,
    AclBinding,
    AclBindingFilter,
    ResourcePattern,
    ResourcePatternFilter,
)
from sluice.server.security.authorizer import (
    AclAuthorizer,
    AclStore,
    FileAclStore,
    ZkAclStore,
    acl_path,
)
from sluice.server.zk.client import ZkClient

# --- the model ----------------------------------------------------------------------------------

CONCRETE_OPS = [op for op in Op if op not in (Op.UNKNOWN, Op.ANY)]
NAMES = ["a", "ab", "abc", "b", "*"]
PRINCIPALS = ["User:alice", "User:bob", "User:*"]
HOSTS = ["10.0.0.1", "10.0.0.2", "*"]


def model(
    acls: list[AclBinding], super_users: set[str], allow_everyone: bool,
    principal: str, host: str, op: Op, rtype: RT, name: str,
) -> bool:  # fmt: skip
    """Kafka's rules written out plainly from the documentation, one ACL at a time."""
    if principal in super_users:
        return True
    applicable = []
    for b in acls:
        p = b.pattern
        if p.resource_type != rtype:
            continue
        literal = p.pattern_type == PT.LITERAL and p.name in (name, "*")
        if literal or (p.pattern_type == PT.PREFIXED and name.startswith(p.name)):
            applicable.append(b.entry)
    if not applicable:
        return allow_everyone

    def matches(e: AccessControlEntry, ops: set[Op]) -> bool:
        return (
            e.principal in (principal, "User:*")
            and e.host in (host, "*")
            and (e.operation in ops or e.operation == Op.ALL)
        )

    if any(e.permission_type == Perm.DENY and matches(e, {op}) for e in applicable):
        return False
    implied = {op}
    if op == Op.DESCRIBE:
        implied |= {Op.READ, Op.WRITE, Op.DELETE, Op.ALTER}
    if op == Op.DESCRIBE_CONFIGS:
        implied |= {Op.ALTER_CONFIGS}
    return any(e.permission_type == Perm.ALLOW and matches(e, implied) for e in applicable)


bindings = st.builds(
    AclBinding,
    st.builds(
        ResourcePattern,
        st.sampled_from([RT.TOPIC, RT.GROUP]),
        st.sampled_from(NAMES),
        st.sampled_from([PT.LITERAL, PT.PREFIXED]),
    ),
    st.builds(
        AccessControlEntry,
        st.sampled_from(PRINCIPALS),
        st.sampled_from(HOSTS),
        st.sampled_from(CONCRETE_OPS),
        st.sampled_from([Perm.ALLOW, Perm.DENY]),
    ),
)


def store_of(acls: list[AclBinding]) -> AclStore:
    store = AclStore()
    for b in acls:
        store.put(b.pattern, store.cache.get(b.pattern, frozenset()) | {b.entry})
    return store


@settings(max_examples=400, deadline=None)
@given(
    acls=st.lists(bindings, max_size=8),
    super_users=st.sets(st.sampled_from(["User:alice", "User:carol"]), max_size=1),
    allow_everyone=st.booleans(),
    principal=st.sampled_from(["User:alice", "User:bob", "User:carol"]),
    host=st.sampled_from(["10.0.0.1", "10.0.0.2"]),
    op=st.sampled_from(CONCRETE_OPS),
    rtype=st.sampled_from([RT.TOPIC, RT.GROUP]),
    name=st.sampled_from(["a", "ab", "abc", "abd", "b", "c"]),
)
def test_decision_agrees_with_the_model(
    acls: list[AclBinding], super_users: set[str], allow_everyone: bool,
    principal: str, host: str, op: Op, rtype: RT, name: str,
) -> None:  # fmt: skip
    authorizer = AclAuthorizer(
        store_of(acls), super_users=super_users, allow_everyone_if_no_acl_found=allow_everyone
    )
    expected = model(acls, super_users, allow_everyone, principal, host, op, rtype, name)
    assert authorizer.authorize(principal, host, op, rtype, name, audit=False) == expected


@settings(max_examples=200, deadline=None)
@given(acls=st.lists(bindings, max_size=8), principal=st.sampled_from(["User:alice", "User:bob"]))
def test_authorized_operations_are_the_allowed_supported_ones(
    acls: list[AclBinding], principal: str
) -> None:
    authorizer = AclAuthorizer(store_of(acls))
    ops = authorizer.authorized_operations(principal, "10.0.0.1", RT.TOPIC, "abc")
    assert ops == {
        op for op in (Op.READ, Op.WRITE, Op.CREATE, Op.DESCRIBE, Op.DELETE, Op.ALTER,
                      Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS)
        if model(acls, set(), False, principal, "10.0.0.1", op, RT.TOPIC, "abc")
    }  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(acls=st.lists(bindings, max_size=6), principal=st.sampled_from(["User:alice", "User:bob"]))
def test_by_resource_type_is_allowed_when_some_resource_is(
    acls: list[AclBinding], principal: str
) -> None:
    """If a concrete topic allows WRITE through a WRITE/ALL allow (no implications), the
    by-type check allows too; if the by-type check allows, some topic name allows WRITE."""
    authorizer = AclAuthorizer(store_of(acls))
    by_type = authorizer.authorize_by_resource_type(principal, "10.0.0.1", Op.WRITE, RT.TOPIC)
    candidates = ["a", "ab", "abc", "b", "az", "abz", "abcz", "bz", "*z", "zzz"]
    some = any(
        authorizer.authorize(principal, "10.0.0.1", Op.WRITE, RT.TOPIC, n, audit=False)
        for n in candidates
    )
    assert by_type == some


# --- worked examples ----------------------------------------------------------------------------


def allow(principal: str, op: Op, host: str = "*") -> AccessControlEntry:
    return AccessControlEntry(principal, host, op, Perm.ALLOW)


def deny(principal: str, op: Op, host: str = "*") -> AccessControlEntry:
    return AccessControlEntry(principal, host, op, Perm.DENY)


def topic(name: str, pattern_type: PT = PT.LITERAL) -> ResourcePattern:
    return ResourcePattern(RT.TOPIC, name, pattern_type)


async def test_worked_examples(tmp_path: Path) -> None:
    auth = AclAuthorizer(FileAclStore(tmp_path / "acls.json"), super_users={"User:admin"})
    assert await auth.create_acls([
        AclBinding(topic("orders"), allow("User:alice", Op.READ)),
        AclBinding(topic("pay", PT.PREFIXED), allow("User:*", Op.WRITE)),
        AclBinding(topic("payments-secret"), deny("User:bob", Op.ALL)),
        AclBinding(topic("*"), allow("User:carol", Op.ALTER_CONFIGS, host="10.0.0.9")),
    ]) == [None] * 4  # fmt: skip
    a = auth.authorize
    assert a("User:alice", "1.2.3.4", Op.READ, RT.TOPIC, "orders")
    assert a("User:alice", "1.2.3.4", Op.DESCRIBE, RT.TOPIC, "orders")  # Read implies Describe
    assert not a("User:alice", "1.2.3.4", Op.WRITE, RT.TOPIC, "orders")
    assert not a("User:alice", "1.2.3.4", Op.READ, RT.TOPIC, "orders2")  # literal is exact
    assert a("User:bob", "1.2.3.4", Op.WRITE, RT.TOPIC, "payments")  # prefixed, User:*
    assert not a("User:bob", "1.2.3.4", Op.WRITE, RT.TOPIC, "payments-secret")  # deny wins
    assert a("User:alice", "1.2.3.4", Op.WRITE, RT.TOPIC, "payments-secret")
    assert a("User:carol", "10.0.0.9", Op.DESCRIBE_CONFIGS, RT.TOPIC, "anything")
    assert not a("User:carol", "10.0.0.8", Op.DESCRIBE_CONFIGS, RT.TOPIC, "anything")
    assert not a("User:alice", "1.2.3.4", Op.READ, RT.GROUP, "orders")  # no ACL: refused
    assert a("User:admin", "1.2.3.4", Op.DELETE, RT.CLUSTER, "kafka-cluster")  # super user
    assert auth.authorize_by_resource_type("User:dave", "1.2.3.4", Op.WRITE, RT.TOPIC)
    assert not auth.authorize_by_resource_type("User:dave", "1.2.3.4", Op.READ, RT.TOPIC)
    # the file survives a restart
    again = AclAuthorizer(FileAclStore(tmp_path / "acls.json"))
    assert again.acls() == auth.acls() and len(again.acls()) == 4


async def test_allow_everyone_if_no_acl_found() -> None:
    """The keys as the broker reads them (declared once, in ``security.config``) and wires
    them into the authorizer (``Server._make_security``)."""
    config = Config.load(
        None,
        ["allow.everyone.if.no.acl.found=true", "super.users=User:admin; User:broker"],
    )
    auth = AclAuthorizer(
        AclStore(),
        super_users=config.super_users,
        allow_everyone_if_no_acl_found=config.allow_everyone_if_no_acl_found,
    )
    assert auth.super_users == {"User:admin", "User:broker"}
    assert auth.authorize("User:x", "h", Op.READ, RT.TOPIC, "t")
    auth.store.put(topic("t"), frozenset({allow("User:y", Op.READ)}))
    assert not auth.authorize("User:x", "h", Op.READ, RT.TOPIC, "t")  # an ACL exists now
    assert auth.authorize("User:x", "h", Op.READ, RT.TOPIC, "u")
    with pytest.raises(ConfigError, match=r"allow\.everyone\.if\.no\.acl\.found"):
        Config.load(None, ["allow.everyone.if.no.acl.found=yes"])
    with pytest.raises(ConfigError, match=r"super\.users"):
        Config.load(None, ["super.users=admin"])


async def test_create_refuses_invalid_bindings_and_delete_reports_per_filter() -> None:
    auth = AclAuthorizer(MemoryAclStore())
    results = await auth.create_acls([
        AclBinding(topic("a/b"), allow("User:x", Op.READ)),
        AclBinding(topic("t1"), allow("User:x", Op.READ)),
        AclBinding(topic("t1"), allow("User:y", Op.READ)),
        AclBinding(topic("t2", PT.PREFIXED), deny("User:x", Op.WRITE)),
    ])  # fmt: skip
    assert results == ["ACL binding contains invalid resource name: a/b", None, None, None]
    x_filter = AclBindingFilter(entry=AccessControlEntryFilter(principal="User:x"))
    assert [b.entry.principal for b in auth.acls(x_filter)] == ["User:x", "User:x"]
    deleted = await auth.delete_acls([
        AclBindingFilter(ResourcePatternFilter(RT.TOPIC, "t1", PT.LITERAL)),
        x_filter,  # t1's User:x binding is reported under the first filter only
        AclBindingFilter(ResourcePatternFilter(RT.GROUP)),
    ])  # fmt: skip
    assert [sorted(b.entry.principal for b, err in r) for r in deleted] == [
        ["User:x", "User:y"],
        ["User:x"],
        [],
    ]
    assert all(err is None for r in deleted for _, err in r)
    assert auth.acls() == []


class MemoryAclStore(AclStore):
    async def update(self, pattern, change):  # type: ignore[no-untyped-def]
        entries = frozenset(change(self.cache.get(pattern, frozenset())))
        self.put(pattern, entries)
        return entries


# --- ZooKeeper ----------------------------------------------------------------------------------


async def wait_for(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.01)


@pytest.fixture
async def zk_clients(sluice_zookeeper_connect: str) -> AsyncIterator[list[ZkClient]]:
    clients = [ZkClient(sluice_zookeeper_connect, session_timeout=5.0) for _ in range(2)]
    for client in clients:
        await client.start()
    try:
        yield clients
    finally:
        for client in clients:
            await client.close()


async def test_zk_layout_is_kafkas(zk_clients: list[ZkClient]) -> None:
    zk = zk_clients[0]
    store = ZkAclStore(zk)
    await store.start()
    auth = AclAuthorizer(store)
    try:
        await auth.create_acls([
            AclBinding(topic("orders"), allow("User:alice", Op.READ)),
            AclBinding(ResourcePattern(RT.TRANSACTIONAL_ID, "tx-", PT.PREFIXED),
                       deny("User:bob", Op.WRITE, host="10.0.0.1")),
        ])  # fmt: skip
        assert acl_path(topic("orders")) == "/kafka-acl/Topic/orders"
        data, _ = await zk.get("/kafka-acl/Topic/orders")
        assert data == (
            b'{"version":1,"acls":[{"principal":"User:alice","permissionType":"Allow",'
            b'"operation":"Read","host":"*"}]}'
        )
        data, _ = await zk.get("/kafka-acl-extended/prefixed/TransactionalId/tx-")
        assert json.loads(data) == {"version": 1, "acls": [
            {"principal": "User:bob", "permissionType": "Deny", "operation": "Write",
             "host": "10.0.0.1"}]}  # fmt: skip
        [literal] = await zk.get_children("/kafka-acl-changes")
        assert literal.startswith("acl_changes_")
        assert (await zk.get(f"/kafka-acl-changes/{literal}"))[0] == b"TOPIC:orders"
        [extended] = await zk.get_children("/kafka-acl-extended-changes")
        assert json.loads((await zk.get(f"/kafka-acl-extended-changes/{extended}"))[0]) == {
            "version": 1, "resourceType": "TRANSACTIONAL_ID", "name": "tx-",
            "patternType": "PREFIXED",
        }  # fmt: skip
        await auth.delete_acls([AclBindingFilter(ResourcePatternFilter(RT.TOPIC))])
        assert await zk.exists("/kafka-acl/Topic/orders") is None  # no entries: no znode
    finally:
        await store.close()


async def test_a_broker_sees_anothers_acls_and_kafkas_znodes(zk_clients: list[ZkClient]) -> None:
    # An ACL znode as Kafka writes it (keys in another order, pretty JSON), before start-up.
    kafkas = {
        "version": 1,
        "acls": [
            {"host": "*", "permissionType": "Allow", "operation": "Describe", "principal": "User:k"}
        ],
    }
    await zk_clients[0].create("/kafka-acl/Group/g1", json.dumps(kafkas, indent=2).encode(),
                               make_parents=True)  # fmt: skip
    one, two = ZkAclStore(zk_clients[0]), ZkAclStore(zk_clients[1])
    await one.start()
    await two.start()
    first, second = AclAuthorizer(one), AclAuthorizer(two)
    try:
        assert second.authorize("User:k", "h", Op.DESCRIBE, RT.GROUP, "g1")
        await first.create_acls(
            [AclBinding(topic("logs-", PT.PREFIXED), allow("User:z", Op.WRITE))]
        )
        await wait_for(
            lambda: second.authorize("User:z", "h", Op.WRITE, RT.TOPIC, "logs-app", audit=False)
        )
        await first.create_acls([AclBinding(topic("logs-app"), deny("User:z", Op.WRITE))])
        await wait_for(
            lambda: not second.authorize("User:z", "h", Op.WRITE, RT.TOPIC, "logs-app", audit=False)
        )
        # a change made on the second broker reaches the first, on top of its own
        await second.create_acls([AclBinding(topic("logs-app"), allow("User:q", Op.READ))])
        await wait_for(
            lambda: first.authorize("User:q", "h", Op.READ, RT.TOPIC, "logs-app", audit=False)
        )
        data, _ = await zk_clients[0].get("/kafka-acl/Topic/logs-app")
        assert len(json.loads(data)["acls"]) == 2
    finally:
        await one.close()
        await two.close()


async def test_concurrent_updates_of_one_resource_lose_nothing(zk_clients: list[ZkClient]) -> None:
    stores = [ZkAclStore(zk) for zk in zk_clients]
    for store in stores:
        await store.start()
    try:
        auths = [AclAuthorizer(s) for s in stores]
        await asyncio.gather(*(
            auths[i % 2].create_acls([AclBinding(topic("shared"), allow(f"User:u{i}", Op.READ))])
            for i in range(10)
        ))  # fmt: skip
        data, _ = await zk_clients[0].get("/kafka-acl/Topic/shared")
        assert {a["principal"] for a in json.loads(data)["acls"]} == {
            f"User:u{i}" for i in range(10)
        }
    finally:
        for store in stores:
            await store.close()


async def test_a_new_session_reloads_every_acl(zk_clients: list[ZkClient]) -> None:
    from sluice.server.zk.client import SessionEvent, SessionState

    zk = zk_clients[0]
    store = ZkAclStore(zk)
    await store.start()
    auth = AclAuthorizer(store)
    try:
        await auth.create_acls([AclBinding(topic("old-", PT.PREFIXED), allow("User:a", Op.READ))])
        entry = {
            "principal": "User:b",
            "permissionType": "Allow",
            "operation": "Write",
            "host": "*",
        }
        data = json.dumps({"version": 1, "acls": [entry]}).encode()
        await zk.create("/kafka-acl/Topic/fresh", data, make_parents=True)
        await zk.delete("/kafka-acl-extended/prefixed/Topic/old-")
        await store._on_session(SessionEvent(SessionState.CONNECTED, 2, new_session=True))
        assert auth.authorize("User:b", "h", Op.WRITE, RT.TOPIC, "fresh", audit=False)
        assert not auth.authorize("User:a", "h", Op.READ, RT.TOPIC, "old-1", audit=False)
        assert store.prefixes.get(RT.TOPIC) == set()
    finally:
        await store.close()
