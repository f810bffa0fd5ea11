"""The group APIs (FindCoordinator, JoinGroup ... OffsetDelete) over the group coordinator."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any

from sluice.protocol import acl, errors
from sluice.protocol import messages as m
from sluice.protocol.messages import RequestHeader
from sluice.server.network.request import REQUEST_CONTEXT
from sluice.server.security.acl import AclOperation, ResourceType

if TYPE_CHECKING:
    pass

from sluice.server.api.base import GROUP_TYPE_CLASSIC, ApiBase, _code, _commit_topics


class GroupApis(ApiBase):
    """This family\'s handlers (module docstring); mixed into ``Handlers``."""

    def _group_denied(self, group_id: str) -> int:
        """Read on the group (JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit)."""
        return self.denied_code(AclOperation.READ, ResourceType.GROUP, group_id)

    # --- Consumer groups (10-16, 42) and committed offsets (8, 9): sluice.server.group.coordinator
    # --

    def find_coordinator(
        self, header: RequestHeader, body: m.FindCoordinatorRequest
    ) -> m.FindCoordinatorResponse:
        """Standalone this broker coordinates every group (key type 0) and transactional id
        (1); in a cluster the leader of the key's ``__consumer_offsets`` /
        ``__transaction_state`` partition does."""
        cls = m.FindCoordinatorResponse
        resource = ResourceType.GROUP if body.key_type == 0 else ResourceType.TRANSACTIONAL_ID
        denied = self.denied_code(AclOperation.DESCRIBE, resource, body.key)
        if denied:
            return cls(throttle_time_ms=0, error_code=denied, error_message=None, node_id=-1,
                       host="", port=-1)  # fmt: skip
        if body.key_type == 0:
            code, broker = self.metadata_view.group_coordinator(body.key)
        elif body.key_type == 1:
            code, broker = self.metadata_view.transaction_coordinator(body.key)
        else:
            code, broker = errors.InvalidRequest.code, None
        if code or broker is None:
            return cls(throttle_time_ms=0, error_code=code, error_message=None, node_id=-1,
                       host="", port=-1)  # fmt: skip
        return cls(throttle_time_ms=0, error_code=0, error_message=None,
                   node_id=broker.broker_id, host=broker.host, port=broker.port)  # fmt: skip

    async def join_group(
        self, header: RequestHeader, body: m.JoinGroupRequest
    ) -> m.JoinGroupResponse:
        cls = m.JoinGroupResponse
        member_cls = m.JoinGroupResponse.JoinGroupResponseMember
        denied = self._group_denied(body.group_id)
        if denied:
            return cls(throttle_time_ms=0, error_code=denied, generation_id=-1, protocol_name="",
                       leader="", member_id=body.member_id, members=[])  # fmt: skip
        result = await self.groups.join_group(
            group_id=body.group_id,
            member_id=body.member_id,
            group_instance_id=body.group_instance_id,
            client_id=header.client_id or "",
            client_host=REQUEST_CONTEXT.get().client_host,
            session_timeout_ms=body.session_timeout_ms,
            rebalance_timeout_ms=body.rebalance_timeout_ms,
            protocol_type=body.protocol_type,
            protocols=[(p.name, bytes(p.metadata)) for p in body.protocols],
            require_known_member_id=header.api_version >= 4,
        )
        self.metrics.inc("groups.joins")
        return cls(
            throttle_time_ms=0,
            error_code=result.error_code,
            generation_id=result.generation_id,
            protocol_name=result.protocol_name,
            leader=result.leader,
            member_id=result.member_id,
            members=[
                member_cls(member_id=m, group_instance_id=i, metadata=md)
                for m, i, md in result.members
            ],
        )

    async def sync_group(
        self, header: RequestHeader, body: m.SyncGroupRequest
    ) -> m.SyncGroupResponse:
        denied = self._group_denied(body.group_id)
        if denied:
            return m.SyncGroupResponse(throttle_time_ms=0, error_code=denied, assignment=b"")
        code, assignment = await self.groups.sync_group(
            group_id=body.group_id,
            generation_id=body.generation_id,
            member_id=body.member_id,
            group_instance_id=body.group_instance_id,
            assignments=[(a.member_id, bytes(a.assignment)) for a in body.assignments],
        )
        return m.SyncGroupResponse(throttle_time_ms=0, error_code=code, assignment=assignment)

    def heartbeat(self, header: RequestHeader, body: m.HeartbeatRequest) -> m.HeartbeatResponse:
        denied = self._group_denied(body.group_id)
        if denied:
            return m.HeartbeatResponse(throttle_time_ms=0, error_code=denied)
        code = self.groups.heartbeat(
            group_id=body.group_id,
            generation_id=body.generation_id,
            member_id=body.member_id,
            group_instance_id=body.group_instance_id,
        )
        return m.HeartbeatResponse(throttle_time_ms=0, error_code=code)

    def leave_group(self, header: RequestHeader, body: m.LeaveGroupRequest) -> m.LeaveGroupResponse:
        cls = m.LeaveGroupResponse
        member_cls = m.LeaveGroupResponse.MemberResponse
        denied = self._group_denied(body.group_id)
        if denied:
            return cls(throttle_time_ms=0, error_code=denied, members=[])
        if header.api_version >= 3:
            who = [(m.member_id, m.group_instance_id) for m in body.members]
        else:
            who = [(body.member_id, None)]
        code, results = self.groups.leave_group(body.group_id, who)
        if header.api_version < 3 and code == 0 and results:
            code = results[0]
        return cls(
            throttle_time_ms=0,
            error_code=code,
            members=[
                member_cls(member_id=m, group_instance_id=i, error_code=c)
                for (m, i), c in zip(who, results, strict=False)
            ],
        )

    def offset_commit(
        self, header: RequestHeader, body: m.OffsetCommitRequest
    ) -> m.OffsetCommitResponse | Awaitable[m.OffsetCommitResponse]:
        wanted = [
            (t.name, p.partition_index, p.committed_offset, p.committed_leader_epoch,
             p.committed_metadata)
            for t in body.topics
            for p in t.partitions
        ]  # fmt: skip
        if self.authorizer is not None:
            group_denied = self._group_denied(body.group_id)
            if group_denied:
                return self._offset_commit_response(wanted, [group_denied] * len(wanted))
            readable = {
                t.name for t in body.topics
                if self.allowed(AclOperation.READ, ResourceType.TOPIC, t.name)
            }  # fmt: skip
            if len(readable) < len(body.topics):
                return self._offset_commit_partly(body, wanted, readable)
        codes = self.groups.commit_offsets(
            group_id=body.group_id,
            generation_id=body.generation_id_or_member_epoch,
            member_id=body.member_id,
            group_instance_id=body.group_instance_id,
            offsets=wanted,
        )
        self.metrics.inc("groups.offset_commits")
        if not isinstance(codes, list):  # answered once the offsets topic's replicas have it
            return self._offset_commit_later(wanted, codes)
        return self._offset_commit_response(wanted, codes)

    def _offset_commit_partly(
        self, body: m.OffsetCommitRequest, wanted: list[Any], readable: set[str]
    ) -> m.OffsetCommitResponse | Awaitable[m.OffsetCommitResponse]:
        """Commit the partitions of the topics the principal may read; the others are
        TOPIC_AUTHORIZATION_FAILED (``KafkaApis.handleOffsetCommitRequest``)."""
        allowed = [w for w in wanted if w[0] in readable]
        codes = self.groups.commit_offsets(
            group_id=body.group_id,
            generation_id=body.generation_id_or_member_epoch,
            member_id=body.member_id,
            group_instance_id=body.group_instance_id,
            offsets=allowed,
        )
        denied = [w for w in wanted if w[0] not in readable]
        refused = [errors.TopicAuthorizationFailed.code] * len(denied)
        if not isinstance(codes, list):
            done = codes

            async def later() -> m.OffsetCommitResponse:
                return self._offset_commit_response(allowed + denied, (await done) + refused)

            return later()
        return self._offset_commit_response(allowed + denied, codes + refused)

    async def _offset_commit_later(
        self, wanted: list[Any], codes: Awaitable[list[int]]
    ) -> m.OffsetCommitResponse:
        return self._offset_commit_response(wanted, await codes)

    def _offset_commit_response(
        self, wanted: list[Any], codes: list[int]
    ) -> m.OffsetCommitResponse:
        topic_cls = m.OffsetCommitResponse.OffsetCommitResponseTopic
        part_cls = topic_cls.OffsetCommitResponsePartition
        topics = _commit_topics(wanted, codes, topic_cls, part_cls)
        return m.OffsetCommitResponse(throttle_time_ms=0, topics=topics)

    def offset_fetch(
        self, header: RequestHeader, body: m.OffsetFetchRequest
    ) -> m.OffsetFetchResponse:
        cls = m.OffsetFetchResponse
        topic_cls = m.OffsetFetchResponse.OffsetFetchResponseTopic
        part_cls = m.OffsetFetchResponse.OffsetFetchResponsePartition
        wanted = (
            None
            if body.topics is None
            else [(t.name, p) for t in body.topics for p in t.partition_indexes]
        )
        denied = self.denied_code(AclOperation.DESCRIBE, ResourceType.GROUP, body.group_id)
        if denied:
            return cls(throttle_time_ms=0, topics=[], error_code=denied)
        try:
            found = self.groups.fetch_offsets(body.group_id, wanted)
        except Exception as exc:
            return cls(throttle_time_ms=0, topics=[], error_code=_code(exc))
        # Describe on each topic: the ones named without it are TOPIC_AUTHORIZATION_FAILED,
        # left out when all are asked for (``KafkaApis.handleOffsetFetchRequest``).
        describable: dict[str, bool] = {}
        topics: dict[str, list[m.OffsetFetchResponse.OffsetFetchResponsePartition]] = {}
        # v7+ (KIP-447): a read_committed consumer asks for stable offsets only; a partition
        # whose offset is still being committed (in a transaction, or being written) answers
        # UNSTABLE_OFFSET_COMMIT, which the client retries.
        unstable = self.groups.unstable_offsets(body.group_id) if body.require_stable else ()
        for topic, part, value in found:
            ok = describable.get(topic)
            if ok is None:
                ok = describable[topic] = self.allowed(
                    AclOperation.DESCRIBE, ResourceType.TOPIC, topic, audit=wanted is not None
                )
            if not ok:
                if wanted is not None:
                    topics.setdefault(topic, []).append(part_cls(
                        partition_index=part, committed_offset=-1, committed_leader_epoch=-1,
                        metadata="", error_code=errors.TopicAuthorizationFailed.code,
                    ))  # fmt: skip
                continue
            if (topic, part) in unstable:
                topics.setdefault(topic, []).append(part_cls(
                    partition_index=part, committed_offset=-1, committed_leader_epoch=-1,
                    metadata="", error_code=errors.UnstableOffsetCommit.code,
                ))  # fmt: skip
                continue
            topics.setdefault(topic, []).append(
                part_cls(
                    partition_index=part,
                    committed_offset=value.offset if value else -1,
                    committed_leader_epoch=value.leader_epoch if value else -1,
                    metadata=value.metadata if value else "",
                    error_code=0,
                )
            )
        return cls(
            throttle_time_ms=0,
            topics=[topic_cls(name=n, partitions=ps) for n, ps in topics.items()],
            error_code=0,
        )

    def list_groups(self, header: RequestHeader, body: m.ListGroupsRequest) -> m.ListGroupsResponse:
        """The groups this broker coordinates, with their state (v4+, KIP-518) and type (v5+,
        KIP-848: every group here is a ``classic`` one). ``states_filter`` / ``types_filter``
        keep the groups whose state / type is listed (case-insensitive, as Kafka compares);
        empty means all."""
        cls = m.ListGroupsResponse
        group_cls = m.ListGroupsResponse.ListedGroup
        listed = self.groups.list_groups(body.states_filter)
        if not self.allowed(AclOperation.DESCRIBE, audit=False):  # else each group's Describe
            listed = [
                g for g in listed
                if self.allowed(AclOperation.DESCRIBE, ResourceType.GROUP, g[0], audit=False)
            ]  # fmt: skip
        types = {t.lower() for t in body.types_filter}
        if types and GROUP_TYPE_CLASSIC not in types:
            listed = []
        return cls(
            throttle_time_ms=0,
            # Kafka: the groups it has, and this error while some offsets partition loads.
            error_code=errors.CoordinatorLoadInProgress.code if self.groups.loading else 0,
            groups=[
                group_cls(group_id=g, protocol_type=t, group_state=s, group_type=GROUP_TYPE_CLASSIC)
                for g, t, s in listed
            ],
        )

    def describe_groups(
        self, header: RequestHeader, body: m.DescribeGroupsRequest
    ) -> m.DescribeGroupsResponse:
        cls = m.DescribeGroupsResponse
        group_cls = m.DescribeGroupsResponse.DescribedGroup
        member_cls = m.DescribeGroupsResponse.DescribedGroupMember
        described = []
        requested = bool(body.include_authorized_operations)
        for group_id in body.groups:
            denied = self.denied_code(AclOperation.DESCRIBE, ResourceType.GROUP, group_id)
            if denied:
                described.append(
                    group_cls(
                        error_code=denied,
                        group_id=group_id,
                        group_state="",
                        members=[],
                        authorized_operations=acl.NOT_REQUESTED,
                    )
                )
                continue
            ops = self.authorized_operations(requested, ResourceType.GROUP, group_id)
            try:
                group = self.groups.describe_group(group_id)
            except errors.KafkaError as exc:  # not the coordinator (now) of this group
                described.append(group_cls(error_code=exc.code, group_id=group_id, group_state="",
                                           members=[], authorized_operations=ops))  # fmt: skip
                continue
            if group is None:
                # Kafka (v0-5): an unknown group is described as Dead, without an error.
                described.append(group_cls(error_code=0, group_id=group_id, group_state="Dead",
                                           members=[], authorized_operations=ops))  # fmt: skip
                continue
            stable = group.state.value == "Stable"
            protocol = group.protocol_name or ""
            described.append(
                group_cls(
                    error_code=0,
                    group_id=group_id,
                    group_state=group.state.value,
                    protocol_type=group.protocol_type or "",
                    protocol_data=protocol if stable else "",
                    members=[
                        member_cls(
                            member_id=m.member_id,
                            group_instance_id=m.group_instance_id,
                            client_id=m.client_id,
                            client_host=m.client_host,
                            member_metadata=m.metadata_for(protocol) if stable else b"",
                            member_assignment=m.assignment if stable else b"",
                        )
                        for m in group.members.values()
                    ],
                    authorized_operations=ops,
                )
            )
        return cls(throttle_time_ms=0, groups=described)

    def delete_groups(
        self, header: RequestHeader, body: m.DeleteGroupsRequest
    ) -> m.DeleteGroupsResponse:
        cls = m.DeleteGroupsResponse
        result_cls = m.DeleteGroupsResponse.DeletableGroupResult
        names = list(body.groups_names)
        denied = [self.denied_code(AclOperation.DELETE, ResourceType.GROUP, g) for g in names]
        codes = self.groups.delete_groups([g for g, d in zip(names, denied, strict=True) if not d])
        it = iter(codes)
        codes = [d or next(it) for d in denied]
        return cls(
            throttle_time_ms=0,
            results=[
                result_cls(group_id=g, error_code=c)
                for g, c in zip(body.groups_names, codes, strict=True)
            ],
        )

    def offset_delete(
        self, header: RequestHeader, body: m.OffsetDeleteRequest
    ) -> m.OffsetDeleteResponse:
        """OffsetDelete (47): a partition of a topic that does not exist is
        UNKNOWN_TOPIC_OR_PARTITION (Kafka's KafkaApis check); the rest is the coordinator's."""
        cls = m.OffsetDeleteResponse
        topic_cls = m.OffsetDeleteResponse.OffsetDeleteResponseTopic
        part_cls = m.OffsetDeleteResponse.OffsetDeleteResponsePartition
        group_denied = self.denied_code(AclOperation.DELETE, ResourceType.GROUP, body.group_id)
        if group_denied:
            return cls(error_code=group_denied, throttle_time_ms=0, topics=[])
        existing = self.logs.topics()
        codes: dict[tuple[str, int], int] = {}
        known: list[tuple[str, int]] = []
        for t in body.topics:
            readable = self.allowed(AclOperation.READ, ResourceType.TOPIC, t.name)
            for p in t.partitions:
                tp = (t.name, p.partition_index)
                if not readable:
                    codes[tp] = errors.TopicAuthorizationFailed.code
                elif 0 <= p.partition_index < existing.get(t.name, 0):
                    known.append(tp)
                else:
                    codes[tp] = errors.UnknownTopicOrPartition.code
        group_code, found = self.groups.delete_offsets(body.group_id, known)
        if group_code:
            return cls(error_code=group_code, throttle_time_ms=0, topics=[])
        codes.update(found)
        topics: dict[str, list[m.OffsetDeleteResponse.OffsetDeleteResponsePartition]] = {}
        for (topic, part), code in codes.items():
            topics.setdefault(topic, []).append(part_cls(partition_index=part, error_code=code))
        listed = [topic_cls(name=n, partitions=ps) for n, ps in topics.items()]
        return cls(error_code=0, throttle_time_ms=0, topics=listed)
