"""The ``sluice_broker`` fixture as an outside project sees it: a throwaway project directory with
its own test file, run by a separate ``pytest`` process that finds the fixture only through the
installed ``pytest11`` entry point (no conftest, no ``-p``)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

# Each test runs a pytest session of its own in a subprocess: seconds apiece.
pytestmark = pytest.mark.slow

OUTSIDE_TESTS = """
import asyncio
import socket

import pytest

from sluice.client import Producer


def test_sync_test_can_connect(sluice_broker):
    host, port = sluice_broker.bootstrap_servers.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=5):
        pass
    assert sluice_broker.data_dir.is_dir()


@pytest.mark.asyncio
async def test_async_test_produces(sluice_broker):
    async with Producer(sluice_broker.bootstrap_servers) as producer:
        meta = await producer.send_and_wait("outside", b"hello")
    assert (meta.topic, meta.offset) == ("outside", 0)


def test_each_test_gets_a_fresh_broker(sluice_broker):
    async def produce():
        async with Producer(sluice_broker.bootstrap_servers) as producer:
            return await producer.send_and_wait("outside", b"again")
    assert asyncio.run(produce()).offset == 0  # not 1: the previous test's data is gone


@pytest.mark.sluice_broker(properties={"num.partitions": "5"})
def test_marker_configures_the_broker(sluice_broker):
    async def partitions():
        async with Producer(sluice_broker.bootstrap_servers) as producer:
            return await producer.partitions_for("five")
    assert asyncio.run(partitions()) == [0, 1, 2, 3, 4]


@pytest.mark.sluice_broker(mode="subprocess")
def test_subprocess_mode(sluice_broker):
    assert sluice_broker.process is not None and sluice_broker.process.poll() is None


def test_groups_start_without_the_initial_rebalance_delay(sluice_broker):
    from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType

    admin = AdminClient({"bootstrap.servers": sluice_broker.bootstrap_servers})
    resource = ConfigResource(ResourceType.BROKER, "0")
    configs = admin.describe_configs([resource])[resource].result(20)
    assert configs["group.initial.rebalance.delay.ms"].value == "0"
"""


def run_pytest(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_fixture_works_in_an_outside_project(tmp_path: Path) -> None:
    (tmp_path / "test_outside.py").write_text(textwrap.dedent(OUTSIDE_TESTS))
    result = run_pytest(tmp_path, "--strict-markers")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "6 passed" in result.stdout


def test_fixture_comes_from_the_entry_point(tmp_path: Path) -> None:
    (tmp_path / "test_outside.py").write_text(textwrap.dedent(OUTSIDE_TESTS))
    result = run_pytest(tmp_path, "-p", "no:sluice", "-k", "sync_test")
    assert result.returncode != 0
    assert "fixture 'sluice_broker' not found" in result.stdout


def test_failing_outside_test_is_reported(tmp_path: Path) -> None:
    (tmp_path / "test_fails.py").write_text(
        "def test_wrong(sluice_broker):\n    assert sluice_broker.bootstrap_servers == 'nope'\n"
    )
    result = run_pytest(tmp_path)
    assert result.returncode == 1
    assert "1 failed" in result.stdout
