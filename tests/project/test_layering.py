"""The rooms of the ``sluice`` package and what each may import (STYLE items 1 and 13).

* ``sluice.protocol`` is sans-I/O: no I/O module, nothing else of Sluice.
* ``sluice.server.config_def`` (how settings are declared) imports nothing of Sluice: every
  room of the server may import it.
* ``sluice.server.storage`` imports only ``sluice.protocol`` and itself, and no network code.
* ``sluice.server.group`` (coordinator, offsets store) sits on storage, never on the core.
* ``sluice.server.zk`` (everything that talks to ZooKeeper) knows the protocol's value types and
  the logging module, nothing of the core, storage or group rooms: the core uses it, not the
  other way round.
* ``sluice.server.controller`` decides cluster state from what ZooKeeper holds: it sees
  ZooKeeper (``sluice.server.zk``) and the protocol, never the core, storage or groups.
* ``sluice.client`` speaks the wire only through ``sluice.protocol`` (the CLI also wraps the
  dump-log tool and the pipeline jobs).
* Nothing but ``sluice.testing`` and the core imports the broker core; nothing imports
  ``sluice.testing`` except itself.
* Metrics registration lives in the core: only ``sluice.server.core`` imports
  ``prometheus_client`` (and the HTTP server it brings).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "sluice"
IO_MODULES = {"asyncio", "socket", "selectors", "ssl", "uvloop", "mmap", "structlog", "kazoo"}
NETWORK_MODULES = {"socket", "selectors", "ssl", "uvloop", "kazoo"}


def module_name(path: Path, package: Path = PACKAGE) -> str:
    parts = path.relative_to(package.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(path: Path, root: Path = PACKAGE) -> set[str]:
    """Absolute names of every module ``path`` imports (relative imports resolved)."""
    package = module_name(path, root).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            names.add(".".join([*base, *([node.module] if node.module else [])]))
    return names


def _within(name: str, rooms: tuple[str, ...]) -> bool:
    return any(name == room or name.startswith(room + ".") for room in rooms)


def room_violations(
    room: str, allowed: tuple[str, ...], forbidden: set[str], root: Path = PACKAGE
) -> dict[str, list[str]]:
    """Modules of ``room`` importing a ``sluice`` module outside ``allowed`` or a ``forbidden``
    root."""
    base = root.parent / room.replace(".", "/")
    files = sorted(base.rglob("*.py")) if base.is_dir() else [base.with_suffix(".py")]
    assert all(f.exists() for f in files) and files, f"{room} has no modules"
    found: dict[str, list[str]] = {}
    for path in files:
        bad = sorted(
            name
            for name in imported(path, root)
            if name.split(".")[0] in forbidden
            or (name.startswith("sluice") and not _within(name, allowed))
        )
        if bad:
            found[module_name(path, root)] = bad
    return found


RULES = [
    ("sluice.protocol", ("sluice.protocol",), IO_MODULES),
    ("sluice.server.config_def", (), IO_MODULES),
    (
        "sluice.server.storage",
        ("sluice.protocol", "sluice.server.config_def", "sluice.server.storage"),
        NETWORK_MODULES,
    ),
    (
        "sluice.server.group",
        (
            "sluice.protocol",
            "sluice.server.config_def",
            "sluice.server.storage",
            "sluice.server.group",
            "sluice.server.logging",
        ),
        NETWORK_MODULES,
    ),
    (
        "sluice.server.zk",
        ("sluice.protocol", "sluice.server.logging", "sluice.server.zk"),
        set(),
    ),
    (
        "sluice.server.controller",
        (
            "sluice.protocol",
            "sluice.server.config_def",
            "sluice.server.controller",
            "sluice.server.zk",
            "sluice.server.logging",
        ),
        set(),
    ),
    ("sluice.client", ("sluice.protocol", "sluice.client"), set()),
    (
        "sluice.pipeline",
        ("sluice.protocol", "sluice.pipeline", "sluice.client", "sluice.server.storage"),
        set(),
    ),
]
#: Known, deliberate exceptions: the CLI wraps the dump-log tool and the Spark jobs.
EXCEPTIONS = {
    "sluice.client.cli": {"sluice.server.storage.dump_log", "sluice.pipeline.cli"},
}


@pytest.mark.parametrize(("room", "allowed", "forbidden"), RULES, ids=[r[0] for r in RULES])
def test_room_imports_only_what_it_may(
    room: str, allowed: tuple[str, ...], forbidden: set[str]
) -> None:
    found = room_violations(room, allowed, forbidden)
    for module, ok in EXCEPTIONS.items():
        if module in found:
            found[module] = [n for n in found[module] if n not in ok]
            if not found[module]:
                del found[module]
    assert found == {}


def test_nothing_outside_testing_imports_testing() -> None:
    offenders = {
        module_name(p): sorted(n for n in imported(p) if n.startswith("sluice.testing"))
        for p in PACKAGE.rglob("*.py")
        if not module_name(p).startswith("sluice.testing") and module_name(p) != "sluice"
    }
    assert {k: v for k, v in offenders.items() if v} == {}


def test_only_the_core_imports_prometheus_client() -> None:
    offenders = {
        module_name(p): sorted(n for n in imported(p) if n.split(".")[0] == "prometheus_client")
        for p in PACKAGE.rglob("*.py")
        if not module_name(p).startswith("sluice.server.core")
    }
    assert {k: v for k, v in offenders.items() if v} == {}
    importers = {
        module_name(p)
        for p in PACKAGE.rglob("*.py")
        if any(n.split(".")[0] == "prometheus_client" for n in imported(p))
    }
    assert importers == {"sluice.server.core.prometheus"}


def test_layering_check_detects_a_violation(tmp_path: Path) -> None:
    fake = tmp_path / "sluice" / "server" / "storage"
    fake.mkdir(parents=True)
    (fake / "bad.py").write_text(
        "import socket\nfrom sluice.server.core.handlers import Handlers\nfrom . import log\n"
        "from ..core import server\n"
    )
    found = room_violations(
        "sluice.server.storage", RULES[2][1], NETWORK_MODULES, tmp_path / "sluice"
    )
    assert found == {
        "sluice.server.storage.bad": ["sluice.server.core", "sluice.server.core.handlers", "socket"]
    }
