"""Garbage from the network closes that connection (or gets an error code); nothing else suffers.

Every case: open a connection, send the bad bytes, check the broker's reaction (EOF, an error
response), check a counter moved, then check that another connection is served and the data
stored before is intact.
"""

from __future__ import annotations

import asyncio
import random
import struct
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from sluice.protocol import messages as m
from sluice.protocol.framing import encode_request
from sluice.protocol.records import build_batch, iter_batches
from sluice.server.server import Server
from tests.broker.test_server import create_topic, fetch, metadata, produce, start_server
from tests.broker_util import WireClient

MAX_FRAME = 64 * 1024
STORED = build_batch([(1_700_000_000_000 + i, None, b"keep-%d" % i) for i in range(5)])


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[Server]:
    srv = await start_server(tmp_path, f"socket.request.max.bytes={MAX_FRAME}")
    c = await WireClient.connect("127.0.0.1", srv.port)
    try:
        assert await create_topic(c, "keep") == 0
        assert (await produce(c, "keep", STORED)).error_code == 0
    finally:
        await c.close()
    try:
        yield srv
    finally:
        await srv.shutdown()


async def assert_still_serving(server: Server, hw: int = 5) -> None:
    """A fresh connection works and the stored batch is intact (and nothing else was added)."""
    c = await WireClient.connect("127.0.0.1", server.port)
    try:
        resp = await metadata(c, ["keep"], auto=False)
        assert resp.topics[0].error_code == 0
        p = await fetch(c, "keep", 0)
        assert p.error_code == 0 and p.high_watermark == hw
        _, _, stored = next(iter_batches(bytes(p.records)))
        assert bytes(stored)[16:] == STORED[16:]
    finally:
        await c.close()


async def assert_closed(c: WireClient) -> None:
    assert await c.read_frame(timeout=10) is None


def header(api_key: int, version: int, correlation: int = 1, client: bytes = b"bad") -> bytes:
    return struct.pack(">hhih", api_key, version, correlation, len(client)) + client


def framed(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


async def test_oversize_frame_closes_before_the_body(server: Server) -> None:
    c = await WireClient.connect("127.0.0.1", server.port)
    # Only the size prefix: the broker must not wait for the body to decide.
    await c.send_raw(struct.pack(">i", MAX_FRAME + 1))
    await assert_closed(c)
    await c.close()
    assert server.metrics.get("connections.closed.frame_too_large") == 1
    await assert_still_serving(server)


async def test_negative_size_closes(server: Server) -> None:
    c = await WireClient.connect("127.0.0.1", server.port)
    await c.send_raw(struct.pack(">i", -7) + b"xxxx")
    await assert_closed(c)
    await c.close()
    assert server.metrics.get("connections.closed.frame_too_large") == 1
    await assert_still_serving(server)


@pytest.mark.parametrize(
    "payload",
    [
        b"",  # empty frame
        b"\x00\x03",  # shorter than a header
        struct.pack(">hhi", 3, 8, 1) + b"\x00\x10ab",  # client_id length past the end
        header(3, 8) + b"\xff\xff\xff\xfe",  # Metadata: topics count -2
        header(3, 8) + b"\x00\x00\x00\x05\x00",  # Metadata: 5 topics announced, 0 present
        header(0, 8) + b"\x00\x00\x00\x01",  # Produce body truncated
        header(0, 8) + b"\xff\xff" + b"\x00\x01\x00\x00\x03\xe8\x00\x00\x00\x01\x7f\xff",
        # ^ Produce: acks, timeout, 1 topic whose name claims 32767 bytes
    ],
    ids=["empty", "short", "client_id", "neg_count", "count_past_end", "truncated", "name_len"],
)
async def test_garbage_header_or_body_closes(server: Server, payload: bytes) -> None:
    c = await WireClient.connect("127.0.0.1", server.port)
    await c.send_raw(framed(payload))
    await assert_closed(c)
    await c.close()
    assert server.metrics.get("connections.closed.bad_request") == 1
    await assert_still_serving(server)


@pytest.mark.parametrize("api_key, version", [(999, 0), (1, 99), (0, 2), (3, 0), (-1, 0)])
async def test_unknown_api_or_version_closes(server: Server, api_key: int, version: int) -> None:
    c = await WireClient.connect("127.0.0.1", server.port)
    await c.send_raw(framed(header(api_key, version) + b"\x00" * 16))
    await assert_closed(c)
    await c.close()
    assert server.metrics.get("connections.closed.unsupported_version") == 1
    await assert_still_serving(server)


@pytest.mark.parametrize("api", [m.FindCoordinator, m.Heartbeat, m.JoinGroup])
async def test_api_declared_but_not_served_closes(server: Server, api: object) -> None:
    """An API the codec knows but no handler serves is neither advertised nor served. Every
    declared API has a handler now, so the test takes one away (a broker built without it)."""
    key, version = api.key, api.min_version  # type: ignore[attr-defined]
    assert server.replica_manager is not None
    del server.handlers._dispatch[key]
    assert key not in server.handlers.served_api_keys
    c = await WireClient.connect("127.0.0.1", server.port)
    await c.send_raw(encode_request(key, version, 3, "t", api.request.cls()))  # type: ignore[attr-defined]
    await assert_closed(c)
    await c.close()
    assert server.metrics.get("connections.closed.unsupported_version") == 1
    await assert_still_serving(server)


async def test_responses_due_before_the_garbage_are_sent(server: Server) -> None:
    c = await WireClient.connect("127.0.0.1", server.port)
    good = encode_request(3, 8, 41, "t", m.MetadataRequest(topics=None))
    await c.send_raw(good + framed(b"\x00\x03"))
    raw = await c.read_frame()
    assert raw is not None and struct.unpack(">i", raw[:4])[0] == 41
    await assert_closed(c)
    await c.close()
    await assert_still_serving(server)


async def test_random_garbage_never_hurts_the_broker(server: Server) -> None:
    rng = random.Random(1234)
    good = encode_request(0, 8, 9, "t", m.ProduceRequest(
        acks=1, timeout_ms=1000, topic_data=[m.ProduceRequest.TopicProduceData(
            name="keep", partition_data=[m.ProduceRequest.PartitionProduceData(
                index=0, records=b"\x00" * 70)])]))  # fmt: skip
    for i in range(40):
        c = await WireClient.connect("127.0.0.1", server.port)
        if i % 2:
            data = bytearray(good)  # a valid frame with a few random bytes flipped
            for _ in range(rng.randint(1, 4)):
                data[rng.randrange(4, len(data))] = rng.randrange(256)
        else:
            body = rng.randbytes(rng.randint(0, 200))
            data = bytearray(framed(body))
        await c.send_raw(bytes(data))
        # Either an answer or a close; never a hang (bounded read) or a broker crash.
        frame = await c.read_frame(timeout=10)
        if frame is not None:
            assert len(frame) >= 4
        await c.close()
    await assert_still_serving(server)  # nothing was appended by the garbage
    assert server.metrics.get("connections.closed.internal_error") == 0


async def test_client_vanishing_mid_frame_and_mid_long_poll(server: Server) -> None:
    c = await WireClient.connect("127.0.0.1", server.port)
    await c.send_raw(struct.pack(">i", 1000) + b"\x00\x03")  # half a frame, then gone
    await c.close()
    c = await WireClient.connect("127.0.0.1", server.port)
    from tests.broker.test_server import fetch_request

    await c.send(1, 11, fetch_request("keep", 5, max_wait_ms=60_000))
    assert server.replica_manager is not None
    for _ in range(2000):
        if server.replica_manager.fetch_purgatory.watched():
            break
        await asyncio.sleep(0.005)
    c.writer.transport.abort()
    await c.close()
    await assert_still_serving(server)
    # the orphaned long-poll is woken by the next append and its answer is dropped quietly
    other = await WireClient.connect("127.0.0.1", server.port)
    try:
        assert (await produce(other, "keep", STORED)).error_code == 0
    finally:
        await other.close()
    await assert_still_serving(server, hw=10)


async def park_a_fetch_on_a_full_socket(srv: Server, c: WireClient) -> None:
    """Topic "big" with 10 batches of 500 KB, and a Fetch of all of it that ``c`` never reads:
    returns once the server's sendfile has met a full socket (server started with
    ``socket.send.buffer.bytes=65536``)."""
    from tests.broker.test_server import batch, fetch_request

    assert await create_topic(c, "big") == 0
    for i in range(10):
        assert (await produce(c, "big", batch(1, start=i, size=500_000))).error_code == 0
    await c.send(1, 11, fetch_request("big", 0, partition_max_bytes=10**8))
    for _ in range(3000):  # bounded: until sendfile is parked on a full socket
        if srv.metrics.get("fetch.sendfile_eagain"):
            break
        await asyncio.sleep(0.005)
    assert srv.metrics.get("fetch.sendfile_eagain") >= 1


async def test_client_vanishing_while_a_fetch_waits_for_the_socket(tmp_path: Path) -> None:
    srv = await start_server(tmp_path, "socket.send.buffer.bytes=65536")
    try:
        c = await WireClient.connect("127.0.0.1", srv.port)
        await park_a_fetch_on_a_full_socket(srv, c)
        c.writer.transport.abort()
        await c.close()
        for _ in range(3000):  # bounded: the connection and its worker go away
            if srv.metrics.get("connections.active") == 0:
                break
            await asyncio.sleep(0.005)
        assert srv.metrics.get("connections.active") == 0

        def workers() -> list[asyncio.Task[object]]:
            return [t for t in asyncio.all_tasks() if "Connection._run" in repr(t.get_coro())]

        for _ in range(3000):  # bounded: no worker is left hanging on the dead socket
            if not workers():
                break
            await asyncio.sleep(0.005)
        assert workers() == []
        other = await WireClient.connect("127.0.0.1", srv.port)
        try:
            p = await fetch(other, "big", 9)
            assert p.error_code == 0 and p.high_watermark == 10
        finally:
            await other.close()
    finally:
        await srv.shutdown()


async def test_shutdown_with_a_fetch_stuck_on_a_client_that_does_not_read(tmp_path: Path) -> None:
    srv = await start_server(
        tmp_path, "socket.send.buffer.bytes=65536", "sluice.shutdown.timeout.ms=200"
    )
    c = await WireClient.connect("127.0.0.1", srv.port)
    try:
        await park_a_fetch_on_a_full_socket(srv, c)
        # the client never reads: shutdown must still finish (bounded) and leave no worker
        await asyncio.wait_for(srv.shutdown(), 30)
        assert [t for t in asyncio.all_tasks() if "Connection._run" in repr(t.get_coro())] == []
        # and the client is disconnected (it sees the end of the stream after the partial data)
        async with asyncio.timeout(30):
            while await c.reader.read(1 << 20):
                pass
    finally:
        await c.close()
        await srv.shutdown()


async def test_flood_without_reading_is_bounded(tmp_path: Path) -> None:
    """A client that pipelines requests and never reads: the broker pauses reading from it."""
    srv = await start_server(
        tmp_path, "queued.max.requests=4", "sluice.connection.max.unsent.bytes=65536"
    )
    try:
        c = await WireClient.connect("127.0.0.1", srv.port)
        req = encode_request(3, 8, 1, "flood", m.MetadataRequest(topics=None))
        c.writer.transport.set_write_buffer_limits(high=10**9)  # we buffer, the broker stops
        for _ in range(20000):
            c.writer.write(req)
        for _ in range(2000):  # bounded: until the broker applies backpressure
            if srv.metrics.get("connections.backpressure"):
                break
            await asyncio.sleep(0.005)
        assert srv.metrics.get("connections.backpressure") >= 1
        # now read everything: every request is answered, in order
        for expected in range(20000):
            raw = await c.read_frame()
            assert raw is not None and struct.unpack(">i", raw[:4])[0] == 1, expected
        other = await WireClient.connect("127.0.0.1", srv.port)
        assert (await metadata(other, None)).brokers[0].port == srv.port
        await other.close()
        await c.close()
    finally:
        await srv.shutdown()
