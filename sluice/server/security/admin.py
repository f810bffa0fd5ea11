"""The security admin APIs as functions from request to response, ready for the handlers:
CreateAcls (30), DescribeAcls (29), DeleteAcls (31) as Kafka's ``AclApis``, and
DescribeUserScramCredentials (50) / AlterUserScramCredentials (51) as Kafka's
``ZkAdminManager`` (KIP-554), with Kafka's error codes and messages.

The handler checks the caller first (Describe on the cluster for 29 and 50, Alter for 30, 31
and 51: :data:`sluice.server.security.acl.API_OPERATIONS`); these functions do the rest. Without
an authorizer the ACL APIs answer SECURITY_DISABLED, as Kafka does.
"""

from __future__ import annotations

import enum
from collections import Counter
from typing import TypeVar

from sluice.protocol import messages as m
from sluice.protocol.errors import (
    DuplicateResource,
    InvalidRequest,
    ResourceNotFound,
    SecurityDisabled,
    UnacceptableCredential,
    UnsupportedSaslMechanism,
)

from .acl import (
    AccessControlEntry,
    AccessControlEntryFilter,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType,
)
from .authorizer import AclAuthorizer
from .credentials import CredentialStore
from .errors import InvalidCredential
from .scram import (
    check_iterations,
    credential_from_salted_password,
    mechanism_name,
    mechanism_type,
)

__all__ = [
    "alter_user_scram_credentials",
    "create_acls",
    "delete_acls",
    "describe_acls",
    "describe_user_scram_credentials",
]

_NO_AUTHORIZER = "No Authorizer is configured on the broker"


E = TypeVar("E", bound=enum.IntEnum)


def _enum(enum_type: type[E], value: int) -> E:
    """The member with code ``value``; UNKNOWN for a code Kafka does not define."""
    try:
        return enum_type(value)
    except ValueError:
        return enum_type["UNKNOWN"]


def _binding_filter(
    resource_type: int, name: str | None, pattern_type: int,
    principal: str | None, host: str | None, operation: int, permission: int,
) -> AclBindingFilter:  # fmt: skip
    return AclBindingFilter(
        ResourcePatternFilter(
            _enum(ResourceType, resource_type),
            name,
            _enum(PatternType, pattern_type),
        ),
        AccessControlEntryFilter(
            principal,
            host,
            _enum(AclOperation, operation),
            _enum(AclPermissionType, permission),
        ),
    )


def describe_acls(
    authorizer: AclAuthorizer | None, request: m.DescribeAclsRequest
) -> m.DescribeAclsResponse:
    R = m.DescribeAclsResponse
    if authorizer is None:
        return R(error_code=SecurityDisabled.code, error_message=_NO_AUTHORIZER)
    binding_filter = _binding_filter(
        request.resource_type_filter, request.resource_name_filter, request.pattern_type_filter,
        request.principal_filter, request.host_filter, request.operation,
        request.permission_type,
    )  # fmt: skip
    if binding_filter.unknown():
        return R(error_code=InvalidRequest.code, error_message="Filter contain UNKNOWN elements")
    grouped: dict[ResourcePattern, list[AccessControlEntry]] = {}
    for binding in authorizer.acls(binding_filter):
        grouped.setdefault(binding.pattern, []).append(binding.entry)
    return R(
        resources=[
            R.DescribeAclsResource(
                resource_type=int(p.resource_type),
                resource_name=p.name,
                pattern_type=int(p.pattern_type),
                acls=[
                    R.AclDescription(
                        principal=e.principal,
                        host=e.host,
                        operation=int(e.operation),
                        permission_type=int(e.permission_type),
                    )
                    for e in entries
                ],
            )
            for p, entries in grouped.items()
        ]
    )


async def create_acls(
    authorizer: AclAuthorizer | None, request: m.CreateAclsRequest
) -> m.CreateAclsResponse:
    R = m.CreateAclsResponse
    if authorizer is None:
        error = R.AclCreationResult(error_code=SecurityDisabled.code, error_message=_NO_AUTHORIZER)
        return R(results=[error for _ in request.creations])
    bindings = [
        AclBinding(
            ResourcePattern(
                _enum(ResourceType, c.resource_type),
                c.resource_name,
                _enum(PatternType, c.resource_pattern_type),
            ),
            AccessControlEntry(
                c.principal,
                c.host,
                _enum(AclOperation, c.operation),
                _enum(AclPermissionType, c.permission_type),
            ),
        )
        for c in request.creations
    ]
    results = await authorizer.create_acls(bindings)
    return R(
        results=[
            R.AclCreationResult(error_code=0)
            if error is None
            else R.AclCreationResult(error_code=InvalidRequest.code, error_message=error)
            for error in results
        ]
    )


async def delete_acls(
    authorizer: AclAuthorizer | None, request: m.DeleteAclsRequest
) -> m.DeleteAclsResponse:
    R = m.DeleteAclsResponse
    if authorizer is None:
        error = R.DeleteAclsFilterResult(
            error_code=SecurityDisabled.code, error_message=_NO_AUTHORIZER
        )
        return R(filter_results=[error for _ in request.filters])
    filters = [
        _binding_filter(
            f.resource_type_filter,
            f.resource_name_filter,
            f.pattern_type_filter,
            f.principal_filter,
            f.host_filter,
            f.operation,
            f.permission_type,
        )
        for f in request.filters
    ]
    valid = [i for i, f in enumerate(filters) if not f.unknown()]
    deleted = await authorizer.delete_acls([filters[i] for i in valid])
    results = [
        R.DeleteAclsFilterResult(
            error_code=InvalidRequest.code, error_message="Filter contain UNKNOWN elements"
        )
        for _ in filters
    ]
    for i, matches in zip(valid, deleted, strict=True):
        results[i] = R.DeleteAclsFilterResult(
            error_code=0,
            matching_acls=[
                R.DeleteAclsMatchingAcl(
                    error_code=0 if error is None else InvalidRequest.code,
                    error_message=error,
                    resource_type=int(b.pattern.resource_type),
                    resource_name=b.pattern.name,
                    pattern_type=int(b.pattern.pattern_type),
                    principal=b.entry.principal,
                    host=b.entry.host,
                    operation=int(b.entry.operation),
                    permission_type=int(b.entry.permission_type),
                )
                for b, error in matches
            ],
        )
    return R(filter_results=results)


# --- KIP-554 ----------------------------------------------------------------------------------


def describe_user_scram_credentials(
    store: CredentialStore, request: m.DescribeUserScramCredentialsRequest
) -> m.DescribeUserScramCredentialsResponse:
    """``ZkAdminManager.describeUserScramCredentials``: every user with a credential when no
    users are named (sorted); otherwise one result per distinct name asked for."""
    R = m.DescribeUserScramCredentialsResponse
    users = store.users()

    def infos(user: str) -> list[m.DescribeUserScramCredentialsResponse.CredentialInfo]:
        return [
            R.CredentialInfo(mechanism=mechanism_type(mech), iterations=cred.iterations)
            for mech, cred in sorted(users[user].items(), key=lambda kv: mechanism_type(kv[0]))
        ]

    if not request.users:
        return R(results=[
            R.DescribeUserScramCredentialsResult(user=u, error_code=0, credential_infos=infos(u))
            for u in sorted(users)
        ])  # fmt: skip
    names = [u.name for u in request.users]
    counts = Counter(names)
    results = []
    for name in dict.fromkeys(names):  # distinct, in request order
        result = R.DescribeUserScramCredentialsResult(user=name)
        if not name:
            result.error_code, result.error_message = (
                ResourceNotFound.code, "Username must not be empty",
            )  # fmt: skip
        elif counts[name] > 1:
            result.error_code = DuplicateResource.code
            result.error_message = (
                "Cannot describe SCRAM credentials for the same user twice in a single "
                f"request: {name}"
            )
        elif name not in users:
            result.error_code = ResourceNotFound.code
            result.error_message = (
                f"Attempt to describe a user credential that does not exist: {name}"
            )
        else:
            result.credential_infos = infos(name)
        results.append(result)
    return R(results=results)


async def alter_user_scram_credentials(
    store: CredentialStore, request: m.AlterUserScramCredentialsRequest
) -> m.AlterUserScramCredentialsResponse:
    """``ZkAdminManager.alterUserScramCredentials``: per user, all of its changes or none
    (an invalid or duplicated change fails the whole user)."""
    R = m.AlterUserScramCredentialsResponse
    failed: dict[str, tuple[int, str]] = {}
    changes = [(c.name, c.mechanism) for c in request.deletions] + [
        (c.name, c.mechanism) for c in request.upsertions
    ]
    for name, mechanism_code in changes:
        if not name:
            failed.setdefault("", (UnacceptableCredential.code, "Username must not be empty"))
        elif mechanism_name(mechanism_code) is None:
            failed.setdefault(name, (UnsupportedSaslMechanism.code, "Unknown SCRAM mechanism"))
    for up in request.upsertions:
        if up.name and up.name not in failed:
            try:
                check_iterations(up.iterations)
            except InvalidCredential as exc:
                failed[up.name] = (UnacceptableCredential.code, str(exc))
    pairs = Counter(pair for pair in changes if pair[0] not in failed)
    for (name, _), count in pairs.items():
        if count > 1:
            failed.setdefault(name, (
                DuplicateResource.code,
                "A user credential cannot be altered twice in the same request",
            ))  # fmt: skip
    users = store.users()
    for d in request.deletions:
        if d.name not in failed and mechanism_name(d.mechanism) not in users.get(d.name, {}):
            failed[d.name] = (
                ResourceNotFound.code, "Attempt to delete a user credential that does not exist"
            )  # fmt: skip
    results = [
        R.AlterUserScramCredentialsResult(user=user, error_code=code, error_message=message)
        for user, (code, message) in failed.items()
    ]
    to_alter = dict.fromkeys(name for name, _ in changes if name not in failed)
    for user in to_alter:
        upserts = {
            mech: credential_from_salted_password(
                mech, bytes(u.salt), bytes(u.salted_password), u.iterations
            )
            for u in request.upsertions
            if u.name == user and (mech := mechanism_name(u.mechanism)) is not None
        }
        deletions = [
            mech
            for d in request.deletions
            if d.name == user and (mech := mechanism_name(d.mechanism)) is not None
        ]
        try:
            await store.alter(user, upserts, deletions)
        except Exception as exc:
            results.append(
                R.AlterUserScramCredentialsResult(user=user, error_code=-1, error_message=str(exc))
            )
        else:
            results.append(R.AlterUserScramCredentialsResult(user=user, error_code=0))
    return R(results=results)
