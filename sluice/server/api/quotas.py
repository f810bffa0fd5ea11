"""DescribeClientQuotas (48) and AlterClientQuotas (49), as Kafka 3.9's ``ZkAdminManager`` answers
them in ZooKeeper mode.

The quotas are entity configs (:mod:`sluice.server.security.entity_configs`): a quota entity is a
user, a client id, or both (``user`` / ``client-id`` in the request; a null name is the default
entity, ``<default>`` in the entity path), stored at ``users/<user>``, ``clients/<client-id>`` or
``users/<user>/clients/<client-id>`` -- in ZooKeeper in a cluster (every broker applies a change
from its notice), in the data directory standalone. What the brokers enforce is
:class:`~sluice.server.network.quotas.ClientQuotas`.

* Keys and types are Kafka's (``QuotaConfigs``): ``producer_byte_rate`` and
  ``consumer_byte_rate`` are longs (a value that is not whole is INVALID_REQUEST "must be a
  LONG value"), ``request_percentage`` a double, written as Java writes them (``1024``,
  ``200.0``). Another key is INVALID_REQUEST "Invalid configuration key".
* A user's znode also holds its SCRAM credentials: Describe reports only the quota keys, and
  Alter changes only the keys it names.
* IP quotas (``connection_creation_rate``, entity ``ip``) are not implemented: altering one is
  INVALID_REQUEST saying so; a Describe filter on ``ip`` finds nothing.
* Describe needs DescribeConfigs on the cluster, Alter AlterConfigs (Kafka's table); without,
  CLUSTER_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

from collections.abc import Awaitable, Iterable, Mapping
from typing import TYPE_CHECKING

from sluice.protocol import errors
from sluice.protocol import messages as m
from sluice.protocol.messages import RequestHeader
from sluice.server.api.base import ApiBase
from sluice.server.api.registry import Answer
from sluice.server.logging import get_logger
from sluice.server.security.acl import AclOperation
from sluice.server.security.entity_configs import DEFAULT_ENTITY, EntityConfigs
from sluice.server.security.notifications import desanitize, sanitize

if TYPE_CHECKING:
    pass

log = get_logger("sluice.quotas")

USER, CLIENT_ID, IP = "user", "client-id", "ip"
#: Kafka's ``QuotaConfigs`` client/user keys and their ConfigDef types.
QUOTA_TYPES = {
    "producer_byte_rate": "LONG",
    "consumer_byte_rate": "LONG",
    "request_percentage": "DOUBLE",
}
MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2
_EPSILON = 1e-6
_CLUSTER_DENIED = errors.ClusterAuthorizationFailed.code

#: A quota entity: entity type -> name (None: the default entity).
Entity = dict[str, "str | None"]
#: A describe filter component: (wanted?, name) -- ``(True, n)`` exact or default (n None),
#: ``(False, None)`` any specified name.
_Match = tuple[bool, "str | None"]


def _sanitized(name: str | None) -> str:
    return DEFAULT_ENTITY if name is None else sanitize(name)


def _desanitized(part: str) -> str | None:
    return None if part == DEFAULT_ENTITY else desanitize(part)


def entity_path(entity: Mapping[str, str | None]) -> str:
    """Kafka's ``parseAndSanitizeQuotaEntity``: the entity path of a quota entity, or
    InvalidRequest with Kafka's message."""
    if not entity:
        raise errors.InvalidRequest("Invalid empty client quota entity")
    for entity_type, name in entity.items():
        if entity_type not in (USER, CLIENT_ID, IP):
            raise errors.InvalidRequest(f"Unhandled client quota entity type: {entity_type}")
        if name is not None and not name:
            raise errors.InvalidRequest(f"Empty {entity_type} not supported")
    if IP in entity:
        if len(entity) > 1:
            raise errors.InvalidRequest(
                "Invalid quota entity combination, IP entity should not be used with "
                "user/client ID entity."
            )
        raise errors.InvalidRequest(
            "IP quotas (connection_creation_rate) are not supported by Sluice"
        )
    if USER in entity and CLIENT_ID in entity:
        return f"users/{_sanitized(entity[USER])}/clients/{_sanitized(entity[CLIENT_ID])}"
    if USER in entity:
        return f"users/{_sanitized(entity[USER])}"
    return f"clients/{_sanitized(entity[CLIENT_ID])}"


def entity_of_path(path: str) -> Entity | None:
    """The quota entity of an entity path; None for other entities (brokers)."""
    parts = path.split("/")
    if len(parts) == 2 and parts[0] == "users":
        return {USER: _desanitized(parts[1])}
    if len(parts) == 2 and parts[0] == "clients":
        return {CLIENT_ID: _desanitized(parts[1])}
    if len(parts) == 4 and parts[0] == "users" and parts[2] == "clients":
        return {USER: _desanitized(parts[1]), CLIENT_ID: _desanitized(parts[3])}
    return None


def quota_values(config: Mapping[str, str]) -> dict[str, float]:
    """The quota keys of an entity config as numbers (a value that is no number is left out)."""
    out = {}
    for key in QUOTA_TYPES:
        if key in config:
            try:
                out[key] = float(config[key])
            except ValueError:
                continue
    return out


def _java_text(key: str, value: float) -> str:
    """A quota value as Kafka stores it (``props.setProperty(key, value.toString)``)."""
    if QUOTA_TYPES[key] == "DOUBLE":
        text = repr(float(value))
        return text if "e" not in text else str(value)
    whole = int(value + _EPSILON)
    if abs(whole - value) > _EPSILON:
        raise errors.InvalidRequest(f"Configuration {key} must be a LONG value")
    return str(whole)


def describe(
    store: EntityConfigs, components: Iterable[tuple[str, _Match]], strict: bool
) -> list[tuple[Entity, dict[str, float]]]:
    """Kafka's ``describeClientQuotas`` over the store's entities."""
    wanted: dict[str, _Match] = {}
    for entity_type, match in components:
        if entity_type in (USER, CLIENT_ID, IP):
            if entity_type in wanted:
                kind = "client" if entity_type == CLIENT_ID else entity_type
                raise errors.InvalidRequest(f"Duplicate {kind} filter component entity type")
            wanted[entity_type] = match
        elif entity_type == "":
            raise errors.InvalidRequest("Unexpected empty filter component entity type")
        else:
            raise errors.UnsupportedVersion(f"Custom entity type '{entity_type}' not supported")
    if IP in wanted:
        if USER in wanted or CLIENT_ID in wanted:
            raise errors.InvalidRequest(
                "Invalid entity filter component combination, IP filter component should not "
                "be used with user or clientId filter component."
            )
        return []  # no IP quota can exist (module docstring)

    def matches(entity_type: str, entity: Entity) -> bool:
        match = wanted.get(entity_type)
        if match is None:
            return entity_type not in entity or not strict
        exact, name = match
        if exact:
            return entity_type in entity and entity[entity_type] == name
        return entity_type in entity

    out = []
    for path, config in sorted(store.items()):
        entity = entity_of_path(path)
        if entity is None:
            continue
        values = quota_values(config)
        if values and matches(USER, entity) and matches(CLIENT_ID, entity):
            out.append((entity, values))
    return out


async def alter(
    store: EntityConfigs, entries: list[m.AlterClientQuotasRequest.EntryData], validate_only: bool
) -> list[tuple[int, str | None]]:
    """Kafka's ``alterClientQuotas``: one (error code, message) per entry; each entry is
    validated whole and then written (one znode and one notice)."""
    results: list[tuple[int, str | None]] = []
    for entry in entries:
        try:
            entity: Entity = {}
            for e in entry.entity:
                if e.entity_type in entity:
                    raise errors.InvalidRequest(f"Duplicate {e.entity_type} entity type")
                entity[e.entity_type] = e.entity_name
            path = entity_path(entity)
            upserts: dict[str, str] = {}
            deletions: list[str] = []
            for op in entry.ops:
                if op.remove:
                    deletions.append(op.key)
                    upserts.pop(op.key, None)
                    continue
                if op.key not in QUOTA_TYPES:
                    raise errors.InvalidRequest(f"Invalid configuration key {op.key}")
                upserts[op.key] = _java_text(op.key, op.value)
            if not validate_only:
                await store.alter(path, upserts, deletions)
            results.append((0, None))
        except errors.KafkaError as exc:
            results.append((exc.code, str(exc.args[0])))
        except Exception as exc:  # a ZooKeeper failure: this entry fails, the rest go on
            log.warning("altering a client quota failed", error=repr(exc))
            results.append((errors.UnknownServerError.code, repr(exc)))
    return results


class ClientQuotaApis(ApiBase):
    """This family's handlers (module docstring); mixed into ``Handlers``."""

    #: Where quota entities live (set by ``Server``: the data directory's file standalone,
    #: ZooKeeper in a cluster); until then an empty in-memory one.
    entity_configs: EntityConfigs = EntityConfigs()

    def describe_client_quotas(
        self, header: RequestHeader, body: m.DescribeClientQuotasRequest
    ) -> m.DescribeClientQuotasResponse:
        R = m.DescribeClientQuotasResponse
        if not self.allowed(AclOperation.DESCRIBE_CONFIGS):
            return R(throttle_time_ms=0, error_code=_CLUSTER_DENIED,
                     error_message="Cluster authorization failed.", entries=None)  # fmt: skip
        components = [
            (c.entity_type, (c.match_type != MATCH_SPECIFIED,
                             c.match if c.match_type == MATCH_EXACT else None))
            for c in body.components
        ]  # fmt: skip
        try:
            found = describe(self.entity_configs, components, body.strict)
        except errors.KafkaError as exc:
            return R(throttle_time_ms=0, error_code=exc.code, error_message=str(exc.args[0]),
                     entries=None)  # fmt: skip
        return R(throttle_time_ms=0, error_code=0, entries=[
            R.EntryData(
                entity=[R.EntityData(entity_type=t, entity_name=n) for t, n in entity.items()],
                values=[R.ValueData(key=k, value=v) for k, v in values.items()],
            )
            for entity, values in found
        ])  # fmt: skip

    def alter_client_quotas(
        self, header: RequestHeader, body: m.AlterClientQuotasRequest
    ) -> Answer[m.AlterClientQuotasResponse]:
        R = m.AlterClientQuotasResponse

        def respond(codes: list[tuple[int, str | None]]) -> m.AlterClientQuotasResponse:
            return R(throttle_time_ms=0, entries=[
                R.EntryData(error_code=code, error_message=message, entity=[
                    R.EntityData(entity_type=e.entity_type, entity_name=e.entity_name)
                    for e in entry.entity
                ])
                for entry, (code, message) in zip(body.entries, codes, strict=True)
            ])  # fmt: skip

        if not self.allowed(AclOperation.ALTER_CONFIGS):
            return respond([(_CLUSTER_DENIED, "Cluster authorization failed.")] * len(body.entries))

        async def altered() -> m.AlterClientQuotasResponse:
            return respond(await alter(self.entity_configs, body.entries, body.validate_only))

        result: Awaitable[m.AlterClientQuotasResponse] = altered()
        return result
