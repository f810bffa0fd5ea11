"""The front door: what `make run` and `make test` would install and run, read from `make -n`.

A dry run against a venv path that does not exist shows every recipe line a fresh clone would
execute, without executing any of them.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _dry_run(target: str, tmp_path: Path) -> list[str]:
    result = subprocess.run(
        ["make", "-n", "-C", str(REPO), f"VENV={tmp_path / 'venv'}", target],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    # -C makes make announce the directory it enters; those lines are not recipe lines.
    return [line for line in result.stdout.splitlines() if not line.startswith("make")]


def _installs(lines: list[str]) -> list[str]:
    """What each `pip install` line installs (its last argument)."""
    return [line.split()[-1] for line in lines if re.search(r"/pip install .*-e ", line)]


def test_make_run_installs_the_runtime_dependencies_only(tmp_path: Path) -> None:
    lines = _dry_run("run", tmp_path)
    assert _installs(lines) == ["."]
    assert "sluice-server" in lines[-1]


def test_make_test_installs_everything_and_runs_lint_types_and_tests(tmp_path: Path) -> None:
    lines = _dry_run("test", tmp_path)
    assert _installs(lines) == [".", "'.[test,spark]'"]
    commands = [line.split("/")[-1] for line in lines[-4:]]
    assert commands == ["ruff check .", "ruff format --check .", "mypy", "pytest"]


def test_ci_runs_what_the_readme_tells_a_person_to_run() -> None:
    ci = (REPO / ".ci" / "run").read_text()
    assert [line for line in ci.splitlines() if line.startswith("make")] == ["make test"]
    readme = (REPO / "README.md").read_text()
    first_block = re.search(r"```sh\n(.*?)```", readme, re.DOTALL)
    assert first_block is not None
    assert first_block.group(1).splitlines() == ["make run", "make test"]


def test_make_cluster_serves_metrics_on_the_ports_the_readme_gives(tmp_path: Path) -> None:
    (line,) = [x for x in _dry_run("cluster", tmp_path) if "sluice.testing.cluster" in x]
    assert "--port 9092" in line and "--metrics-port 9644" in line
    monitoring = (REPO / "README.md").read_text().split("## Monitoring")[1].split("\n## ")[0]
    assert "`make cluster`" in monitoring and "9644-9646" in monitoring
