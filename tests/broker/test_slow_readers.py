"""Slow readers hold bounded memory (issue 13): clients that send Fetch requests for large
responses and never read them must not make a broker process (``sluice.fetch.zero.copy=false``,
every record copied through Python) grow by their responses' size; each connection holds about
``sluice.connection.max.unsent.bytes``. Closing such connections logs no traceback.

The issue saw 8 slow readers take a broker from 44 to 569 MB: the copy path read each response
whole (up to ``fetch.max.bytes``) into the transport's buffer before the high watermark paused it.
RSS is read from ``/proc/<pid>/status`` of a real broker process.
"""

from __future__ import annotations

import asyncio
import socket
import time
from pathlib import Path

import pytest

from sluice.protocol import messages as m
from sluice.protocol.framing import encode_request
from tests.broker.test_server import batch, create_topic, fetch_request, produce
from tests.broker_util import WireClient, start_broker

pytestmark = pytest.mark.slow  # a broker process and ~50 MB of records

CLIENTS = 6
MIB = 1024 * 1024
RESPONSE = 24 * MIB  # what each Fetch asks for (24 batches of ~1 MiB)
UNSENT = 1 * MIB  # sluice.connection.max.unsent.bytes in the test


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def settled_rss_mb(pid: int, timeout: float = 30.0) -> float:
    """RSS once it has stayed within 1 MB for 20 samples 50 ms apart (bounded wait)."""
    deadline = time.monotonic() + timeout
    samples: list[float] = []
    while time.monotonic() < deadline:
        samples.append(rss_mb(pid))
        window = samples[-20:]
        if len(window) == 20 and max(window) - min(window) < 1.0:
            return max(samples)
        time.sleep(0.05)
    return max(samples)


async def _fill(port: int) -> None:
    client = await WireClient.connect("127.0.0.1", port)
    try:
        assert await create_topic(client, "big") == 0
        for i in range(RESPONSE // MIB):
            b = batch(1, start=i, size=MIB - 200)
            assert (await produce(client, "big", b)).error_code == 0
        # one full fetch (the page cache holds the file; the broker has met every code path)
        whole = fetch_request("big", 0, max_bytes=2 * RESPONSE, partition_max_bytes=2 * RESPONSE)
        resp = await client.request(m.Fetch.key, 11, whole)
        assert len(bytes(resp.responses[0].partitions[0].records)) > RESPONSE - MIB
    finally:
        await client.close()


def slow_reader(port: int, requests: int) -> socket.socket:
    """A client that sends ``requests`` Fetches for the whole partition and never reads."""
    s = socket.create_connection(("127.0.0.1", port))
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
    body = fetch_request("big", 0, max_bytes=2 * RESPONSE, partition_max_bytes=2 * RESPONSE)
    for cid in range(requests):
        s.sendall(encode_request(m.Fetch.key, 11, cid + 1, "slow", body))
    return s


@pytest.mark.parametrize("zero_copy", ["false", "true"])
def test_slow_readers_hold_bounded_memory(tmp_path: Path, zero_copy: str) -> None:
    broker = start_broker(
        tmp_path / "data",
        overrides=[
            f"sluice.fetch.zero.copy={zero_copy}",
            f"sluice.connection.max.unsent.bytes={UNSENT}",
        ],
    )
    readers: list[socket.socket] = []
    try:
        asyncio.run(_fill(broker.port))
        before = settled_rss_mb(broker.pid)
        readers = [slow_reader(broker.port, 3) for _ in range(CLIENTS)]
        after = settled_rss_mb(broker.pid)
        growth = after - before
        print(f"RSS {before:.0f} -> {after:.0f} MB with {CLIENTS} slow readers")
        # Old code: ~ CLIENTS x RESPONSE (a whole copied response per connection, ~140 MB).
        # Bounded: per connection about the unsent bound plus one copied chunk of it.
        assert growth < CLIENTS * 3 * UNSENT / MIB + 16, (before, after)
        for s in readers:  # unread responses in the socket: close() resets the connection
            s.close()
        readers = []
        asyncio.run(_still_serves(broker.port))
        assert broker.stop() == 0
    finally:
        for s in readers:
            s.close()
        if broker.proc.poll() is None:
            broker.kill()
    text = broker.log_text()
    assert "Traceback" not in text and '"exception"' not in text, text[-3000:]
    assert '"level": "error"' not in text, text[-3000:]


async def _still_serves(port: int) -> None:
    client = await WireClient.connect("127.0.0.1", port)
    try:
        resp = await client.request(
            m.Fetch.key, 11, fetch_request("big", 0, max_bytes=MIB, partition_max_bytes=MIB)
        )
        assert resp.responses[0].partitions[0].error_code == 0
    finally:
        await client.close()
