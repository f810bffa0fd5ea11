"""The README's shell and Python examples run as written, in order, as a new user runs them.

``tests/project/test_readme.py`` runs each Python block on a broker of its own; a reader runs the
blocks one after another on one ``make run`` broker, where each sees what the ones before it did
(the kcat line auto-creates ``events``, so a later ``topics create --topic events`` failed).
Here the first sections' ```sh and ```python blocks run in README order on one fresh broker,
each shell line on its own through ``bash``, each bounded (a ``consume`` waiting forever for
records that never come is a failure). Two things name the reader's machine and are pointed at
the test's broker: the address ``127.0.0.1:9092`` (and ``localhost:9092``), also as the ``sluice``
CLI's default (``$SLUICE_BOOTSTRAP_SERVER``), and ``make run``'s data directory ``./data`` (the
broker's ``log.dirs`` is ``data`` in the directory the lines run in). The cluster section's lines
run the same way on a three-broker cluster, the ACL section's on a broker started with the
``--override`` flags of its ``sluice-server`` line.

Lines not run here: ``make ...`` (the broker or cluster is the test's), server starts
(``sluice-server``, ``python -m sluice.server``: ``tests/broker/`` runs them), ``docker`` /
``podman`` (``tests/project/test_dockerfile.py``), ``curl`` of the metrics page
(``tests/broker/test_metrics*.py``), ``sluice pipeline`` (the Spark jobs: ``tests/pipeline/``)
and the Development section's commands.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from sluice import EmbeddedBroker

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
README = (REPO / "README.md").read_text()
#: The sections a new user walks through on one ``make run`` broker, in order.
WALKTHROUGH = ("## Point a Kafka client at it\n", "## Our own client, CLI and embedded broker\n")
#: Lines that are not examples to run here (module docstring).
NOT_RUN = re.compile(r"^(make|sluice-server|python -m sluice\.server|docker|podman|curl|"
                     r"sluice pipeline|SLUICE_\w+=\S+ sluice-server|\.venv/bin/)")  # fmt: skip
#: Seconds any one line or block may take.
BOUND = 120


def section(title: str) -> str:
    start = README.index(title)
    end = README.find("\n## ", start + 1)
    return README[start : end if end >= 0 else len(README)]


def blocks(text: str) -> list[tuple[str, str]]:
    """(language, body) of every fenced ``sh`` / ``python`` block, in order."""
    return re.findall(r"^```(sh|python)\n(.*?)^```", text, re.M | re.S)


def shell_lines(body: str) -> list[str]:
    """The commands of a ``sh`` block: continuation lines joined, blank lines dropped."""
    return [line for line in body.replace("\\\n", " ").splitlines() if line.strip()]


def point_at(text: str, bootstrap: str) -> str:
    return text.replace("127.0.0.1:9092", bootstrap).replace("localhost:9092", bootstrap)


def run(args: list[str], cwd: Path, bootstrap: str) -> str:
    env = {
        **os.environ,
        "SLUICE_BOOTSTRAP_SERVER": bootstrap,
        # The commands a reader has after `source .venv/bin/activate`.
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]]),
    }
    try:
        result = subprocess.run(
            args, cwd=cwd, env=env, capture_output=True, text=True, timeout=BOUND, check=False
        )
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(f"{args[-1]!r} still running after {BOUND}s: {exc.stdout}") from None
    assert result.returncode == 0, f"{args[-1]!r} failed:\n{result.stdout}{result.stderr}"
    return result.stdout


def run_blocks(found: list[tuple[str, str]], cwd: Path, bootstrap: str) -> dict[str, str]:
    """Run every block in order; return each shell line's output by line."""
    outputs: dict[str, str] = {}
    for language, body in found:
        if language == "sh":
            for line in shell_lines(body):
                if not NOT_RUN.match(line):
                    outputs[line] = run(["bash", "-c", point_at(line, bootstrap)], cwd, bootstrap)
        elif re.search(r"^def test_", body, re.M):  # a pytest example: its own broker
            (cwd / "test_readme_block.py").write_text(body)
            run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                 "test_readme_block.py"], cwd, bootstrap)  # fmt: skip
        else:
            run([sys.executable, "-c", point_at(body, bootstrap)], cwd, bootstrap)
    return outputs


def test_the_walkthrough_has_the_cli_and_kcat_examples() -> None:
    found = [b for title in WALKTHROUGH for b in blocks(section(title))]
    lines = [line for language, body in found if language == "sh" for line in shell_lines(body)]
    assert any(line.startswith("kcat ") or "| kcat " in line for line in lines)
    for command in ("topics create", "configs", "produce", "consume", "offsets", "dump-log"):
        assert any(line.startswith(f"sluice {command}") for line in lines), command
    assert any(language == "python" for language, _ in found)


def test_the_first_sections_run_in_order_on_one_fresh_broker(tmp_path: Path) -> None:
    found = [b for title in WALKTHROUGH for b in blocks(section(title))]
    with EmbeddedBroker(data_dir=tmp_path / "data") as broker:
        outputs = run_blocks(found, tmp_path, broker.bootstrap_servers)
    consumed = [out for line, out in outputs.items() if line.startswith("sluice consume")]
    assert consumed and all(out.strip() for out in consumed), outputs
    (kcat_read,) = [out for line, out in outputs.items() if line.startswith("kcat ")]
    assert "hello" in kcat_read


def test_the_cluster_section_runs_on_a_cluster(sluice_cluster: Any, tmp_path: Path) -> None:
    found = blocks(section("## A replicated cluster\n"))
    sh = [(language, body) for language, body in found if language == "sh"]
    assert sh and "make cluster" in sh[0][1]
    outputs = run_blocks(sh, tmp_path, sluice_cluster.bootstrap_servers)
    described = [out for line, out in outputs.items() if "topics describe" in line]
    assert any("Isr" in out or "ISR" in out for out in described), outputs


def test_the_acl_section_runs_on_the_broker_its_first_line_starts(tmp_path: Path) -> None:
    (body,) = [body for language, body in blocks(section("## ACLs\n")) if language == "sh"]
    start, *rest = shell_lines(body)
    assert start.startswith("sluice-server ") and rest
    properties = dict(re.findall(r"--override ([\w.]+)=(\S+)", start))
    assert "authorizer.class.name" in properties
    with EmbeddedBroker(data_dir=tmp_path / "data", properties=properties) as broker:
        outputs = run_blocks([("sh", body)], tmp_path, broker.bootstrap_servers)
    (listed,) = [out for line, out in outputs.items() if line.startswith("sluice acls --list")]
    # orders-2026 matches alice's prefixed orders- ACL, not bob's literal orders-audit one.
    assert "User:alice" in listed and "PREFIXED" in listed.upper(), listed
    assert "User:bob" not in listed, listed
    (described,) = [out for line, out in outputs.items() if line.endswith("alice --describe")]
    assert "SCRAM-SHA-512" in described and "8192" in described, described
