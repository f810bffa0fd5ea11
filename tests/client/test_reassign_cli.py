"""``sluice reassign-partitions`` / ``sluice leader-election``: what they refuse before asking
any broker (Kafka's tools' checks and messages). Their runs against a cluster are in
``tests/cluster/test_cluster_reassignment.py``."""

from __future__ import annotations

import json
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from sluice.cli.main import cli
from sluice.cli.reassign import parse_reassignment
from sluice.client.cluster import TopicPartition

#: Nothing listens here: a command that got past its checks would fail to connect instead.
NOWHERE = ["--bootstrap-server", "127.0.0.1:1"]


def test_parse_reassignment_is_kafkas() -> None:
    doc = {
        "version": 1,
        "partitions": [
            {"topic": "a", "partition": 0, "replicas": [2, 3], "log_dirs": ["any", "any"]},
            {"topic": "a", "partition": 1, "replicas": [1]},
        ],
    }
    assert parse_reassignment(doc) == {TopicPartition("a", 0): [2, 3], TopicPartition("a", 1): [1]}
    for bad, text in (
        ({"version": 2, "partitions": []}, "version 1"),
        ({"partitions": []}, "cannot be empty"),
        ({"partitions": [{"topic": "a", "partition": 0}]}, "Invalid partition entry"),
        ({"partitions": [{"topic": "a", "partition": 0, "replicas": [1, 1]}]}, "duplicate"),
        (
            {"partitions": [{"topic": "a", "partition": 0, "replicas": [1]}] * 2},
            "Duplicate reassignment for partition a-0",
        ),
        (
            {"partitions": [{"topic": "a", "partition": 0, "replicas": [1], "log_dirs": ["/d"]}]},
            "log_dirs",
        ),
    ):
        with pytest.raises(click.ClickException, match=text):
            parse_reassignment(bad)


def test_reassign_partitions_usage(tmp_path: Path) -> None:
    file = tmp_path / "r.json"
    file.write_text(json.dumps({"partitions": [{"topic": "a", "partition": 0, "replicas": [1]}]}))
    runner = CliRunner()
    for args, text in (
        (["--execute", "--verify"], "exactly one action"),
        ([], "exactly one action"),
        (["--execute"], "--reassignment-json-file is required"),
        (
            ["--verify", "--reassignment-json-file", str(file), "--throttle", "1000"],
            "--throttle is only valid with --execute",
        ),
        (
            [
                "--execute",
                "--reassignment-json-file",
                str(file),
                "--replica-alter-log-dirs-throttle",
                "1000",
            ],
            "one log directory",
        ),
    ):
        result = runner.invoke(cli, ["reassign-partitions", *NOWHERE, *args])
        assert result.exit_code == 2 and text in result.output, (args, result.output)


def test_leader_election_usage() -> None:
    runner = CliRunner()
    for args, text in (
        (["--election-type", "preferred"], "One and only one"),
        (["--election-type", "preferred", "--all-topic-partitions", "--topic", "t"], "One and"),
        (["--election-type", "preferred", "--topic", "t"], "--topic and --partition"),
        (["--election-type", "sideways", "--all-topic-partitions"], "sideways"),
    ):
        result = runner.invoke(cli, ["leader-election", *NOWHERE, *args])
        assert result.exit_code == 2 and text in result.output, (args, result.output)
