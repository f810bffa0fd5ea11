"""`pytest -m "not slow"` is the quick loop: it must not start a Spark session (tens of seconds),
so every test module marked ``spark`` is marked ``slow`` too."""

from __future__ import annotations

import re
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def test_spark_test_modules_are_slow() -> None:
    spark_modules = {}
    for path in TESTS.rglob("test_*.py"):
        mark = re.search(r"^pytestmark = (.*)$", path.read_text(), re.M)
        if mark is not None and "mark.spark" in mark.group(1):
            spark_modules[path.name] = "mark.slow" in mark.group(1)
    assert spark_modules, "no module is marked spark"
    assert [name for name, slow in spark_modules.items() if not slow] == []
