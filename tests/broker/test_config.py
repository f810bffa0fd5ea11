"""Config: defaults, Java-properties files, --override precedence, validation."""

from __future__ import annotations

from pathlib import Path

import pytest

from sluice.server import config as config_mod
from sluice.server.config import Config, ConfigError, Listener
from sluice.server.config_def import HIGH, INT


def test_defaults_match_the_option_table() -> None:
    config_mod._check_defaults()
    c = Config()
    assert c.listener == Listener("PLAINTEXT", "127.0.0.1", 9092)
    assert c.socket_request_max_bytes == 104857600
    assert c.data_dir == Path("./data")
    assert c.default_replication_factor == 1
    assert c.auto_create_topics_enable is True


def test_properties_file_syntax(tmp_path: Path) -> None:
    path = tmp_path / "server.properties"
    path.write_text(
        "# a comment\n"
        "! also a comment\n"
        "listeners = PLAINTEXT://127.0.0.1:19092\n"
        "node.id: 7\n"
        "log.dirs /var/sluice\n"
        "num.partitions=\\\n"
        "    3\n"
        "log.segment.bytes=1048576\n"
        "num.network.threads=3\n"
    )
    c = Config.load(path)
    assert c.listener == Listener("PLAINTEXT", "127.0.0.1", 19092)
    assert c.node_id == 7
    assert c.log_dirs == "/var/sluice"
    assert c.num_partitions == 3
    assert c.log_properties() == {"log.segment.bytes": "1048576"}
    assert c.ignored_keys == ("num.network.threads",)


def test_overrides_win_over_the_file(tmp_path: Path) -> None:
    path = tmp_path / "server.properties"
    path.write_text("num.partitions=3\nauto.create.topics.enable=true\n")
    c = Config.load(path, ["num.partitions=5", "auto.create.topics.enable=FALSE"])
    assert c.num_partitions == 5
    assert c.auto_create_topics_enable is False


def test_environment_sits_between_the_file_and_the_overrides(tmp_path: Path) -> None:
    path = tmp_path / "server.properties"
    path.write_text("num.partitions=3\nlog.retention.hours=1\nnode.id=1\n")
    environ = {
        "SLUICE_NUM_PARTITIONS": "4",  # beats the file
        "SLUICE_NODE_ID": "2",  # loses to the override
        "SLUICE_ADVERTISED_LISTENERS": "PLAINTEXT://broker.example:19092",
        "SLUICE_SLUICE_SHUTDOWN_TIMEOUT_MS": "1500",  # a sluice.* key
        "SLUICE_ADVERTISED_LISTENER": "PLAINTEXT://typo:1",  # no such key
        "SLUICE_BOOTSTRAP_SERVER": "127.0.0.1:9092",  # the CLI's: not warned about
        "KAFKA_NUM_PARTITIONS": "9",  # not ours
        "PATH": "/usr/bin",
    }
    c = Config.load(path, ["node.id=5"], environ=environ)
    assert (c.num_partitions, c.node_id) == (4, 5)
    assert c.advertised_listener == Listener("PLAINTEXT", "broker.example", 19092)
    assert c.properties["sluice.shutdown.timeout.ms"] == "1500"
    assert c.properties["log.retention.hours"] == "1"  # the file's, untouched
    assert c.ignored_environment == ("SLUICE_ADVERTISED_LISTENER",)
    assert c.environment_keys == (
        "advertised.listeners", "node.id", "num.partitions", "sluice.shutdown.timeout.ms",
    )  # fmt: skip
    assert Config.load(path).num_partitions == 3  # no environment unless given
    with pytest.raises(ConfigError, match=r"num\.partitions"):
        Config.load(None, environ={"SLUICE_NUM_PARTITIONS": "many"})


def test_every_declared_key_has_an_environment_name() -> None:
    names = {config_mod.env_name(o.key): o.key for o in config_mod.OPTIONS}
    assert len(names) == len(config_mod.OPTIONS)  # no two keys share a variable
    for name, key in names.items():
        assert name.startswith("SLUICE_") and name == name.upper()
        assert config_mod.key_from_env(name) == key
        assert config_mod.properties_from_env({name: "v"}) == ({key: "v"}, ())
    # The escapes: '_' in a key doubles, '-' triples (Apache's and Confluent's Kafka images)
    examples = {
        "advertised.listeners": "SLUICE_ADVERTISED_LISTENERS",
        "log.dirs": "SLUICE_LOG_DIRS",
        "a_b.c": "SLUICE_A__B_C",
        "x-y.z": "SLUICE_X___Y_Z",
        "a_b-c.d": "SLUICE_A__B___C_D",
    }
    for key, name in examples.items():
        assert config_mod.env_name(key) == name
        assert config_mod.key_from_env(name) == key
    for bad in ("SLUICE_", "SLUICE__X", "SLUICE_X_", "SLUICE_A____B", "KAFKA_LOG_DIRS"):
        assert config_mod.key_from_env(bad) is None


def test_log_dir_alias_and_broker_id() -> None:
    c = Config.load(None, ["log.dir=/tmp/x", "broker.id=4"])
    assert c.log_dirs == "/tmp/x"
    assert c.node_id == 4
    c = Config.load(None, ["log.dir=/tmp/x", "log.dirs=/tmp/y", "broker.id=4", "node.id=2"])
    assert c.log_dirs == "/tmp/y"
    assert c.node_id == 2


def test_advertised_listener_defaults() -> None:
    c = Config.load(None, ["listeners=PLAINTEXT://0.0.0.0:9093"])
    assert c.advertised_listener == Listener("PLAINTEXT", "127.0.0.1", 9093)
    c = Config.load(None, ["advertised.listeners=PLAINTEXT://broker.example:9094"])
    assert c.advertised_listener == Listener("PLAINTEXT", "broker.example", 9094)


@pytest.mark.parametrize(
    "override, fragment",
    [
        ("num.partitions=zero", "num.partitions"),
        ("num.partitions=0", "must be >= 1"),
        ("default.replication.factor=3", "default.replication.factor"),
        ("auto.create.topics.enable=yes", "true or false"),
        ("listeners=INTERNAL://127.0.0.1:9093", "No security protocol defined for listener"),
        ("listeners=SASL_SSL://127.0.0.1:9093", "set sasl.enabled.mechanisms to some of PLAIN"),
        ("listeners=PLAINTEXT://:9092,plaintext://:9093", "different name"),
        ("listeners=PLAINTEXT://:9092,SSL://:9092", "different port"),
        ("listener.security.protocol.map=A:TLS", "unknown security protocol"),
        ("ssl.client.auth=maybe", "none, requested or required"),
        ("listener.name.plaintext.connections.max.reauth.ms=soon", "listener.name.plaintext"),
        ("listeners=PLAINTEXT://127.0.0.1", "port"),
        ("listeners=PLAINTEXT://127.0.0.1:70000", "out of range"),
        ("log.dirs=/a,/b", "exactly one"),
        ("log.message.timestamp.type=Now", "CreateTime"),
        ("socket.request.max.bytes=-5", "socket.request.max.bytes"),
        ("noequals", "key=value"),
        ("log.cleanup.policy=shred", "log.cleanup.policy"),
        ("log.cleaner.threads=-1", "log.cleaner.threads"),
        ("log.segment.bytes=10", "log.segment.bytes"),
    ],
)
def test_invalid_values_are_rejected_clearly(override: str, fragment: str) -> None:
    with pytest.raises(ConfigError) as info:
        Config.load(None, [override])
    assert fragment in str(info.value)


def test_missing_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        Config.load(tmp_path / "nope.properties")


def test_example_properties_file_loads() -> None:
    example = Path(__file__).resolve().parents[2] / "config" / "server.properties"
    c = Config.load(example)
    assert c.ignored_keys == ()
    assert c == Config.load(None, [f"{k}={v}" for k, v in c.properties.items()])


def test_log_keys_reach_the_storage_defaults() -> None:
    c = Config.load(
        None,
        [
            "log.segment.bytes=1048576",
            "log.retention.hours=1",
            "log.message.timestamp.type=LogAppendTime",
            "message.max.bytes=2000000",
        ],
    )
    lc = c.log_config()
    assert lc.segment_bytes == 1048576
    assert lc.retention_ms == 3_600_000
    assert lc.message_timestamp_type == "LogAppendTime"
    assert lc.max_message_bytes == 2000000
    assert Config().log_config().segment_bytes == 1073741824


def test_logging_is_json_off_a_terminal_and_pretty_on_one() -> None:
    import io
    import json

    import structlog

    from sluice.server.logging import configure_logging, get_logger

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    try:
        out = io.StringIO()
        configure_logging("info", stream=out)
        get_logger("sluice.test").info("hello", n=1)
        get_logger("sluice.test").debug("dropped below the level")
        (line,) = out.getvalue().splitlines()
        record = json.loads(line)
        assert (record["event"], record["n"], record["logger_name"]) == ("hello", 1, "sluice.test")
        assert record["level"] == "info"
        tty = Tty()
        configure_logging("info", stream=tty)
        get_logger("sluice.test").info("hello", n=2)
        text = tty.getvalue()
        assert "hello" in text and "\x1b[" in text and not text.lstrip().startswith("{")
    finally:
        structlog.reset_defaults()


def test_group_keys_are_known_and_reach_the_coordinator() -> None:
    from sluice.server.group.coordinator import GroupConfig

    c = Config.load(None, ["group.initial.rebalance.delay.ms=0", "offsets.topic.num.partitions=3"])
    assert c.ignored_keys == ()
    assert "offsets.topic.num.partitions" not in c.log_properties()
    gc = GroupConfig.from_properties(c.properties)
    assert (gc.initial_rebalance_delay_ms, gc.offsets_topic_num_partitions) == (0, 3)
    assert GroupConfig.from_properties(c.properties, cluster=False) == gc  # set: kept


def test_offsets_topic_partitions_default_to_kafkas_50_in_a_cluster_and_1_standalone() -> None:
    from sluice.server.group.config import GroupConfig

    assert GroupConfig.from_properties({}).offsets_topic_num_partitions == 50
    assert GroupConfig.from_properties({}, cluster=False).offsets_topic_num_partitions == 1
    standalone = GroupConfig.from_properties({"offsets.topic.num.partitions": "50"}, cluster=False)
    assert standalone.offsets_topic_num_partitions == 50


def test_typed_config_defaults_are_the_declared_ones() -> None:
    """The typed config objects take their defaults from the declarations, field by field."""
    from sluice.server.config_def import fields_by_key
    from sluice.server.controller.controller import ControllerSettings
    from sluice.server.group.config import GROUP_CONFIG, GroupConfig

    group = GroupConfig()
    for key, attr in fields_by_key(GroupConfig).items():
        scale = 60000 if key == "offsets.retention.minutes" else 1
        assert getattr(group, attr) == GROUP_CONFIG.default(key) * scale, key
    assert group.offsets_retention_ms == 7 * 24 * 3600 * 1000  # Kafka's 7 days
    assert set(fields_by_key(GroupConfig)) == set(GROUP_CONFIG.names())
    settings = ControllerSettings.from_config(Config())
    assert settings == ControllerSettings()
    assert settings.leader_imbalance_check_interval_s == 300.0
    from sluice.server.storage.log_config import SERVER_LOG_CONFIG
    from sluice.server.transaction.config import TRANSACTION_CONFIG, TransactionConfig

    assert set(fields_by_key(TransactionConfig)) == set(TRANSACTION_CONFIG.names())
    txn = TransactionConfig()
    for key, attr in fields_by_key(TransactionConfig).items():
        assert getattr(txn, attr) == TRANSACTION_CONFIG.default(key), key
    assert (txn.state_log_num_partitions, txn.max_timeout_ms) == (50, 900_000)  # Kafka's
    read = set(fields_by_key(Config)) | set(GROUP_CONFIG.names()) | set(SERVER_LOG_CONFIG.names())
    read |= set(TRANSACTION_CONFIG.names())
    read |= config_mod.TLS_KEYS  # read per listener (Config.listener_security_settings)
    assert set(config_mod.OPTIONS_BY_KEY) - read == {"log.dir", "broker.id"}  # the aliases


@pytest.mark.parametrize(
    "override", ["offsets.topic.num.partitions=0", "group.initial.rebalance.delay.ms=soon"]
)
def test_invalid_group_value_is_a_config_error(override: str) -> None:
    with pytest.raises(ConfigError, match=override.split("=")[0]):
        Config.load(None, [override])


#: Every broker key with its default and doc as they were when the declarations moved into the
#: rooms that read them (storage, group): the move must not change one.
DECLARED = {
    "advertised.listeners": (
        None,
        "what Metadata tells clients of each listener to connect to; a listener not named here "
        "advertises its listeners entry",
    ),
    "auto.create.topics.enable": ("true", "create a topic on Metadata/Produce for an unknown name"),
    "broker.id": (None, "Kafka's old name for node.id; node.id wins"),
    "replica.selector.class": (
        None,
        "KIP-392: org.apache.kafka.common.replica.RackAwareReplicaSelector sends a consumer that "
        "sets client.rack to a replica in its rack; unset: consumers read from leaders "
        "(followers still serve a consumer that fetches from them)",
    ),
    "broker.rack": (
        None,
        "this broker's rack (e.g. us-east-1d): new topics spread their replicas over racks "
        "(Kafka's rack-aware assignment), shown in Metadata",
    ),
    "default.replication.factor": (
        "1",
        "replicas of an auto-created topic or CreateTopics with replication_factor -1 "
        "(standalone: only 1)",
    ),
    "delete.topic.enable": ("true", "allow DeleteTopics"),
    "group.initial.rebalance.delay.ms": (
        "3000",
        "wait this long for more members before the first rebalance of an empty group",
    ),
    "group.max.session.timeout.ms": ("1800000", "largest session timeout"),
    "group.max.size": ("2147483647", "members per group"),
    "group.min.session.timeout.ms": ("6000", "smallest session timeout"),
    "listeners": (
        "PLAINTEXT://127.0.0.1:9092",
        "where the broker listens: NAME://host:port,... one per listener name (port 0 = any free "
        "port)",
    ),
    "log.cleanup.policy": (
        "delete",
        "delete (retention), compact (keep the last record per key), or both",
    ),
    "log.cleaner.backoff.ms": ("15000", "how long a cleaner sleeps when no log needs cleaning"),
    "producer.id.expiration.ms": (
        "86400000",
        "a partition forgets an idempotent producer whose last batch's timestamp is this "
        "old (never while its transaction is open); its next batch is taken as an "
        "unknown producer's, with any sequence. Set it at least to the producers' "
        "delivery.timeout.ms: an expired producer's retry is no longer recognised as a "
        "duplicate",
    ),
    "producer.id.expiration.check.interval.ms": (
        "600000",
        "how often each partition removes the producer ids producer.id.expiration.ms "
        "expired (Kafka: an internal key)",
    ),
    "log.cleaner.dedupe.buffer.size": (
        "134217728",
        "memory for the cleaners' offset maps (key hash -> last offset), all threads together",
    ),
    "log.cleaner.delete.retention.ms": (
        "86400000",
        "how long a compacted topic keeps tombstones once cleaned",
    ),
    "log.cleaner.enable": ("true", "run the log cleaner (compacted topics)"),
    "log.cleaner.io.buffer.load.factor": (
        "0.9",
        "how full an offset map may become before a cleaning stops reading dirty segments",
    ),
    "log.cleaner.io.buffer.size": (
        "524288",
        "memory for the cleaners' read and write buffers, all threads together",
    ),
    "log.cleaner.io.max.bytes.per.second": (
        "1.7976931348623157E308",
        "throttle: the cleaners read and write at most this many bytes per second on average",
    ),
    "log.cleaner.max.compaction.lag.ms": (
        "9223372036854775807",
        "the maximum time a record stays ineligible for compaction",
    ),
    "log.cleaner.min.cleanable.ratio": (
        "0.5",
        "dirty share of a log above which the cleaner compacts it",
    ),
    "log.cleaner.min.compaction.lag.ms": ("0", "the minimum time a record stays uncompacted"),
    "log.cleaner.threads": (
        "1",
        "log cleaner threads (0: none). Sluice runs one per data dir: more than 1 is accepted, "
        "logged at start, and runs as 1 with the whole buffers",
    ),
    "log.dir": ("./data", "used when log.dirs is not set"),
    "log.dirs": (None, "the data directory (exactly one)"),
    "log.flush.interval.messages": ("9223372036854775807", "fsync after this many messages"),
    "log.flush.interval.ms": (None, "fsync after this long"),
    "log.flush.offset.checkpoint.interval.ms": (
        "60000",
        "how often recovery points are checkpointed",
    ),
    "sluice.log.open.files.max": (
        None,
        "segment files kept open at once; the least recently read old segments are closed "
        "beyond it (unset: the open-file limit less a quarter of it, or 64 if more)",
    ),
    "log.flush.scheduler.interval.ms": (
        "9223372036854775807",
        "how often the flush check runs (unset: every second, which also flushes rolled segments)",
    ),
    "log.index.interval.bytes": ("4096", "bytes between index entries"),
    "log.index.size.max.bytes": ("10485760", "max size of an index file"),
    "log.message.timestamp.type": ("CreateTime", "which timestamp a batch keeps"),
    "log.retention.bytes": ("-1", "retention by size per partition"),
    "log.retention.check.interval.ms": ("300000", "how often retention runs"),
    "log.retention.hours": ("168", "retention by age"),
    "log.retention.minutes": (None, "retention by age"),
    "log.retention.ms": (None, "retention by age (-1 forever)"),
    "log.roll.hours": ("168", "segment age before rolling"),
    "log.roll.jitter.hours": ("0", "max random jitter subtracted from roll"),
    "log.roll.jitter.ms": (None, "max random jitter subtracted from roll"),
    "log.roll.ms": (None, "segment age before rolling; overrides hours"),
    "log.segment.bytes": ("1073741824", "segment size before rolling"),
    "log.segment.delete.delay.ms": (
        "60000",
        "delay between renaming a segment to .deleted and removing it",
    ),
    "message.max.bytes": ("1048588", "largest record batch accepted"),
    "min.insync.replicas": ("1", "ISR size an acks=all produce needs"),
    "unclean.leader.election.enable": (
        "false",
        "cluster: with no live in-sync replica, let an out-of-sync one lead (may lose acked data)",
    ),
    "compression.type": ("producer", "codec batches are stored in (producer: as sent)"),
    "authorizer.class.name": (
        "",
        "Kafka's AclAuthorizer or StandardAuthorizer turns ACLs on; empty: no authorization",
    ),
    "super.users": ("", "principals (User:name) separated by ';' that every ACL check allows"),
    "allow.everyone.if.no.acl.found": (
        "false",
        "with an authorizer: a resource with no ACL is open to everyone (true) or to super "
        "users only",
    ),
    "node.id": ("0", "this broker's id (in Metadata)"),
    "num.partitions": (
        "1",
        "partitions of an auto-created topic or CreateTopics with num_partitions -1",
    ),
    "offset.metadata.max.bytes": ("4096", "largest commit metadata string"),
    "offsets.commit.required.acks": (
        "-1",
        "acks of the coordinator's writes to the offsets topic (keep -1)",
    ),
    "offsets.commit.timeout.ms": (
        "5000",
        "an offset commit or group write waits this long for the offsets topic's replicas",
    ),
    "offsets.load.buffer.size": (
        "5242880",
        "bytes read per step when loading an offsets partition",
    ),
    "offsets.retention.check.interval.ms": ("600000", "how often expired offsets are removed"),
    "offsets.topic.replication.factor": (
        "3",
        "replicas of __consumer_offsets in a cluster (standalone: 1); created when that many "
        "brokers live",
    ),
    "offsets.retention.minutes": (
        "10080",
        "committed offsets of an empty group expire after this long",
    ),
    "offsets.topic.num.partitions": (
        "50",
        "partitions of __consumer_offsets, fixed once it exists (a standalone broker that does "
        "not set it uses 1)",
    ),
    "queued.max.requests": (
        "500",
        "per connection: unanswered requests before the broker stops reading from it",
    ),
    "connections.max.idle.ms": (
        "600000",
        "close client connections idle (nothing read or written, no request being handled) "
        "this long (-1: never)",
    ),
    "fetch.max.bytes": (
        "57671680",
        "largest Fetch response; a request asking more gets this (its first batch may exceed it)",
    ),
    "sluice.connection.max.unsent.bytes": (
        "4194304",
        "per connection: bytes buffered for a slow reader; above it sending and reading wait",
    ),
    "sluice.fetch.zero.copy": (
        "true",
        "send Fetch record bytes with os.sendfile (true) or copy them through Python (false)",
    ),
    "sluice.metrics.listener": (
        None,
        "Prometheus endpoint, http://host:port (path /metrics); unset or empty: none",
    ),
    "max.connections.per.ip": (
        "2147483647",
        "open connections from one address; more are closed when accepted",
    ),
    "max.connections.per.ip.overrides": (
        "",
        "host:count,... : max.connections.per.ip for the addresses (or host names) named",
    ),
    "max.connections": ("2147483647", "open connections in all; more are closed when accepted"),
    "sluice.quota.requests.per.second": (
        "2147483647",
        "requests per second per client id; above it responses carry throttle_time_ms and the "
        "connection waits that long",
    ),
    "quota.window.num": ("11", "samples the request rate is measured over"),
    "quota.window.size.seconds": (
        "1",
        "length of one request-rate sample (also the longest throttle)",
    ),
    "sluice.max.topics": (
        "2147483647",
        "topics in all (internal ones included); creating more is POLICY_VIOLATION",
    ),
    "sluice.max.partitions": (
        "2147483647",
        "partitions of all topics (internal ones included); more is POLICY_VIOLATION",
    ),
    "sluice.max.partitions.per.topic": (
        "10000",
        "partitions of one topic; more is INVALID_PARTITIONS",
    ),
    "offsets.topic.segment.bytes": (
        "104857600",
        "segment.bytes of __consumer_offsets (kept small for faster compaction and loads)",
    ),
    "offsets.topic.compression.codec": (
        "0",
        "codec of the coordinator's batches to __consumer_offsets (Kafka's ids: 0 none, "
        "1 gzip, 2 snappy, 3 lz4, 4 zstd)",
    ),
    "sluice.shutdown.timeout.ms": (
        "10000",
        "graceful shutdown: how long in-flight requests may take before connections close",
    ),
    "socket.receive.buffer.bytes": (
        "-1",
        "SO_RCVBUF of client connections (-1: the OS default, with autotuning)",
    ),
    "socket.request.max.bytes": (
        "104857600",
        "largest request frame; a bigger one closes the connection before its body is read",
    ),
    "socket.send.buffer.bytes": (
        "-1",
        "SO_SNDBUF of client connections (-1: the OS default, with autotuning)",
    ),
    "zookeeper.connect": (
        None,
        "host:port[,host:port...][/chroot] of the ZooKeeper ensemble; unset: standalone broker",
    ),
    "zookeeper.session.timeout.ms": (
        "18000",
        "ZooKeeper session timeout: how long a dead broker keeps its registration",
    ),
    "zookeeper.connection.timeout.ms": (
        None,
        "how long to wait for a ZooKeeper connection (unset: the session timeout)",
    ),
    "zookeeper.set.acl": (
        "false",
        "create znodes readable by anyone but writable only by this broker's ZooKeeper identity "
        "(its SASL user or TLS client certificate), the credentials' only by it (Kafka's "
        "secure ACLs)",
    ),
    "zookeeper.ssl.client.enable": (
        "false",
        "reach ZooKeeper over TLS (its secureClientPort), with the zookeeper.ssl.* keys",
    ),
    "zookeeper.ssl.keystore.location": (
        None,
        "the broker's key and certificate chain for ZooKeeper's client authentication (PEM)",
    ),
    "zookeeper.ssl.keystore.password": (
        None,
        "the password of the keystore's private key",
    ),
    "zookeeper.ssl.keystore.type": (
        None,
        "PEM (unset: PEM)",
    ),
    "zookeeper.ssl.truststore.location": (
        None,
        "the CA certificates ZooKeeper's certificate must chain to (PEM; unset: the system's)",
    ),
    "zookeeper.ssl.truststore.password": (
        None,
        "not needed for a PEM truststore (accepted)",
    ),
    "zookeeper.ssl.truststore.type": (
        None,
        "PEM (unset: PEM)",
    ),
    "zookeeper.ssl.endpoint.identification.algorithm": (
        "HTTPS",
        "HTTPS: check ZooKeeper's host name against its certificate; empty: not",
    ),
    "replica.lag.time.max.ms": ("30000", "a follower not caught up for this long leaves the ISR"),
    "replica.fetch.wait.max.ms": (
        "500",
        "how long a follower's fetch waits at the leader for new data",
    ),
    "replica.fetch.min.bytes": ("1", "bytes a follower's fetch waits for"),
    "replica.fetch.max.bytes": (
        "1048576",
        "bytes per partition a follower fetches at once (at least one batch)",
    ),
    "replica.fetch.response.max.bytes": (
        "10485760",
        "bytes per follower fetch response (at least one batch)",
    ),
    "replica.fetch.backoff.ms": ("1000", "pause before a follower retries after a fetch error"),
    "replica.socket.timeout.ms": (
        "30000",
        "how long a follower waits for a fetch answer before reconnecting",
    ),
    "leader.replication.throttled.rate": (
        "9223372036854775807",
        "leader-throttled replicas: bytes/s sent to followers outside the ISR (set dynamically)",
    ),
    "follower.replication.throttled.rate": (
        "9223372036854775807",
        "follower-throttled replicas: bytes/s fetched while not caught up (set dynamically)",
    ),
    "replication.quota.window.num": (
        "11",
        "samples the replication throttles' rates are measured over",
    ),
    "replication.quota.window.size.seconds": (
        "1",
        "length of one replication-throttle sample",
    ),
    "auto.leader.rebalance.enable": (
        "true",
        "the controller moves leadership back to preferred replicas",
    ),
    "leader.imbalance.check.interval.seconds": (
        "300",
        "how often the controller checks for non-preferred leaders",
    ),
    "leader.imbalance.per.broker.percentage": (
        "10",
        "rebalance a broker's partitions when more than this % of those it should lead it does not",
    ),
    "controlled.shutdown.enable": ("true", "on SIGTERM, move leadership away before stopping"),
    "controlled.shutdown.max.retries": ("3", "controlled shutdown attempts before stopping anyway"),
    "controlled.shutdown.retry.backoff.ms": ("5000", "pause between controlled shutdown attempts"),
    "listener.security.protocol.map": (
        "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL",
        "the security protocol of each listener name (PLAINTEXT, SSL, SASL_PLAINTEXT, "
        "SASL_SSL); every ssl.*/sasl.* key below may be set for one listener as "
        "listener.name.<name lower case>.<key>",
    ),
    "inter.broker.listener.name": (
        None,
        "the listener brokers use to reach each other (replica fetchers, the controller);"
        " unset: the one named security.inter.broker.protocol",
    ),
    "security.inter.broker.protocol": (
        "PLAINTEXT",
        "the inter-broker listener's name when inter.broker.listener.name is unset (set "
        "at most one of the two)",
    ),
    "ssl.keystore.location": (
        None,
        "the broker's private key and certificate chain: a PEM file or a PKCS#12 keystore"
        " (JKS: convert with keytool -importkeystore -deststoretype PKCS12)",
    ),
    "ssl.keystore.type": (
        None,
        "PEM or PKCS12 (unset: from the file's content)",
    ),
    "ssl.keystore.password": (
        None,
        "the PKCS#12 keystore's password",
    ),
    "ssl.key.password": (
        None,
        "the password of an encrypted private key",
    ),
    "ssl.truststore.location": (
        None,
        "the CA certificates trusted for peers (client certificates; brokers, for the "
        "inter-broker client): PEM bundle or PKCS#12; unset: the system's",
    ),
    "ssl.truststore.type": (
        None,
        "PEM or PKCS12 (unset: from the file's content)",
    ),
    "ssl.truststore.password": (
        None,
        "the PKCS#12 truststore's password",
    ),
    "ssl.client.auth": (
        "none",
        "client certificates on TLS listeners: none, requested (verified when sent) or "
        "required; the certificate's name becomes the principal",
    ),
    "ssl.enabled.protocols": (
        "TLSv1.2,TLSv1.3",
        "the TLS versions allowed",
    ),
    "ssl.cipher.suites": (
        "",
        "the TLS 1.2 cipher suites allowed (IANA or OpenSSL names; empty: OpenSSL's defaults)",
    ),
    "ssl.endpoint.identification.algorithm": (
        "https",
        "https: the inter-broker client checks a broker's host name against its "
        "certificate; empty: not",
    ),
    "ssl.principal.mapping.rules": (
        "DEFAULT",
        "RULE:<regex>/<replacement>/[L|U],...,DEFAULT: the principal name of a client "
        "certificate's distinguished name",
    ),
    "sasl.enabled.mechanisms": (
        "GSSAPI",
        "the SASL mechanisms SASL listeners offer: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 "
        "(Kafka's default GSSAPI is not supported: set this with a SASL listener)",
    ),
    "sasl.mechanism.inter.broker.protocol": (
        "GSSAPI",
        "the mechanism brokers log in to each other with over a SASL inter-broker listener",
    ),
    "sasl.jaas.config": (
        None,
        "the inter-broker client's login (set it as "
        'listener.name.<l>.<mechanism>.sasl.jaas.config): ... required username="broker" '
        'password="...";',
    ),
    "sasl.server.max.receive.size": (
        "524288",
        "largest frame accepted before a SASL login completes; a bigger one closes the connection",
    ),
    "connections.max.reauth.ms": (
        "0",
        "a SASL session's lifetime: clients re-authenticate on the connection before it "
        "ends, others are disconnected (0: sessions never end)",
    ),
    "connection.failed.authentication.delay.ms": (
        "100",
        "how long a failed login's answer and the close of its connection wait",
    ),
    "sluice.security.credentials.file": (
        None,
        "a standalone broker's SCRAM credentials (python -m sluice.server.security writes"
        " it); unset: users.json in the data directory. A cluster keeps them in ZooKeeper"
        " (/config/users)",
    ),
    "transaction.state.log.num.partitions": (
        "50",
        "partitions of __transaction_state (fixed once the topic exists)",
    ),
    "transaction.state.log.replication.factor": (
        "3",
        "replicas of __transaction_state in a cluster (standalone: 1); created when that many "
        "brokers live",
    ),
    "transaction.state.log.min.isr": (
        "2",
        "min.insync.replicas of __transaction_state (capped at its replication factor)",
    ),
    "transaction.state.log.segment.bytes": (
        "104857600",
        "segment.bytes of __transaction_state",
    ),
    "transaction.state.log.load.buffer.size": (
        "5242880",
        "bytes read per step when loading a __transaction_state partition",
    ),
    "transaction.max.timeout.ms": (
        "900000",
        "largest transaction.timeout.ms a producer may ask (larger: INVALID_TRANSACTION_TIMEOUT)",
    ),
    "transactional.id.expiration.ms": (
        "604800000",
        "a transactional id without a transaction for this long is forgotten",
    ),
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": (
        "10000",
        "how often transactions past their timeout are aborted",
    ),
    "transaction.remove.expired.transaction.cleanup.interval.ms": (
        "3600000",
        "how often expired transactional ids are removed",
    ),
}


def test_every_key_is_declared_once_with_its_default_and_doc() -> None:
    from sluice.server.config import OPTIONS
    from sluice.server.config_def import ConfigDef, int_in

    keys = [o.key for o in OPTIONS]
    assert len(keys) == len(set(keys)), "a key declared twice"
    assert {o.key: (o.default, o.doc) for o in OPTIONS} == DECLARED
    with pytest.raises(ValueError, match="declared twice"):
        ConfigDef().define("a.b", INT, 1, int_in(0), HIGH, "x").define(
            "a.b", INT, 1, int_in(0), HIGH, "y"
        )
    with pytest.raises(ValueError, match="default '-1' is invalid"):
        ConfigDef().define("a.b", INT, -1, int_in(0), HIGH, "x")


def test_example_properties_file_lists_every_declared_key() -> None:
    from sluice.server.config import OPTIONS_BY_KEY

    example = Path(__file__).resolve().parents[2] / "config" / "server.properties"
    documented = {
        line.lstrip("#").split("=", 1)[0].strip()
        for line in example.read_text().splitlines()
        if "=" in line and not line.startswith("# ")
    }
    assert sorted(documented - OPTIONS_BY_KEY.keys()) == [], "documented but unknown"
    assert sorted(OPTIONS_BY_KEY.keys() - documented) == [], "declared but not documented"


@pytest.mark.parametrize(
    ("value", "ok"),
    [
        ("127.0.0.1:2181", True),
        ("a:2181,b:2182/sluice/chroot", True),
        ("127.0.0.1", False),
        ("127.0.0.1:0", False),
        ("a:2181,:2182", False),
        ("a:2181/", False),
        ("a:2181/x/", False),
    ],
)
def test_zookeeper_connect_is_checked(value: str, ok: bool) -> None:
    if ok:
        config = Config.load(None, [f"zookeeper.connect={value}"])
        assert config.zookeeper_connect == value and config.cluster_mode
    else:
        with pytest.raises(ConfigError, match=r"zookeeper\.connect"):
            Config.load(None, [f"zookeeper.connect={value}"])


def test_replication_factor_above_one_needs_a_cluster() -> None:
    assert not Config().cluster_mode
    with pytest.raises(ConfigError, match=r"standalone broker .* supports only 1"):
        Config.load(None, ["default.replication.factor=3"])
    config = Config.load(None, ["default.replication.factor=3", "zookeeper.connect=127.0.0.1:2181"])
    assert config.default_replication_factor == 3


def test_replica_socket_timeout_must_cover_the_fetch_wait() -> None:
    with pytest.raises(ConfigError, match=r"replica\.socket\.timeout\.ms \(400\) must be at least"):
        Config.load(None, ["replica.socket.timeout.ms=400", "replica.fetch.wait.max.ms=500"])
    assert Config.load(None, ["replica.socket.timeout.ms=3000"]).replica_socket_timeout_ms == 3000


def test_example_properties_file_is_generated_from_the_declarations() -> None:
    example = Path(__file__).resolve().parents[2] / "config" / "server.properties"
    assert example.read_text() == config_mod.example_properties(), (
        "config/server.properties is stale: python -m sluice.server.config > "
        "config/server.properties"
    )
    assert "\n# --- consumer groups and committed offsets ---\n" in example.read_text()
    assert "\n#log.segment.bytes=1073741824\n" in example.read_text()


def test_describe_configs_derives_types_docs_and_synonyms_from_the_declarations(
    tmp_path: Path,
) -> None:
    """DescribeConfigs answers from the declarations: a broker key's Kafka type and doc, a topic
    key's type, doc and broker synonyms (most specific first)."""
    from sluice.protocol import messages as m
    from sluice.protocol.config_resources import ConfigSource, ResourceType
    from sluice.server.api.config_resources import ConfigResources
    from sluice.server.config_def import Type
    from sluice.server.storage.log_manager import LogManager

    config = Config.load(None, ["log.retention.hours=2", f"log.dirs={tmp_path}"])
    logs = LogManager(tmp_path, config.log_config())
    logs.open()
    try:
        logs.create_topic("t", 1, {"retention.ms": "5000"})
        resources = ConfigResources(config, logs)
        req = m.DescribeConfigsRequest
        body = req(
            resources=[
                req.DescribeConfigsResource(
                    resource_type=ResourceType.BROKER,
                    resource_name="0",
                    configuration_keys=["num.partitions", "auto.create.topics.enable"],
                ),
                req.DescribeConfigsResource(
                    resource_type=ResourceType.TOPIC,
                    resource_name="t",
                    configuration_keys=["retention.ms", "cleanup.policy"],
                ),
            ],
            include_synonyms=True,
            include_documentation=True,
        )
        broker, topic = resources.describe(body, 4).results
    finally:
        logs.close()
    entries = {e.name: e for e in broker.configs}
    assert entries["num.partitions"].config_type == Type.INT
    assert entries["auto.create.topics.enable"].config_type == Type.BOOLEAN
    assert entries["num.partitions"].documentation == config_mod.BROKER_CONFIG["num.partitions"].doc
    entries = {e.name: e for e in topic.configs}
    retention = entries["retention.ms"]
    assert (retention.value, retention.config_type) == ("5000", Type.LONG)
    assert [(s.name, s.value, s.source) for s in retention.synonyms] == [
        ("retention.ms", "5000", ConfigSource.DYNAMIC_TOPIC_CONFIG),
        ("log.retention.hours", "2", ConfigSource.STATIC_BROKER_CONFIG),
        ("log.retention.hours", "168", ConfigSource.DEFAULT_CONFIG),  # Kafka's: its default
    ]
    assert entries["cleanup.policy"].config_type == Type.LIST


def test_several_listeners_with_their_protocols_and_overrides() -> None:
    c = Config.load(
        overrides=[
            "listeners=CLIENT://0.0.0.0:9094,INTERNAL://127.0.0.1:9093",
            "advertised.listeners=CLIENT://broker.example:9094",
            "listener.security.protocol.map=CLIENT:SASL_SSL,INTERNAL:SSL",
            "inter.broker.listener.name=INTERNAL",
            "sasl.enabled.mechanisms=GSSAPI",
            "listener.name.client.sasl.enabled.mechanisms=SCRAM-SHA-512,PLAIN",
            "listener.name.internal.ssl.client.auth=required",
        ]
    )
    assert [lst.name for lst in c.listeners] == ["CLIENT", "INTERNAL"]
    assert c.advertised_endpoints() == (
        Listener("CLIENT", "broker.example", 9094),
        Listener("INTERNAL", "127.0.0.1", 9093),
    )
    assert c.security_protocol("CLIENT").value == "SASL_SSL"
    assert c.inter_broker_listener == "INTERNAL"
    assert c.sasl_mechanisms("CLIENT") == ("SCRAM-SHA-512", "PLAIN")
    assert c.listener_security_settings("INTERNAL")["ssl.client.auth"] == "required"
    assert c.listener_security_settings("CLIENT")["ssl.client.auth"] == "none"
    assert not any(k.startswith("listener.name.") for k in c.ignored_keys)


def test_inter_broker_keys_are_exclusive_and_must_name_a_listener() -> None:
    with pytest.raises(ConfigError, match="Only one of"):
        Config.load(
            overrides=["inter.broker.listener.name=PLAINTEXT", "security.inter.broker.protocol=SSL"]
        )
    with pytest.raises(ConfigError, match=r"inter\.broker\.listener\.name must be a listener"):
        Config.load(
            overrides=["zookeeper.connect=127.0.0.1:2181", "security.inter.broker.protocol=SSL"]
        )


def test_per_listener_settings_come_from_the_environment_too() -> None:
    env = {
        "SLUICE_LISTENERS": "SASL_SSL://:9094",
        "SLUICE_SASL_ENABLED_MECHANISMS": "PLAIN",
        "SLUICE_LISTENER_NAME_SASL__SSL_SSL_CLIENT_AUTH": "required",
        "SLUICE_LISTENER_NAME_SASL__SSL_SCRAM___SHA___512_SASL_JAAS_CONFIG": "x",
    }
    c = Config.load(environ=env)
    assert c.listener_security_settings("SASL_SSL")["ssl.client.auth"] == "required"
    assert c.properties["listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config"] == "x"
    assert c.ignored_environment == ()


def test_topic_synonyms_are_the_broker_keys_the_broker_resource_lists(tmp_path: Path) -> None:
    """Every synonym of every topic key (DescribeConfigs include_synonyms) names a broker key
    that the BROKER resource lists, with the value and source it lists there: a static key as
    set, else each key's own declared default (Kafka's ConfigHelper.configSynonyms)."""
    from sluice.protocol import messages as m
    from sluice.protocol.config_resources import ConfigSource, ResourceType
    from sluice.server.api.config_resources import ConfigResources
    from sluice.server.storage.log_config import TOPIC_KEYS, broker_synonyms
    from sluice.server.storage.log_manager import LogManager

    config = Config.load(
        None, ["log.retention.hours=2", "log.roll.ms=60000", f"log.dirs={tmp_path}"]
    )
    logs = LogManager(tmp_path, config.log_config())
    logs.open()
    try:
        logs.create_topic("t", 1, {})
        req = m.DescribeConfigsRequest
        body = req(
            resources=[
                req.DescribeConfigsResource(
                    resource_type=ResourceType.BROKER, resource_name="0", configuration_keys=None
                ),
                req.DescribeConfigsResource(
                    resource_type=ResourceType.TOPIC, resource_name="t", configuration_keys=None
                ),
            ],
            include_synonyms=True,
            include_documentation=False,
        )
        broker, topic = ConfigResources(config, logs).describe(body, 4).results
    finally:
        logs.close()
    listed = {e.name: {(s.value, s.source) for s in e.synonyms} for e in broker.configs}
    topic_entries = {e.name: e for e in topic.configs}
    assert set(topic_entries) == set(TOPIC_KEYS)
    checked = 0
    for name, entry in topic_entries.items():
        assert [s.name for s in entry.synonyms] == [
            n for n in broker_synonyms(name) for s in entry.synonyms if s.name == n
        ], name  # only its own broker keys, most specific first
        for s in entry.synonyms:
            assert (s.value, s.source) in listed[s.name], (name, s.name)
            checked += 1
    retention = [(s.name, s.value, s.source) for s in topic_entries["retention.ms"].synonyms]
    assert retention == [
        ("log.retention.hours", "2", ConfigSource.STATIC_BROKER_CONFIG),
        ("log.retention.hours", "168", ConfigSource.DEFAULT_CONFIG),
    ]
    segment_ms = [(s.name, s.source) for s in topic_entries["segment.ms"].synonyms]
    assert segment_ms == [
        ("log.roll.ms", ConfigSource.STATIC_BROKER_CONFIG),
        ("log.roll.hours", ConfigSource.DEFAULT_CONFIG),
    ]
    assert checked > 20
