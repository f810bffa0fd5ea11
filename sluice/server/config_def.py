"""Settings declared as data: Kafka's ``ConfigDef`` in miniature.

Every setting the broker reads is declared once, as Kafka's
``ConfigDef.define(name, type, default, validator, importance, doc)``, by the room that reads it:

* the topic keys (``segment.bytes``...) and the broker's ``log.*`` keys by the storage layer
  (:data:`sluice.server.storage.log_config.TOPIC_CONFIG`, ``SERVER_LOG_CONFIG``);
* the ``group.*`` / ``offsets.*`` keys by the group room (:mod:`sluice.server.group.config`,
  importable without the coordinator);
* the controller keys by the controller room (:mod:`sluice.server.controller.config`);
* the ``transaction.*`` keys by the transaction room (:mod:`sluice.server.transaction.config`);
* the listeners' security, ``ssl.*``, ``sasl.*`` and authorizer keys by the security room
  (:mod:`sluice.server.security.config`), whose TLS contexts, SASL authenticator and the
  network layer's listeners default from them;
* the network, broker, replica and ZooKeeper keys by the broker's ``Config``
  (:mod:`sluice.server.config`), which collects all broker keys into one ``ConfigDef``.

Everything else is derived from the declarations: parsing and validation
(:meth:`ConfigDef.parse`), the defaults of the typed config objects (their dataclass fields are
:func:`setting` s naming a key), the example ``config/server.properties`` and DescribeConfigs'
types, synonyms and documentation.

A *validator* turns the text of a value (as in a ``.properties`` file) into the typed value or
raises ``ValueError`` with a short reason ("must be >= 1"); the room formats the message (the
broker's ``invalid value 'x' for key: reason``, a topic's ``key='x': reason``). A default is
given typed (``1048588``, ``True``, ``None`` for Kafka's "null") and kept as its text, which the
validator must accept: a declaration whose default fails its own validator fails at import.

This module is at the bottom of the server's layering: it imports nothing of Sluice, so every
room of the broker may import it. Pure data and parsing, no I/O.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

#: Text -> typed value; raises ValueError with a short reason.
Validator = Callable[[str], Any]


class ConfigError(ValueError):
    """A configuration key has a value Sluice cannot use (message names key and value)."""


class Type(enum.IntEnum):
    """Kafka's ``ConfigDef.Type``, numbered as DescribeConfigs v3+ reports it (``ConfigType``)."""

    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7
    CLASS = 8
    PASSWORD = 9


class Importance(enum.Enum):
    """Kafka's ``ConfigDef.Importance``: how likely a user is to need to change the key."""

    HIGH = "high"
    MEDIUM = "medium"
    LOW = "low"


BOOLEAN, STRING, INT, LONG, DOUBLE, LIST, PASSWORD = (
    Type.BOOLEAN, Type.STRING, Type.INT, Type.LONG, Type.DOUBLE, Type.LIST, Type.PASSWORD,
)  # fmt: skip
HIGH, MEDIUM, LOW = Importance.HIGH, Importance.MEDIUM, Importance.LOW


@dataclass(frozen=True)
class ConfigKey:
    """One declared key. ``default`` is the text of the default as in server.properties (None:
    unset, Kafka's "null"); ``value`` is that default parsed. ``group`` titles the section of
    the example file the key is listed in. ``synonym_of`` names the topic key a broker key
    supplies the default of (``log.segment.bytes`` -> ``segment.bytes``; Kafka's
    ``ServerTopicConfigSynonyms``). ``dynamic``: the key may change while the broker runs
    (a dynamic broker config, Kafka's ``DynamicBrokerConfig.AllDynamicConfigs``) *and* Sluice
    applies such a change live; every other key is read-only in DescribeConfigs and an
    alteration of it is refused."""

    name: str
    type: Type
    default: str | None
    validator: Validator
    importance: Importance
    doc: str
    group: str = ""
    synonym_of: str | None = None
    value: Any = None
    dynamic: bool = False

    def parse(self, text: str) -> Any:
        """The typed value of ``text``; ValueError with the validator's reason."""
        return self.validator(text)

    @property
    def key(self) -> str:
        """The name (what the broker's option table called it)."""
        return self.name


def format_value(value: object) -> str:
    """A typed value as Kafka prints it (``true``/``false`` for booleans)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


class ConfigDef:
    """An ordered set of declared keys; :meth:`define` adds one and returns the def (chained,
    like Kafka's). Declaring a key twice is an error."""

    def __init__(self, *bases: ConfigDef) -> None:
        self._keys: dict[str, ConfigKey] = {}
        self._group = ""
        for base in bases:
            for key in base:
                self._add(key)

    def _add(self, key: ConfigKey) -> None:
        if key.name in self._keys:
            raise ValueError(f"config key {key.name} declared twice")
        self._keys[key.name] = key

    def include(self, other: ConfigDef) -> ConfigDef:
        """Add every key of ``other`` (declared by another room), in its order and sections."""
        for key in other:
            self._add(key)
        return self

    def section(self, title: str) -> ConfigDef:
        """Keys defined after this belong to the section ``title`` (of the example file)."""
        self._group = title
        return self

    def define(
        self,
        name: str,
        type: Type,
        default: object,
        validator: Validator,
        importance: Importance,
        doc: str,
        *,
        synonym_of: str | None = None,
        dynamic: bool = False,
    ) -> ConfigDef:
        text = None if default is None else format_value(default)
        try:
            value = None if text is None else validator(text)
        except ValueError as exc:
            raise ValueError(f"{name}: default {text!r} is invalid: {exc}") from exc
        self._add(
            ConfigKey(name, type, text, validator, importance, doc, self._group, synonym_of, value,
                      dynamic)
        )  # fmt: skip
        return self

    def dynamic(self, *names: str) -> ConfigDef:
        """Mark keys already defined as dynamic broker configs (:class:`ConfigKey`)."""
        for name in names:
            self._keys[name] = dataclasses.replace(self._keys[name], dynamic=True)
        return self

    def define_synonym(
        self,
        name: str,
        of: ConfigKey,
        *,
        default: object = ...,
        doc: str | None = None,
    ) -> ConfigDef:
        """Declare the broker key ``name`` that supplies topic key ``of``'s default: the same
        type, validator and importance; the same default unless given (None: Kafka's "null",
        a coarser key supplies it). Such a key is dynamic: Kafka's ``DynamicLogConfig`` lets
        the primary broker synonym of every topic key change at run time (the coarser-unit
        keys, ``log.retention.hours``..., are plain ``define`` s and stay static), and Sluice
        applies it to the log manager's default (``LogManager.set_default_config``)."""
        return self.define(
            name,
            of.type,
            of.value if default is ... else default,
            of.validator,
            of.importance,
            of.doc if doc is None else doc,
            synonym_of=of.name,
            dynamic=True,
        )

    def __getitem__(self, name: str) -> ConfigKey:
        return self._keys[name]

    def __contains__(self, name: object) -> bool:
        return name in self._keys

    def __iter__(self) -> Iterator[ConfigKey]:
        return iter(self._keys.values())

    def __len__(self) -> int:
        return len(self._keys)

    def names(self) -> list[str]:
        return list(self._keys)

    def parse(self, props: Mapping[str, str]) -> dict[str, Any]:
        """``{key: typed value}`` of the declared keys among ``props`` (others are left out).
        Raises :class:`ConfigError` ``invalid value 'x' for key: reason`` (the broker's form)."""
        values: dict[str, Any] = {}
        for name, text in props.items():
            key = self._keys.get(name)
            if key is None:
                continue
            try:
                values[name] = key.validator(text)
            except ValueError as exc:
                raise ConfigError(f"invalid value {text!r} for {name}: {exc}") from exc
        return values

    def default(self, name: str) -> Any:
        """The parsed default of ``name`` (None when Kafka's default is "null")."""
        return self._keys[name].value

    def setting(self, name: str, *, scale: int | float = 1) -> Any:
        """A dataclass field of a typed config object read from key ``name`` (its value times
        ``scale``: ``offsets.retention.minutes`` -> milliseconds), defaulting to the declared
        default. :func:`typed_values` maps parsed keys onto such fields. A PASSWORD key's field
        is left out of the object's repr (Kafka prints a ``Password`` as ``[hidden]``)."""
        value = self.default(name)
        if value is not None and scale != 1:
            value = value * scale
        shown = self._keys[name].type is not Type.PASSWORD
        return dataclasses.field(
            default=value, metadata={"config": name, "scale": scale}, repr=shown
        )


def typed_values(cls: type, values: Mapping[str, Any]) -> dict[str, Any]:
    """Keyword arguments of dataclass ``cls`` from ``{key: parsed value}``: each field made by
    :meth:`ConfigDef.setting` takes its key's value (scaled); keys without a field are left."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        key = f.metadata.get("config")
        if key is not None and key in values:
            value, scale = values[key], f.metadata["scale"]
            out[f.name] = value * scale if value is not None and scale != 1 else value
    return out


def fields_by_key(cls: type) -> dict[str, str]:
    """``{key: field name}`` of the :meth:`ConfigDef.setting` fields of dataclass ``cls``."""
    return {f.metadata["config"]: f.name for f in dataclasses.fields(cls) if "config" in f.metadata}


# --- validators of broker keys (reason only; the broker names key and value) -----------------


def int_in(lo: int | None = None, hi: int | None = None) -> Validator:
    """An integer in ``[lo, hi]`` (either bound optional)."""

    def parse(text: str) -> int:
        value = int(text.strip())
        if lo is not None and value < lo:
            raise ValueError(f"must be >= {lo}")
        if hi is not None and value > hi:
            raise ValueError(f"must be <= {hi}")
        return value

    return parse


def boolean(text: str) -> bool:
    """``true`` or ``false``, any case."""
    lowered = text.strip().lower()
    if lowered not in ("true", "false"):
        raise ValueError("must be true or false")
    return lowered == "true"


def string(text: str) -> str:
    return text.strip()


def one_of(*choices: str) -> Validator:
    def parse(text: str) -> str:
        value = text.strip()
        if value not in choices:
            raise ValueError(f"must be one of {', '.join(choices)}")
        return value

    return parse


#: Kafka's "no bound" for an int option (``Int.MaxValue``): the default of the broker's
#: connection, request-rate, topic and partition bounds.
NO_BOUND = 2147483647


def parse_ip_overrides(text: str) -> tuple[tuple[str, int], ...]:
    """``max.connections.per.ip.overrides``: ``host:count[,host:count...]`` (Kafka's format; an
    IPv6 literal in brackets); empty = none."""
    out: list[tuple[str, int]] = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        host, colon, count_text = item.rpartition(":")
        host = host.strip().strip("[]")
        if not colon or not host:
            raise ValueError(f"{item!r} is not host:count")
        try:
            count = int(count_text)
        except ValueError:
            raise ValueError(f"{item!r}: count {count_text!r} is not a number") from None
        if count < 0:
            raise ValueError(f"{item!r}: count must be >= 0")
        out.append((host, count))
    return tuple(out)
