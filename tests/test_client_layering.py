"""client/ speaks the wire only through protocol/ (one codec for broker and client, STYLE item 2):
no client module imports server/ (except the CLI, which wraps server.dump_log for ``sluice
dump-log``), and none packs Kafka frames itself with ``struct``."""

from __future__ import annotations

import ast
from pathlib import Path

CLIENT = Path(__file__).resolve().parent.parent / "client"
ALLOWED_SERVER_IMPORTS = {"cli.py": {"server.dump_log"}}


def imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
    return names


def test_client_uses_protocol_not_server() -> None:
    files = sorted(CLIENT.glob("*.py"))
    assert len(files) >= 8
    offenders = {}
    for path in files:
        server = {n for n in imports(path) if n.split(".")[0] == "server"}
        server -= ALLOWED_SERVER_IMPORTS.get(path.name, set())
        if server:
            offenders[path.name] = sorted(server)
    assert offenders == {}
    wire = imports(CLIENT / "connection.py")
    assert {"protocol.framing"} <= wire or "protocol" in wire


def test_only_frame_sizes_and_hashing_use_struct() -> None:
    # The size prefix is the one thing the connection reads itself (to know how much to await);
    # everything inside a frame is decoded by protocol/. The partitioner unpacks murmur2's
    # little-endian words of the key, which are not wire data.
    users = sorted(p.name for p in CLIENT.glob("*.py") if "struct" in imports(p))
    assert users == ["connection.py", "partitioner.py"], users
