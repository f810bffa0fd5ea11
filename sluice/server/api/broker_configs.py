"""Dynamic broker configs, as Kafka's ``DynamicBrokerConfig`` in ZooKeeper mode.

A broker's effective config is, key by key, the first of: its own dynamic config (entity
``brokers/<id>``: source DYNAMIC_BROKER_CONFIG), the cluster's dynamic default
(``brokers/<default>``: DYNAMIC_DEFAULT_BROKER_CONFIG), server.properties
(STATIC_BROKER_CONFIG), the declared default (DEFAULT_CONFIG). The dynamic configs are entity
configs (:mod:`sluice.server.security.entity_configs`): ``/config/brokers/<id|<default>>`` in
ZooKeeper with Kafka's change notices, so a default set through any broker reaches every broker;
a standalone broker keeps them in its data directory.

Which keys may change is declared with the key (:class:`~sluice.server.config_def.ConfigKey`
``dynamic``): the keys Kafka reconfigures at run time *and* Sluice applies live -- the broker
defaults of the topic keys (``log.retention.ms``, ``log.segment.bytes``, ``message.max.bytes``,
``log.cleanup.policy``, ``min.insync.replicas``...: the log manager's default, applied to every
topic without an override of its own), ``producer.id.expiration.ms`` (the logs' shared
``ProducerStateManagerConfig``, read at each expiration check and snapshot load) and the
connection bounds (``max.connections``, ``max.connections.per.ip``,
``max.connections.per.ip.overrides``). Refused with Kafka's
INVALID_CONFIG "Invalid config value for resource ConfigResource(type=BROKER, name='0'): ..."
(its ``ConfigException``, wrapped) are: a key Kafka never changes at run time ("Cannot update
these configs dynamically"), one Kafka changes but Sluice does not apply live (the cleaner's
thread and buffer keys, the listeners and TLS stores: "Sluice cannot update these configs
dynamically"), an unknown key, and a bad value (the key's validator's reason, then the
topic-default rules of :class:`~sluice.server.storage.log_config.LogConfig`).

The appliers (``appliers``, registered by the ``Server``) get the whole effective config after
every change of this broker's or the default entity.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING

from sluice.protocol import errors
from sluice.protocol.config_resources import ConfigSource
from sluice.server.config_def import ConfigError, ConfigKey
from sluice.server.logging import get_logger
from sluice.server.security.entity_configs import DEFAULT_ENTITY, EntityConfigs
from sluice.server.storage.log_config import SERVER_LOG_CONFIG, LogConfig

if TYPE_CHECKING:
    from sluice.server.config import Config

log = get_logger("sluice.configs")

#: Keys Kafka reconfigures at run time (``DynamicBrokerConfig.AllDynamicConfigs``) that Sluice
#: declares but does not apply live: refused with their own message.
KAFKA_DYNAMIC_NOT_APPLIED = frozenset({
    "log.cleaner.threads", "log.cleaner.dedupe.buffer.size", "log.cleaner.io.buffer.size",
    "log.cleaner.io.buffer.load.factor", "log.cleaner.io.max.bytes.per.second",
    "log.cleaner.backoff.ms", "listeners", "advertised.listeners",
    "listener.security.protocol.map", "ssl.keystore.location", "ssl.keystore.type",
    "ssl.keystore.password", "ssl.key.password", "ssl.truststore.location",
    "ssl.truststore.type", "ssl.truststore.password", "ssl.client.auth",
    "ssl.enabled.protocols", "ssl.cipher.suites", "ssl.endpoint.identification.algorithm",
    "ssl.principal.mapping.rules", "sasl.enabled.mechanisms", "sasl.jaas.config",
    "sasl.server.max.receive.size", "sasl.mechanism.inter.broker.protocol",
})  # fmt: skip


def _set_text(names: Iterable[str]) -> str:
    """A Scala ``Set`` as Kafka's messages print it."""
    return f"Set({', '.join(sorted(names))})"


class DynamicBrokerConfig:
    """This broker's dynamic configs (module docstring): fed by an entity config listener
    (:meth:`update`), read by DescribeConfigs, written by the alter APIs through
    :meth:`write`."""

    def __init__(self, config: Config, store: EntityConfigs | None = None) -> None:
        from sluice.server.config import BROKER_CONFIG

        self.config = config
        self.node_id = config.node_id
        self.keys: dict[str, ConfigKey] = {key.name: key for key in BROKER_CONFIG}
        self.store = store if store is not None else EntityConfigs()
        self.default: dict[str, str] = {}
        self.per_broker: dict[str, str] = {}
        #: Called with the effective config after a change of it.
        self.appliers: list[Callable[[Mapping[str, str]], None]] = []

    def use_store(self, store: EntityConfigs) -> None:
        self.store = store

    def entity(self, name: str) -> str:
        """The entity path of a BROKER resource name (``""``: the cluster default)."""
        return f"brokers/{name or DEFAULT_ENTITY}"

    def dynamic(self, name: str) -> dict[str, str]:
        """The dynamic configs of the BROKER resource ``name``."""
        return dict(self.default if not name else self.per_broker)

    def effective(self) -> dict[str, str]:
        """Static properties overlaid by the dynamic default, then by this broker's own."""
        return {**self.config.properties, **self.default, **self.per_broker}

    def source(self, key: str) -> ConfigSource:
        if key in self.per_broker:
            return ConfigSource.DYNAMIC_BROKER_CONFIG
        if key in self.default:
            return ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG
        if key in self.config.properties:
            return ConfigSource.STATIC_BROKER_CONFIG
        return ConfigSource.DEFAULT_CONFIG

    def synonyms(self, key: str) -> list[tuple[str, ConfigSource]]:
        """``(value, source)`` of every place ``key`` is set, most specific first."""
        out = []
        for where, source in (
            (self.per_broker, ConfigSource.DYNAMIC_BROKER_CONFIG),
            (self.default, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),
            (self.config.properties, ConfigSource.STATIC_BROKER_CONFIG),
        ):
            if key in where:
                out.append((where[key], source))
        return out

    def validate(self, name: str, props: Mapping[str, str]) -> None:
        """Kafka's ``DynamicBrokerConfig.validate`` of the whole new dynamic config of
        resource ``name``; InvalidRequest with Kafka's message."""
        resource = f"ConfigResource(type=BROKER, name='{name}')"

        def refuse(message: str) -> errors.KafkaError:  # Kafka's ConfigException, wrapped
            return errors.InvalidConfig(f"Invalid config value for resource {resource}: {message}")

        unknown = [k for k in props if k not in self.keys]
        if unknown:
            raise refuse(f"Unknown broker configs: {_set_text(unknown)}")
        not_applied = [k for k in props if k in KAFKA_DYNAMIC_NOT_APPLIED]
        fixed = [k for k in props if not self.keys[k].dynamic and k not in not_applied]
        if fixed:
            raise refuse(f"Cannot update these configs dynamically: {_set_text(fixed)}")
        if not_applied:
            raise refuse(f"Sluice cannot update these configs dynamically (set them in "
                         f"server.properties and restart): {_set_text(not_applied)}")  # fmt: skip
        for key, text in props.items():
            try:
                self.keys[key].parse(text)
            except ValueError as exc:
                raise refuse(f"invalid value {text!r} for {key}: {exc}") from None
        static = self.config.properties
        if name:  # this broker's own over the default
            merged = {**static, **self.default, **props}
        else:  # the default, under this broker's own
            merged = {**static, **props, **self.per_broker}
        log_props = {k: v for k, v in merged.items() if k in SERVER_LOG_CONFIG}
        try:
            LogConfig.from_broker_properties(log_props)
        except (errors.KafkaError, ConfigError) as exc:
            raise refuse(str(exc.args[0])) from None

    async def write(self, name: str, props: Mapping[str, str]) -> None:
        """Make ``props`` the whole dynamic config of resource ``name`` (validated)."""
        current = self.store.get(self.entity(name))
        await self.store.alter(self.entity(name), props, [k for k in current if k not in props])

    def update(self, entity_path: str, config: Mapping[str, str]) -> None:
        """An entity config changed (an ``EntityConfigs`` listener): this broker's or the
        default one's is taken and applied."""
        if entity_path == f"brokers/{DEFAULT_ENTITY}":
            self.default = dict(config)
        elif entity_path == f"brokers/{self.node_id}":
            self.per_broker = dict(config)
        else:
            return
        log.info("dynamic broker config changed", entity=entity_path, config=dict(config))
        effective = self.effective()
        for apply in self.appliers:
            try:
                apply(effective)
            except Exception:  # a value refused here was stored by an older broker: keep on
                log.exception("applying a dynamic broker config failed", entity=entity_path)
