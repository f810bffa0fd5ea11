"""Standalone mode stays as it was: ``python -m sluice.server`` without ``zookeeper.connect``
never imports kazoo or the ZooKeeper room (spec ``replication.md`` §1: the embedded default
must stay as fast to start as it is); nor ``prometheus_client`` unless ``sluice.metrics.listener``
asks for the endpoint."""

from __future__ import annotations

import pytest

from sluice.testing import EmbeddedBroker


def test_standalone_start_does_not_load_kazoo(monkeypatch: pytest.MonkeyPatch) -> None:
    # -X importtime for the broker subprocess: every module it imports is named on stderr,
    # which EmbeddedBroker writes to its log together with the JSON log lines.
    monkeypatch.setenv("PYTHONPROFILEIMPORTTIME", "1")
    with EmbeddedBroker(mode="subprocess") as broker:
        assert broker.log_path is not None
        log = broker.log_path.read_text(errors="replace")
    imported = {
        line.rsplit("|", 1)[-1].strip()
        for line in log.splitlines()
        if line.startswith("import time:")
    }
    assert "sluice.server.server" in imported  # the importtime lines are really there
    assert not {m for m in imported if m.split(".")[0] == "kazoo"}
    assert not {m for m in imported if m.startswith("sluice.server.zk")}
    assert not {m for m in imported if m.split(".")[0] == "prometheus_client"}
