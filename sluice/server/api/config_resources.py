"""DescribeConfigs, AlterConfigs and IncrementalAlterConfigs: topic and broker configs.

Resources (Kafka's ``ConfigResource.Type``):

* **TOPIC** (2): every topic key of :data:`sluice.server.storage.log_config.TOPIC_CONFIG`, with
  its effective value and where it comes from, as Kafka's ``ConfigHelper`` reports it: the
  topic's own override (TOPIC_CONFIG), else a broker key given in server.properties
  (STATIC_BROKER_CONFIG), else the default (DEFAULT_CONFIG); the synonyms list those sources,
  most specific first. AlterConfigs replaces the topic's overrides with the given set;
  IncrementalAlterConfigs edits them (SET, DELETE, and APPEND/SUBTRACT for list keys). Either
  validates the whole resulting set first (an unknown key, a bad value or one Sluice cannot
  honour is INVALID_CONFIG with the reason) and then persists it and applies it to the open
  logs (``LogManager.alter_topic_config``); ``validate_only`` stops after the validation.
* **BROKER** (4): name this node id, or empty for the cluster-wide default. Described: every
  broker key (:data:`sluice.server.config.BROKER_CONFIG`) with its effective value, source
  (DYNAMIC_BROKER_CONFIG, DYNAMIC_DEFAULT_BROKER_CONFIG, STATIC_BROKER_CONFIG,
  DEFAULT_CONFIG) and synonyms, read-only unless Sluice changes it live; the default resource
  lists only the cluster's dynamic default configs, as Kafka does. Altered: the dynamic
  configs of :mod:`sluice.server.api.broker_configs` (validated there, then written to the
  entity configs, from which every broker concerned applies them).

* **BROKER_LOGGER** (8, Kafka's ``broker-loggers``): name this node id. Described: every
  logger (:func:`sluice.server.logging.logger_levels`, ``root`` first) with its level, source
  DYNAMIC_BROKER_LOGGER_CONFIG. IncrementalAlterConfigs SETs a level (TRACE, DEBUG, INFO, WARN,
  ERROR, FATAL) or DELETEs a logger's own (back to inheriting; not root's), live and not kept
  across a restart, with Kafka's checks and messages (``validateLogLevelConfigs``); AlterConfigs
  does not apply to it (INVALID_REQUEST, as Kafka).

Other resource types (groups, client metrics) answer INVALID_REQUEST.
Runs on the event-loop thread, called from the handlers; writes only through the LogManager.

Topic overrides are read and written through the metadata view's
:class:`~sluice.server.metadata.view.TopicConfigStore`: standalone the LogManager's, in a
cluster ZooKeeper's (``/config/topics/<t>``, Kafka's layout; any broker answers for any topic,
and every broker hosting the topic applies a change from its watch). An alter that writes
returns a coroutine for the response; every resource is validated before any is written.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, TypeVar

from sluice.protocol import errors
from sluice.protocol import messages as m
from sluice.protocol.acl import AclOperation
from sluice.protocol.acl import ResourceType as AclResource
from sluice.protocol.config_resources import AlterConfigOp, ConfigSource, ResourceType
from sluice.server.api.broker_configs import DynamicBrokerConfig
from sluice.server.config_def import Type
from sluice.server.logging import (
    KAFKA_LEVELS,
    ROOT_LOGGER,
    get_logger,
    logger_exists,
    logger_levels,
    set_logger_level,
)
from sluice.server.metadata.view import LocalTopicConfigs, TopicConfigStore
from sluice.server.security.acl import CLUSTER_NAME
from sluice.server.storage.log_config import (
    SERVER_LOG_CONFIG,
    TOPIC_DOCS,
    TOPIC_KEYS,
    LogConfig,
    broker_synonyms,
    config_type,
)

if TYPE_CHECKING:
    from collections.abc import Awaitable

    from sluice.server.config import Config
    from sluice.server.storage.log_manager import LogManager

log = get_logger("sluice.configs")

RESOURCE_TOPIC, RESOURCE_BROKER = ResourceType.TOPIC, ResourceType.BROKER
RESOURCE_BROKER_LOGGER = ResourceType.BROKER_LOGGER

#: One resource's alter result: (error code, message, (resource type, name, configs to write)).
_Outcome = tuple[int, "str | None", "tuple[int, str, dict[str, str]] | None"]
_R = TypeVar("_R")

SOURCE_TOPIC_CONFIG = ConfigSource.DYNAMIC_TOPIC_CONFIG
SOURCE_STATIC_BROKER_CONFIG = ConfigSource.STATIC_BROKER_CONFIG
SOURCE_DEFAULT_CONFIG = ConfigSource.DEFAULT_CONFIG
SOURCE_DYNAMIC_DEFAULT = ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG
_BROKER_SOURCE_ORDER = (ConfigSource.DYNAMIC_BROKER_CONFIG, SOURCE_DYNAMIC_DEFAULT,
                        SOURCE_STATIC_BROKER_CONFIG)  # fmt: skip

OP_SET, OP_DELETE = AlterConfigOp.SET, AlterConfigOp.DELETE
OP_APPEND, OP_SUBTRACT = AlterConfigOp.APPEND, AlterConfigOp.SUBTRACT

_LIST_TYPE = Type.LIST  # the keys APPEND / SUBTRACT apply to


def _allow_all(operation: AclOperation, resource_type: AclResource, name: str) -> None:
    return None


class ConfigResources:
    """The config side of the admin API over the broker's Config and the LogManager."""

    def __init__(
        self,
        config: Config,
        logs: LogManager,
        topic_configs: Callable[[], TopicConfigStore] | None = None,
    ) -> None:
        self.config = config
        self.logs = logs
        #: Where topic overrides live now: the handlers' metadata view (the LogManager's
        #: standalone, ZooKeeper's once the broker joined a cluster); default the LogManager's.
        if topic_configs is None:
            local = LocalTopicConfigs(logs)
            topic_configs = lambda: local  # noqa: E731
        self.topic_configs = topic_configs
        #: The handlers' authorization check (raises *_AUTHORIZATION_FAILED): DescribeConfigs /
        #: AlterConfigs on the topic, or on the cluster for a broker's configs.
        self.check: Callable[[AclOperation, AclResource, str], None] = _allow_all
        #: Dynamic broker configs (the ``Server`` sets this broker's; none: static only).
        self.dynamic = DynamicBrokerConfig(config)

    def _authorize(self, operation: AclOperation, resource_type: int, name: str) -> None:
        if resource_type == RESOURCE_TOPIC:
            self.check(operation, AclResource.TOPIC, name)
        elif resource_type in (RESOURCE_BROKER, RESOURCE_BROKER_LOGGER):
            self.check(operation, AclResource.CLUSTER, CLUSTER_NAME)

    def _overrides(self, topic: str) -> dict[str, str]:
        """A topic's overrides; UnknownTopicOrPartition if it does not exist."""
        return self.topic_configs().topic_overrides(topic)

    # --- DescribeConfigs (32) ------------------------------------------------------------------

    def describe(self, body: m.DescribeConfigsRequest, version: int) -> m.DescribeConfigsResponse:
        result_cls = m.DescribeConfigsResponse.DescribeConfigsResult
        results = []
        for res in body.resources:
            code, message = 0, None
            entries: list[m.DescribeConfigsResponse.DescribeConfigsResourceResult] = []
            try:
                self._authorize(AclOperation.DESCRIBE_CONFIGS, res.resource_type, res.resource_name)
                wanted = None if res.configuration_keys is None else set(res.configuration_keys)
                if res.resource_type == RESOURCE_TOPIC:
                    entries = self._describe_topic(res.resource_name, wanted, body, version)
                elif res.resource_type == RESOURCE_BROKER:
                    entries = self._describe_broker(res.resource_name, wanted, body, version)
                elif res.resource_type == RESOURCE_BROKER_LOGGER:
                    entries = self._describe_loggers(res.resource_name, wanted, body, version)
                else:
                    raise errors.InvalidRequest(
                        f"resource type {res.resource_type} is not supported by Sluice"
                    )
            except errors.KafkaError as exc:
                code, message, entries = exc.code, str(exc.args[0]), []
            results.append(
                result_cls(
                    error_code=code,
                    error_message=message,
                    resource_type=res.resource_type,
                    resource_name=res.resource_name,
                    configs=entries,
                )
            )
        return m.DescribeConfigsResponse(throttle_time_ms=0, results=results)

    def _describe_topic(
        self, topic: str, wanted: set[str] | None, body: m.DescribeConfigsRequest, version: int
    ) -> list[m.DescribeConfigsResponse.DescribeConfigsResourceResult]:
        overrides = self._overrides(topic)  # UnknownTopicOrPartition if none
        values = LogConfig.from_properties(overrides, self.logs.default_config).to_properties()
        synonym_cls = m.DescribeConfigsResponse.DescribeConfigsSynonym
        out = []
        for key in TOPIC_KEYS:
            if wanted is not None and key not in wanted:
                continue
            synonyms = []
            if key in overrides:
                synonyms.append(
                    synonym_cls(name=key, value=values[key], source=SOURCE_TOPIC_CONFIG)
                )
            names = broker_synonyms(key)
            # Kafka's ConfigHelper order: by source (this broker's dynamic, the dynamic
            # default, static), each in the synonyms' order (most specific first).
            found = [(name, value, source) for name in names
                     for value, source in self.dynamic.synonyms(name)]  # fmt: skip
            found.sort(key=lambda f: _BROKER_SOURCE_ORDER.index(f[2]))  # stable
            synonyms += [synonym_cls(name=n, value=v, source=src) for n, v, src in found]
            # Then each broker key's own declared default, as the BROKER resource lists it
            # (Kafka's staticDefaultConfigs: log.retention.hours=168, not a derived
            # log.retention.ms); a key declared without one (log.retention.ms) has none.
            for name in names:
                default = SERVER_LOG_CONFIG[name].default
                if default is not None:
                    synonyms.append(
                        synonym_cls(name=name, value=default, source=SOURCE_DEFAULT_CONFIG)
                    )
            source = synonyms[0].source if synonyms else SOURCE_DEFAULT_CONFIG
            out.append(self._entry(key, values[key], source, False, synonyms, config_type(key),
                                   TOPIC_DOCS[key], body, version))  # fmt: skip
        return out

    def _describe_broker(
        self, name: str, wanted: set[str] | None, body: m.DescribeConfigsRequest, version: int
    ) -> list[m.DescribeConfigsResponse.DescribeConfigsResourceResult]:
        from sluice.server.config import BROKER_CONFIG

        self._check_broker_name(name, describe=True)
        synonym_cls = m.DescribeConfigsResponse.DescribeConfigsSynonym
        dynamic = self.dynamic
        default_only = dynamic.dynamic("") if not name else None
        out = []
        for key in BROKER_CONFIG:
            if wanted is not None and key.name not in wanted:
                continue
            if default_only is not None and key.name not in default_only:
                continue  # the default resource: its dynamic configs alone (Kafka's)
            secret = key.type == Type.PASSWORD  # Kafka never sends a password's value
            found = dynamic.synonyms(key.name)
            if default_only is not None:  # Kafka's perBrokerConfig = false
                found = [(v, s) for v, s in found if s != ConfigSource.DYNAMIC_BROKER_CONFIG]
            synonyms = [synonym_cls(name=key.name, value=None if secret else v, source=s)
                        for v, s in found]  # fmt: skip
            if key.default is not None or not synonyms:
                synonyms.append(synonym_cls(name=key.name, value=None if secret else key.default,
                                            source=SOURCE_DEFAULT_CONFIG))  # fmt: skip
            value, source = synonyms[0].value, synonyms[0].source
            out.append(self._entry(key.name, value, source, not key.dynamic, synonyms, key.type,
                                   key.doc, body, version))  # fmt: skip
        return out

    def _check_logger_resource(self, name: str) -> None:
        """Kafka's ConfigHelper checks of a BROKER_LOGGER name."""
        if not name:
            raise errors.InvalidRequest("Broker id must not be empty")
        if name != str(self.config.node_id):
            raise errors.InvalidRequest(
                f"Unexpected broker id, expected {self.config.node_id} but received {name}"
            )

    def _describe_loggers(
        self, name: str, wanted: set[str] | None, body: m.DescribeConfigsRequest, version: int
    ) -> list[m.DescribeConfigsResponse.DescribeConfigsResourceResult]:
        self._check_logger_resource(name)
        return [
            self._entry(logger, level, ConfigSource.DYNAMIC_BROKER_LOGGER_CONFIG, False, [], 0,
                        "", body, version)
            for logger, level in logger_levels().items()
            if wanted is None or logger in wanted
        ]  # fmt: skip

    def _alter_loggers(
        self,
        name: str,
        configs: list[m.IncrementalAlterConfigsRequest.AlterConfigsResource.AlterableConfig],
        validate_only: bool,
    ) -> _Outcome:
        """Kafka's ``validateLogLevelConfigs`` then ``Log4jController`` (module docstring)."""
        resource = f"ConfigResource(type=BROKER_LOGGER, name='{name}')"
        try:
            self._authorize(AclOperation.ALTER_CONFIGS, RESOURCE_BROKER_LOGGER, name)
            self._check_logger_resource(name)
            for c in configs:
                op = c.config_operation
                if op in (OP_SET, OP_DELETE) and not logger_exists(c.name):
                    raise errors.InvalidConfig(f"Invalid config value for resource {resource}: "
                                               f"Logger {c.name} does not exist!")  # fmt: skip
                if op == OP_SET and c.value not in KAFKA_LEVELS:
                    raise errors.InvalidConfig(
                        f"Invalid config value for resource {resource}: Cannot set the log "
                        f"level of {c.name} to {c.value} as it is not a supported log level. "
                        f"Valid log levels are {', '.join(KAFKA_LEVELS)}"
                    )
                if op == OP_DELETE and c.name == ROOT_LOGGER:
                    raise errors.InvalidRequest(
                        f"Removing the log level of the {ROOT_LOGGER} logger is not allowed"
                    )
                if op in (OP_APPEND, OP_SUBTRACT):
                    what = AlterConfigOp(op).name
                    raise errors.InvalidRequest(
                        f"{what} operation is not allowed for the BROKER_LOGGER resource"
                    )
                if op not in (OP_SET, OP_DELETE):
                    raise errors.InvalidRequest(f"unknown config operation {op} for {c.name!r}")
            if not validate_only:
                for c in configs:
                    set_logger_level(c.name, c.value if c.config_operation == OP_SET else None)
                    log.info("log level changed", logger=c.name,
                             level=logger_levels()[c.name])  # fmt: skip
        except errors.KafkaError as exc:
            return exc.code, str(exc.args[0]), None
        return 0, None, None

    def _check_broker_name(self, name: str, *, describe: bool = False) -> None:
        """Kafka's refusal of another broker's id (ConfigHelper / ZkAdminManager messages)."""
        if name not in ("", str(self.config.node_id)):
            expected = f"{self.config.node_id}{' or empty string' if describe else ''}"
            raise errors.InvalidRequest(
                f"Unexpected broker id, expected {expected}, but received {name}"
            )

    @staticmethod
    def _entry(
        name: str,
        value: str | None,
        source: int,
        read_only: bool,
        synonyms: list[m.DescribeConfigsResponse.DescribeConfigsSynonym],
        type_: int,
        doc: str,
        body: m.DescribeConfigsRequest,
        version: int,
    ) -> m.DescribeConfigsResponse.DescribeConfigsResourceResult:
        return m.DescribeConfigsResponse.DescribeConfigsResourceResult(
            name=name,
            value=value,
            read_only=read_only,
            is_default=source == SOURCE_DEFAULT_CONFIG,  # v0's flag
            config_source=source,
            is_sensitive=type_ == Type.PASSWORD,
            synonyms=synonyms if version >= 1 and body.include_synonyms else [],
            config_type=type_,
            documentation=doc if body.include_documentation else None,
        )

    # --- AlterConfigs (33) / IncrementalAlterConfigs (44) --------------------------------------

    def alter(
        self, body: m.AlterConfigsRequest
    ) -> m.AlterConfigsResponse | Awaitable[m.AlterConfigsResponse]:
        """Replace each resource's overrides with the configs given (null values ignored)."""
        outcomes = [
            self._apply(
                res.resource_type,
                res.resource_name,
                functools.partial(
                    _replace, given={c.name: c.value for c in res.configs if c.value is not None}
                ),
                body.validate_only,
            )
            for res in body.resources
        ]

        def respond(codes: list[tuple[int, str | None]]) -> m.AlterConfigsResponse:
            resp_cls = m.AlterConfigsResponse.AlterConfigsResourceResponse
            return m.AlterConfigsResponse(throttle_time_ms=0, responses=[
                resp_cls(error_code=code, error_message=message, resource_type=res.resource_type,
                         resource_name=res.resource_name)
                for res, (code, message) in zip(body.resources, codes, strict=True)
            ])  # fmt: skip

        return self._finish(outcomes, respond)

    def incremental_alter(
        self, body: m.IncrementalAlterConfigsRequest
    ) -> m.IncrementalAlterConfigsResponse | Awaitable[m.IncrementalAlterConfigsResponse]:
        outcomes = [
            self._alter_loggers(res.resource_name, res.configs, body.validate_only)
            if res.resource_type == RESOURCE_BROKER_LOGGER
            else self._apply(
                res.resource_type,
                res.resource_name,
                functools.partial(_edit, configs=res.configs),
                body.validate_only,
            )
            for res in body.resources
        ]

        def respond(codes: list[tuple[int, str | None]]) -> m.IncrementalAlterConfigsResponse:
            resp_cls = m.IncrementalAlterConfigsResponse.AlterConfigsResourceResponse
            return m.IncrementalAlterConfigsResponse(throttle_time_ms=0, responses=[
                resp_cls(error_code=code, error_message=message, resource_type=res.resource_type,
                         resource_name=res.resource_name)
                for res, (code, message) in zip(body.resources, codes, strict=True)
            ])  # fmt: skip

        return self._finish(outcomes, respond)

    def _finish(
        self, outcomes: list[_Outcome], respond: Callable[[list[tuple[int, str | None]]], _R]
    ) -> _R | Awaitable[_R]:
        """The response now, or (with writes to make) a coroutine for it."""
        if not any(write for _, _, write in outcomes):
            return respond([(code, message) for code, message, _ in outcomes])
        store = self.topic_configs()

        async def written() -> _R:
            codes = []
            for code, message, write in outcomes:
                if write is not None:
                    resource_type, name, configs = write
                    try:
                        if resource_type == RESOURCE_BROKER:
                            await self.dynamic.write(name, configs)
                        else:
                            await store.alter_topic_config(name, configs)
                    except errors.KafkaError as exc:
                        code, message = exc.code, str(exc.args[0])
                    except Exception as exc:
                        log.warning("altering configs failed", resource_type=resource_type,
                                    name=name, error=repr(exc))  # fmt: skip
                        code, message = errors.UnknownServerError.code, repr(exc)
                codes.append((code, message))
            return respond(codes)

        return written()

    def _apply(
        self,
        resource_type: int,
        name: str,
        new_overrides: Callable[[Mapping[str, str]], dict[str, str]],
        validate_only: bool,
    ) -> _Outcome:
        """(error code, message, overrides to write) of altering one resource;
        ``new_overrides`` maps the topic's current overrides to the wanted ones (raising
        KafkaError for a bad request)."""
        try:
            self._authorize(AclOperation.ALTER_CONFIGS, resource_type, name)
            if resource_type == RESOURCE_BROKER:
                self._check_broker_name(name)
                wanted = new_overrides(self.dynamic.dynamic(name))
                self.dynamic.validate(name, wanted)
                return 0, None, None if validate_only else (resource_type, name, wanted)
            if resource_type == RESOURCE_BROKER_LOGGER:  # (AlterConfigs: Kafka's refusal)
                raise errors.InvalidRequest(
                    "AlterConfigs is only supported for topics and brokers, but resource type "
                    "is BROKER_LOGGER"
                )
            if resource_type != RESOURCE_TOPIC:
                raise errors.InvalidRequest(
                    f"resource type {resource_type} is not supported by Sluice"
                )
            current = self._overrides(name)  # UnknownTopicOrPartition if none
            wanted = new_overrides(current)
            LogConfig.from_properties(wanted, self.logs.default_config)  # InvalidConfig
            if not validate_only:
                return 0, None, (resource_type, name, wanted)
        except errors.KafkaError as exc:
            return exc.code, str(exc.args[0]), None
        return 0, None, None


def _replace(_current: Mapping[str, str], given: dict[str, str]) -> dict[str, str]:
    """AlterConfigs: the given set is the new set of overrides."""
    return dict(given)


def _edit(
    current: Mapping[str, str],
    configs: list[m.IncrementalAlterConfigsRequest.AlterConfigsResource.AlterableConfig],
) -> dict[str, str]:
    """Kafka's ``prepareIncrementalConfigs``: SET / DELETE any key, APPEND / SUBTRACT items of a
    list key (``cleanup.policy``, the throttled-replica lists)."""
    names = [c.name for c in configs]
    if len(set(names)) != len(names):
        raise errors.InvalidRequest("duplicate config keys in one resource")
    result = dict(current)
    defaults = LogConfig().to_properties()
    for c in configs:
        op = c.config_operation
        if op == OP_SET:
            if c.value is None:
                raise errors.InvalidRequest(f"null value for config {c.name!r}")
            result[c.name] = c.value
        elif op == OP_DELETE:
            result.pop(c.name, None)
        elif op in (OP_APPEND, OP_SUBTRACT):
            if c.name not in TOPIC_KEYS or config_type(c.name) != _LIST_TYPE:
                raise errors.InvalidConfig(
                    f"{c.name!r}: APPEND and SUBTRACT apply only to list configs"
                )
            base = result.get(c.name, defaults[c.name])
            items = [x for x in base.split(",") if x]
            given = [x.strip() for x in (c.value or "").split(",") if x.strip()]
            if op == OP_APPEND:
                items += [x for x in given if x not in items]
            else:
                items = [x for x in items if x not in given]
            result[c.name] = ",".join(items)
        else:
            raise errors.InvalidRequest(f"unknown config operation {op} for {c.name!r}")
    return result
