"""Kafka's ZooKeeper data: the znode paths and their JSON, as Kafka's ``kafka/zk/ZkData.scala``.

A Kafka tool pointed at our ZooKeeper (or we at Kafka's) reads the same znodes. Layout
(spec ``replication.md`` §2); who writes what:

==========================================  ===========  =======================================
znode                                       kind         written by
==========================================  ===========  =======================================
``/brokers/ids/<id>``                       ephemeral    that broker, at start-up (its czxid is
                                                         the **broker epoch**, KIP-380)
``/controller``                             ephemeral    the broker that won the election
``/controller_epoch``                       persistent   the election (+1 per new controller)
``/brokers/topics/<t>``                     persistent   whoever creates the topic (assignment)
``/brokers/topics/<t>/partitions/<p>/state``  persistent   the controller (leader, epoch, ISR),
                                                         the partition leader (ISR only,
                                                         conditional on the zkVersion)
``/config/topics/<t>``                      persistent   topic creation / AlterConfigs
``/admin/delete_topics/<t>``                persistent   a delete request (empty data); the
                                                         controller deletes it when done
``/latest_producer_id_block``               persistent   brokers taking a block of producer ids
==========================================  ===========  =======================================

Each value type has ``encode() -> bytes`` and a ``decode(...)`` classmethod. Encoding writes
Kafka's current version (compact JSON, the keys Kafka writes); decoding accepts what Kafka's
decoder accepts and validates every field it reads: wrong JSON, a missing or mistyped field
(``true`` is not an int) or an unknown version is a :class:`ZkDataError` naming the znode and
field, never a ``KeyError``. The zkVersion of a state znode is not in its JSON: it comes from the
znode's stat and travels with the decoded value (:attr:`PartitionState.zk_version`).
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sluice.protocol.structs import TopicPartition
from sluice.protocol.types import uuid_from_str, uuid_to_str

from .errors import ZkDataError

__all__ = [
    "ADMIN_PATH",
    "BROKERS_PATH",
    "BROKER_IDS_PATH",
    "CONFIG_PATH",
    "CONFIG_TOPICS_PATH",
    "CONTROLLER_EPOCH_PATH",
    "CONTROLLER_PATH",
    "DELETE_TOPICS_PATH",
    "INITIAL_CONTROLLER_EPOCH",
    "LOG_DIR_EVENT_NOTIFICATION_PATH",
    "LOG_DIR_EVENT_PREFIX",
    "PERSISTENT_PATHS",
    "PREFERRED_REPLICA_ELECTION_PATH",
    "PRODUCER_ID_BLOCK_PATH",
    "REASSIGN_PARTITIONS_PATH",
    "TOPICS_PATH",
    "BrokerInfo",
    "ControllerInfo",
    "EndPoint",
    "LogDirEvent",
    "PartitionState",
    "ProducerIdBlock",
    "ReplicaAssignment",
    "TopicAssignment",
    "TopicConfig",
    "broker_path",
    "decode_controller_epoch",
    "decode_log_dir_event",
    "decode_partition_reassignment",
    "decode_preferred_replica_election",
    "decode_topic_id",
    "delete_topic_path",
    "encode_controller_epoch",
    "encode_log_dir_event",
    "encode_partition_reassignment",
    "encode_preferred_replica_election",
    "encode_topic_id",
    "is_decimal",
    "partition_path",
    "partition_state_path",
    "partitions_path",
    "topic_config_path",
    "topic_path",
]

# --- paths --------------------------------------------------------------------------------------

BROKERS_PATH = "/brokers"
BROKER_IDS_PATH = "/brokers/ids"
TOPICS_PATH = "/brokers/topics"
CONTROLLER_PATH = "/controller"
CONTROLLER_EPOCH_PATH = "/controller_epoch"
CONFIG_PATH = "/config"
CONFIG_TOPICS_PATH = "/config/topics"
ADMIN_PATH = "/admin"
DELETE_TOPICS_PATH = "/admin/delete_topics"
REASSIGN_PARTITIONS_PATH = "/admin/reassign_partitions"
PREFERRED_REPLICA_ELECTION_PATH = "/admin/preferred_replica_election"
PRODUCER_ID_BLOCK_PATH = "/latest_producer_id_block"
CLUSTER_ID_PATH = "/cluster/id"
LOG_DIR_EVENT_NOTIFICATION_PATH = "/log_dir_event_notification"
#: A notification is the sequential child ``log_dir_event_<10 digits>``.
LOG_DIR_EVENT_PREFIX = "log_dir_event_"

#: The persistent znodes a broker makes sure exist at start-up (Kafka's
#: ``ZkData.PersistentZkPaths``, the subset Sluice uses).
PERSISTENT_PATHS = (
    BROKER_IDS_PATH,
    TOPICS_PATH,
    CONFIG_TOPICS_PATH,
    DELETE_TOPICS_PATH,
    PRODUCER_ID_BLOCK_PATH,
    LOG_DIR_EVENT_NOTIFICATION_PATH,
)

#: ``/controller_epoch`` starts at 0 (zkVersion 0); the first controller makes it 1.
INITIAL_CONTROLLER_EPOCH = 0


def _topic(topic: str) -> str:
    """A topic name as one path segment. Kafka's naming rule itself is checked where topics
    are created (``sluice.server.storage.log_manager``); here only what would break the path."""
    if not topic or topic in (".", "..") or "/" in topic or "\x00" in topic:
        raise ValueError(f"not a topic name usable in a znode path: {topic!r}")
    return topic


def broker_path(broker_id: int) -> str:
    return f"{BROKER_IDS_PATH}/{broker_id}"


def topic_path(topic: str) -> str:
    return f"{TOPICS_PATH}/{_topic(topic)}"


def partitions_path(topic: str) -> str:
    return f"{topic_path(topic)}/partitions"


def partition_path(tp: TopicPartition) -> str:
    return f"{partitions_path(tp.topic)}/{tp.partition}"


def partition_state_path(tp: TopicPartition) -> str:
    return f"{partition_path(tp)}/state"


def topic_config_path(topic: str) -> str:
    return f"{CONFIG_TOPICS_PATH}/{_topic(topic)}"


def delete_topic_path(topic: str) -> str:
    return f"{DELETE_TOPICS_PATH}/{_topic(topic)}"


# --- JSON helpers -------------------------------------------------------------------------------


def is_decimal(text: str) -> bool:
    """ASCII digits only (``str.isdigit`` also accepts ``"²"``, which ``int()`` refuses)."""
    return text.isascii() and text.isdigit()


def _dumps(obj: Mapping[str, Any]) -> bytes:
    """Compact JSON, as Kafka's Jackson writes it."""
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


def _loads(data: bytes, what: str) -> dict[str, Any]:
    try:
        obj = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise ZkDataError(f"{what}: not JSON ({exc}): {data[:200]!r}") from exc
    if not isinstance(obj, dict):
        raise ZkDataError(f"{what}: expected a JSON object, got {type(obj).__name__}")
    return obj


def _int(obj: Mapping[str, Any], key: str, what: str) -> int:
    if key not in obj:
        raise ZkDataError(f"{what}: missing field {key!r}")
    value = obj[key]
    if isinstance(value, bool) or not isinstance(value, int):
        raise ZkDataError(f"{what}: field {key!r} must be an integer, got {value!r}")
    return value


def _str(obj: Mapping[str, Any], key: str, what: str) -> str:
    if key not in obj:
        raise ZkDataError(f"{what}: missing field {key!r}")
    value = obj[key]
    if not isinstance(value, str):
        raise ZkDataError(f"{what}: field {key!r} must be a string, got {value!r}")
    return value


def _int_list(value: Any, key: str, what: str) -> tuple[int, ...]:
    if not isinstance(value, list) or any(
        isinstance(v, bool) or not isinstance(v, int) for v in value
    ):
        raise ZkDataError(f"{what}: field {key!r} must be a list of integers, got {value!r}")
    return tuple(value)


def _tp_entries(partitions: Iterable[TopicPartition]) -> list[dict[str, Any]]:
    """Partitions as Kafka's znodes list them: ``[{"topic": t, "partition": p}, ...]``."""
    return [{"topic": tp.topic, "partition": tp.partition} for tp in partitions]


def _tp_list(value: Any, key: str, what: str) -> tuple[TopicPartition, ...]:
    """The inverse of :func:`_tp_entries` (``value``: the field ``key`` of ``what``)."""
    if not isinstance(value, list) or not all(isinstance(e, dict) for e in value):
        raise ZkDataError(f"{what}: field {key!r} must be a list of objects")
    return tuple(TopicPartition(_str(e, "topic", what), _int(e, "partition", what)) for e in value)


def _object(obj: Mapping[str, Any], key: str, what: str) -> dict[str, Any] | None:
    value = obj.get(key)
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ZkDataError(f"{what}: field {key!r} must be an object, got {value!r}")
    return value


def _version(obj: Mapping[str, Any], what: str, supported: range) -> int:
    version = _int(obj, "version", what)
    if version not in supported:
        raise ZkDataError(
            f"{what}: unsupported version {version} "
            f"(supported {supported.start}..{supported.stop - 1})"
        )
    return version


def _now_ms() -> int:
    return int(time.time() * 1000)


# --- /brokers/ids/<id> --------------------------------------------------------------------------

#: Kafka's default listener-name -> security-protocol map (a listener named after a protocol).
_DEFAULT_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
# Kafka's EndPoint.uriParseExp: "LISTENER://host:port", an IPv6 host in brackets.
_ENDPOINT_RE = re.compile(r"^(.*)://\[?([0-9a-zA-Z\-%._:]*)\]?:(-?[0-9]+)$")


@dataclass(frozen=True, slots=True)
class EndPoint:
    """One advertised listener: ``PLAINTEXT://host:9092``."""

    listener: str
    host: str
    port: int
    security_protocol: str = "PLAINTEXT"

    @property
    def connection_string(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.listener}://{host}:{self.port}"

    @classmethod
    def parse(cls, text: str, protocol_map: Mapping[str, str] | None = None) -> EndPoint:
        """Parse ``LISTENER://host:port``; the security protocol comes from ``protocol_map``
        (the znode's ``listener_security_protocol_map``) or, without one, the listener name."""
        match = _ENDPOINT_RE.match(text)
        if match is None:
            raise ZkDataError(f"endpoint {text!r} is not LISTENER://host:port")
        listener, host, port = match.group(1), match.group(2), int(match.group(3))
        if protocol_map is not None and listener in protocol_map:
            protocol = protocol_map[listener]
        elif protocol_map is None and listener in _DEFAULT_PROTOCOLS:
            protocol = listener
        else:
            raise ZkDataError(f"endpoint {text!r}: no security protocol for listener {listener}")
        return cls(listener, host, port, protocol)


#: :attr:`BrokerInfo.may_have_lost_unflushed` in the registration's JSON.
LOST_UNFLUSHED_KEY = "may_have_lost_unflushed"
#: :attr:`BrokerInfo.offline_partitions` in the registration's JSON.
OFFLINE_PARTITIONS_KEY = "offline_partitions"


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    """A live broker's registration (``/brokers/ids/<id>``, version 5).

    ``host``/``port`` at the top level of the JSON are the first PLAINTEXT endpoint's (for old
    clients; ``null``/-1 without one). ``features`` is KIP-584's supported-features map, empty
    for us. ``epoch`` is not in the JSON: it is the znode's czxid, filled by the reader.

    ``may_have_lost_unflushed`` (Sluice's, in the JSON only when true: Kafka's readers ignore
    fields they do not know) is KIP-966's unclean shutdown as ZooKeeper mode can say it: this
    is the first registration of a broker whose previous run stopped uncleanly in another boot
    of its machine, so it may lack writes it had (even below a high watermark). The controller
    then no longer counts it as holding what the states written before this registration say
    (:mod:`sluice.server.controller.election`).

    ``offline_partitions`` (Sluice's, in the JSON only when some, as
    ``[{"topic": t, "partition": p}, ...]``) are the partitions whose log on this broker went
    offline (an I/O error, ``Log._go_offline``) in this process: the broker states them in its
    registration as a KRaft broker states its offline log dirs in its registration and
    heartbeats (KIP-858), because Sluice's controller sends no LeaderAndIsr to ask (Kafka's
    ``replicasOnOfflineDirs``, learnt from KAFKA_STORAGE_ERROR answers). The broker writes
    them (its own ephemeral node: Kafka's ``updateBrokerInfo``) before its log dir event
    notification, so a controller elected at any time reads them with the live brokers, and
    every broker's Metadata lists those replicas as offline. The registration dies with the
    process; the next start recovers the logs and registers without them.
    """

    broker_id: int
    endpoints: tuple[EndPoint, ...]
    rack: str | None = None
    jmx_port: int = -1
    timestamp_ms: int = field(default_factory=_now_ms)
    features: Mapping[str, Any] = field(default_factory=dict)
    version: int = 5
    epoch: int = -1
    may_have_lost_unflushed: bool = False
    offline_partitions: tuple[TopicPartition, ...] = ()

    def encode(self) -> bytes:
        plaintext = next((e for e in self.endpoints if e.security_protocol == "PLAINTEXT"), None)
        obj: dict[str, Any] = {
            "version": self.version,
            "host": plaintext.host if plaintext else None,
            "port": plaintext.port if plaintext else -1,
            "endpoints": [e.connection_string for e in self.endpoints],
            "jmx_port": self.jmx_port,
            "timestamp": str(self.timestamp_ms),
        }
        if self.rack is not None:
            obj["rack"] = self.rack
        obj["listener_security_protocol_map"] = {
            e.listener: e.security_protocol for e in self.endpoints
        }
        obj["features"] = dict(self.features)
        if self.may_have_lost_unflushed:
            obj[LOST_UNFLUSHED_KEY] = True
        if self.offline_partitions:
            obj[OFFLINE_PARTITIONS_KEY] = _tp_entries(self.offline_partitions)
        return _dumps(obj)

    @classmethod
    def decode(cls, broker_id: int, data: bytes, epoch: int = -1) -> BrokerInfo:
        what = f"/brokers/ids/{broker_id}"
        obj = _loads(data, what)
        version = _version(obj, what, range(1, 6))
        jmx_port = _int(obj, "jmx_port", what)
        if version == 1:
            endpoints: tuple[EndPoint, ...] = (
                EndPoint("PLAINTEXT", _str(obj, "host", what), _int(obj, "port", what)),
            )
        else:
            raw_map = _object(obj, "listener_security_protocol_map", what)
            if raw_map is not None and not all(isinstance(v, str) for v in raw_map.values()):
                raise ZkDataError(f"{what}: listener_security_protocol_map values are names")
            raw = obj.get("endpoints")
            if not isinstance(raw, list) or not all(isinstance(e, str) for e in raw):
                raise ZkDataError(f"{what}: field 'endpoints' must be a list of strings")
            endpoints = tuple(EndPoint.parse(e, raw_map) for e in raw)
        rack = obj.get("rack")
        if rack is not None and not isinstance(rack, str):
            raise ZkDataError(f"{what}: field 'rack' must be a string")
        timestamp = obj.get("timestamp")
        try:
            timestamp_ms = int(timestamp) if timestamp is not None else -1
        except (TypeError, ValueError):
            raise ZkDataError(f"{what}: field 'timestamp' is not a number: {timestamp!r}") from None
        features = _object(obj, "features", what) or {}
        lost = obj.get(LOST_UNFLUSHED_KEY, False)
        if not isinstance(lost, bool):
            raise ZkDataError(f"{what}: field {LOST_UNFLUSHED_KEY!r} must be a boolean")
        offline = obj.get(OFFLINE_PARTITIONS_KEY)
        offline_partitions = (
            () if offline is None else _tp_list(offline, OFFLINE_PARTITIONS_KEY, what)
        )
        return cls(
            broker_id, endpoints, rack, jmx_port, timestamp_ms, features, version, epoch, lost,
            offline_partitions,
        )  # fmt: skip


# --- /controller, /controller_epoch -------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ControllerInfo:
    """``/controller`` (version 2): who is controller. ``kraftControllerEpoch`` is -1 outside a
    KRaft migration (always, here). ``zk_version`` from the stat, when read."""

    broker_id: int
    timestamp_ms: int = field(default_factory=_now_ms)
    kraft_controller_epoch: int = -1
    zk_version: int = -1

    def encode(self) -> bytes:
        return _dumps(
            {
                "version": 2,
                "brokerid": self.broker_id,
                "timestamp": str(self.timestamp_ms),
                "kraftControllerEpoch": self.kraft_controller_epoch,
            }
        )

    @classmethod
    def decode(cls, data: bytes, zk_version: int = -1) -> ControllerInfo:
        what = CONTROLLER_PATH
        obj = _loads(data, what)
        _version(obj, what, range(1, 3))
        broker_id = _int(obj, "brokerid", what)
        try:
            timestamp_ms = int(obj.get("timestamp", -1))
        except (TypeError, ValueError):
            raise ZkDataError(f"{what}: field 'timestamp' is not a number") from None
        kraft = obj.get("kraftControllerEpoch", -1)
        if isinstance(kraft, bool) or not isinstance(kraft, int):
            raise ZkDataError(f"{what}: field 'kraftControllerEpoch' must be an integer")
        return cls(broker_id, timestamp_ms, kraft, zk_version)


def encode_controller_epoch(epoch: int) -> bytes:
    """``/controller_epoch`` is the epoch in decimal, not JSON."""
    return str(epoch).encode()


def decode_controller_epoch(data: bytes) -> int:
    text = data.decode("ascii", "replace").strip()
    if not is_decimal(text.removeprefix("-")):
        raise ZkDataError(f"{CONTROLLER_EPOCH_PATH}: not a decimal epoch: {data[:50]!r}")
    return int(text)


# --- /log_dir_event_notification/log_dir_event_<seq> ----------------------------------------------

#: Kafka's ``LogDirEventNotificationSequenceZNode.LogDirFailureEvent``.
LOG_DIR_FAILURE_EVENT = 1


@dataclass(frozen=True)
class LogDirEvent:
    """A broker's notice that storage failed (Kafka's log-dir event notification).

    Kafka writes ``{"version":1,"broker":<id>,"event":1}``: a whole log directory failed, and
    the controller finds out which replicas by asking the broker (LeaderAndIsr answered
    KAFKA_STORAGE_ERROR per partition). Sluice takes single logs offline (an I/O error in one
    log's segment swap leaves the others serving) and its controller sends no requests: the
    broker states them in its registration (:attr:`BrokerInfo.offline_partitions`, which the
    controller reads on a notice), and the notice lists them too, under ``partitions`` (Kafka's
    controller reads only ``broker``; a controller of an earlier Sluice reads them here).
    ``partitions`` None -- a notice without the field, as Kafka writes it -- means every
    replica on the broker."""

    broker: int
    partitions: tuple[TopicPartition, ...] | None = None
    event: int = LOG_DIR_FAILURE_EVENT


def encode_log_dir_event(event: LogDirEvent) -> bytes:
    obj: dict[str, Any] = {"version": 1, "broker": event.broker, "event": event.event}
    if event.partitions is not None:
        obj["partitions"] = _tp_entries(event.partitions)
    return _dumps(obj)


def decode_log_dir_event(data: bytes, path: str = LOG_DIR_EVENT_NOTIFICATION_PATH) -> LogDirEvent:
    obj = _loads(data, path)
    listed = obj.get("partitions")
    partitions = None if listed is None else _tp_list(listed, "partitions", path)
    event = obj.get("event", LOG_DIR_FAILURE_EVENT)
    if not isinstance(event, int):
        event = LOG_DIR_FAILURE_EVENT
    return LogDirEvent(_int(obj, "broker", path), partitions, event)


# --- /brokers/topics/<t> ------------------------------------------------------------------------


def encode_topic_id(topic_id: uuid.UUID) -> str:
    """Kafka's ``Uuid.toString`` (:func:`sluice.protocol.types.uuid_to_str`)."""
    return uuid_to_str(topic_id)


def encode_cluster_id(cluster_id: str) -> bytes:
    """``/cluster/id`` (Kafka's ``ClusterIdZNode``): ``{"version":"1","id":"<id>"}``."""
    return _dumps({"version": "1", "id": cluster_id})


def decode_cluster_id(data: bytes) -> str:
    return _str(_loads(data, CLUSTER_ID_PATH), "id", CLUSTER_ID_PATH)


def decode_topic_id(text: str) -> uuid.UUID:
    """Kafka's ``Uuid.fromString``; a malformed id is a :class:`ZkDataError`."""
    try:
        return uuid_from_str(text)
    except ValueError as exc:
        raise ZkDataError(f"topic id {exc}") from None


@dataclass(frozen=True, slots=True)
class ReplicaAssignment:
    """A partition's replicas in preference order (the first is the preferred leader), and
    those being added / removed by a reassignment."""

    replicas: tuple[int, ...]
    adding: tuple[int, ...] = ()
    removing: tuple[int, ...] = ()

    # Kafka's ``ControllerContext.ReplicaAssignment``: while a reassignment runs, ``replicas``
    # is RS = TRS + ORS (target first, in its order), ``adding`` = TRS - ORS, ``removing`` =
    # ORS - TRS; the znode is the only place the original set is kept, so that a new
    # controller resumes from it.

    @property
    def is_being_reassigned(self) -> bool:
        return bool(self.adding or self.removing)

    @property
    def origin_replicas(self) -> tuple[int, ...]:
        """ORS: the replicas before the reassignment (RS - AR)."""
        return tuple(r for r in self.replicas if r not in self.adding)

    @property
    def target_replicas(self) -> tuple[int, ...]:
        """TRS: the replicas once it completes (RS - RR)."""
        return tuple(r for r in self.replicas if r not in self.removing)

    def reassign_to(self, target: Sequence[int]) -> ReplicaAssignment:
        """The assignment while moving to ``target`` (Kafka's ``reassignTo``): RS = target +
        the origin replicas not in it, AR = RS - ORS, RR = RS - target. Reassigning to the
        origin replicas (a cancellation) gives no AR and no RR."""
        origin = self.origin_replicas
        full = tuple(dict.fromkeys([*target, *origin]))
        return ReplicaAssignment(
            full,
            tuple(r for r in full if r not in origin),
            tuple(r for r in full if r not in target),
        )


@dataclass(frozen=True, slots=True)
class TopicAssignment:
    """``/brokers/topics/<t>`` (version 3): the topic id and each partition's replicas.
    ``zk_version`` from the stat, when read."""

    topic: str
    topic_id: uuid.UUID | None
    partitions: Mapping[int, ReplicaAssignment]
    zk_version: int = -1

    def replicas(self, partition: int) -> tuple[int, ...]:
        return self.partitions[partition].replicas

    def encode(self) -> bytes:
        obj: dict[str, Any] = {
            "version": 3,
            "partitions": {str(p): list(a.replicas) for p, a in sorted(self.partitions.items())},
            "adding_replicas": {
                str(p): list(a.adding) for p, a in sorted(self.partitions.items()) if a.adding
            },
            "removing_replicas": {
                str(p): list(a.removing) for p, a in sorted(self.partitions.items()) if a.removing
            },
        }
        if self.topic_id is not None:
            obj["topic_id"] = encode_topic_id(self.topic_id)
        return _dumps(obj)

    @classmethod
    def decode(cls, topic: str, data: bytes, zk_version: int = -1) -> TopicAssignment:
        what = f"/brokers/topics/{topic}"
        obj = _loads(data, what)
        _version(obj, what, range(1, 4))
        raw_id = obj.get("topic_id")
        if raw_id is not None and not isinstance(raw_id, str):
            raise ZkDataError(f"{what}: field 'topic_id' must be a string")
        topic_id = decode_topic_id(raw_id) if raw_id is not None else None
        partitions_obj = _object(obj, "partitions", what) or {}
        adding = _object(obj, "adding_replicas", what) or {}
        removing = _object(obj, "removing_replicas", what) or {}
        partitions: dict[int, ReplicaAssignment] = {}
        for key, replicas in partitions_obj.items():
            if not is_decimal(key):
                raise ZkDataError(f"{what}: partition {key!r} is not a partition number")
            partitions[int(key)] = ReplicaAssignment(
                _int_list(replicas, f"partitions.{key}", what),
                _int_list(adding.get(key, []), f"adding_replicas.{key}", what),
                _int_list(removing.get(key, []), f"removing_replicas.{key}", what),
            )
        return cls(topic, topic_id, dict(sorted(partitions.items())), zk_version)


# --- /admin/reassign_partitions, /admin/preferred_replica_election -----------------------------


def encode_partition_reassignment(reassignment: Mapping[TopicPartition, Sequence[int]]) -> bytes:
    """``/admin/reassign_partitions`` (Kafka's ``ReassignPartitionsZNode``, version 1): the
    target replicas of each partition a tool asked to move."""
    return _dumps(
        {
            "version": 1,
            "partitions": [
                {"topic": tp.topic, "partition": tp.partition, "replicas": list(replicas)}
                for tp, replicas in sorted(reassignment.items())
            ],
        }
    )


def _partition_entries(data: bytes, what: str) -> list[dict[str, Any]]:
    obj = _loads(data, what)
    _version(obj, what, range(1, 2))
    entries = obj.get("partitions")
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise ZkDataError(f"{what}: field 'partitions' must be a list of objects")
    return entries


def decode_partition_reassignment(data: bytes) -> dict[TopicPartition, tuple[int, ...]]:
    what = REASSIGN_PARTITIONS_PATH
    return {
        TopicPartition(_str(e, "topic", what), _int(e, "partition", what)): _int_list(
            e.get("replicas"), "replicas", what
        )
        for e in _partition_entries(data, what)
    }


def encode_preferred_replica_election(partitions: Iterable[TopicPartition]) -> bytes:
    """``/admin/preferred_replica_election`` (Kafka's ``PreferredReplicaElectionZNode``)."""
    return _dumps({"version": 1, "partitions": _tp_entries(sorted(partitions))})


def decode_preferred_replica_election(data: bytes) -> set[TopicPartition]:
    what = PREFERRED_REPLICA_ELECTION_PATH
    return {
        TopicPartition(_str(e, "topic", what), _int(e, "partition", what))
        for e in _partition_entries(data, what)
    }


# --- /brokers/topics/<t>/partitions/<p>/state ---------------------------------------------------


@dataclass(frozen=True, slots=True)
class PartitionState:
    """A partition's leader, leader epoch and ISR, and the controller epoch of the controller
    that elected that leader (Kafka's ``LeaderIsrAndControllerEpoch``; version 1 JSON).

    ``zk_version`` is the state znode's data version (Kafka's "partition epoch"): every write
    to the state is conditional on it, so two writers can never both succeed from the same
    read. It is not part of the JSON; -1 for a state not read from ZooKeeper.
    ``leader = -1`` (``NO_LEADER``) means the partition is offline. ``leader_recovery_state``
    (KIP-704) is written only when not 0 (RECOVERED), as Kafka does.
    """

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    controller_epoch: int
    zk_version: int = -1
    leader_recovery_state: int = 0
    #: The ZooKeeper transaction that last wrote the state znode (its ``mzxid``; -1 when not
    #: read from ZooKeeper). Comparable with a broker epoch (the czxid of the broker's
    #: registration): a state written *before* its leader registered was given to an earlier
    #: incarnation of that broker, which may have lost data since (a power loss) -- the broker
    #: does not lead on it and the controller elects again (see ``ClusterMember._apply``,
    #: ``Controller._reconcile``). Not part of the JSON.
    mzxid: int = field(default=-1, compare=False)
    #: KIP-966's eligible leader replicas: replicas out of the ISR that still hold every record
    #: below the high watermark (they left it while it was below ``min.insync.replicas``, when
    #: the high watermark cannot move); the controller elects one when no ISR member is left.
    #: A Sluice addition to the JSON (``eligible_leader_replicas``, written only when not
    #: empty): Kafka's ZooKeeper-mode brokers read the fields they know and ignore it.
    eligible_leader_replicas: tuple[int, ...] = ()

    NO_LEADER = -1

    def encode(self) -> bytes:
        obj: dict[str, Any] = {
            "version": 1,
            "leader": self.leader,
            "leader_epoch": self.leader_epoch,
            "controller_epoch": self.controller_epoch,
            "isr": list(self.isr),
        }
        if self.leader_recovery_state != 0:
            obj["leader_recovery_state"] = self.leader_recovery_state
        if self.eligible_leader_replicas:
            obj["eligible_leader_replicas"] = list(self.eligible_leader_replicas)
        return _dumps(obj)

    @classmethod
    def decode(
        cls, data: bytes, zk_version: int = -1, what: str = "partition state"
    ) -> PartitionState:
        obj = _loads(data, what)
        _version(obj, what, range(1, 2))
        if "isr" not in obj:
            raise ZkDataError(f"{what}: missing field 'isr'")
        recovery = obj.get("leader_recovery_state", 0)
        if isinstance(recovery, bool) or not isinstance(recovery, int):
            raise ZkDataError(f"{what}: field 'leader_recovery_state' must be an integer")
        return cls(
            leader=_int(obj, "leader", what),
            leader_epoch=_int(obj, "leader_epoch", what),
            isr=_int_list(obj["isr"], "isr", what),
            controller_epoch=_int(obj, "controller_epoch", what),
            zk_version=zk_version,
            leader_recovery_state=recovery,
            eligible_leader_replicas=_int_list(
                obj.get("eligible_leader_replicas", []), "eligible_leader_replicas", what
            ),
        )

    def same_data(self, other: PartitionState) -> bool:
        """Equal as written to ZooKeeper (everything but the zkVersion): how Kafka's
        ``checkLeaderAndIsrZkData`` recognises its own write after a lost reply."""
        return self.encode() == other.encode()


# --- /config/topics/<t> -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TopicConfig:
    """``/config/topics/<t>`` (version 1): a topic's config overrides, Kafka key -> string."""

    config: Mapping[str, str]
    zk_version: int = -1

    def encode(self) -> bytes:
        return _dumps({"version": 1, "config": dict(self.config)})

    @classmethod
    def decode(cls, data: bytes, zk_version: int = -1, what: str = "topic config") -> TopicConfig:
        if not data:  # Kafka reads a null znode as no overrides
            return cls({}, zk_version)
        obj = _loads(data, what)
        config = _object(obj, "config", what) or {}
        if not all(isinstance(v, str) for v in config.values()):
            raise ZkDataError(f"{what}: config values must be strings: {config!r}")
        return cls(dict(config), zk_version)


# --- /latest_producer_id_block ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ProducerIdBlock:
    """A block of producer ids ``[first, last]`` taken by ``broker_id`` (Kafka's
    ``ProducerIdsBlock``; the znode holds the latest block handed out, version 1 JSON with the
    bounds as decimal strings)."""

    broker_id: int
    first: int
    last: int

    #: Kafka's ``ProducerIdsBlock.PRODUCER_ID_BLOCK_SIZE``.
    DEFAULT_SIZE = 1000

    @property
    def size(self) -> int:
        return self.last - self.first + 1

    def encode(self) -> bytes:
        return _dumps(
            {
                "version": 1,
                "broker": self.broker_id,
                "block_start": str(self.first),
                "block_end": str(self.last),
            }
        )

    @classmethod
    def decode(cls, data: bytes) -> ProducerIdBlock:
        what = PRODUCER_ID_BLOCK_PATH
        obj = _loads(data, what)
        _version(obj, what, range(1, 2))
        try:
            first, last = int(_str(obj, "block_start", what)), int(_str(obj, "block_end", what))
        except ValueError:
            raise ZkDataError(f"{what}: block bounds are not decimal numbers") from None
        if last < first:
            raise ZkDataError(f"{what}: block_end {last} < block_start {first}")
        return cls(_int(obj, "broker", what), first, last)
