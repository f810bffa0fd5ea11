"""Interop: kcat (the Debian package, linking Debian's librdkafka 2.0.2 — an older librdkafka
than the confluent-kafka wheel's) against a broker process.

kcat cannot create topics: the per-codec topics are auto-created by kcat's own Metadata
request (``auto.create.topics.enable`` defaults to true); the small-``segment.bytes`` topic is
created with confluent-kafka's AdminClient. kcat cannot set record timestamps either: each
``kcat -P`` run stamps its records with the wall clock, so the tests produce in a few runs (one
batch each, distinct timestamps) and check what comes back against the window each run happened
in. Skipped (with the reason) when ``kcat`` is not on PATH; scripts/install-system-deps.sh
installs it in CI. Every kcat run has a timeout.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from tests.broker_util import BrokerProcess
from tests.interop_helpers import (
    CODECS,
    DEADLINE_S,
    SEGMENT_BYTES,
    broker_fixture,
    log_files,
    now_ms,
)

KCAT = shutil.which("kcat")
pytestmark = [
    pytest.mark.interop,
    pytest.mark.skipif(
        KCAT is None, reason="kcat is not on PATH (scripts/install-system-deps.sh installs it)"
    ),
]


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    yield from broker_fixture(tmp_path_factory, "kcat")


def kcat(broker: BrokerProcess, *args: str, stdin: bytes = b"") -> subprocess.CompletedProcess[str]:
    """Run kcat against ``broker``; fail with its stderr unless it exits 0."""
    assert KCAT is not None
    proc = subprocess.run(
        [KCAT, "-b", broker.bootstrap, "-m", str(int(DEADLINE_S)), *args],
        input=stdin,
        capture_output=True,
        timeout=DEADLINE_S + 5,
        check=False,
    )
    stdout, stderr = proc.stdout.decode(), proc.stderr.decode(errors="replace")
    assert proc.returncode == 0, f"kcat {' '.join(args)} exited {proc.returncode}:\n{stderr}"
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)


@dataclass
class Run:
    """One ``kcat -P`` invocation: its lines (key, value), its headers, its wall-clock window."""

    records: list[tuple[str | None, str]]
    headers: list[tuple[str, str | None]]
    started_ms: int
    ended_ms: int


def produce_run(
    broker: BrokerProcess, topic: str, run: int, codec: str, count: int, one_per_batch: bool = False
) -> Run:
    records: list[tuple[str | None, str]] = []
    for i in range(count):
        value = f"{topic}-run{run}-value{i}-" + "payload" * 20
        key = None if i == 1 else f"{topic}-run{run}-key{i}"  # a line without TAB: null key
        records.append((key, value))
    lines = "".join(f"{v}\n" if k is None else f"{k}\t{v}\n" for k, v in records)
    headers: list[tuple[str, str | None]] = [("run", str(run)), ("empty", ""), ("null", None)]
    header_args = [
        x for name, val in headers for x in ("-H", name if val is None else f"{name}={val}")
    ]
    if one_per_batch:
        header_args += ["-X", "batch.num.messages=1", "-X", "linger.ms=0"]
    started = now_ms()
    kcat(broker, "-P", "-t", topic, "-p", "0", "-z", codec, "-K", "\t", *header_args,
         stdin=lines.encode())  # fmt: skip
    return Run(records, headers, started, now_ms())


def consume_json(broker: BrokerProcess, topic: str, *, start: str = "beginning") -> list[Any]:
    """Every record from ``start`` to the end of the partition, as kcat's JSON envelopes."""
    out = kcat(broker, "-C", "-t", topic, "-p", "0", "-o", start, "-e", "-J").stdout
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def query_offset(broker: BrokerProcess, topic: str, timestamp: int) -> int:
    """``kcat -Q``: ListOffsets for one timestamp (-1 latest, -2 earliest)."""
    out = kcat(broker, "-Q", "-t", f"{topic}:0:{timestamp}").stdout.split()
    # "<topic> [0] offset <n>"
    assert out[:3] == [topic, "[0]", "offset"], out
    return int(out[3])


def expected_envelopes(runs: list[Run]) -> list[tuple[Any, ...]]:
    out = []
    for run in runs:
        flat_headers = [x for pair in run.headers for x in pair]
        for key, value in run.records:
            out.append((key, value, flat_headers))
    return out


def check_consumed(got: list[Any], runs: list[Run], topic: str) -> None:
    assert [(m["key"], m["payload"], m["headers"]) for m in got] == expected_envelopes(runs)
    assert [m["offset"] for m in got] == list(range(len(got)))
    assert all(m["topic"] == topic and m["partition"] == 0 for m in got)
    assert all(m["tstype"] == "create" for m in got)
    i = 0
    for run in runs:
        for _ in run.records:
            assert run.started_ms <= got[i]["ts"] <= run.ended_ms, (got[i], run)
            i += 1


@pytest.mark.parametrize("codec", CODECS)
def test_produce_consume_every_codec_and_offset_lookups(broker: BrokerProcess, codec: str) -> None:
    topic = f"kcat-{codec}"
    runs = []
    for run in range(3):
        runs.append(produce_run(broker, topic, run, codec, count=10))
        time.sleep(0.005)  # the next run's timestamps are strictly later
    got = consume_json(broker, topic)
    check_consumed(got, runs, topic)

    total = len(got)
    assert query_offset(broker, topic, -2) == 0
    assert query_offset(broker, topic, -1) == total
    # The first record of run 2: the first offset whose timestamp is >= its timestamp.
    first_of_run2 = 20
    ts = got[first_of_run2]["ts"]
    assert ts > got[first_of_run2 - 1]["ts"]
    assert query_offset(broker, topic, ts) == first_of_run2
    assert query_offset(broker, topic, got[-1]["ts"] + 1) == -1  # nothing that late
    # Consuming from a timestamp (kcat resolves s@ts with ListOffsets, then fetches).
    tail = consume_json(broker, topic, start=f"s@{ts}")
    assert [m["offset"] for m in tail] == list(range(first_of_run2, total))
    # Consuming from the middle of a (compressed) batch.
    middle = consume_json(broker, topic, start="25")
    assert [(m["offset"], m["payload"]) for m in middle] == [
        (m["offset"], m["payload"]) for m in got[25:]
    ]


def test_old_librdkafka_handshake_and_metadata(broker: BrokerProcess) -> None:
    """librdkafka 2.0.2 also opens with ApiVersions v3 and gets a v3 answer; -L lists topics."""
    kcat(broker, "-P", "-t", "kcat-meta", "-p", "0", stdin=b"x\n")  # auto-creates the topic
    listing = kcat(broker, "-L", "-J", "-d", "protocol")
    assert "Sent ApiVersionRequest (v3" in listing.stderr
    assert "Received ApiVersionResponse (v3" in listing.stderr
    md = json.loads(listing.stdout)
    assert [(b["id"], b["name"]) for b in md["brokers"]] == [(0, broker.bootstrap)]
    (topic,) = (t for t in md["topics"] if t["topic"] == "kcat-meta")
    assert "error" not in topic
    assert topic["partitions"] == [
        {"partition": 0, "leader": 0, "replicas": [{"id": 0}], "isrs": [{"id": 0}]}
    ]


def test_small_segment_bytes_rolls_segments_on_disk(broker: BrokerProcess) -> None:
    topic = "kcat-roll"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    futures = admin.create_topics(
        [NewTopic(topic, 1, 1, config={"segment.bytes": str(SEGMENT_BYTES)})],
        operation_timeout=DEADLINE_S,
    )
    futures[topic].result(DEADLINE_S)
    # One record per batch: ~50 batches of ~250 bytes, ~12 KiB -> at least 3 segments.
    run = produce_run(broker, topic, 0, "none", count=50, one_per_batch=True)
    files = log_files(broker, topic)
    assert len(files) >= 3, files
    assert all(f.stat().st_size <= SEGMENT_BYTES for f in files)
    assert files[0].name == "00000000000000000000.log"
    got = consume_json(broker, topic)
    check_consumed(got, [run], topic)
    # The last segment's base offset, from its file name, is the offset of a record in it.
    last_base = int(files[-1].name.removesuffix(".log"))
    assert 0 < last_base < len(got)
