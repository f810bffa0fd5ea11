"""A real broker process (``python -m sluice.server``): stop it (SIGTERM / SIGINT / kill -9), start
it
again on the same data directory, and everything acknowledged is still there."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import pytest

from sluice.protocol.records import build_batch, decode_batch, iter_batches
from tests.broker.test_server import create_topic, fetch, list_offset, metadata, produce
from tests.broker_util import WireClient, running_broker, start_broker


def batches(n: int) -> list[bytes]:
    return [
        build_batch([(1_700_000_000_000 + 10 * i + j, b"k", b"v%d-%d" % (i, j)) for j in range(3)])
        for i in range(n)
    ]


async def write_some(port: int, sent: list[bytes]) -> None:
    c = await WireClient.connect("127.0.0.1", port)
    try:
        assert await create_topic(c, "durable", 2, configs={"segment.bytes": "1024"}) == 0
        for i, b in enumerate(sent):
            r = await produce(c, "durable", b, partition=i % 2)
            assert r.error_code == 0
    finally:
        await c.close()


async def read_back(port: int) -> dict[int, list[bytes]]:
    """Every stored record value per partition."""
    c = await WireClient.connect("127.0.0.1", port)
    try:
        resp = await metadata(c, ["durable"], auto=False)
        assert resp.topics[0].error_code == 0
        assert len(resp.topics[0].partitions) == 2
        out: dict[int, list[bytes]] = {}
        for part in (0, 1):
            values: list[bytes] = []
            offset = 0
            for _ in range(100):  # bounded paging through the log
                p = await fetch(c, "durable", offset, partition=part)
                assert p.error_code == 0
                if not p.records:
                    break
                for _, header, b in iter_batches(bytes(p.records), allow_partial_tail=True):
                    values += [r.value or b"" for r in decode_batch(b).records]
                    offset = header.base_offset + header.last_offset_delta + 1
            out[part] = values
        return out
    finally:
        await c.close()


def expected_values(sent: list[bytes]) -> dict[int, list[bytes]]:
    out: dict[int, list[bytes]] = {0: [], 1: []}
    for i, b in enumerate(sent):
        out[i % 2] += [r.value or b"" for r in decode_batch(b).records]
    return out


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
async def test_graceful_stop_and_restart(tmp_path: Path, sig: int) -> None:
    data = tmp_path / "data"
    sent = batches(40)
    broker = start_broker(data)
    try:
        await write_some(broker.port, sent)
    finally:
        code = broker.stop(sig)
    assert code == 0, broker.log_text()
    assert (data / ".kafka_cleanshutdown").exists() or (data / ".clean-shutdown").exists()
    log = broker.log_text()
    assert '"event": "stopped"' in log
    assert len(list((data / "durable-0").glob("*.log"))) > 1  # segment.bytes=1024: rolled
    with running_broker(data) as again:
        assert await read_back(again.port) == expected_values(sent)
        c = await WireClient.connect("127.0.0.1", again.port)
        try:
            assert (await list_offset(c, "durable", -1)).offset == 20 * 3
        finally:
            await c.close()


async def test_kill_9_and_restart(tmp_path: Path) -> None:
    data = tmp_path / "data"
    sent = batches(30)
    broker = start_broker(data)
    try:
        await write_some(broker.port, sent)
    finally:
        code = broker.kill()
    assert code == -signal.SIGKILL
    assert not (data / ".kafka_cleanshutdown").exists()
    with running_broker(data) as again:
        # Acknowledged writes survive: the page cache outlives the process.
        assert await read_back(again.port) == expected_values(sent)
        # and the log keeps accepting at the right offsets
        c = await WireClient.connect("127.0.0.1", again.port)
        try:
            r = await produce(c, "durable", sent[0], partition=0)
            assert (r.error_code, r.base_offset) == (0, 15 * 3)
        finally:
            await c.close()


async def test_second_start_on_a_busy_port_fails_cleanly(tmp_path: Path) -> None:
    with running_broker(tmp_path / "a") as first:
        with pytest.raises(AssertionError, match="could not start broker") as info:
            start_broker(tmp_path / "b", port=first.port, timeout=15)
        assert "cannot start broker" in str(info.value)
        # the first one is unaffected
        c = await WireClient.connect("127.0.0.1", first.port)
        try:
            assert (await metadata(c, None)).brokers[0].port == first.port
        finally:
            await c.close()


async def test_sigterm_answers_a_parked_long_poll_then_exits(tmp_path: Path) -> None:
    from tests.broker.test_server import fetch_request

    data = tmp_path / "data"
    broker = start_broker(data)
    try:
        c = await WireClient.connect("127.0.0.1", broker.port)
        assert await create_topic(c, "quiet") == 0
        cid = await c.send(1, 11, fetch_request("quiet", 0, max_wait_ms=120_000))
        for _ in range(200):  # bounded: the broker has read the fetch once it logged nothing else
            await asyncio.sleep(0.01)
        broker.proc.send_signal(signal.SIGTERM)
        # the in-flight fetch is answered (empty, no error) before the connection closes
        resp = await c.receive(1, 11, cid, timeout=30)
        p = resp.responses[0].partitions[0]
        assert (p.error_code, len(p.records or b"")) == (0, 0)
        assert await c.read_frame(timeout=30) is None
        await c.close()
    finally:
        code = broker.stop()
    assert code == 0, broker.log_text()
    assert (data / ".kafka_cleanshutdown").exists() or (data / ".clean-shutdown").exists()


async def test_second_sigint_forces_but_still_closes_logs(tmp_path: Path) -> None:
    data = tmp_path / "data"
    broker = start_broker(data)
    try:
        await write_some(broker.port, batches(4))
        broker.proc.send_signal(signal.SIGINT)
        broker.proc.send_signal(signal.SIGINT)
    finally:
        code = broker.stop()
    assert code == 0, broker.log_text()
    assert (data / ".kafka_cleanshutdown").exists() or (data / ".clean-shutdown").exists()
    with running_broker(data) as again:
        assert await read_back(again.port) == expected_values(batches(4))


def test_invalid_config_exits_2_with_a_clear_message(tmp_path: Path) -> None:
    import subprocess
    import sys

    from tests.broker_util import REPO

    props = tmp_path / "server.properties"
    props.write_text("num.partitions=3\nlisteners=PLAINTEXT://127.0.0.1:0\n")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "sluice.server",
            str(props),
            "--override",
            "default.replication.factor=3",
        ],
        cwd=REPO,
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2
    out = proc.stdout.decode()
    assert "invalid configuration" in out and "default.replication.factor" in out
    assert "listening" not in out  # it stopped before opening anything
