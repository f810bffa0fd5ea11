"""Fetch responses made of many parts (bytes, file slices, empty and error partitions) through
server/connection.py's zero-copy and copying paths, on uvloop (the entrypoint's loop), with a
small send buffer and a client that starts reading late, so sendfile hits EAGAIN mid-response."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
import uvloop

from sluice.protocol import messages as m
from sluice.protocol.records import iter_batches
from tests.broker.test_server import (
    FETCH,
    METADATA,
    batch,
    create_topic,
    produce,
    same_batch_content,
    start_server,
)
from tests.broker_util import WireClient


def multi_fetch(offsets: dict[int, int]) -> Any:
    """Partitions 0..2 of "multi" at ``offsets`` plus a partition of a topic that does not exist
    (an error entry between the slices)."""
    return m.FetchRequest(
        replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=10**8, isolation_level=0,
        topics=[
            m.FetchRequest.FetchTopic(topic="multi", partitions=[
                m.FetchRequest.FetchPartition(partition=p, fetch_offset=o,
                                              partition_max_bytes=10**8)
                for p, o in offsets.items()]),
            m.FetchRequest.FetchTopic(topic="nope", partitions=[
                m.FetchRequest.FetchPartition(partition=0, fetch_offset=0,
                                              partition_max_bytes=10**8)]),
        ],
    )  # fmt: skip


@pytest.mark.parametrize("zero_copy", ["true", "false"])
def test_multi_partition_fetches_pipelined_through_a_late_reader(
    tmp_path: Path, zero_copy: str
) -> None:
    async def scenario() -> None:
        srv = await start_server(
            tmp_path,
            f"sluice.fetch.zero.copy={zero_copy}",
            "socket.send.buffer.bytes=65536",
            "auto.create.topics.enable=false",
        )
        try:
            c = await WireClient.connect("127.0.0.1", srv.port)
            try:
                assert await create_topic(c, "multi", partitions=3) == 0
                sent: dict[int, list[bytes]] = {0: [], 1: [], 2: []}
                for i in range(4):  # partition 1 stays empty
                    for p in (0, 2):
                        b = batch(1, start=10 * p + i, size=300_000)
                        sent[p].append(b)
                        assert (await produce(c, "multi", b, partition=p)).error_code == 0
                plan: list[tuple[int, Any, dict[int, int]]] = [
                    (FETCH, multi_fetch({0: 0, 1: 0, 2: 0}), {0: 0, 1: 0, 2: 0}),
                    (METADATA, m.MetadataRequest(topics=None), {}),
                    (FETCH, multi_fetch({2: 1, 0: 3, 1: 0}), {2: 1, 0: 3, 1: 0}),
                    (FETCH, multi_fetch({0: 2}), {0: 2}),
                ]
                ids = [await c.send(k, 11 if k == FETCH else 8, body) for k, body, _ in plan]
                await asyncio.sleep(0.2)  # the broker fills the socket before we read
                for cid, (key, _, offsets) in zip(ids, plan, strict=True):
                    resp = await c.receive(key, 11 if key == FETCH else 8, cid)
                    if key != FETCH:
                        assert "multi" in {t.name for t in resp.topics}
                        continue
                    by_topic = {t.topic: t.partitions for t in resp.responses}
                    assert [p.error_code for p in by_topic["nope"]] == [3]
                    parts = {p.partition_index: p for p in by_topic["multi"]}
                    assert list(parts) == list(offsets)  # in request order
                    for p, offset in offsets.items():
                        assert parts[p].error_code == 0
                        stored = [bytes(b) for _, _, b in iter_batches(bytes(parts[p].records))]
                        expected = sent[p][offset:]
                        assert len(stored) == len(expected)
                        for i, (s, st) in enumerate(zip(expected, stored, strict=True)):
                            same_batch_content(s, st, offset + i)
                if zero_copy == "true":
                    assert srv.metrics.get("fetch.sendfile_bytes") >= 8 * 300_000
                    assert srv.metrics.get("fetch.sendfile_eagain") >= 1
                else:
                    assert srv.metrics.get("fetch.sendfile_bytes") == 0
            finally:
                await c.close()
        finally:
            await srv.shutdown()

    uvloop.run(scenario())


def test_no_sendfile_to_a_closing_transport(monkeypatch: pytest.MonkeyPatch) -> None:
    """An aborted transport's socket fd is closed (its number may already name another file):
    a slice still to send is dropped, never sendfile'd to the remembered descriptor."""
    import os
    import socket
    from types import SimpleNamespace

    from sluice.server.metrics.metrics import Metrics
    from sluice.server.network.connection import Connection

    calls: list[tuple[int, ...]] = []
    monkeypatch.setattr(os, "sendfile", lambda *a: calls.append(a) or 0)

    class ClosingTransport:
        closing = False

        def get_write_buffer_size(self) -> int:
            return 0

        def is_closing(self) -> bool:
            return self.closing

        def abort(self) -> None:
            self.closing = True

    async def scenario() -> None:
        conn = Connection(
            None,  # type: ignore[arg-type]
            Metrics(),
            max_frame_size=1 << 20,
            max_queued_requests=1,
            max_unsent_bytes=1 << 20,
            zero_copy=True,
            registry=set(),
        )
        a, b = socket.socketpair()
        transport = ClosingTransport()
        conn._transport = transport  # type: ignore[assignment]
        conn._loop = asyncio.get_running_loop()
        conn._fd = a.fileno()
        piece = SimpleNamespace(file=SimpleNamespace(fileno=lambda: b.fileno()), position=0, size=5)
        try:
            transport.abort()
            await conn._sendfile(piece)
            assert calls == []
        finally:
            a.close()
            b.close()

    asyncio.run(scenario())
