"""Every repository path a docstring names exists (``sluice/server/api/handlers.py``,
``tests/cluster/...``, ``bench/NOTES.md``): a moved or deleted file leaves no stale pointer."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCANNED = ("sluice", "tests", "bench", "scripts")
#: A path from the repository root: a top-level directory, then at least one more part.
PATH = re.compile(r"(?<![\w./-])((?:sluice|tests|bench|scripts|config|docs)/[\w./*-]*[\w*])")


def docstrings(source: str) -> list[tuple[int, str]]:
    """(line, text) of the module's, every class's and every function's docstring."""
    tree = ast.parse(source)
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            doc = ast.get_docstring(node, clean=False)
            if doc is not None:
                body = node.body[0]
                found.append((body.lineno, doc))
    return found


def named_paths(text: str) -> set[str]:
    """Repository paths in ``text`` (``...`` ends a path; ``*`` is a glob)."""
    return {match.group(1).split("...")[0].rstrip("./") for match in PATH.finditer(text)}


def exists(root: Path, path: str) -> bool:
    return any(root.glob(path)) if "*" in path else (root / path).exists()


def stale_paths(root: Path = ROOT) -> list[str]:
    stale = []
    for top in SCANNED:
        for file in sorted((root / top).rglob("*.py")):
            for line, doc in docstrings(file.read_text()):
                for path in sorted(named_paths(doc)):
                    if not exists(root, path):
                        stale.append(f"{file.relative_to(root)}:{line}: {path}")
    return stale


def test_every_path_named_in_a_docstring_exists() -> None:
    assert stale_paths() == []


def test_a_stale_path_is_found(tmp_path: Path) -> None:
    (tmp_path / "sluice").mkdir()
    (tmp_path / "sluice" / "real.py").write_text(
        '"""See sluice/real.py, tests/gone/test_x.py, sluice/re*.py and tests/x_*.py."""\n'
        "def f():\n    '''Moved: sluice/server/core/handlers.py.'''\n"
    )
    assert stale_paths(tmp_path) == [
        "sluice/real.py:1: tests/gone/test_x.py",
        "sluice/real.py:1: tests/x_*.py",
        "sluice/real.py:3: sluice/server/core/handlers.py",
    ]
