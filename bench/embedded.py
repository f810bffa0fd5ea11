"""Embedded broker: time until ready and idle memory.

``python -m bench embedded [--runs N]``

* **cold ready**: a fresh interpreter (``python -c``) timing ``from sluice.testing import
EmbeddedBroker``
  + ``EmbeddedBroker().start_sync()`` until it accepts connections -- what the first test of a
  session pays (imports included). Median of ``--runs``.
* **warm ready**: in this process, after a first start: ``async with EmbeddedBroker()`` on the
  running loop, and ``with EmbeddedBroker()`` (thread with its own loop) -- what every later test
  pays (the ``sluice_broker`` fixture uses the thread form).
* **subprocess ready**: ``EmbeddedBroker(mode="subprocess")`` from ``start_sync()`` to ready
  (a whole ``python -m sluice.server`` start).
* **idle RSS**: resident memory of that fresh interpreter with the broker started, after one
  produce and 1 s idle (``VmRSS`` from /proc/self/status).

Targets: ready < 0.3 s, RSS < 60 MB.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import time

READY_TARGET_S = 0.3
RSS_TARGET_MB = 60.0

_CHILD = r"""
import time
t0 = time.perf_counter()
from sluice.testing import EmbeddedBroker
from sluice.server.logging import configure_logging
configure_logging("warning")
broker = EmbeddedBroker().start_sync()
ready = time.perf_counter() - t0
import socket
from sluice.protocol import messages
from sluice.protocol.framing import encode_request
from sluice.protocol.records import build_batch
# one produce through the real server path (raw wire: no client library imported)
host, port = broker.bootstrap_servers.rsplit(":", 1)
req = messages.ProduceRequest
body = req(transactional_id=None, acks=1, timeout_ms=5000, topic_data=[req.TopicProduceData(
    name="idle", partition_data=[req.TopicProduceData.PartitionProduceData(
        index=0, records=build_batch([(1, None, b"x" * 100)]))])])
meta = messages.MetadataRequest(topics=[messages.MetadataRequest.MetadataRequestTopic(name="idle")])
with socket.create_connection((host, int(port)), timeout=10) as s:
    for key, version, b in ((3, 8, meta), (0, 8, body)):
        s.sendall(encode_request(key, version, 1, "bench", b))
        size = int.from_bytes(s.recv(4), "big")
        while size > 0:
            size -= len(s.recv(size))
time.sleep(1.0)
rss_kb = next(int(line.split()[1]) for line in open("/proc/self/status")
              if line.startswith("VmRSS:"))
broker.stop_sync()
print(__import__("json").dumps({"ready": ready, "rss_mb": rss_kb / 1024}))
"""


def cold(runs: int) -> tuple[list[float], list[float]]:
    readies, rss = [], []
    for _ in range(runs):
        out = subprocess.run(
            [sys.executable, "-c", _CHILD], capture_output=True, text=True, timeout=120, check=True
        )
        result = json.loads(out.stdout.strip().splitlines()[-1])
        readies.append(result["ready"])
        rss.append(result["rss_mb"])
    return readies, rss


async def warm_async(runs: int) -> list[float]:
    from sluice.testing.embedded import EmbeddedBroker

    times = []
    for _ in range(runs):
        t = time.perf_counter()
        broker = await EmbeddedBroker().start()
        times.append(time.perf_counter() - t)
        await broker.stop()
    return times


def warm_thread(runs: int) -> list[float]:
    from sluice.testing.embedded import EmbeddedBroker

    times = []
    for _ in range(runs):
        t = time.perf_counter()
        broker = EmbeddedBroker().start_sync()
        times.append(time.perf_counter() - t)
        broker.stop_sync()
    return times


def subprocess_ready(runs: int) -> list[float]:
    from sluice.testing.embedded import EmbeddedBroker

    times = []
    for _ in range(runs):
        t = time.perf_counter()
        broker = EmbeddedBroker(mode="subprocess").start_sync()
        times.append(time.perf_counter() - t)
        broker.stop_sync()
    return times


def _fmt(name: str, values: list[float], unit: str, target: float | None = None) -> str:
    med = statistics.median(values)
    scale = 1000 if unit == "ms" else 1
    line = (
        f"{name:<28} median {med * scale:8.1f} {unit}   min {min(values) * scale:8.1f}   "
        f"max {max(values) * scale:8.1f}   (n={len(values)})"
    )
    if target is not None:
        line += f"   target < {target * scale:g} {unit}: {'ok' if med < target else 'MISSED'}"
    return line


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench embedded", description=__doc__)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args(argv)
    from sluice.server.logging import configure_logging

    configure_logging("warning")
    ready, rss = cold(args.runs)
    print(_fmt("cold ready (fresh python)", ready, "ms", READY_TARGET_S))
    print(_fmt("idle RSS (fresh python)", rss, "MB", RSS_TARGET_MB))
    asyncio.run(warm_async(1))  # imports
    print(_fmt("warm ready, async with", asyncio.run(warm_async(args.runs * 4)), "ms",
               READY_TARGET_S))  # fmt: skip
    print(_fmt("warm ready, with (thread)", warm_thread(args.runs * 4), "ms", READY_TARGET_S))
    print(_fmt("subprocess ready", subprocess_ready(args.runs), "ms"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
