"""The topic admin APIs: CreateTopics, CreatePartitions, DeleteTopics, over the metadata view
(standalone: the logs now; in a cluster: through ZooKeeper and the controller)."""

from __future__ import annotations

import asyncio

from sluice.protocol import errors
from sluice.protocol import messages as m
from sluice.protocol.messages import RequestHeader
from sluice.protocol.types import ZERO_UUID
from sluice.server.api.base import ApiBase, _code, _Granted, _topic_failure, log
from sluice.server.api.registry import Answer
from sluice.server.replication.replica_manager import INTERNAL_TOPICS
from sluice.server.security.acl import AclOperation, ResourceType


class TopicApis(ApiBase):
    """This family\'s handlers (module docstring); mixed into ``Handlers``."""

    # --- CreateTopics (19) -----------------------------------------------------------------------

    @staticmethod
    def _creatable_configs(t: m.CreateTopicsRequest.CreatableTopic) -> dict[str, str]:
        configs: dict[str, str] = {}
        for c in t.configs:
            if c.value is None:
                raise errors.InvalidConfig(f"null value for config {c.name!r}")
            configs[c.name] = c.value
        return configs

    @staticmethod
    def _duplicates(body: m.CreateTopicsRequest) -> set[str]:
        seen: dict[str, int] = {}
        for t in body.topics:
            seen[t.name] = seen.get(t.name, 0) + 1
        return {name for name, count in seen.items() if count > 1}

    def create_topics(
        self, header: RequestHeader, body: m.CreateTopicsRequest
    ) -> Answer[m.CreateTopicsResponse]:
        """Validate each topic (:meth:`MetadataView.validate_new_topic`), check the topic
        limits, then create it (:meth:`MetadataView.create_topic`: standalone the logs now; in a
        cluster through ZooKeeper, the answer waiting for the leaders, bounded by
        ``timeout_ms``). ``validate_only`` creates nothing."""
        result_cls = m.CreateTopicsResponse.CreatableTopicResult
        duplicates = self._duplicates(body)
        view = self.metadata_view
        # What the request's earlier topics take while the counts do not show them (yet).
        granted = _Granted()

        async def one(t: m.CreateTopicsRequest.CreatableTopic) -> tuple[int, str | None]:
            try:
                if t.name in duplicates:
                    raise errors.InvalidRequest(f"topic {t.name!r} appears more than once")
                self._check_create(t.name)
                configs = self._creatable_configs(t)
                explicit = None
                n, rf = t.num_partitions, t.replication_factor
                if t.assignments:
                    if n != -1 or rf != -1:
                        raise errors.InvalidRequest(
                            "num_partitions and replication_factor must be -1 with assignments"
                        )
                    explicit = {a.partition_index: list(a.broker_ids) for a in t.assignments}
                else:
                    n = self.config.num_partitions if n == -1 else n
                    rf = self.config.default_replication_factor if rf == -1 else rf
                self._check_topic_limits(t.name, len(explicit) if explicit else n, granted)
                planned = view.validate_new_topic(t.name, n, rf, explicit, configs)
                granted.add(t.name, len(explicit) if explicit else n)
                if not body.validate_only:
                    try:
                        await view.create_topic(t.name, planned, configs, body.timeout_ms)
                    finally:
                        if t.name in view.topics():  # counted there from now on
                            granted.discard(t.name)
            except Exception as exc:
                return _topic_failure(exc, "create topic failed", t.name)
            return 0, None

        async def gathered() -> m.CreateTopicsResponse:
            outcomes = await asyncio.gather(*(one(t) for t in body.topics))
            return m.CreateTopicsResponse(
                throttle_time_ms=0,
                topics=[
                    result_cls(name=t.name, error_code=code, error_message=message)
                    for t, (code, message) in zip(body.topics, outcomes, strict=True)
                ],
            )

        return gathered()

    def _check_create(self, name: str) -> None:
        """Create on the cluster, or else on the topic (Kafka's CreateTopics rule)."""
        if not self.allowed(AclOperation.CREATE, audit=False):
            self.check(AclOperation.CREATE, ResourceType.TOPIC, name)

    # --- CreatePartitions (37) -------------------------------------------------------------------

    def create_partitions(
        self, header: RequestHeader, body: m.CreatePartitionsRequest
    ) -> Answer[m.CreatePartitionsResponse]:
        """Grow topics (Kafka's ``ZkAdminManager.createPartitions`` checks and messages): a
        count that does not grow the topic is INVALID_PARTITIONS, an unknown topic
        UNKNOWN_TOPIC_OR_PARTITION, a topic named twice INVALID_REQUEST, ``assignments`` (one
        replica list per new partition) that do not fit INVALID_REPLICA_ASSIGNMENT;
        ``validate_only`` checks without adding. ``__consumer_offsets`` is refused
        (INVALID_REQUEST): the group coordinator places groups by its partition count. (Kafka's
        broker does not check it, ``ZkAdminManager.createPartitions`` 2.8; ``kafka-topics.sh``
        refuses it client-side, ``TopicCommand``: "The number of partitions for the internal
        topic ... cannot be changed".)
        Standalone the logs are added now (``LogManager.add_partitions``); in a cluster the
        grown assignment is written to ZooKeeper and the answer waits for the new leaders
        (:meth:`MetadataView.add_partitions`)."""
        seen: dict[str, int] = {}
        for t in body.topics:
            seen[t.name] = seen.get(t.name, 0) + 1
        view = self.metadata_view

        async def one(t: m.CreatePartitionsRequest.CreatePartitionsTopic) -> tuple[int, str | None]:
            try:
                self.check(AclOperation.ALTER, ResourceType.TOPIC, t.name)
                self._check_partitions_request(t, seen)
                if t.name in view.topics():  # else add_partitions says unknown
                    self._check_topic_limits(t.name, t.count)
                assignments = (
                    None if t.assignments is None else [list(a.broker_ids) for a in t.assignments]
                )
                await view.add_partitions(
                    t.name, t.count, assignments, body.timeout_ms, body.validate_only
                )
            except Exception as exc:
                return _topic_failure(exc, "create partitions failed", t.name)
            return 0, None

        async def gathered() -> m.CreatePartitionsResponse:
            outcomes = await asyncio.gather(*(one(t) for t in body.topics))
            result_cls = m.CreatePartitionsResponse.CreatePartitionsTopicResult
            return m.CreatePartitionsResponse(
                throttle_time_ms=0,
                results=[
                    result_cls(name=t.name, error_code=code, error_message=message)
                    for t, (code, message) in zip(body.topics, outcomes, strict=True)
                ],
            )

        return gathered()

    @staticmethod
    def _check_partitions_request(
        t: m.CreatePartitionsRequest.CreatePartitionsTopic, seen: dict[str, int]
    ) -> None:
        if seen[t.name] > 1:
            raise errors.InvalidRequest("Duplicate topic in request.")
        if t.name in INTERNAL_TOPICS:
            raise errors.InvalidRequest(
                f"cannot add partitions to {t.name}: groups and transactional ids are placed "
                "by its partition count"
            )

    # --- DeleteTopics (20) -----------------------------------------------------------------------

    def delete_topics(
        self, header: RequestHeader, body: m.DeleteTopicsRequest
    ) -> Answer[m.DeleteTopicsResponse]:
        """Delete topics (standalone now; in a cluster through the controller, the answer
        waiting, bounded by ``timeout_ms``, until they are gone from this broker's view).

        ``__consumer_offsets`` is refused with TOPIC_AUTHORIZATION_FAILED, the rest of the
        request served. Kafka's broker has no internal-topic check of its own here
        (``KafkaApis.handleDeleteTopicsRequest``, 2.8 and 3.x ``ControllerApis.deleteTopics``):
        what refuses a deletion of an existing topic is the authorizer, with that code, and
        ``kafka-topics.sh`` refuses internal topics client-side (``TopicCommand``: "is a kafka
        internal topic and is not allowed to be marked for deletion"). Sluice has no ACLs, so
        it answers what a Kafka cluster denying DELETE on internal topics answers: every
        committed offset would otherwise be gone (and groups placed on a topic recreated).

        v6 names each topic by name or by id (KIP-516): an id is resolved to its name here
        (UNKNOWN_TOPIC_ID if unknown; INVALID_REQUEST with both), and every answer carries the
        topic's id."""
        cls = m.DeleteTopicsResponse
        result_cls = m.DeleteTopicsResponse.DeletableTopicResult
        view = self.metadata_view
        codes: list[int] = []
        names: list[str | None] = []
        if header.api_version >= 6:
            for topic in body.topics:
                if topic.topic_id == ZERO_UUID:
                    names.append(topic.name)
                    codes.append(0 if topic.name is not None else errors.InvalidRequest.code)
                elif topic.name is not None:
                    names.append(topic.name)
                    codes.append(errors.InvalidRequest.code)
                else:
                    names.append(view.topic_name(topic.topic_id))
                    codes.append(0 if names[-1] is not None else errors.UnknownTopicId.code)
        else:
            names = list(body.topic_names)
            codes = [0] * len(names)
        for i, name in enumerate(names):
            if codes[i] or name is None:
                continue
            code = self.denied_code(AclOperation.DELETE, ResourceType.TOPIC, name)
            if code:
                pass
            elif not self.config.delete_topic_enable:
                code = errors.TopicDeletionDisabled.code
            elif name in INTERNAL_TOPICS:
                code = self._refuse_internal_deletion(name)
            codes[i] = code
        ids = [(view.topic_id(n) if n is not None else None) or ZERO_UUID for n in names]
        if header.api_version >= 6:  # an id asked for is answered as asked
            ids = [
                t.topic_id if t.topic_id != ZERO_UUID else i
                for t, i in zip(body.topics, ids, strict=True)
            ]

        def response() -> m.DeleteTopicsResponse:
            results = zip(names, ids, codes, strict=True)
            answers = [result_cls(name=n, topic_id=i, error_code=c) for n, i, c in results]
            return cls(throttle_time_ms=0, responses=answers)

        if not any(code == 0 for code in codes):
            return response()

        async def delete() -> m.DeleteTopicsResponse:
            """Each allowed topic deleted in turn, then a wait (bounded by ``timeout_ms``)
            until they are gone from this broker's view."""
            for i, name in enumerate(names):
                if codes[i] or name is None:
                    continue
                try:
                    await view.delete_topic(name)
                except Exception as exc:
                    if not isinstance(exc, errors.KafkaError):
                        log.exception("delete topic failed", topic=name)
                    codes[i] = _code(exc)
            requested = [n for n, code in zip(names, codes, strict=True) if n and code == 0]
            late = await view.wait_deleted(requested, body.timeout_ms)
            for i, name in enumerate(names):
                if codes[i] == 0 and name in late:
                    codes[i] = errors.RequestTimedOut.code
            return response()

        return delete()

    @staticmethod
    def _refuse_internal_deletion(name: str) -> int:
        log.warning("refused to delete an internal topic", topic=name)
        return errors.TopicAuthorizationFailed.code
