"""The ``sluice`` command line, run as a subprocess against a running broker; stdout checked."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from sluice.testing.embedded import EmbeddedBroker
from tests.broker_util import free_port

SCRIPT = Path(sys.executable).with_name("sluice")
# The installed script when it is this tree's entry point (an editable install made before the
# CLI moved still names the old module), else the module itself.
_CURRENT = SCRIPT.exists() and "sluice.cli.main" in SCRIPT.read_text(errors="replace")
COMMAND = [str(SCRIPT)] if _CURRENT else [sys.executable, "-m", "sluice.cli.main"]


@pytest.fixture(scope="module")
def broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(properties={"num.partitions": "1"}) as b:
        yield b


def sluice(
    broker: EmbeddedBroker | None, *args: str, stdin: str | None = None, status: int = 0
) -> subprocess.CompletedProcess[str]:
    """Run ``sluice ARGS --bootstrap-server ...``; assert the exit status."""
    extra = ["--bootstrap-server", broker.bootstrap_servers] if broker is not None else []
    result = subprocess.run(
        [*COMMAND, *args, *extra], input=stdin, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == status, f"{args}: {result.stdout}\n{result.stderr}"
    return result


def test_topics_lifecycle(broker: EmbeddedBroker) -> None:
    out = sluice(broker, "topics", "create", "--topic", "cli-t", "--partitions", "3",
                 "--config", "retention.ms=3600000").stdout  # fmt: skip
    assert out == "Created topic cli-t.\n"
    assert "cli-t" in sluice(broker, "topics", "list").stdout.splitlines()
    described = sluice(broker, "topics", "describe", "--topic", "cli-t").stdout
    summary, *rows = [line for line in described.splitlines() if "cli-t" in line]
    assert summary == (
        "Topic: cli-t\tPartitionCount: 3\tReplicationFactor: 1\tConfigs: retention.ms=3600000"
    )
    assert len(rows) == 3
    assert [re.findall(r"\S+", r.replace("│", " "))[:3] for r in rows] == [
        ["cli-t", str(p), "0"] for p in range(3)
    ]
    again = sluice(broker, "topics", "create", "--topic", "cli-t", status=1)
    assert "TopicAlreadyExists" in again.stderr
    sluice(broker, "topics", "create", "--topic", "cli-t", "--if-not-exists")
    assert sluice(broker, "topics", "delete", "--topic", "cli-t").stdout == "Deleted topic cli-t.\n"
    assert "cli-t" not in sluice(broker, "topics", "list").stdout.splitlines()


def test_topics_alter_adds_partitions(broker: EmbeddedBroker) -> None:
    sluice(broker, "topics", "create", "--topic", "cli-grow", "--partitions", "2")
    out = sluice(broker, "topics", "alter", "--topic", "cli-grow", "--partitions", "4").stdout
    assert out == "Topic cli-grow now has 4 partitions.\n"
    described = sluice(broker, "topics", "describe", "--topic", "cli-grow").stdout
    assert len([line for line in described.splitlines() if "│ cli-grow" in line]) == 4
    same = sluice(broker, "topics", "alter", "--topic", "cli-grow", "--partitions", "4", status=1)
    assert "InvalidPartitions" in same.stderr and "already has 4 partitions" in same.stderr
    missing = sluice(broker, "topics", "alter", "--topic", "nope", "--partitions", "4", status=1)
    assert "UnknownTopicOrPartition" in missing.stderr


def test_topic_configs_are_applied(broker: EmbeddedBroker) -> None:
    sluice(broker, "topics", "create", "--topic", "tiny", "--config", "max.message.bytes=200")
    sluice(broker, "produce", "--topic", "tiny", stdin="short\n")
    failed = sluice(broker, "produce", "--topic", "tiny", stdin="x" * 1000 + "\n", status=1)
    assert "records failed" in failed.stderr


def test_configs_describe_and_alter_a_topic(broker: EmbeddedBroker) -> None:
    """kafka-configs' flags and output: --describe lists what was altered (--all: every key),
    each with its source and synonyms; --alter sets and deletes in one request."""
    sluice(broker, "topics", "create", "--topic", "cfg", "--config", "retention.ms=3600000")
    topic = ("configs", "--entity-type", "topics", "--entity-name", "cfg")
    assert sluice(broker, *topic, "--describe").stdout == (
        "Dynamic configs for topic cfg are:\n"
        "  retention.ms=3600000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms="
        "3600000, DEFAULT_CONFIG:log.retention.hours=168}\n"
    )
    done = sluice(broker, *topic, "--alter", "--add-config",
                  "max.message.bytes=5000,cleanup.policy=[delete],segment.ms=60000",
                  "--delete-config", "retention.ms")  # fmt: skip
    assert done.stdout == "Completed updating config for topic cfg.\n"
    dynamic = sluice(broker, *topic, "--describe").stdout.splitlines()
    assert dynamic[0] == "Dynamic configs for topic cfg are:"
    assert [line.split()[0] for line in dynamic[1:]] == [
        "cleanup.policy=delete", "max.message.bytes=5000", "segment.ms=60000",
    ]  # fmt: skip
    every = sluice(broker, *topic, "--describe", "--all").stdout.splitlines()
    assert every[0] == "All configs for topic cfg are:"
    entries = {line.split()[0].partition("=")[0]: line for line in every[1:]}
    assert len(entries) > 30 and "compression.type" in entries
    assert entries["retention.ms"] == (  # back to the broker's default
        "  retention.ms=604800000 sensitive=false synonyms={DEFAULT_CONFIG:log.retention.hours="
        "168}"  # the broker key's own default, as Kafka prints it
    )
    assert (
        "synonyms={DYNAMIC_TOPIC_CONFIG:segment.ms=60000, DEFAULT_CONFIG:log.roll.hours=168}"
        in (entries["segment.ms"])
    )
    # kafka-topics --describe shows the topic's non-default configs
    summary = sluice(broker, "topics", "describe", "--topic", "cfg").stdout.splitlines()[0]
    assert summary.endswith(
        "Configs: cleanup.policy=delete,max.message.bytes=5000,segment.ms=60000"
    )
    # ... which the broker applies: a record over max.message.bytes is refused
    failed = sluice(broker, "produce", "--topic", "cfg", stdin="x" * 6000 + "\n", status=1)
    assert "records failed" in failed.stderr
    # Every topic when no --entity-name is given
    listed = sluice(broker, "configs", "--entity-type", "topics", "--describe").stdout
    assert "Dynamic configs for topic cfg are:\n  cleanup.policy=delete" in listed


def test_configs_refusals_name_the_kafka_error(broker: EmbeddedBroker) -> None:
    sluice(broker, "topics", "create", "--topic", "cfg-bad", "--config", "retention.ms=1000")
    topic = ("configs", "--entity-type", "topics", "--entity-name", "cfg-bad")
    bad = sluice(broker, *topic, "--alter", "--add-config", "retention.ms=soon,flush.ms=10",
                 status=1)  # fmt: skip
    assert "Error: INVALID_CONFIG:" in bad.stderr and "retention.ms='soon'" in bad.stderr
    unknown_key = sluice(broker, *topic, "--alter", "--add-config", "no.such.key=1", status=1)
    assert "INVALID_CONFIG" in unknown_key.stderr and "no.such.key" in unknown_key.stderr
    not_set = sluice(broker, *topic, "--alter", "--delete-config", "flush.ms", status=1)
    assert "INVALID_CONFIG: Invalid config(s): flush.ms" in not_set.stderr
    # nothing of the refused requests was applied
    assert sluice(broker, *topic, "--describe").stdout.splitlines()[1].split()[0] == (
        "retention.ms=1000"
    )
    assert len(sluice(broker, *topic, "--describe").stdout.splitlines()) == 2
    for action in (("--describe",), ("--alter", "--add-config", "retention.ms=1")):
        missing = sluice(broker, "configs", "--entity-type", "topics", "--entity-name", "nope",
                         *action, status=1)  # fmt: skip
        assert "Error: UNKNOWN_TOPIC_OR_PARTITION:" in missing.stderr, action
    # a static broker key (Kafka changes log.retention.ms live, not .hours): INVALID_CONFIG
    read_only = sluice(broker, "configs", "--entity-type", "brokers", "--entity-name", "0",
                       "--alter", "--add-config", "log.retention.hours=1", status=1)  # fmt: skip
    assert "Error: INVALID_CONFIG:" in read_only.stderr
    assert "Cannot update these configs dynamically: Set(log.retention.hours)" in read_only.stderr
    for usage in (
        ("--describe", "--alter"),
        ("--alter",),
        ("--alter", "--add-config", "novalue"),
        ("--describe", "--add-config", "a=1"),
        ("--describe", "--entity-default"),
    ):
        sluice(broker, *topic, *usage, status=2)
    sluice(broker, "configs", "--entity-type", "ips", "--describe", status=2)


def test_configs_describe_brokers(broker: EmbeddedBroker) -> None:
    brokers = ("configs", "--entity-type", "brokers")
    assert sluice(broker, *brokers, "--describe").stdout == (
        "Dynamic configs for broker 0 are:\nDefault configs for brokers in the cluster are:\n"
    )
    every = sluice(broker, *brokers, "--entity-name", "0", "--describe", "--all").stdout
    lines = every.splitlines()
    assert lines[0] == "All configs for broker 0 are:"
    assert (
        "  num.partitions=1 sensitive=false synonyms={STATIC_BROKER_CONFIG:num.partitions=1, "
        "DEFAULT_CONFIG:num.partitions=1}"
    ) in lines
    assert (
        "  log.segment.bytes=1073741824 sensitive=false "
        "synonyms={DEFAULT_CONFIG:log.segment.bytes=1073741824}"
    ) in lines
    default = sluice(broker, *brokers, "--entity-default", "--describe", "--all").stdout
    assert default.splitlines()[0] == "Default configs for brokers in the cluster are:"
    wrong = sluice(broker, *brokers, "--entity-name", "7", "--describe", status=1)
    assert "Error: INVALID_REQUEST:" in wrong.stderr
    # Dynamic: the cluster default, then this broker's own over it (kafka-configs' output).
    key = "log.cleaner.delete.retention.ms"  # (only compacted topics would notice)
    out = sluice(broker, *brokers, "--entity-default", "--alter", "--add-config", f"{key}=5000")
    assert out.stdout == "Completed updating default config for brokers in the cluster.\n"
    out = sluice(broker, *brokers, "--entity-name", "0", "--alter", "--add-config", f"{key}=6000")
    assert out.stdout == "Completed updating config for broker 0.\n"
    assert sluice(broker, *brokers, "--describe").stdout == (
        "Dynamic configs for broker 0 are:\n"
        f"  {key}=6000 sensitive=false synonyms={{DYNAMIC_BROKER_CONFIG:{key}=6000, "
        f"DYNAMIC_DEFAULT_BROKER_CONFIG:{key}=5000, DEFAULT_CONFIG:{key}=86400000}}\n"
        "Default configs for brokers in the cluster are:\n"
        f"  {key}=5000 sensitive=false synonyms={{DYNAMIC_DEFAULT_BROKER_CONFIG:{key}=5000, "
        f"DEFAULT_CONFIG:{key}=86400000}}\n"
    )
    sluice(broker, *brokers, "--entity-name", "0", "--alter", "--delete-config", key)
    sluice(broker, *brokers, "--entity-default", "--alter", "--delete-config", key)
    assert sluice(broker, *brokers, "--describe").stdout == (
        "Dynamic configs for broker 0 are:\nDefault configs for brokers in the cluster are:\n"
    )


def test_produce_and_consume_lines(broker: EmbeddedBroker) -> None:
    produced = sluice(broker, "produce", "--topic", "lines", "--key-separator", ":",
                      "--header", "source=cli", "--header", "n=1",
                      stdin="k1:first\nk2:second:with:colons\nk1:third\n")  # fmt: skip
    assert "Produced 3 record(s)" in produced.stderr
    out = sluice(broker, "consume", "--topic", "lines", "--from-beginning", "--max-messages", "3")
    assert out.stdout == "first\nsecond:with:colons\nthird\n"
    assert "Processed a total of 3 messages" in out.stderr
    keyed = sluice(broker, "consume", "--topic", "lines", "--from-beginning", "--max-messages",
                   "1", "--print-key", "--key-separator", "=")  # fmt: skip
    assert keyed.stdout == "k1=first\n"
    as_json = sluice(broker, "consume", "--topic", "lines", "--from-beginning", "--max-messages",
                     "3", "--format", "json").stdout  # fmt: skip
    records = [json.loads(line) for line in as_json.splitlines()]
    assert [(r["offset"], r["key"], r["value"]) for r in records] == [
        (0, "k1", "first"), (1, "k2", "second:with:colons"), (2, "k1", "third"),
    ]  # fmt: skip
    assert records[0]["headers"] == [["source", "cli"], ["n", "1"]]
    assert records[0]["topic"] == "lines" and records[0]["partition"] == 0


def test_produce_from_file_and_consume_from_offset(broker: EmbeddedBroker, tmp_path: Path) -> None:
    source = tmp_path / "in.txt"
    source.write_text("".join(f"line-{i}\n" for i in range(10)))
    sluice(broker, "produce", "--topic", "fromfile", "--file", str(source))
    out = sluice(broker, "consume", "--topic", "fromfile", "--partition", "0", "--offset", "7",
                 "--max-messages", "3").stdout  # fmt: skip
    assert out == "line-7\nline-8\nline-9\n"


def test_consume_from_timestamp_and_latest(broker: EmbeddedBroker) -> None:
    sluice(broker, "produce", "--topic", "timed", stdin="old\n")
    marker = json.loads(sluice(broker, "consume", "--topic", "timed", "--from-beginning",
                               "--max-messages", "1", "--format", "json").stdout)  # fmt: skip
    sluice(broker, "produce", "--topic", "timed", stdin="new\n")
    # "new" was produced a whole CLI run after "old": its timestamp is later.
    after = sluice(broker, "consume", "--topic", "timed", "--timestamp",
                   str(marker["timestamp"] + 1), "--max-messages", "1").stdout  # fmt: skip
    assert after == "new\n"
    from_marker = sluice(broker, "consume", "--topic", "timed", "--timestamp",
                         str(marker["timestamp"]), "--max-messages", "2").stdout  # fmt: skip
    assert from_marker == "old\nnew\n"
    latest = sluice(broker, "consume", "--topic", "timed", "--timeout-ms", "500")
    assert latest.stdout == ""
    assert "Processed a total of 0 messages" in latest.stderr


def test_bad_input(broker: EmbeddedBroker) -> None:
    missing = sluice(broker, "produce", "--topic", "sep", "--key-separator", ":",
                     stdin="a:1\nno separator\n", status=1)  # fmt: skip
    assert "line 2: no key separator" in missing.stderr
    usage = sluice(broker, "consume", "--topic", "sep", "--offset", "3", status=2)
    assert "--offset needs --partition" in usage.stderr
    unknown = sluice(broker, "consume", "--topic", "does-not-exist", "--timeout-ms", "100",
                     status=1)  # fmt: skip
    assert "UnknownTopicOrPartition" in unknown.stderr


def test_unreachable_broker_exits_1() -> None:
    result = subprocess.run(
        [*COMMAND, "topics", "list", "--bootstrap-server", f"127.0.0.1:{free_port()}"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 1
    assert "no broker reachable" in result.stderr


def test_offsets(broker: EmbeddedBroker) -> None:
    sluice(broker, "topics", "create", "--topic", "offs", "--partitions", "2")
    sluice(broker, "produce", "--topic", "offs", "--partition", "1", stdin="a\nb\nc\n")
    assert sluice(broker, "offsets", "--topic", "offs").stdout == "offs:0:0\noffs:1:3\n"
    earliest = sluice(broker, "offsets", "--topic", "offs", "--time", "-2", "--partition", "1")
    assert earliest.stdout == "offs:1:0\n"
    future = sluice(broker, "offsets", "--topic", "offs", "--time", "4000000000000")
    assert future.stdout == "offs:0:\noffs:1:\n"  # no record that late


def test_dump_log(broker: EmbeddedBroker) -> None:
    sluice(broker, "produce", "--topic", "dumped", stdin="alpha\nbeta\n")
    segment = next((broker.data_dir / "dumped-0").glob("*.log"))
    out = sluice(None, "dump-log", "--files", str(segment), "--print-data-log").stdout
    assert "baseOffset: 0 lastOffset: 1 count: 2" in out
    assert "payload: alpha" in out and "payload: beta" in out
    epochs = broker.data_dir / "dumped-0" / "leader-epoch-checkpoint"
    assert sluice(None, "dump-log", "--files", str(epochs)).stdout.splitlines()[1:] == [
        "epoch: 0 startOffset: 0"
    ]
    verify = sluice(None, "dump-log", "--verify", str(broker.data_dir)).stdout
    assert re.search(r"Verified \d+ partition\(s\) under .*: 0 problem\(s\)", verify)


def test_perf_produce_and_consume(broker: EmbeddedBroker) -> None:
    out = sluice(broker, "perf", "produce", "--topic", "perf", "--num-records", "2000",
                 "--record-size", "50").stdout  # fmt: skip
    assert re.fullmatch(
        r"2000 records sent, [\d.]+ records/sec \([\d.]+ MB/sec\), [\d.]+ ms avg latency, "
        r"[\d.]+ ms max latency, \d+ ms 50th, \d+ ms 95th, \d+ ms 99th, \d+ ms 99\.9th\.\n",
        out,
    )
    assert sluice(broker, "offsets", "--topic", "perf").stdout == "perf:0:2000\n"
    consumed = sluice(broker, "perf", "consume", "--topic", "perf", "--messages", "2000").stdout
    assert re.fullmatch(
        r"2000 records consumed, 0\.10 MB, [\d.]+ records/sec \([\d.]+ MB/sec\) in [\d.]+ s\n",
        consumed,
    )


def test_configs_client_quotas_as_kafka_configs(broker: EmbeddedBroker) -> None:
    """kafka-configs' quota syntax: users, clients, a user's client id, the default entities."""
    user = ("configs", "--entity-type", "users", "--entity-name", "qa")
    out = sluice(broker, *user, "--alter", "--add-config",
                 "producer_byte_rate=1024,consumer_byte_rate=2048").stdout  # fmt: skip
    assert out == "Completed updating config for user qa.\n"
    both = ("configs", "--entity-type", "users", "--entity-name", "qa",
            "--entity-type", "clients", "--entity-name", "app")  # fmt: skip
    out = sluice(broker, *both, "--alter", "--add-config", "request_percentage=12.5").stdout
    assert out == "Completed updating config for entity: user-principal 'qa', client-id 'app'.\n"
    default = ("configs", "--entity-type", "clients", "--entity-default")
    out = sluice(broker, *default, "--alter", "--add-config", "producer_byte_rate=99").stdout
    assert out == "Completed updating default config for clients in the cluster.\n"

    assert sluice(broker, *user, "--describe").stdout == (
        "Quota configs for user-principal 'qa' are "
        "producer_byte_rate=1024.0, consumer_byte_rate=2048.0\n"
    )
    assert sluice(broker, *both, "--describe").stdout == (
        "Quota configs for user-principal 'qa', client-id 'app' are request_percentage=12.5\n"
    )
    assert sluice(broker, "configs", "--entity-type", "clients", "--describe").stdout == (
        "Quota configs for the default client-id are producer_byte_rate=99.0\n"
    )
    sluice(broker, *user, "--alter", "--delete-config", "consumer_byte_rate")
    assert "consumer_byte_rate" not in sluice(broker, *user, "--describe").stdout
    bad = sluice(broker, *user, "--alter", "--add-config", "producer_byte_rate=1.5", status=1)
    assert "INVALID_REQUEST" in bad.stderr and "must be a LONG value" in bad.stderr


def test_a_command_imports_no_storage_module() -> None:
    """Only ``dump-log`` reads the storage engine's files: the other commands start without the
    broker's storage modules (and their logging), ~50 ms at every start; ``--help`` lists it."""
    probe = (
        "import json, sys; from sluice.cli.main import cli\n"
        "try:\n    cli.main(sys.argv[1:], standalone_mode=False)\n"
        "finally:\n"
        "    print(json.dumps(sorted(m for m in sys.modules if m.startswith('sluice.server'))))"
    )

    def loaded(*args: str) -> tuple[str, list[str]]:
        out = subprocess.run([sys.executable, "-c", probe, *args], capture_output=True,
                             text=True, check=True).stdout  # fmt: skip
        *text, modules = out.strip().splitlines()
        return "\n".join(text), json.loads(modules)

    _, modules = loaded("topics", "--help")
    assert not [m for m in modules if m.startswith("sluice.server.storage")], modules
    usage, _ = loaded("--help")
    assert "dump-log" in usage
    _, modules = loaded("dump-log", "--help")
    assert "sluice.server.storage.dump_log" in modules
