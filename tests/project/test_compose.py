"""compose.yaml (a 3-broker cluster in containers) stays true: each broker's command is one the
entrypoint accepts -- every override a key Sluice knows, with a valid value -- ids and ports are
distinct, every broker advertises what it listens on and all share one ZooKeeper. (No container
engine can pull images on the build machines; the command itself is what can drift.)"""

from __future__ import annotations

import re
from pathlib import Path

from sluice.server.core.config import Config

REPO = Path(__file__).resolve().parents[2]


def broker_commands() -> dict[str, list[str]]:
    """``{service: command list}`` for the sluice-N services (a line parser: the file is ours
    and simple; no YAML library is a dependency)."""
    commands: dict[str, list[str]] = {}
    service = None
    in_command = False
    for line in (REPO / "compose.yaml").read_text().splitlines():
        if m := re.fullmatch(r"  (sluice-\d+):", line):
            service, in_command = m.group(1), False
            commands[service] = []
        elif service and line.strip() == "command:":
            in_command = True
        elif service and in_command and (m := re.fullmatch(r"      - (.+)", line)):
            commands[service].append(m.group(1))
        elif line.strip() and not line.startswith("      "):
            in_command = False
            if not line.startswith(" "):
                service = None
    return commands


def test_every_broker_command_is_a_valid_cluster_config() -> None:
    commands = broker_commands()
    assert sorted(commands) == ["sluice-1", "sluice-2", "sluice-3"]
    ids, ports, zookeepers = set(), set(), set()
    for service, command in commands.items():
        assert command[:3] == ["sluice-server", "--config", "/opt/sluice/config/server.properties"]
        args = command[3:]
        assert args[0::2] == ["--override"] * (len(args) // 2)
        overrides = args[1::2]
        config = Config.load(REPO / "config" / "server.properties", overrides)
        assert config.ignored_keys == (), (service, config.ignored_keys)
        assert config.cluster_mode
        assert service == f"sluice-{config.node_id}"
        assert config.listener.port == config.advertised_listener.port
        ids.add(config.node_id)
        ports.add(config.listener.port)
        zookeepers.add(config.zookeeper_connect)
        assert config.default_replication_factor == 3
    assert len(ids) == len(ports) == 3
    assert len(zookeepers) == 1
