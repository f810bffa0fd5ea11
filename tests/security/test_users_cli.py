"""``python -m sluice.server.security``: kafka-configs' SCRAM syntax against the file and
ZooKeeper stores, and the users it makes authenticate real SCRAM clients."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from sluice.server.security.credentials import FileCredentialStore
from sluice.server.security.errors import InvalidCredential
from sluice.server.security.scram import ScramServerExchange
from sluice.server.security.users import main, parse_add_config, scram_upserts
from sluice.server.zk.client import ZkClient

from .clients import SCRAM_CLIENTS


def test_kafka_configs_syntax() -> None:
    assert parse_add_config(
        "SCRAM-SHA-256=[iterations=8192,password=alice-secret],SCRAM-SHA-512=[password=a,b]"
    ) == {"SCRAM-SHA-256": "iterations=8192,password=alice-secret", "SCRAM-SHA-512": "password=a,b"}
    creds = scram_upserts(
        {"SCRAM-SHA-256": "iterations=8192,password=x", "SCRAM-SHA-512": "password=y"}
    )
    assert (creds["SCRAM-SHA-256"].iterations, creds["SCRAM-SHA-512"].iterations) == (8192, 4096)
    with pytest.raises(InvalidCredential, match="Unexpected config names: producer_byte_rate"):
        scram_upserts({"producer_byte_rate": "1024"})
    with pytest.raises(InvalidCredential, match="Too few iterations"):
        scram_upserts({"SCRAM-SHA-256": "iterations=100,password=x"})
    with pytest.raises(InvalidCredential, match="key=val"):
        parse_add_config("SCRAM-SHA-256")


def test_file_store_before_the_broker_starts(tmp_path: Path) -> None:
    path = str(tmp_path / "users.json")
    runner = CliRunner()
    base = ["--credentials-file", path, "--entity-type", "users"]
    add = "SCRAM-SHA-512=[iterations=8192,password=alice-secret]"
    result = runner.invoke(main, [*base, "--entity-name", "alice", "--alter", "--add-config", add])
    assert result.exit_code == 0, result.output
    assert result.output == "Completed updating config for user alice.\n"
    store = FileCredentialStore(path)
    exchange = ScramServerExchange(
        "SCRAM-SHA-512", lambda u: store.scram_credential(u, "SCRAM-SHA-512")
    )
    SCRAM_CLIENTS["kafka-python"]("alice", "alice-secret", "SCRAM-SHA-512")(exchange.evaluate)
    assert exchange.complete
    result = runner.invoke(main, [*base, "--describe"])
    assert result.output == (
        "SCRAM credential configs for user-principal 'alice' are SCRAM-SHA-512=iterations=8192\n"
    )
    result = runner.invoke(main, [*base, "--describe", "--entity-name", "bob"])
    assert "Attempt to describe a user credential that does not exist: bob" in result.output
    result = runner.invoke(
        main, [*base, "--entity-name", "alice", "--alter", "--delete-config", "SCRAM-SHA-512"]
    )
    assert result.exit_code == 0 and FileCredentialStore(path).users() == {}
    result = runner.invoke(
        main,
        [*base, "--entity-name", "alice", "--alter", "--add-config", "SCRAM-SHA-1=[password=x]"],
    )
    assert result.exit_code != 0 and "Unexpected config names: SCRAM-SHA-1" in result.output
    result = runner.invoke(main, [*base, "--alter", "--add-config", "SCRAM-SHA-512=[password=x]"])
    assert result.exit_code != 0 and "--alter needs --entity-name" in result.output


def test_zookeeper_store_as_a_subprocess(sluice_zookeeper_connect: str) -> None:
    """The module entry point against the real ZooKeeper: Kafka's znode and notice appear."""
    command = [
        sys.executable, "-m", "sluice.server.security", "--zookeeper", sluice_zookeeper_connect,
        "--entity-type", "users", "--entity-name", "carol", "--alter",
        "--add-config", "SCRAM-SHA-256=[password=carol-secret]",
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().endswith("Completed updating config for user carol.")

    async def read() -> tuple[dict[str, object], list[str]]:
        zk = ZkClient(sluice_zookeeper_connect)
        await zk.start()
        try:
            data, _ = await zk.get("/config/users/carol")
            return json.loads(data), await zk.get_children("/config/changes")
        finally:
            await zk.close()

    config, notices = asyncio.run(read())
    assert list(config["config"]) == ["SCRAM-SHA-256"]  # type: ignore[call-overload]
    assert len(notices) == 1
