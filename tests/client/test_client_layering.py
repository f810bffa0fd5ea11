"""sluice.client packs no Kafka frame itself with ``struct``: one codec for broker and client
(STYLE item 2). What it may import is checked with the other rooms in test_layering.py."""

from __future__ import annotations

import ast
from pathlib import Path

CLIENT = Path(__file__).resolve().parents[2] / "sluice" / "client"


def imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
    return names


def test_only_frame_sizes_and_hashing_use_struct() -> None:
    # The size prefix is the one thing the connection reads itself (to know how much to await);
    # everything inside a frame is decoded by protocol/. The partitioner unpacks murmur2's
    # little-endian words of the key, which are not wire data.
    users = sorted(p.name for p in CLIENT.glob("*.py") if "struct" in imports(p))
    assert users == ["connection.py", "partitioner.py"], users
