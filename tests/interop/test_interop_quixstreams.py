"""Interop: a Quix Streams stateful application (its default ``use_changelog_topics=True``)
against a real broker subprocess -- issue 23's first wall: Quix creates its changelog topics
``cleanup.policy=compact`` and refused to start while Sluice had no log compaction.

The application counts records per key in a RocksDB store backed by a changelog topic. It
runs once over the input; the broker (small segments, a short cleaner backoff) compacts the
changelog; the application's local state is deleted, and a new run over a few more records
must continue every count from where it was: the state came back from the compacted
changelog, read across the offset gaps cleaning leaves.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, ConfigResource

from tests.broker_util import BrokerProcess
from tests.interop_helpers import DEADLINE_S, broker_fixture

quixstreams = pytest.importorskip("quixstreams")

pytestmark = pytest.mark.interop

KEYS = [f"user-{i}" for i in range(4)]
ROUNDS = 10


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    yield from broker_fixture(
        tmp_path_factory,
        "quixstreams",
        [
            "log.cleaner.backoff.ms=100",
            "log.cleaner.min.cleanable.ratio=0.01",
            "log.segment.bytes=1024",  # every topic rolls: the changelog gets cleaned
        ],
    )


def produce(broker: BrokerProcess, topic: str, keys: list[str]) -> None:
    """One record per key, one batch each (the segments are smaller than a batch of many)."""
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    failed: list[Any] = []
    for key in keys:
        producer.produce(
            topic,
            key=key.encode(),
            value=json.dumps({"user": key}).encode(),
            on_delivery=lambda err, _msg: failed.append(err) if err else None,
        )
        assert producer.flush(DEADLINE_S) == 0
    assert failed == []


def run_counter(broker: BrokerProcess, state_dir: Path, expect: int) -> dict[str, int]:
    """Run the counting application until it emitted ``expect`` results; the last count it
    emitted per key."""
    app = quixstreams.Application(
        broker_address=broker.bootstrap,
        consumer_group="counter",
        auto_offset_reset="earliest",
        state_dir=str(state_dir),
        commit_every=1,
        loglevel="WARNING",
    )
    words = app.topic("clicks", value_deserializer="json")
    sdf = app.dataframe(words)

    def count(value: dict[str, Any], state: Any) -> dict[str, Any]:
        total = state.get("count", 0) + 1
        state.set("count", total)
        return {"user": value["user"], "count": total}

    sdf = sdf.apply(count, stateful=True)
    results = app.run(count=expect, timeout=60)
    assert len(results) == expect, results
    last: dict[str, int] = {}
    for row in results:
        last[row["user"]] = row["count"]
    return last


def changelog_topic(broker: BrokerProcess) -> str:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    topics = admin.list_topics(timeout=DEADLINE_S).topics
    (name,) = [t for t in topics if t.startswith("changelog__")]
    return name


def wait_cleaned(broker: BrokerProcess, topic: str) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        for line in broker.log_text().splitlines():
            if '"cleaned log"' in line and f'"topic": "{topic}"' in line:
                return
        time.sleep(0.1)
    raise AssertionError(f"{topic} was not cleaned within 30 s")


def test_a_stateful_application_restores_its_state_from_the_compacted_changelog(
    broker: BrokerProcess, tmp_path: Path
) -> None:
    state_dir = tmp_path / "state"
    produce(broker, "clicks", KEYS * ROUNDS)
    counts = run_counter(broker, state_dir, len(KEYS) * ROUNDS)
    assert counts == dict.fromkeys(KEYS, ROUNDS)

    changelog = changelog_topic(broker)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    resource = ConfigResource(ConfigResource.Type.TOPIC, changelog)
    described = admin.describe_configs([resource])[resource].result(DEADLINE_S)
    assert described["cleanup.policy"].value == "compact"
    wait_cleaned(broker, changelog)

    # Local state gone (a new machine, a lost disk): it must come back from the changelog.
    shutil.rmtree(state_dir)
    produce(broker, "clicks", KEYS)
    counts = run_counter(broker, state_dir, len(KEYS))
    assert counts == dict.fromkeys(KEYS, ROUNDS + 1)
