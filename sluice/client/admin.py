"""Topic administration and offset queries: the calls behind ``sluice topics`` / ``sluice offsets``.

Usage::

    async with Admin("127.0.0.1:9092") as admin:
        await admin.create_topic("events", partitions=3, configs={"retention.ms": "3600000"})
        await admin.create_partitions({"events": 6})     # grow it to 6 partitions
        print(await admin.list_topics())                 # {"events": 3}
        print(await admin.describe_topics(["events"]))   # [TopicDescription(...)]
        print(await admin.list_offsets({TopicPartition("events", 0): LATEST}))
        print(await admin.describe_configs(ResourceType.TOPIC, "events"))  # [ConfigEntry(...)]
        await admin.incremental_alter_configs(
            ResourceType.TOPIC, "events", set_values={"retention.ms": "60000"}, delete=["flush.ms"]
        )
        await admin.delete_topic("events")

Errors in a per-topic result become the :class:`sluice.protocol.errors.KafkaError` subclass of the
code
(e.g. ``TopicAlreadyExists``), with the broker's message when it sent one.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sluice.net.connection import Connection
from sluice.net.security import ClientSecurity
from sluice.protocol import messages
from sluice.protocol.acl import AclOperation, AclPermissionType, PatternType
from sluice.protocol.acl import ResourceType as AclResourceType
from sluice.protocol.config_resources import AlterConfigOp, ConfigSource, ResourceType
from sluice.protocol.errors import KafkaError, NotController, for_code

from .cluster import Cluster, PartitionInfo, TopicPartition
from .consumer import EARLIEST, LATEST, Consumer, OffsetAndTimestamp

__all__ = [
    "EARLIEST",
    "LATEST",
    "SCRAM_MECHANISMS",
    "AclBinding",
    "AclBindingFilter",
    "Admin",
    "ConfigEntry",
    "ConfigSynonym",
    "PartitionReassignment",
    "ResourceType",
    "TopicDescription",
]

CREATE_TOPICS = messages.CreateTopics.key
DELETE_TOPICS = messages.DeleteTopics.key
DELETE_RECORDS = messages.DeleteRecords.key
CREATE_PARTITIONS = messages.CreatePartitions.key
DESCRIBE_CONFIGS = messages.DescribeConfigs.key
INCREMENTAL_ALTER_CONFIGS = messages.IncrementalAlterConfigs.key

#: KIP-554's mechanism codes and their hash (``ScramMechanism``).
SCRAM_MECHANISMS = {"SCRAM-SHA-256": (1, "sha256"), "SCRAM-SHA-512": (2, "sha512")}
_SCRAM_NAMES = {code: name for name, (code, _) in SCRAM_MECHANISMS.items()}


def _scram_mechanism(name: str) -> tuple[int, str]:
    try:
        return SCRAM_MECHANISMS[name]
    except KeyError:
        raise ValueError(
            f"unknown SCRAM mechanism {name!r}: {', '.join(SCRAM_MECHANISMS)}"
        ) from None


@dataclass(frozen=True, slots=True)
class AclBinding:
    """One ACL (Kafka's ``AclBinding``): who (``principal``, ``host``) may or may not
    (``permission``) do ``operation`` on the resources the pattern names."""

    resource_type: AclResourceType
    name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: AclOperation
    permission: AclPermissionType


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    """What DescribeAcls / DeleteAcls match: ``None`` and ANY match anything; pattern type
    MATCH matches every pattern that applies to the resource named (literal, ``*``, prefixes)."""

    resource_type: AclResourceType = AclResourceType.ANY
    name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: AclOperation = AclOperation.ANY
    permission: AclPermissionType = AclPermissionType.ANY


def _binding(a: Any, p: Any) -> AclBinding:
    """A binding from a response's entry ``a`` of the resource ``p`` (DeleteAcls: one object)."""
    return AclBinding(
        AclResourceType(p.resource_type), p.resource_name, PatternType(p.pattern_type),
        a.principal, a.host, AclOperation(a.operation), AclPermissionType(a.permission_type),
    )  # fmt: skip


@dataclass(frozen=True, slots=True)
class TopicDescription:
    name: str
    partitions: tuple[PartitionInfo, ...]
    error: KafkaError | None = None


@dataclass(frozen=True, slots=True)
class ConfigSynonym:
    """One source of a config's value: ``source`` is Kafka's ``ConfigEntry.ConfigSource`` name
    (``DYNAMIC_TOPIC_CONFIG``, ``STATIC_BROKER_CONFIG``, ``DEFAULT_CONFIG``, ...)."""

    name: str
    value: str | None
    source: str


@dataclass(frozen=True, slots=True)
class ConfigEntry:
    """One config of a resource as DescribeConfigs reports it: the effective value, where it
    comes from and (most specific first) every source that sets it."""

    name: str
    value: str | None
    source: str
    read_only: bool = False
    sensitive: bool = False
    synonyms: tuple[ConfigSynonym, ...] = ()

    @property
    def is_default(self) -> bool:
        return self.source == ConfigSource.DEFAULT_CONFIG.name


#: Tries of a controller API while brokers answer NOT_CONTROLLER (a controller moving).
MAX_CONTROLLER_ATTEMPTS = 10


@dataclass(frozen=True, slots=True)
class PartitionReassignment:
    """A reassignment in progress: the current replicas (target first, then the original ones
    being removed), those being added and those being removed."""

    replicas: tuple[int, ...]
    adding: tuple[int, ...]
    removing: tuple[int, ...]


def _top_not_controller(response: Any) -> bool:
    return bool(response.error_code == NotController.code)


def _error(code: int, message: str | None, what: str) -> KafkaError | None:
    if not code:
        return None
    return for_code(code)(f"{what}: {message}" if message else what)


class Admin:
    """Admin client. ``async with Admin(bootstrap_servers) as admin: ...``. ``security``: TLS /
    SASL, as for :class:`~sluice.client.producer.Producer`."""

    def __init__(
        self,
        bootstrap_servers: str | Sequence[str] = "127.0.0.1:9092",
        *,
        client_id: str | None = "sluice-admin",
        request_timeout_ms: int = 30_000,
        security: ClientSecurity | Mapping[str, str] | None = None,
    ) -> None:
        self.request_timeout_ms = request_timeout_ms
        self._bootstrap = bootstrap_servers
        self._cluster = Cluster(
            bootstrap_servers,
            client_id=client_id,
            request_timeout_ms=request_timeout_ms,
            allow_auto_topic_creation=False,
            security=security,
        )
        self._consumer: Consumer | None = None

    async def start(self) -> None:
        await self._cluster.start()

    async def stop(self) -> None:
        if self._consumer is not None:
            await self._consumer.stop()
        await self._cluster.close()

    async def __aenter__(self) -> Admin:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # --- topics ------------------------------------------------------------------------------

    async def list_topics(self) -> dict[str, int]:
        """Every topic and its partition count."""
        await self._cluster.refresh(None)
        return self._cluster.topics()

    async def describe_topics(self, names: Iterable[str] | None = None) -> list[TopicDescription]:
        """Partitions (leader, replicas, ISR) of ``names`` (every topic when None)."""
        wanted = None if names is None else list(names)
        await self._cluster.refresh(wanted)
        out = []
        for name in sorted(self._cluster.topics()) if wanted is None else wanted:
            parts = self._cluster.partitions_for(name)
            error = self._cluster.topic_error(name)
            out.append(TopicDescription(name, tuple(parts or ()), error))
        return out

    async def create_topics(
        self,
        topics: Mapping[str, tuple[int, Mapping[str, str]]],
        *,
        validate_only: bool = False,
        replication_factor: int = -1,
    ) -> dict[str, KafkaError | None]:
        """Create ``{name: (partitions, configs)}`` (partitions -1: the broker default) with
        ``replication_factor`` replicas each (-1: the broker's default.replication.factor).
        Returns each topic's error (None on success)."""
        req = messages.CreateTopicsRequest
        body = req(
            topics=[
                req.CreatableTopic(
                    name=name,
                    num_partitions=n,
                    replication_factor=replication_factor,
                    assignments=[],
                    configs=[
                        req.CreatableTopic.CreatableTopicConfig(name=k, value=v)
                        for k, v in configs.items()
                    ],
                )
                for name, (n, configs) in topics.items()
            ],
            timeout_ms=self.request_timeout_ms,
            validate_only=validate_only,
        )
        conn = await self._cluster.controller_connection()
        response = await conn.request(CREATE_TOPICS, body)
        return {
            t.name: _error(t.error_code, t.error_message, f"create topic {t.name!r}")
            for t in response.topics
        }

    async def create_topic(
        self,
        name: str,
        partitions: int = -1,
        configs: Mapping[str, str] | None = None,
        replication_factor: int = -1,
    ) -> None:
        """Create one topic; raises its error (e.g. ``TopicAlreadyExists``)."""
        wanted = {name: (partitions, dict(configs or {}))}
        error = (await self.create_topics(wanted, replication_factor=replication_factor))[name]
        if error is not None:
            raise error

    async def delete_topics(self, names: Iterable[str]) -> dict[str, KafkaError | None]:
        wanted = list(names)
        body = messages.DeleteTopicsRequest(
            topic_names=wanted,  # v0-5
            topics=[messages.DeleteTopicsRequest.DeleteTopicState(name=n) for n in wanted],  # v6+
            timeout_ms=self.request_timeout_ms,
        )
        conn = await self._cluster.controller_connection()
        response = await conn.request(DELETE_TOPICS, body)
        results: dict[str, KafkaError | None] = {}
        for r in response.responses:
            if r.name is None:  # only for a topic deleted by id, which this client never does
                continue
            self._cluster.forget(r.name)
            results[r.name] = _error(r.error_code, r.error_message, f"delete topic {r.name!r}")
        return results

    async def delete_topic(self, name: str) -> None:
        error = (await self.delete_topics([name]))[name]
        if error is not None:
            raise error

    async def create_partitions(
        self, counts: Mapping[str, int], *, validate_only: bool = False
    ) -> dict[str, KafkaError | None]:
        """Grow each topic to ``counts[name]`` partitions (CreatePartitions; the broker places
        the new replicas). Returns each topic's error (None on success), e.g.
        ``InvalidPartitions`` when the count does not grow the topic."""
        req = messages.CreatePartitionsRequest
        body = req(
            topics=[
                req.CreatePartitionsTopic(name=name, count=count, assignments=None)
                for name, count in counts.items()
            ],
            timeout_ms=self.request_timeout_ms,
            validate_only=validate_only,
        )
        conn = await self._cluster.controller_connection()
        response = await conn.request(CREATE_PARTITIONS, body)
        for r in response.results:
            self._cluster.forget(r.name)  # its partition count changed
        return {
            r.name: _error(r.error_code, r.error_message, f"create partitions of {r.name!r}")
            for r in response.results
        }

    # --- leader election and reassignment (the controller's APIs) -------------------------------

    async def _controller_request(self, api_key: int, body: Any, not_controller: Any) -> Any:
        """Send to the controller; while the answer says NOT_CONTROLLER (``not_controller``
        tells from the response), learn the controller again and retry (bounded), as Kafka's
        admin client does."""
        for attempt in range(MAX_CONTROLLER_ATTEMPTS):
            if attempt:
                await asyncio.sleep(self._cluster.retry_backoff_ms / 1000)
                await self._cluster.refresh(())
            response = await (await self._cluster.controller_connection()).request(api_key, body)
            if not not_controller(response):
                return response
        return response

    async def elect_leaders(
        self, partitions: Iterable[TopicPartition] | None = None, *, unclean: bool = False
    ) -> dict[TopicPartition, KafkaError | None]:
        """ElectLeaders: the preferred replica (or, ``unclean``, any live replica where no
        in-sync one is) of ``partitions`` (None: every partition; then those that needed no
        election are left out). Per partition None (elected) or the error, e.g.
        ``ElectionNotNeeded``, ``PreferredLeaderNotAvailable``."""
        req = messages.ElectLeadersRequest
        wanted = None if partitions is None else sorted(set(partitions))
        topics: dict[str, list[int]] = {}
        for tp in wanted or ():
            topics.setdefault(tp.topic, []).append(tp.partition)
        body = req(
            election_type=1 if unclean else 0,
            topic_partitions=None
            if wanted is None
            else [req.TopicPartitions(topic=t, partitions=ps) for t, ps in topics.items()],
            timeout_ms=self.request_timeout_ms,
        )
        not_controller = NotController.code

        def refused(response: messages.ElectLeadersResponse) -> bool:
            return any(
                p.error_code == not_controller
                for t in response.replica_election_results
                for p in t.partition_result
            )

        response = await self._controller_request(messages.ElectLeaders.key, body, refused)
        top = _error(response.error_code, None, "elect leaders")
        if top is not None:
            raise top
        return {
            TopicPartition(t.topic, p.partition_id): _error(
                p.error_code, p.error_message, f"elect leader of {t.topic}-{p.partition_id}"
            )
            for t in response.replica_election_results
            for p in t.partition_result
        }

    async def alter_partition_reassignments(
        self, reassignments: Mapping[TopicPartition, Sequence[int] | None]
    ) -> dict[TopicPartition, KafkaError | None]:
        """Start moving each partition to its target replicas (None: cancel its reassignment).
        Per partition None (started; :meth:`list_partition_reassignments` shows it until it
        completes) or the error, e.g. ``InvalidReplicaAssignment``."""
        req = messages.AlterPartitionReassignmentsRequest
        topics: dict[str, list[Any]] = {}
        for tp, replicas in sorted(reassignments.items()):
            topics.setdefault(tp.topic, []).append(
                req.ReassignablePartition(
                    partition_index=tp.partition,
                    replicas=None if replicas is None else list(replicas),
                )
            )
        body = req(
            timeout_ms=self.request_timeout_ms,
            topics=[req.ReassignableTopic(name=t, partitions=ps) for t, ps in topics.items()],
        )
        response = await self._controller_request(
            messages.AlterPartitionReassignments.key, body, _top_not_controller
        )
        top = _error(response.error_code, response.error_message, "alter reassignments")
        if top is not None:
            raise top
        return {
            TopicPartition(t.name, p.partition_index): _error(
                p.error_code, p.error_message, f"reassign {t.name}-{p.partition_index}"
            )
            for t in response.responses
            for p in t.partitions
        }

    async def list_partition_reassignments(
        self, partitions: Iterable[TopicPartition] | None = None
    ) -> dict[TopicPartition, PartitionReassignment]:
        """The reassignments in progress (of ``partitions``, or all)."""
        req = messages.ListPartitionReassignmentsRequest
        topics: dict[str, list[int]] = {}
        for tp in sorted(set(partitions or ())):
            topics.setdefault(tp.topic, []).append(tp.partition)
        body = req(
            timeout_ms=self.request_timeout_ms,
            topics=None
            if partitions is None
            else [
                req.ListPartitionReassignmentsTopics(name=t, partition_indexes=ps)
                for t, ps in topics.items()
            ],
        )
        response = await self._controller_request(
            messages.ListPartitionReassignments.key, body, _top_not_controller
        )
        top = _error(response.error_code, response.error_message, "list reassignments")
        if top is not None:
            raise top
        return {
            TopicPartition(t.name, p.partition_index): PartitionReassignment(
                tuple(p.replicas), tuple(p.adding_replicas), tuple(p.removing_replicas)
            )
            for t in response.topics
            for p in t.partitions
        }

    # --- ACLs (CreateAcls, DescribeAcls, DeleteAcls) -------------------------------------------

    async def create_acls(self, bindings: Sequence[AclBinding]) -> list[KafkaError | None]:
        """Create ACLs; per binding its error (None: created), e.g. ``SecurityDisabled`` from
        a broker without an authorizer, ``ClusterAuthorizationFailed`` without Alter on the
        cluster."""
        req = messages.CreateAclsRequest
        body = req(creations=[
            req.AclCreation(resource_type=int(b.resource_type), resource_name=b.name,
                            resource_pattern_type=int(b.pattern_type), principal=b.principal,
                            host=b.host, operation=int(b.operation),
                            permission_type=int(b.permission))
            for b in bindings
        ])  # fmt: skip
        conn = await self._cluster.any_connection()
        response = await conn.request(messages.CreateAcls.key, body)
        return [_error(r.error_code, r.error_message, "create ACL") for r in response.results]

    async def describe_acls(self, acl_filter: AclBindingFilter | None = None) -> list[AclBinding]:
        """The ACLs the filter matches (all without one); raises the broker's error."""
        f = acl_filter or AclBindingFilter()
        body = messages.DescribeAclsRequest(
            resource_type_filter=int(f.resource_type), resource_name_filter=f.name,
            pattern_type_filter=int(f.pattern_type), principal_filter=f.principal,
            host_filter=f.host, operation=int(f.operation), permission_type=int(f.permission),
        )  # fmt: skip
        conn = await self._cluster.any_connection()
        response = await conn.request(messages.DescribeAcls.key, body)
        error = _error(response.error_code, response.error_message, "describe ACLs")
        if error is not None:
            raise error
        return [_binding(a, r) for r in response.resources for a in r.acls]

    async def delete_acls(self, filters: Sequence[AclBindingFilter]) -> list[list[AclBinding]]:
        """Delete what each filter matches; per filter the ACLs deleted. Raises the first
        error of a filter or of a deletion."""
        req = messages.DeleteAclsRequest
        body = req(filters=[
            req.DeleteAclsFilter(
                resource_type_filter=int(f.resource_type), resource_name_filter=f.name,
                pattern_type_filter=int(f.pattern_type), principal_filter=f.principal,
                host_filter=f.host, operation=int(f.operation), permission_type=int(f.permission),
            )
            for f in filters
        ])  # fmt: skip
        conn = await self._cluster.any_connection()
        response = await conn.request(messages.DeleteAcls.key, body)
        out = []
        for result in response.filter_results:
            error = _error(result.error_code, result.error_message, "delete ACLs")
            if error is not None:
                raise error
            for match in result.matching_acls:
                error = _error(match.error_code, match.error_message, "delete ACL")
                if error is not None:
                    raise error
            out.append([_binding(a, a) for a in result.matching_acls])
        return out

    # --- SCRAM credentials (KIP-554) -------------------------------------------------------------

    async def describe_user_scram_credentials(
        self, users: Iterable[str] | None = None
    ) -> dict[str, dict[str, int]]:
        """``{user: {mechanism: iterations}}`` of the users named (every user with a
        credential when None). Raises the first error (``ResourceNotFound`` for a user
        without credentials)."""
        req = messages.DescribeUserScramCredentialsRequest
        body = req(users=None if users is None else [req.UserName(name=u) for u in users])
        conn = await self._cluster.any_connection()
        response = await conn.request(messages.DescribeUserScramCredentials.key, body)
        error = _error(response.error_code, response.error_message, "describe credentials")
        if error is not None:
            raise error
        out: dict[str, dict[str, int]] = {}
        for r in response.results:
            error = _error(r.error_code, r.error_message, f"describe credentials of {r.user!r}")
            if error is not None:
                raise error
            out[r.user] = {
                _SCRAM_NAMES.get(i.mechanism, str(i.mechanism)): i.iterations
                for i in r.credential_infos
            }
        return out

    async def alter_user_scram_credentials(
        self,
        upsertions: Iterable[tuple[str, str, str, int]] = (),
        deletions: Iterable[tuple[str, str]] = (),
    ) -> dict[str, KafkaError | None]:
        """Set ``(user, mechanism, password, iterations)`` credentials and delete ``(user,
        mechanism)`` ones; per user its error (None: done). The password never leaves this
        process: it is salted and hashed here (PBKDF2, a random 32-byte salt), as Kafka's
        admin client does."""
        req = messages.AlterUserScramCredentialsRequest
        ups = []
        for user, mechanism, password, iterations in upsertions:
            code, digest = _scram_mechanism(mechanism)
            salt = os.urandom(32)
            salted = hashlib.pbkdf2_hmac(digest, password.encode(), salt, iterations)
            ups.append(req.ScramCredentialUpsertion(name=user, mechanism=code,
                                                    iterations=iterations, salt=salt,
                                                    salted_password=salted))  # fmt: skip
        dels = [
            req.ScramCredentialDeletion(name=user, mechanism=_scram_mechanism(mech)[0])
            for user, mech in deletions
        ]
        conn = await self._cluster.any_connection()
        response = await conn.request(
            messages.AlterUserScramCredentials.key, req(deletions=dels, upsertions=ups)
        )
        return {
            r.user: _error(r.error_code, r.error_message, f"alter credentials of {r.user!r}")
            for r in response.results
        }

    # --- client quotas (KIP-546) ----------------------------------------------------------------

    async def describe_client_quotas(
        self, components: Iterable[tuple[str, str | None]] = (), *, strict: bool = False
    ) -> list[tuple[dict[str, str | None], dict[str, float]]]:
        """``[(entity, {key: value})]`` of the quota entities matching every ``(entity type,
        name)`` component (``user`` / ``client-id``; name None: the default entity); no
        components: every entity. ``strict``: only entities of exactly those types."""
        req = messages.DescribeClientQuotasRequest
        body = req(components=[
            req.ComponentData(entity_type=t, match_type=1 if n is None else 0, match=n)
            for t, n in components
        ], strict=strict)  # fmt: skip
        conn = await self._cluster.any_connection()
        response = await conn.request(messages.DescribeClientQuotas.key, body)
        error = _error(response.error_code, response.error_message, "describe client quotas")
        if error is not None:
            raise error
        return [
            ({e.entity_type: e.entity_name for e in entry.entity},
             {v.key: v.value for v in entry.values})
            for entry in response.entries or []
        ]  # fmt: skip

    async def alter_client_quotas(
        self,
        entity: Mapping[str, str | None],
        set_values: Mapping[str, float] | None = None,
        remove: Iterable[str] = (),
        *,
        validate_only: bool = False,
    ) -> None:
        """Set and remove quotas of one entity (``{"user": "alice", "client-id": None}``: user
        alice with the default client id). Raises the broker's error."""
        req = messages.AlterClientQuotasRequest
        ops = [
            req.OpData(key=k, value=float(v), remove=False) for k, v in (set_values or {}).items()
        ]
        ops += [req.OpData(key=k, value=0.0, remove=True) for k in remove]
        ents = [req.EntityData(entity_type=t, entity_name=n) for t, n in entity.items()]
        body = req(entries=[req.EntryData(entity=ents, ops=ops)], validate_only=validate_only)
        conn = await self._cluster.any_connection()
        response = await conn.request(messages.AlterClientQuotas.key, body)
        for entry in response.entries:
            error = _error(entry.error_code, entry.error_message, "alter client quotas")
            if error is not None:
                raise error

    # --- configs -----------------------------------------------------------------------------

    async def _config_connection(self, resource_type: ResourceType, name: str) -> Connection:
        """A broker resource is asked of that broker (as Kafka's admin client does: only it
        knows its dynamic configs); anything else of any broker."""
        if resource_type == ResourceType.BROKER and name:
            try:
                node = int(name)
            except ValueError:
                node = -1
            if node not in self._cluster.brokers:
                await self._cluster.refresh(())
            if node in self._cluster.brokers:
                return await self._cluster.connection(node)
        return await self._cluster.any_connection()

    async def describe_configs(
        self,
        resource_type: ResourceType,
        name: str,
        keys: Iterable[str] | None = None,
    ) -> list[ConfigEntry]:
        """DescribeConfigs of one resource (a topic, or a broker by node id; ``""`` is the
        cluster-wide broker default), every key or only ``keys``, with synonyms, sorted by name.
        Raises the resource's error (``UnknownTopicOrPartition``, ``InvalidRequest``, ...)."""
        req = messages.DescribeConfigsRequest
        body = req(
            resources=[
                req.DescribeConfigsResource(
                    resource_type=int(resource_type),
                    resource_name=name,
                    configuration_keys=None if keys is None else list(keys),
                )
            ],
            include_synonyms=True,
            include_documentation=False,
        )
        conn = await self._config_connection(resource_type, name)
        response = await conn.request(DESCRIBE_CONFIGS, body)
        (result,) = response.results
        what = f"describe configs of {resource_type.name.lower()} {name!r}"
        error = _error(result.error_code, result.error_message, what)
        if error is not None:
            raise error
        return sorted(
            (
                ConfigEntry(
                    name=c.name,
                    value=c.value,
                    source=ConfigSource.name_of(c.config_source),
                    read_only=c.read_only,
                    sensitive=c.is_sensitive,
                    synonyms=tuple(
                        ConfigSynonym(s.name, s.value, ConfigSource.name_of(s.source))
                        for s in c.synonyms
                    ),
                )
                for c in result.configs
            ),
            key=lambda e: e.name,
        )

    async def incremental_alter_configs(
        self,
        resource_type: ResourceType,
        name: str,
        *,
        set_values: Mapping[str, str] | None = None,
        delete: Iterable[str] = (),
        append: Mapping[str, str] | None = None,
        subtract: Mapping[str, str] | None = None,
        validate_only: bool = False,
    ) -> None:
        """IncrementalAlterConfigs of one resource: SET, DELETE (back to the default) and, for
        list configs, APPEND / SUBTRACT items; the other keys keep their values. The broker
        checks the whole result first: nothing changes when any of it is refused. Raises the
        error (``InvalidConfig`` naming the key and why, ``UnknownTopicOrPartition``,
        ``InvalidRequest`` for a key that cannot be altered)."""
        req = messages.IncrementalAlterConfigsRequest
        ops: list[tuple[str, AlterConfigOp, str | None]] = [
            *((k, AlterConfigOp.SET, v) for k, v in (set_values or {}).items()),
            *((k, AlterConfigOp.DELETE, None) for k in delete),
            *((k, AlterConfigOp.APPEND, v) for k, v in (append or {}).items()),
            *((k, AlterConfigOp.SUBTRACT, v) for k, v in (subtract or {}).items()),
        ]
        body = req(
            resources=[
                req.AlterConfigsResource(
                    resource_type=int(resource_type),
                    resource_name=name,
                    configs=[
                        req.AlterableConfig(name=k, config_operation=int(op), value=v)
                        for k, op, v in ops
                    ],
                )
            ],
            validate_only=validate_only,
        )
        conn = await self._config_connection(resource_type, name)
        response = await conn.request(INCREMENTAL_ALTER_CONFIGS, body)
        (result,) = response.responses
        what = f"alter configs of {resource_type.name.lower()} {name!r}"
        error = _error(result.error_code, result.error_message, what)
        if error is not None:
            raise error

    async def brokers(self) -> list[int]:
        """The node ids of the cluster's brokers (Metadata)."""
        await self._cluster.refresh(())
        return sorted(self._cluster.brokers)

    # --- offsets -----------------------------------------------------------------------------

    async def _offsets_consumer(self) -> Consumer:
        if self._consumer is None:
            self._consumer = Consumer(self._bootstrap, request_timeout_ms=self.request_timeout_ms)
            await self._consumer.start()
        return self._consumer

    async def list_offsets(
        self, timestamps: Mapping[TopicPartition, int]
    ) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        """ListOffsets: per partition the offset for a timestamp, or :data:`EARLIEST` (-2) /
        :data:`LATEST` (-1). None when no record has a timestamp >= the one given."""
        consumer = await self._offsets_consumer()
        return await consumer.offsets_for_times(dict(timestamps))

    async def partitions(self, topic: str) -> list[int]:
        """Partition ids of an existing topic."""
        parts = await self._cluster.wait_for_topic(
            topic, self.request_timeout_ms, wait_for_creation=False
        )
        return [p.partition for p in parts]

    async def delete_records(
        self, offsets: Mapping[TopicPartition, int]
    ) -> dict[TopicPartition, int]:
        """Delete records before ``offset`` per partition (-1: up to the high watermark).
        Returns the new log start offsets; raises the first partition error."""
        req = messages.DeleteRecordsRequest
        by_topic: dict[str, list[tuple[int, int]]] = {}
        for tp, off in offsets.items():
            by_topic.setdefault(tp.topic, []).append((tp.partition, off))
        body = req(
            topics=[
                req.DeleteRecordsTopic(
                    name=name,
                    partitions=[
                        req.DeleteRecordsTopic.DeleteRecordsPartition(partition_index=p, offset=o)
                        for p, o in parts
                    ],
                )
                for name, parts in by_topic.items()
            ],
            timeout_ms=self.request_timeout_ms,
        )
        conn = await self._cluster.any_connection()
        response = await conn.request(DELETE_RECORDS, body)
        out = {}
        for t in response.topics:
            for p in t.partitions:
                error = _error(p.error_code, None, f"delete records {t.name}-{p.partition_index}")
                if error is not None:
                    raise error
                out[TopicPartition(t.name, p.partition_index)] = p.low_watermark
        return out
