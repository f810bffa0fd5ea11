"""`sluice pipeline` where only the runtime dependencies are installed (`make run`, `pip install
sluice`): a one-line error naming the extra to install, not a traceback."""

from __future__ import annotations

import sys

import pytest
from click.testing import CliRunner

from sluice.pipeline.cli import pipeline


def test_a_job_without_pyspark_says_which_extra_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYSPARK_PYTHON", sys.executable)
    monkeypatch.setenv("PYSPARK_DRIVER_PYTHON", sys.executable)
    for name in ("pyspark", "pyspark.sql"):
        monkeypatch.setitem(sys.modules, name, None)  # import fails as if it were not installed
    args = ["archive", "-b", "127.0.0.1:9", "-t", "t", "--path", "p", "--checkpoint", "c"]
    result = CliRunner().invoke(pipeline, args, obj={})
    assert result.exit_code == 1
    assert "pip install 'sluice-broker[spark]'" in result.output
    assert "Traceback" not in result.output
