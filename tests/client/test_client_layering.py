"""sluice.client and the connection under it (sluice.net) pack no Kafka frame themselves with
``struct``: one codec for broker and client (STYLE item 2). What they may import is checked with
the other rooms in test_layering.py."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "sluice"


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
    files = [*(PACKAGE / "client").glob("*.py"), *(PACKAGE / "net").glob("*.py")]
    users = sorted(str(p.relative_to(PACKAGE)) for p in files if "struct" in imports(p))
    assert users == ["client/partitioner.py", "net/connection.py"], users
