"""Shared pieces of the interop tests (``tests/interop/test_interop_*.py``): Kafka clients nobody
here wrote (confluent-kafka/librdkafka, kafka-python, aiokafka, kcat) against a real broker
subprocess.

* :func:`broker_fixture` — the body of each interop module's module-scoped ``broker`` fixture:
  one ``python -m sluice.server`` per module (started with :func:`tests.broker_util.start_broker`
  on a
  free 127.0.0.1 port and a tmp data dir, stopped by PID). At teardown it checks the broker's log
  for connections the broker closed (an unserved API such as FindCoordinator, or a frame it could
  not parse, closes the connection and logs ``closing connection``), so a client silently stepping
  outside what Sluice serves fails the module instead of passing by luck.
* :func:`sample_records` — the records every test produces: keys (one null), values that
  compress, headers (none, several, an empty value, a null value), distinct CreateTime timestamps
  a little in the past (inside the default 7-day retention, so a retention pass cannot remove them).
* :func:`log_files` — the ``.log`` segment files of a partition on disk.
* :func:`librdkafka_login_refused` — waits for librdkafka to report a refused SASL login.

Every wait in these tests is bounded (``DEADLINE_S`` per poll loop).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.broker_util import BrokerProcess, start_broker

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
"""Kafka's compression names, in codec-id order (0-4)."""

DEADLINE_S = 15.0
"""Upper bound of any single produce/consume/admin wait in the interop tests."""

SEGMENT_BYTES = 4096
"""``segment.bytes`` of the topic that must roll segments on disk."""

Header = tuple[str, bytes | None]


@dataclass(frozen=True)
class Sample:
    """One record as produced, and as it must come back (at ``offset`` == its index)."""

    key: bytes | None
    value: bytes
    headers: tuple[Header, ...]
    timestamp: int


def sample_records(
    count: int, tag: str, *, base_timestamp: int | None = None, null_header_values: bool = True
) -> list[Sample]:
    """``count`` records with strictly increasing timestamps (10 ms apart).

    Record 3 has a null key; records with ``i % 4 == 0`` have no headers; the others carry a
    repeated header name, an empty value and (when ``i % 4 == 2`` and ``null_header_values``; a
    client that cannot send one, like kafka-python, passes False) a null value. Values are
    ~200 bytes of repetitive text so every codec actually shrinks the batch.
    """
    base = base_timestamp if base_timestamp is not None else (now_ms() - 600_000) // 1000 * 1000
    out = []
    for i in range(count):
        headers: tuple[Header, ...] = ()
        if i % 4:
            headers = (("trace", b"t-%d" % i), ("trace", b"again"), ("empty", b""))
            if i % 4 == 2 and null_header_values:
                headers += (("null", None),)
        key = None if i == 3 else f"{tag}-key-{i}".encode()
        value = f"{tag} value {i} ".encode() * 12
        out.append(Sample(key, value, headers, base + 10 * i))
    return out


def now_ms() -> int:
    return int(time.time() * 1000)


def log_files(broker: BrokerProcess, topic: str, partition: int = 0) -> list[Path]:
    """The partition's segment files (``<base offset>.log``), sorted by base offset."""
    return sorted((broker.data_dir / f"{topic}-{partition}").glob("*.log"))


def broker_fixture(
    tmp_path_factory: pytest.TempPathFactory, name: str, overrides: Sequence[str] = ()
) -> Iterator[BrokerProcess]:
    """Start a broker for one test module; at teardown stop it and check its log.

    Fails the module if the broker closed a connection on a client (see the module docstring),
    logged an error, or did not exit cleanly (exit code 0 after SIGTERM).
    """
    data_dir = tmp_path_factory.mktemp(f"interop-{name}") / "data"
    broker = start_broker(data_dir, overrides=overrides)
    try:
        yield broker
    finally:
        code = -1
        with contextlib.suppress(AssertionError):
            code = broker.stop()
    bad = [
        line
        for line in broker.log_text().splitlines()
        if "closing connection" in line or '"level": "error"' in line
    ]
    assert not bad, "the broker closed client connections or logged errors:\n" + "\n".join(bad[:10])
    assert code == 0, f"broker exit code {code}:\n{broker.log_text()[-3000:]}"


def librdkafka_login_refused(client: Any, errors: Sequence[Any], message: str) -> bool:
    """Poll a confluent-kafka ``client`` (its ``error_cb`` appends to ``errors``) until librdkafka
    reports a refused SASL login whose text holds ``message``, at most ``DEADLINE_S``; whether it
    did. librdkafka never fails a request early for a refused login -- it logs in again until the
    request times out --, so waiting for a Metadata request to fail costs its whole timeout; the
    error arrives as soon as the broker answers (the client connects to its bootstrap servers on
    creation)."""
    import confluent_kafka

    def refused() -> bool:
        return any(
            e.code() == confluent_kafka.KafkaError._AUTHENTICATION and message in e.str()
            for e in errors
        )

    deadline = time.monotonic() + DEADLINE_S
    while not refused() and time.monotonic() < deadline:
        client.poll(0.1)  # serves error_cb
    return refused()
