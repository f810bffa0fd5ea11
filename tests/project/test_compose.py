"""compose.yaml (a 3-broker cluster in containers) stays true: each broker's environment is one
the entrypoint accepts -- every ``SLUICE_`` variable names a key Sluice knows, with a valid value,
on top of the image's own environment -- ids and ports are distinct (the Kafka listeners and the
metrics endpoints: the brokers share the host's network), every broker advertises what it listens
on and serves ``/metrics``, and all share one ZooKeeper. (No container engine can pull images on
the build machines; the configuration itself is what can drift.)"""

from __future__ import annotations

import re
from pathlib import Path

from sluice.server.config import Config
from tests.project.test_dockerfile import _exec_form, _image_env, _instruction

REPO = Path(__file__).resolve().parents[2]


def broker_environments() -> dict[str, dict[str, str]]:
    """``{service: environment}`` for the sluice-N services (a line parser: the file is ours
    and simple; no YAML library is a dependency)."""
    envs: dict[str, dict[str, str]] = {}
    service = None
    in_env = False
    for line in (REPO / "compose.yaml").read_text().splitlines():
        if m := re.fullmatch(r"  (sluice-\d+):", line):
            service, in_env = m.group(1), False
            envs[service] = {}
        elif service and line.strip() == "environment:":
            in_env = True
        elif service and in_env and (m := re.fullmatch(r"      (\w+): (.+)", line)):
            envs[service][m.group(1)] = m.group(2).strip('"')
        elif line.strip() and not line.startswith("      "):
            in_env = False
            if not line.startswith(" "):
                service = None
    return envs


def test_every_broker_environment_is_a_valid_cluster_config() -> None:
    envs = broker_environments()
    assert sorted(envs) == ["sluice-1", "sluice-2", "sluice-3"]
    assert "command:" not in (REPO / "compose.yaml").read_text()  # the image's CMD
    command = _exec_form(_instruction("CMD"))
    assert command == ["sluice-server", "--config", "/opt/sluice/config/server.properties"]
    ids, ports, metrics_ports, zookeepers = set(), set(), set(), set()
    for service, env in envs.items():
        config = Config.load(REPO / "config" / "server.properties", environ={**_image_env(), **env})
        assert config.ignored_keys == config.ignored_environment == (), service
        assert set(env) <= {f"SLUICE_{k.upper().replace('.', '_')}" for k in
                            config.environment_keys}  # fmt: skip
        assert config.cluster_mode
        assert service == f"sluice-{config.node_id}"
        assert config.listener.port == config.advertised_listener.port
        assert config.log_dirs == "/var/lib/sluice"  # the image's volume
        ids.add(config.node_id)
        ports.add(config.listener.port)
        assert config.metrics_listener is not None, service
        assert config.metrics_listener.path == "/metrics"
        metrics_ports.add(config.metrics_listener.port)
        zookeepers.add(config.zookeeper_connect)
        assert config.default_replication_factor == 3
    assert len(ids) == len(ports) == len(metrics_ports) == 3
    assert not ports & metrics_ports
    assert len(zookeepers) == 1
