"""PySpark 4 discovers Sluice's data sources by itself (``pyspark_sluice*`` top-level modules).

A fresh Spark session in a child process (its own JVM: PySpark looks data sources up once per
JVM), with the repository root on PYTHONPATH where an installed wheel would put the modules,
must resolve ``format("sluice")`` and ``format("sluice-segments")`` without
``pipeline.register``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.spark, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]

CHILD = """
import os, sys, warnings
from sluice import pipeline
pipeline.python_worker_env()  # workers run this interpreter; nothing is registered
os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
from pyspark.sql import SparkSession
with warnings.catch_warnings():
    warnings.simplefilter("ignore", FutureWarning)
    spark = (
        SparkSession.builder.master("local[1]")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .getOrCreate()
    )
try:
    data = sys.argv[1]
    segments = spark.read.format("sluice-segments").option("subscribe", "t").load(data)
    network = (
        spark.read.format("sluice")
        .option("kafka.bootstrap.servers", "127.0.0.1:9")
        .option("subscribe", "t")
        .load()
    )
    print("COLUMNS", ",".join(network.columns))
    print("SEGMENT_ROWS", segments.count())
finally:
    spark.stop()
"""


def test_fresh_session_finds_the_formats_without_register(tmp_path: Path) -> None:
    pytest.importorskip("pyspark")
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.skip("needs Java 17")
    (tmp_path / "data" / "t-0").mkdir(parents=True)  # an empty partition: zero rows
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("PYSPARK_PYTHON", None)
    env.pop("PYSPARK_DRIVER_PYTHON", None)
    result = subprocess.run(
        [sys.executable, "-c", CHILD, str(tmp_path / "data")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    lines = dict(line.split(" ", 1) for line in result.stdout.splitlines() if " " in line)
    assert lines["COLUMNS"].split(",") == [
        "key",
        "value",
        "topic",
        "partition",
        "offset",
        "timestamp",
        "timestampType",
    ]
    assert lines["SEGMENT_ROWS"] == "0"
