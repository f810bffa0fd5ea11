"""The security admin APIs: DescribeAcls (29), CreateAcls (30), DeleteAcls (31),
DescribeUserScramCredentials (50) and AlterUserScramCredentials (51).

Each checks the caller on the cluster first (Describe for 29 and 50, Alter for 30, 31 and 51,
Kafka's table) and then calls :mod:`sluice.server.security.admin`, which does the rest with
Kafka's codes and messages (SECURITY_DISABLED for the ACL APIs when no authorizer is configured,
as Kafka answers). The SCRAM APIs work with or without an authorizer: they need only the
credential store the ``Server`` hands in (``credentials``).
"""

from __future__ import annotations

from sluice.protocol import errors
from sluice.protocol import messages as m
from sluice.protocol.messages import RequestHeader
from sluice.server.api.base import ApiBase
from sluice.server.api.registry import Answer
from sluice.server.security import admin
from sluice.server.security.acl import AclOperation
from sluice.server.security.credentials import CredentialStore

_CLUSTER_DENIED = errors.ClusterAuthorizationFailed.code


class SecurityApis(ApiBase):
    """This family's handlers (module docstring); mixed into ``Handlers``."""

    #: Where SCRAM credentials live (set by ``Server``: a file standalone, ZooKeeper in a
    #: cluster); until then none, and the SCRAM APIs answer as for a store with no users.
    credentials: CredentialStore = CredentialStore()

    def describe_acls(
        self, header: RequestHeader, body: m.DescribeAclsRequest
    ) -> m.DescribeAclsResponse:
        if not self.allowed(AclOperation.DESCRIBE):
            return m.DescribeAclsResponse(
                throttle_time_ms=0, error_code=_CLUSTER_DENIED, resources=[]
            )
        return admin.describe_acls(self.authorizer, body)

    def create_acls(
        self, header: RequestHeader, body: m.CreateAclsRequest
    ) -> Answer[m.CreateAclsResponse]:
        if not self.allowed(AclOperation.ALTER):
            result = m.CreateAclsResponse.AclCreationResult(error_code=_CLUSTER_DENIED)
            return m.CreateAclsResponse(throttle_time_ms=0, results=[
                result for _ in body.creations
            ])  # fmt: skip
        return admin.create_acls(self.authorizer, body)

    def delete_acls(
        self, header: RequestHeader, body: m.DeleteAclsRequest
    ) -> Answer[m.DeleteAclsResponse]:
        if not self.allowed(AclOperation.ALTER):
            result = m.DeleteAclsResponse.DeleteAclsFilterResult(error_code=_CLUSTER_DENIED)
            return m.DeleteAclsResponse(throttle_time_ms=0, filter_results=[
                result for _ in body.filters
            ])  # fmt: skip
        return admin.delete_acls(self.authorizer, body)

    def describe_user_scram_credentials(
        self, header: RequestHeader, body: m.DescribeUserScramCredentialsRequest
    ) -> m.DescribeUserScramCredentialsResponse:
        if not self.allowed(AclOperation.DESCRIBE):
            return m.DescribeUserScramCredentialsResponse(
                throttle_time_ms=0, error_code=_CLUSTER_DENIED, results=[]
            )
        return admin.describe_user_scram_credentials(self.credentials, body)

    def alter_user_scram_credentials(
        self, header: RequestHeader, body: m.AlterUserScramCredentialsRequest
    ) -> Answer[m.AlterUserScramCredentialsResponse]:
        if not self.allowed(AclOperation.ALTER):
            R = m.AlterUserScramCredentialsResponse
            names = [d.name for d in body.deletions] + [u.name for u in body.upsertions]
            users = dict.fromkeys(names)
            return R(throttle_time_ms=0, results=[
                R.AlterUserScramCredentialsResult(user=u, error_code=_CLUSTER_DENIED)
                for u in users
            ])  # fmt: skip
        return admin.alter_user_scram_credentials(self.credentials, body)
