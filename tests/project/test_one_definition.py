"""STYLE item 15: a fact that several layers use is defined once and re-exported, not copied."""

from __future__ import annotations

import ast
import itertools
import re
from collections.abc import Mapping
from pathlib import Path

import sluice
import sluice.client
import sluice.pipeline.offsets
import sluice.protocol
from sluice.protocol.structs import TopicPartition
from sluice.server.storage.layout import parse_partition_dir

REPO = Path(__file__).resolve().parents[2]


def test_one_topic_partition_for_every_layer() -> None:
    exported = {
        "sluice": sluice.TopicPartition,
        "sluice.client": sluice.client.TopicPartition,
        "sluice.protocol": sluice.protocol.TopicPartition,
        "sluice.pipeline.offsets": sluice.pipeline.offsets.TopicPartition,
    }
    assert {name: cls for name, cls in exported.items() if cls is not TopicPartition} == {}
    # Storage hands out the same type, and it still keys a dict like a plain tuple does.
    tp = parse_partition_dir("orders.eu-3")
    assert type(tp) is TopicPartition
    assert tp == ("orders.eu", 3) and {("orders.eu", 3): 1}[tp] == 1
    assert (tp.topic, tp.partition) == ("orders.eu", 3)


#: ``.get(key, literal)`` calls that are not a setting's default: (file, key).
NOT_A_DEFAULT = {
    # the old topic's policy named in a log line, when it had none
    ("sluice/server/group/offsets_store.py", "cleanup.policy"),
    # meta.properties' own broker.id line (a file Kafka writes), not the broker's setting
    ("sluice/server/storage/meta_properties.py", "broker.id"),
}


def literal_fallbacks(root: Path, keys: Mapping[str, str | None]) -> list[str]:
    """``x.get("<declared key>", <literal>)`` / ``_get(config, "<key>", <literal>)``, and a
    literal under a ``#:`` comment naming a declared key, under ``root``: a default written a
    second time next to its declaration's."""
    found = []
    for path in sorted(root.rglob("*.py")):
        relative = path.relative_to(root.parent.parent).as_posix()
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name not in ("get", "_get", "setdefault"):
                continue
            for key, fallback in itertools.pairwise(node.args):
                if (
                    isinstance(key, ast.Constant)
                    and key.value in keys
                    and isinstance(fallback, ast.Constant)
                    and (relative, key.value) not in NOT_A_DEFAULT
                ):
                    found.append(f"{relative}:{node.lineno}: {key.value}={fallback.value!r}")
        # ``#: ``<key>`` default`` above ``NAME = <literal>``: a copy of the declared default
        lines = path.read_text().splitlines()
        for number, (comment, line) in enumerate(itertools.pairwise(lines), start=2):
            named = [k for k in re.findall(r"``([\w.-]+)``", comment) if k in keys]
            literal = re.fullmatch(r"\s*\w+(?:: [\w|. ]+)? = (-?[\d_]+|\"[^\"]*\")", line)
            if comment.strip().startswith("#:") and named and literal:
                text = literal[1]
                value = text.strip('"') if text.startswith('"') else text.replace("_", "")
                if value == keys[named[0]]:
                    found.append(f"{relative}:{number}: {named[0]}={literal[1]}")
    return found


def test_no_setting_is_defaulted_a_second_time() -> None:
    """Each setting's default is its declaration's (``sluice.server.config_def``): what reads
    a key below the broker's ``Config`` takes the declared default (``CONFIG.default(key)``),
    never a literal of its own that could drift from it."""
    from sluice.server.config import OPTIONS
    from sluice.server.storage.log_config import TOPIC_CONFIG

    keys = {key.name: key.default for key in (*OPTIONS, *TOPIC_CONFIG)}
    assert literal_fallbacks(REPO / "sluice" / "server", keys) == []


def test_a_literal_fallback_is_found(tmp_path: Path) -> None:
    room = tmp_path / "sluice" / "server"
    room.mkdir(parents=True)
    (room / "tls.py").write_text(
        'a = config.get("ssl.client.auth", "none")\nb = _get(config, "ssl.client.auth", "x")\n'
        'c = config.get("ssl.client.auth")\nd = config.get("other.key", "y")\n'
        'class L:\n    #: ``ssl.client.auth``\n    auth: str = "none"\n'
        '    #: ``ssl.client.auth`` when asked for\n    REQUIRED = "required"\n'
        '#: ``ssl.client.auth``\'s declared default\nAUTH = default("ssl.client.auth")\n'
    )
    assert literal_fallbacks(room, {"ssl.client.auth": "none"}) == [
        "sluice/server/tls.py:1: ssl.client.auth='none'",
        "sluice/server/tls.py:2: ssl.client.auth='x'",
        'sluice/server/tls.py:7: ssl.client.auth="none"',
    ]
