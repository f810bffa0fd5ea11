"""bench/broker.py's raw sendfile baseline: the bytes it is compared on, and its CPU clock."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from bench.broker import process_cpu_seconds, raw_sendfile


@pytest.mark.parametrize("threaded", [False, True])
async def test_raw_sendfile_sends_every_planned_byte(tmp_path: Path, threaded: bool) -> None:
    blob = tmp_path / "blob"
    blob.write_bytes(os.urandom(700_000))
    plan = [[100_000, 100_000, 50_123], [200_000, 77]]  # response-sized calls per connection
    seconds, received, sender_cpu, receiver_cpu = await raw_sendfile(
        blob, plan, threaded, sndbuf=65536
    )
    assert received == sum(map(sum, plan))
    assert seconds > 0
    assert sender_cpu >= 0 and receiver_cpu >= 0


def test_process_cpu_seconds_counts_this_process() -> None:
    before = process_cpu_seconds(os.getpid())
    deadline = time.process_time() + 0.05
    while time.process_time() < deadline:  # burn 50 ms of CPU
        pass
    assert process_cpu_seconds(os.getpid()) - before >= 0.04
