"""The security admin APIs end to end through the codec: requests built by kafka-python's
classes, decoded by ours, answered, and the answers decoded by kafka-python."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest

from sluice.protocol import messages as m
from sluice.protocol.acl import AclOperation, ResourceType
from sluice.protocol.framing import decode_request, encode_response
from sluice.server.security.admin import (
    alter_user_scram_credentials,
    create_acls,
    delete_acls,
    describe_acls,
    describe_user_scram_credentials,
)
from sluice.server.security.authorizer import AclAuthorizer, FileAclStore
from sluice.server.security.credentials import FileCredentialStore
from sluice.server.security.scram import ScramServerExchange

from .clients import SCRAM_CLIENTS

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    import kafka.protocol.admin as kp
    from kafka.admin._users import UserScramCredentialUpsertion


def roundtrip(request: Any, version: int, answer: Any) -> Any:
    """kafka-python's request -> our decoder -> ``answer(body)`` -> our encoder -> kafka-python."""
    request.with_header(correlation_id=5, client_id="kp-admin")
    decoded = decode_request(bytes(request.encode(header=True, framed=False)))
    response = answer(decoded.body)
    data = b"".join(bytes(p) for p in encode_response(decoded.header, response))
    response_cls = type(request).__name__.replace("Request", "Response").split("_v")[0]
    flexible = m.APIS[decoded.header.api_key].is_flexible(version)
    body = data[4 + 4 + (1 if flexible else 0) :]  # size, correlation id, tagged fields
    return getattr(kp, response_cls)[version].decode(body)


@pytest.fixture
def authorizer(tmp_path: Path) -> AclAuthorizer:
    return AclAuthorizer(FileAclStore(tmp_path / "acls.json"))


ACL = kp.CreateAclsRequest.AclCreation


@pytest.mark.parametrize("version", [1, 2, 3])
async def test_create_describe_delete_acls(authorizer: AclAuthorizer, version: int) -> None:
    creations = [
        ACL(resource_type=2, resource_name="orders", resource_pattern_type=3,
            principal="User:alice", host="*", operation=3, permission_type=3),
        ACL(resource_type=2, resource_name="pay", resource_pattern_type=4,
            principal="User:*", host="*", operation=4, permission_type=3),
        ACL(resource_type=4, resource_name="not-the-cluster", resource_pattern_type=3,
            principal="User:x", host="*", operation=7, permission_type=3),
        ACL(resource_type=2, resource_name="t", resource_pattern_type=3,
            principal="User:x", host="*", operation=1, permission_type=3),  # ANY: unknown
    ]  # fmt: skip
    created = await create_acls(
        authorizer, decoded(kp.CreateAclsRequest[version](creations=creations))
    )
    resp = kp_response(kp.CreateAclsRequest[version](creations=creations), version, created)
    assert [(r.error_code, r.error_message) for r in resp.results] == [
        (0, None), (0, None),
        (42, "The only valid name for the CLUSTER resource is kafka-cluster"),
        (42, "ACL binding contains unknown elements"),
    ]  # fmt: skip
    assert authorizer.authorize("User:bob", "h", AclOperation.WRITE, ResourceType.TOPIC, "payments")

    describe = kp.DescribeAclsRequest[version](
        resource_type_filter=2, resource_name_filter=None, pattern_type_filter=1,
        principal_filter=None, host_filter=None, operation=1, permission_type=1,
    )  # fmt: skip
    resp = roundtrip(describe, version, lambda body: describe_acls(authorizer, body))
    assert resp.error_code == 0
    found = [
        (r.resource_name, r.pattern_type, [a.principal for a in r.acls]) for r in resp.resources
    ]
    assert sorted(found) == [("orders", 3, ["User:alice"]), ("pay", 4, ["User:*"])]

    Filter = kp.DeleteAclsRequest.DeleteAclsFilter
    delete = kp.DeleteAclsRequest[version](filters=[
        Filter(resource_type_filter=2, resource_name_filter="payments", pattern_type_filter=2,
               principal_filter=None, host_filter=None, operation=1, permission_type=1),
        Filter(resource_type_filter=0, resource_name_filter=None, pattern_type_filter=1,
               principal_filter=None, host_filter=None, operation=1, permission_type=1),
    ])  # fmt: skip
    resp = kp_response(delete, version, await delete_acls(authorizer, decoded(delete)))
    first, second = resp.filter_results
    assert first.error_code == 0
    assert [
        (a.resource_name, a.pattern_type, a.principal, a.operation) for a in first.matching_acls
    ] == [("pay", 4, "User:*", 4)]  # MATCH on "payments" found the prefixed ACL
    assert (second.error_code, second.error_message) == (42, "Filter contain UNKNOWN elements")
    assert [b.pattern.name for b in authorizer.acls()] == ["orders"]


async def test_acl_apis_without_authorizer() -> None:
    describe = kp.DescribeAclsRequest[3](
        resource_type_filter=1, resource_name_filter=None, pattern_type_filter=1,
        principal_filter=None, host_filter=None, operation=1, permission_type=1,
    )  # fmt: skip
    resp = roundtrip(describe, 3, lambda body: describe_acls(None, body))
    assert (resp.error_code, resp.error_message) == (
        54,
        "No Authorizer is configured on the broker",
    )
    creations = [ACL(resource_type=2, resource_name="t", resource_pattern_type=3,
                     principal="User:x", host="*", operation=3, permission_type=3)]  # fmt: skip
    created = await create_acls(None, decoded(kp.CreateAclsRequest[3](creations=creations)))
    assert [r.error_code for r in created.results] == [54]


def decoded(request: Any) -> Any:
    request.with_header(correlation_id=5, client_id="kp-admin")
    return decode_request(bytes(request.encode(header=True, framed=False))).body


def kp_response(request: Any, version: int, response: Any) -> Any:
    return roundtrip(request, version, lambda body: response)


# --- KIP-554 ----------------------------------------------------------------------------------


async def test_alter_then_authenticate_with_a_real_client(tmp_path: Path) -> None:
    store = FileCredentialStore(tmp_path / "users.json")
    up = UserScramCredentialUpsertion("alice", "SCRAM-SHA-512", "s3cret", iterations=8192)
    Upsertion = kp.AlterUserScramCredentialsRequest.ScramCredentialUpsertion
    request = kp.AlterUserScramCredentialsRequest[0](deletions=[], upsertions=[
        Upsertion(name="alice", mechanism=2, iterations=up.iterations, salt=up.salt,
                  salted_password=up.salted_password),
    ])  # fmt: skip
    response = await alter_user_scram_credentials(store, decoded(request))
    resp = kp_response(request, 0, response)
    assert [(r.user, r.error_code, r.error_message) for r in resp.results] == [("alice", 0, None)]
    exchange = ScramServerExchange(
        "SCRAM-SHA-512", lambda user: store.scram_credential(user, "SCRAM-SHA-512")
    )
    SCRAM_CLIENTS["kafka-python"]("alice", "s3cret", "SCRAM-SHA-512")(exchange.evaluate)
    assert exchange.complete and store.verify_plain("alice", "s3cret")

    describe = kp.DescribeUserScramCredentialsRequest[0](users=None)
    resp = kp_response(describe, 0, describe_user_scram_credentials(store, decoded(describe)))
    assert [
        (r.user, [(c.mechanism, c.iterations) for c in r.credential_infos]) for r in resp.results
    ] == [("alice", [(2, 8192)])]


async def test_alter_refusals_are_kafkas(tmp_path: Path) -> None:
    store = FileCredentialStore(tmp_path / "users.json")
    U = kp.AlterUserScramCredentialsRequest.ScramCredentialUpsertion
    D = kp.AlterUserScramCredentialsRequest.ScramCredentialDeletion

    def up(name: str, mechanism: int = 1, iterations: int = 4096) -> Any:
        return U(name=name, mechanism=mechanism, iterations=iterations, salt=b"s" * 16,
                 salted_password=b"p" * 32)  # fmt: skip

    request = kp.AlterUserScramCredentialsRequest[0](
        deletions=[D(name="ghost", mechanism=1), D(name="twice", mechanism=2)],
        upsertions=[up("few", iterations=1000), up("many", iterations=20000), up("mech", 9),
                    up(""), up("twice", 2), up("ok", 2)],
    )  # fmt: skip
    resp = kp_response(request, 0, await alter_user_scram_credentials(store, decoded(request)))
    assert {r.user: (r.error_code, r.error_message) for r in resp.results} == {
        "ghost": (91, "Attempt to delete a user credential that does not exist"),
        "twice": (92, "A user credential cannot be altered twice in the same request"),
        "few": (93, "Too few iterations"),
        "many": (93, "Too many iterations"),
        "mech": (33, "Unknown SCRAM mechanism"),
        "": (93, "Username must not be empty"),
        "ok": (0, None),
    }
    assert set(store.users()) == {"ok"}  # a refused user changed nothing

    UserName = kp.DescribeUserScramCredentialsRequest.UserName
    names = ("ok", "nobody", "ok2", "ok2", "")
    describe = kp.DescribeUserScramCredentialsRequest[0](users=[UserName(name=n) for n in names])
    resp = kp_response(describe, 0, describe_user_scram_credentials(store, decoded(describe)))
    assert [(r.user, r.error_code) for r in resp.results] == [
        ("ok", 0),
        ("nobody", 91),
        ("ok2", 92),
        ("", 91),
    ]
    assert resp.results[0].credential_infos[0].iterations == 4096
