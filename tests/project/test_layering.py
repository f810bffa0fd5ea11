"""The rooms of the ``sluice`` package and what each may import (STYLE items 1 and 13).

Every module belongs to exactly one room of :data:`ROOMS`; a room may import itself and what its
row lists (a room, or one module of a room where only that module may be used), nothing else of
``sluice``. Imports inside ``if TYPE_CHECKING:`` and inside functions count, and so do
``__import__("...")`` and ``importlib.import_module("...")`` with a literal name. Inside a room,
:data:`MODULE_BACK_ARROWS` names the modules that must stay below others (Partition below the
ReplicaManager). The arrows, from the bottom up (the README's *Architecture* table states the
same, compared cell by cell by :func:`test_the_readme_states_the_same_arrows`):

* ``sluice.protocol`` is sans-I/O: no I/O module, nothing else of Sluice.
* ``sluice.net`` (one asyncio connection to a broker) speaks through the protocol only; both the
  user-facing client and the broker's inter-broker client sit on it.
* ``sluice.server.config_def`` (how settings are declared: Kafka's ``ConfigDef``) imports nothing
  of Sluice and no I/O: every room of the broker may declare its keys with it.
* ``sluice.server.storage`` imports only the protocol and ``config_def``, and no network code.
* ``sluice.server.crash_points`` (a crash test's kill -9 at a named step) imports nothing of
  Sluice: the coordinators, replication, the handlers and the config may name their points.
* ``sluice.server.group`` (coordinator, offsets store) sits on storage;
  ``sluice.server.transaction`` (the transaction coordinator, ``__transaction_state``) too, and
  on the group store's partitioning and appender signature.
* ``sluice.server.zk`` knows the protocol's value types and logging; ``sluice.server.controller``
  decides cluster state from what ZooKeeper holds: it sees ZooKeeper, never the broker's rooms.
* ``sluice.server.security`` (TLS, SASL, credentials, ACLs) sees the protocol, ``config_def``
  (it declares its keys) and ZooKeeper (credentials and ACLs live there), never the broker's
  rooms: the broker wires it in.
* ``sluice.server.config`` (the broker's settings) sits at the bottom of the broker: protocol,
  ``config_def``, the keys declared by storage (``log_config``), the group room
  (``group.config``), the transaction room (``transaction.config``), the controller
  (``controller.config``), the security room (``security.config``; the security protocols of
  listeners, ``security.listeners``), the ZooKeeper link's SASL login (``zk.sasl``, read from
  ``KAFKA_OPTS``), logging.
* ``sluice.server.replication`` (Partition, purgatory, ReplicaManager, replica fetcher) sits on
  storage, the group store's topic name and the broker's config; ``sluice.server.metadata``
  (what this broker knows of the cluster) drives replication from ZooKeeper and the controller,
  and finds a group's coordinator (the group store's topic name and partitioning).
* ``sluice.server.metrics`` reads the state of the rooms below it; only it imports
  ``prometheus_client``.
* ``sluice.server.network`` (connections, quotas) knows metrics, config, the replication
  throttles' sampled rate (``replication.throttle``) and security (each
  connection drives its SASL authenticator and reads its TLS principal), never the handlers:
  it calls them through ``network.request.RequestHandler``; ``sluice.server.api`` (the
  handlers) sees only ``network.request`` of the network room (the per-request context), and
  the security room (the authorizer it asks, the ACL and SCRAM admin functions).
* ``sluice.server.server`` (and ``sluice.server`` / ``__main__``) wires everything together,
  security and the inter-broker client's ``sluice.net.security`` included.
* ``sluice.client`` sits on the protocol and ``sluice.net``; ``sluice.pipeline`` on the client
  and storage's file formats (the layout, the producer snapshot and the aborted-transaction
  index, which ``sluice-segments`` reads for read_committed); ``sluice.cli`` on top of the
  client, the pipeline's jobs and the dump-log tool. Nothing but ``sluice.testing`` (and
  ``sluice``'s own lazy exports) imports ``sluice.testing``, which starts brokers (and writes
  a secured cluster's SCRAM users to ZooKeeper before they start).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "sluice"
IO_MODULES = {"asyncio", "socket", "selectors", "ssl", "uvloop", "mmap", "structlog", "kazoo"}
NETWORK_MODULES = {"socket", "selectors", "ssl", "uvloop", "kazoo"}

PROTOCOL = "sluice.protocol"
LOGGING = "sluice.server.logging"
STORAGE = "sluice.server.storage"
CONFIG_DEF = "sluice.server.config_def"
CRASH_POINTS = "sluice.server.crash_points"
#: room -> what it may import besides itself (rooms, or single modules of a room).
ROOMS: dict[str, tuple[str, ...]] = {
    PROTOCOL: (),
    "sluice.net": (PROTOCOL,),
    LOGGING: (),
    CONFIG_DEF: (),
    CRASH_POINTS: (),
    STORAGE: (PROTOCOL, CONFIG_DEF),
    "sluice.server.group": (PROTOCOL, CONFIG_DEF, STORAGE, LOGGING, CRASH_POINTS),
    "sluice.server.transaction": (
        PROTOCOL,
        CONFIG_DEF,
        STORAGE,
        "sluice.server.group.offsets_store",
        LOGGING,
        CRASH_POINTS,
    ),
    "sluice.server.zk": (PROTOCOL, LOGGING),
    "sluice.server.controller": (PROTOCOL, CONFIG_DEF, "sluice.server.zk", LOGGING),
    "sluice.server.security": (PROTOCOL, CONFIG_DEF, "sluice.server.zk", LOGGING),
    "sluice.server.config": (
        PROTOCOL,
        CONFIG_DEF,
        "sluice.server.storage.log_config",
        "sluice.server.group.config",
        "sluice.server.transaction.config",
        "sluice.server.controller.config",
        "sluice.server.security.config",
        "sluice.server.security.listeners",
        "sluice.server.zk.sasl",
        LOGGING,
        CRASH_POINTS,
    ),
    "sluice.server.replication": (
        PROTOCOL,
        "sluice.net",
        STORAGE,
        "sluice.server.group.offsets_store",
        "sluice.server.transaction.state_log",
        "sluice.server.config",
        LOGGING,
        CRASH_POINTS,
    ),
    "sluice.server.metadata": (
        PROTOCOL,
        "sluice.net",
        STORAGE,
        "sluice.server.group.offsets_store",
        "sluice.server.transaction.state_log",
        "sluice.server.zk",
        "sluice.server.controller",
        "sluice.server.replication",
        "sluice.server.config",
        LOGGING,
    ),
    "sluice.server.metrics": (
        PROTOCOL,
        STORAGE,
        "sluice.server.group",
        "sluice.server.transaction",
        "sluice.server.replication",
        "sluice.server.metadata",
        "sluice.server.config",
        LOGGING,
    ),
    "sluice.server.network": (
        PROTOCOL,
        CONFIG_DEF,
        "sluice.server.metrics.metrics",
        "sluice.server.replication.throttle",
        "sluice.server.security",
        LOGGING,
    ),
    "sluice.server.api": (
        PROTOCOL,
        CONFIG_DEF,
        STORAGE,
        "sluice.server.group",
        "sluice.server.transaction",
        "sluice.server.replication",
        "sluice.server.metadata",
        "sluice.server.metrics.metrics",
        "sluice.server.network.request",
        "sluice.server.security",
        "sluice.server.config",
        LOGGING,
        CRASH_POINTS,
    ),
    "sluice.server.server": (
        PROTOCOL,
        CONFIG_DEF,
        STORAGE,
        "sluice.server.group",
        "sluice.server.transaction",
        "sluice.server.replication",
        "sluice.server.metadata",
        "sluice.server.metrics",
        "sluice.server.network",
        "sluice.server.api",
        "sluice.server.security",
        "sluice.server.config",
        "sluice.net",
        LOGGING,
    ),
    "sluice.server.__main__": (
        "sluice.server.server",
        "sluice.server.config",
        "sluice.server.storage.log_manager",
        "sluice.server.security.errors",
        LOGGING,
    ),
    "sluice.server": ("sluice.server.server", "sluice.server.config"),  # lazy re-exports
    "sluice.client": (PROTOCOL, "sluice.net"),
    "sluice.pipeline": (
        PROTOCOL,
        "sluice.client",
        "sluice.server.storage.layout",
        "sluice.server.storage.producer_state",
        "sluice.server.storage.txn_index",
    ),
    "sluice.cli": (
        PROTOCOL,
        "sluice.client",
        "sluice.pipeline.cli",
        "sluice.server.storage.dump_log",
    ),
    "sluice.testing": (
        PROTOCOL,
        "sluice.net",
        "sluice.client",
        "sluice.server.server",
        "sluice.server.config",
        # a secured test cluster's SCRAM users, written before its brokers start
        "sluice.server.security.credentials",
        "sluice.server.security.scram",
        "sluice.server.zk.client",
    ),
    "sluice": ("sluice.client", "sluice.testing"),  # lazy exports of the short names
}
#: Room -> I/O modules it must not import.
FORBIDDEN = {
    PROTOCOL: IO_MODULES,
    CONFIG_DEF: IO_MODULES,
    STORAGE: NETWORK_MODULES,
    "sluice.server.group": NETWORK_MODULES,
    "sluice.server.transaction": NETWORK_MODULES,
}
#: Back-arrows inside a room: module -> modules of its own room it must not import. Partition,
#: the purgatory and the delayed operations sit below the ReplicaManager (which owns them) and
#: the fetcher; the per-request context below the connection (the API layer may import it and
#: must not reach the connection through it); the counters below the Prometheus endpoint.
MODULE_BACK_ARROWS: dict[str, tuple[str, ...]] = {
    **{
        f"sluice.server.replication.{below}": (
            "sluice.server.replication.replica_manager",
            "sluice.server.replication.replica_fetcher",
        )
        for below in ("partition", "purgatory", "delayed")
    },
    "sluice.server.network.request": (
        "sluice.server.network.connection",
        "sluice.server.network.listener",
        "sluice.server.network.quotas",
    ),
    "sluice.server.metrics.metrics": ("sluice.server.metrics.prometheus",),
}
#: Known, deliberate exceptions to the rows above (none today).
EXCEPTIONS: dict[str, set[str]] = {}


def module_name(path: Path, package: Path = PACKAGE) -> str:
    parts = path.relative_to(package.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _literal_dynamic_import(node: ast.Call) -> str | None:
    """The module named by ``__import__("x")`` / ``importlib.import_module("x")`` /
    ``import_module("x")`` with a literal first argument, else None."""
    func = node.func
    name = (
        func.id
        if isinstance(func, ast.Name)
        else func.attr
        if isinstance(func, ast.Attribute)
        else ""
    )
    if name not in ("__import__", "import_module") or not node.args:
        return None
    first = node.args[0]
    if isinstance(first, ast.Constant) and isinstance(first.value, str):
        return first.value
    return None


def imported(path: Path, root: Path = PACKAGE) -> set[str]:
    """Absolute names of every module ``path`` imports (relative imports resolved; dynamic
    imports of a literal name included)."""
    package = module_name(path, root).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            names.add(module)
            # ``from package import module``: the module too (what a chain of imports follows)
            names.update(
                f"{module}.{alias.name}"
                for alias in node.names
                if _module_path(f"{module}.{alias.name}", root) is not None
            )
        elif isinstance(node, ast.Call):
            dynamic = _literal_dynamic_import(node)
            if dynamic is not None:
                names.add(dynamic)
    return names


def _within(name: str, rooms: tuple[str, ...] | set[str]) -> bool:
    return any(name == room or name.startswith(room + ".") for room in rooms)


#: Rooms that are one package's ``__init__`` alone (their subpackages are rooms of their own).
INIT_ONLY = {"sluice", "sluice.server"}


def room_of(module: str) -> str | None:
    """The most specific room ``module`` belongs to."""
    rooms = [
        room
        for room in ROOMS
        if module == room or (room not in INIT_ONLY and _within(module, (room,)))
    ]
    return max(rooms, key=len) if rooms else None


def violations(root: Path = PACKAGE) -> dict[str, list[str]]:
    """Module -> the imports its room's row does not allow (unknown rooms included)."""
    found: dict[str, list[str]] = {}
    for path in sorted(root.rglob("*.py")):
        module = module_name(path, root)
        room = room_of(module)
        if room is None:
            found[module] = ["(in no room)"]
            continue
        allowed = (room, *ROOMS[room])
        forbidden = FORBIDDEN.get(room, set())
        bad = sorted(
            name
            for name in imported(path, root)
            if name.split(".")[0] in forbidden
            or (
                name.split(".")[0] == "sluice"
                and not _within(name, allowed)
                and name not in EXCEPTIONS.get(room, set())
            )
        )
        bad += sorted(
            name
            for name in imported(path, root)
            if _within(name, MODULE_BACK_ARROWS.get(module, ()))
        )
        if bad:
            found[module] = bad
    return found


def _module_path(module: str, root: Path) -> Path | None:
    base = root.parent / module.replace(".", "/")
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def imported_transitively(module: str, root: Path = PACKAGE) -> set[str]:
    """Every ``sluice`` module that importing ``module`` may load (imports inside functions
    and ``TYPE_CHECKING`` blocks included: the strict reading)."""
    seen: set[str] = set()
    todo = [module]
    while todo:
        path = _module_path(todo.pop(), root)
        if path is None:
            continue  # a name imported from a module, not a module
        for name in imported(path, root):
            if name.split(".")[0] == "sluice" and name not in seen:
                seen.add(name)
                todo.append(name)
    return seen


def test_every_room_imports_only_what_its_row_allows() -> None:
    assert violations() == {}


def test_every_room_exists_and_says_what_it_is_for() -> None:
    """Each room is a module or a package whose docstring states its purpose."""
    for room in ROOMS:
        path = PACKAGE.parent / room.replace(".", "/")
        init = path / "__init__.py" if path.is_dir() else path.with_suffix(".py")
        assert init.is_file(), room
        assert ast.get_docstring(ast.parse(init.read_text())), f"{room} has no docstring"


def test_the_exceptions_are_still_needed() -> None:
    """An exception nobody needs any more is removed, so it cannot hide a new import."""
    for room, names in EXCEPTIONS.items():
        used: set[str] = set()
        for path in PACKAGE.rglob("*.py"):
            if room_of(module_name(path)) == room:
                used |= imported(path) & names
        assert used == names, room


def test_nothing_outside_testing_imports_testing() -> None:
    offenders = {
        module_name(p): sorted(n for n in imported(p) if n.startswith("sluice.testing"))
        for p in PACKAGE.rglob("*.py")
        if not module_name(p).startswith("sluice.testing") and module_name(p) != "sluice"
    }
    assert {k: v for k, v in offenders.items() if v} == {}


def test_only_the_metrics_room_imports_prometheus_client() -> None:
    importers = {
        module_name(p)
        for p in PACKAGE.rglob("*.py")
        if any(n.split(".")[0] == "prometheus_client" for n in imported(p))
    }
    assert importers == {"sluice.server.metrics.prometheus"}


@pytest.mark.parametrize(
    ("room", "source", "expected"),
    [
        (
            "server/storage",
            "import socket\nfrom sluice.server.api.handlers import Handlers\nfrom . import log\n"
            "from ..network import connection\n",
            ["sluice.server.api.handlers", "sluice.server.network", "socket"],
        ),
        # The CLI cycle that hid from the test: pipeline importing the CLI, through __import__.
        (
            "pipeline",
            'jobs = __import__("sluice.cli.main", fromlist=["cli"])\n'
            'import importlib\nx = importlib.import_module("sluice.server.server")\n',
            ["sluice.cli.main", "sluice.server.server"],
        ),
        # The API layer reaching into the connection object; the network layer into the API.
        (
            "server/api",
            "from sluice.server.network.connection import Connection\n",
            ["sluice.server.network.connection"],
        ),
        (
            "server/network",
            "if True:\n    from sluice.server.api import handlers\n",
            ["sluice.server.api"],
        ),
        # Partition and the purgatory below the ReplicaManager; metrics below the server.
        (
            "server/replication",
            "from sluice.server.metadata import zk_cluster\n",
            ["sluice.server.metadata"],
        ),
        (
            "server/metrics",
            "from sluice.server.server import Server\n",
            ["sluice.server.server"],
        ),
        (
            "server/replication",
            "from sluice.client.connection import Connection\n",
            ["sluice.client.connection"],
        ),
        # The broker on the user-facing client; metadata reaching into the connection.
        ("server/server", "import sluice.client\n", ["sluice.client"]),
        (
            "server/metadata",
            "def f():\n    from sluice.server.network import connection\n",
            ["sluice.server.network"],
        ),
        # The config on the group coordinator (it may import the group room's option table).
        (
            "server/config",
            "from sluice.server.group.coordinator import GroupCoordinator\n",
            ["sluice.server.group.coordinator"],
        ),
        # Metrics and the server importing each other; the client on the CLI.
        ("server/metrics", "from sluice.server import server\n", ["sluice.server"]),
        ("client", 'import importlib\nimportlib.import_module("sluice.cli")\n', ["sluice.cli"]),
    ],
)
def test_the_check_detects_a_violation(
    tmp_path: Path, room: str, source: str, expected: list[str]
) -> None:
    fake = tmp_path / "sluice" / room
    fake.mkdir(parents=True)
    (fake / "bad.py").write_text(source)
    module = "sluice." + room.replace("/", ".") + ".bad"
    assert violations(tmp_path / "sluice") == {module: expected}


def test_a_module_outside_every_room_is_reported(tmp_path: Path) -> None:
    (tmp_path / "sluice" / "elsewhere").mkdir(parents=True)
    (tmp_path / "sluice" / "elsewhere" / "x.py").write_text("")
    assert violations(tmp_path / "sluice") == {"sluice.elsewhere.x": ["(in no room)"]}


def test_the_check_detects_a_back_arrow_inside_a_room(tmp_path: Path) -> None:
    """Partition importing the ReplicaManager that owns it (one room, one forbidden arrow)."""
    room = tmp_path / "sluice" / "server" / "replication"
    room.mkdir(parents=True)
    (room / "replica_manager.py").write_text("from . import partition\n")
    (room / "partition.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
        "    from .replica_manager import ReplicaManager\n"
    )
    assert violations(tmp_path / "sluice") == {
        "sluice.server.replication.partition": ["sluice.server.replication.replica_manager"]
    }


#: What the broker's config may load, however indirectly: its option tables, never the
#: coordinators, the controller, ZooKeeper's client or the security machinery behind them.
CONFIG_MUST_NOT_LOAD = (
    "sluice.server.group.coordinator",
    "sluice.server.group.offsets_store",
    "sluice.server.transaction.coordinator",
    "sluice.server.transaction.state_log",
    "sluice.server.controller.controller",
    "sluice.server.zk.client",
    "sluice.server.security.tls",
    "sluice.server.security.authorizer",
    "sluice.server.storage.log",
)


def test_the_config_loads_only_option_tables() -> None:
    """The back-arrow of issue 25: the config imported the 1.7k-line group coordinator for
    its option table. Each room's table is a module of its own that imports only
    ``config_def``; this follows every import from ``sluice.server.config`` down."""
    loaded = imported_transitively("sluice.server.config")
    assert "sluice.server.group.config" in loaded  # the walk follows the chain
    assert sorted(n for n in loaded if _within(n, CONFIG_MUST_NOT_LOAD)) == []
    allowed = ("sluice.server.config", *ROOMS["sluice.server.config"])
    assert sorted(n for n in loaded if not _within(n, allowed)) == []


def test_the_transitive_walk_sees_an_indirect_import(tmp_path: Path) -> None:
    group = tmp_path / "sluice" / "server" / "group"
    group.mkdir(parents=True)
    (tmp_path / "sluice" / "server" / "config.py").write_text(
        "from sluice.server.group import config\n"
    )
    (group / "config.py").write_text("def f():\n    from . import coordinator\n")
    (group / "coordinator.py").write_text("")
    loaded = imported_transitively("sluice.server.config", tmp_path / "sluice")
    assert "sluice.server.group.coordinator" in loaded


#: The README's short names of the rooms (``storage's `log_config``` = one module of a room).
SHORT_NAMES = {
    "protocol": PROTOCOL,
    "net": "sluice.net",
    "logging": LOGGING,
    "crash_points": CRASH_POINTS,
    "config_def": CONFIG_DEF,
    "storage": STORAGE,
    "config": "sluice.server.config",
    **{
        name: f"sluice.server.{name}"
        for name in (
            "group", "transaction", "zk", "controller", "security", "replication",
            "metadata", "metrics", "network", "api",
        )
    },
    "client": "sluice.client",
    "pipeline": "sluice.pipeline",
    "server": "sluice.server.server",
}  # fmt: skip
_POSSESSIVE = re.compile(r"^(\w+)'s? `([\w.]+)`$")


def readme_arrows(cell: str) -> set[str]:
    """The rooms and modules a README "May import" cell lists: ``protocol, storage's
    `layout` and `txn_index` (a remark)`` -> the protocol room, ``storage.layout``,
    ``storage.txn_index``; ``nothing`` -> none."""
    cell = re.sub(r"\([^)]*\)", "", cell).strip()
    if cell.startswith("nothing"):
        return set()
    found: set[str] = set()
    room = ""
    for item in re.split(r",\s*|\s+and\s+", cell):
        item = item.strip()
        possessive = _POSSESSIVE.match(item)
        if possessive:
            room = SHORT_NAMES[possessive[1]]
            found.add(f"{room}.{possessive[2]}")
        elif item.startswith("`") and item.endswith("`") and room:
            found.add(f"{room}.{item.strip('`')}")  # another module of the same room
        else:
            found.add(SHORT_NAMES[item])
    return found


def readme_rows() -> dict[str, str]:
    readme = (PACKAGE.parent / "README.md").read_text()
    section = readme.split("### Architecture", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0].startswith("`sluice"):
            rows[cells[0].strip("`")] = cells[2]
    return rows


def test_the_readme_states_the_same_arrows() -> None:
    """The README's table and :data:`ROOMS` say the same: the same rooms, and each room's
    "May import" cell names exactly its row (``nothing`` for an empty one)."""
    rows = readme_rows()
    assert [room for room in ROOMS if room not in rows] == [
        "sluice.server.__main__",
        "sluice.server",
        "sluice",
    ]
    differ = {
        room: {
            "README only": sorted(readme_arrows(cell) - set(ROOMS[room])),
            "test only": sorted(set(ROOMS[room]) - readme_arrows(cell)),
        }
        for room, cell in rows.items()
        if readme_arrows(cell) != set(ROOMS[room])
    }
    assert differ == {}


def test_the_readme_cells_are_read_as_written() -> None:
    assert readme_arrows("nothing (no I/O)") == set()
    assert readme_arrows(
        "protocol, storage's `layout`, `producer_state` and `txn_index` (read_committed), "
        "metrics' `metrics`"
    ) == {
        PROTOCOL,
        f"{STORAGE}.layout",
        f"{STORAGE}.producer_state",
        f"{STORAGE}.txn_index",
        "sluice.server.metrics.metrics",
    }


def _unnamed_dynamic_imports(path: Path) -> list[int]:
    """Lines of ``__import__(x)`` / ``import_module(x)`` whose module is not a literal."""
    lines = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call) and _literal_dynamic_import(node) is None:
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name in ("__import__", "import_module"):
                lines.append(node.lineno)
    return lines


def test_no_dynamic_import_hides_what_it_imports() -> None:
    """The check reads a dynamic import's literal name; one computed at run time would hide an
    arrow. The one allowed: ``sluice``'s lazy exports, whose modules its own row lists (and its
    ``TYPE_CHECKING`` block imports, which the check reads)."""
    found = {
        module_name(path): lines
        for path in sorted(PACKAGE.rglob("*.py"))
        if (lines := _unnamed_dynamic_imports(path))
    }
    assert set(found) == {"sluice"}


def test_an_unnamed_dynamic_import_is_found(tmp_path: Path) -> None:
    source = tmp_path / "x.py"
    source.write_text('import importlib\nname = "sluice.cli"\nimportlib.import_module(name)\n')
    assert _unnamed_dynamic_imports(source) == [3]
