"""protocol/ is sans-I/O: it imports no I/O module and nothing from server/ or client/."""

import ast
from pathlib import Path

FORBIDDEN = {"asyncio", "socket", "uvloop", "mmap", "server", "client", "structlog", "selectors"}
PROTOCOL = Path(__file__).resolve().parent.parent / "protocol"


def _imported_roots(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    roots: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            roots.add(node.module.split(".")[0])
    return roots


def test_protocol_does_no_io() -> None:
    files = sorted(PROTOCOL.rglob("*.py"))
    assert files, "protocol/ has no modules"
    offenders = {
        str(p.relative_to(PROTOCOL)): sorted(_imported_roots(p) & FORBIDDEN)
        for p in files
        if _imported_roots(p) & FORBIDDEN
    }
    assert offenders == {}


def test_layering_check_detects_a_violation(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("import asyncio\nfrom server.log import Log\n")
    assert _imported_roots(bad) & FORBIDDEN == {"asyncio", "server"}
