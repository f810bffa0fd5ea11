"""The README's Python examples run, so the front door stays true.

Every ```python block is run against a real broker: a block that defines ``test_*`` functions is
run by pytest as a test file of its own (its ``sluice_broker`` fixture comes from the installed
plugin); any other block is run as a script with ``127.0.0.1:9092`` pointed at an embedded broker.
The Spark section's block needs the run's Spark session:
``tests/pipeline/test_pipeline_readme.py`` runs it.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from sluice import EmbeddedBroker

REPO = Path(__file__).resolve().parents[2]
BLOCKS = re.findall(r"^```python\n(.*?)^```", (REPO / "README.md").read_text(), re.M | re.S)
RUNNABLE = [b for b in BLOCKS if "spark" not in b]


def _first_line(block: str) -> str:
    return next(line for line in block.splitlines() if line and not line.startswith("import"))


def _run(args: list[str], cwd: Path) -> None:
    result = subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_readme_has_its_examples() -> None:
    # The client, the embedded broker and its fixture, and confluent-kafka against Sluice.
    assert len(RUNNABLE) >= 4
    assert any("from sluice import EmbeddedBroker" in b for b in RUNNABLE)
    assert any("from sluice import Consumer, Producer, TopicPartition" in b for b in RUNNABLE)
    assert any("def test_" in b and "sluice_broker" in b for b in RUNNABLE)


@pytest.mark.slow
@pytest.mark.parametrize("block", RUNNABLE, ids=_first_line)
def test_readme_example_runs(block: str, tmp_path: Path) -> None:
    if re.search(r"^def test_", block, re.M):
        (tmp_path / "test_readme_block.py").write_text(block)
        _run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"], tmp_path)
        return
    with EmbeddedBroker() as broker:
        script = block.replace("127.0.0.1:9092", broker.bootstrap_servers)
        _run([sys.executable, "-c", script], tmp_path)
