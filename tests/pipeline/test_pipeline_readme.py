"""The README's Spark section runs as written, on the run's one local Spark session.

The ```python block of the "Spark pipeline" section is run in this process (its
``SparkSession.builder...getOrCreate()`` returns the session-scoped ``spark`` fixture: one JVM
per run) against an embedded broker with its defaults (topics auto-created, as a fresh ``make
run`` broker). Two things name the reader's machine and are pointed at that broker, as
``tests/project/test_readme.py`` does: the address ``127.0.0.1:9092`` and the data directory
``data`` (``make run``'s ``log.dirs``). Nothing else is changed: no topic is created beforehand,
no save mode added.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer

from sluice import EmbeddedBroker

pytestmark = [pytest.mark.spark, pytest.mark.slow]

README = Path(__file__).resolve().parents[2] / "README.md"


def spark_block() -> str:
    text = README.read_text()
    section = text[text.index("## Spark pipeline\n") :]
    section = section[: section.index("\n## ", 1)]
    blocks = re.findall(r"^```python\n(.*?)^```", section, re.M | re.S)
    assert len(blocks) == 1, "the Spark section has one Python example"
    return str(blocks[0])


def test_the_spark_section_says_what_a_fresh_machine_needs() -> None:
    text = README.read_text()
    section = text[text.index("## Spark pipeline\n") : text.index("## Container image")]
    assert "PYSPARK_PYTHON" in section
    assert 'format("sluice-segments").option("subscribe"' in section


def test_the_readme_spark_example_runs_as_written(
    spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    block = spark_block()
    assert block.count("127.0.0.1:9092") == 1 and block.count('.load("data")') == 1
    with EmbeddedBroker(data_dir=tmp_path / "data") as broker:
        script = block.replace("127.0.0.1:9092", broker.bootstrap_servers).replace(
            '.load("data")', f".load({str(broker.data_dir)!r})"
        )
        exec(compile(script, str(README), "exec"), {"__name__": "readme_spark"})
        shown = capsys.readouterr().out
        consumer = Consumer(
            {"bootstrap.servers": broker.bootstrap_servers, "group.id": "readme",
             "auto.offset.reset": "earliest", "enable.partition.eof": True}
        )  # fmt: skip
        try:
            consumer.subscribe(["events-upper"])
            got: dict[bytes | None, bytes | None] = {}
            while len(got) < 2:
                msg = consumer.poll(10)
                assert msg is not None, f"events-upper holds {got}"
                if not msg.error():
                    got[msg.key()] = msg.value()
        finally:
            consumer.close()
    assert got == {b"k1": b"HELLO", b"k2": b"WORLD"}
    # The two show() tables: events-upper over the network, events from its segment files.
    assert "HELLO" in shown and "WORLD" in shown
    assert re.search(r"\|\s*events\|", shown), shown
