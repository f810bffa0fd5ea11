"""Connection: version negotiation, pipelining, correlation ids and failure modes, against the
real broker and against a scripted fake broker (built on protocol/'s broker-side framing) that
misbehaves on purpose."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from sluice.client import Consumer, Producer, TopicPartition
from sluice.client.errors import KafkaConnectionError, KafkaTimeoutError, UnsupportedVersionError
from sluice.net.connection import Connection
from sluice.protocol import messages
from sluice.protocol.errors import ProtocolError
from sluice.protocol.framing import (
    FrameReader,
    api_versions_response,
    decode_request,
    encode_response,
    unsupported_version_response,
)
from sluice.protocol.framing import (
    UnsupportedVersionError as ServerUnsupported,
)
from sluice.protocol.records import iter_records
from sluice.testing.embedded import EmbeddedBroker

METADATA = messages.Metadata.key
API_VERSIONS = messages.ApiVersions.key

# handler(request) -> list of byte parts to write, or None to stay silent, or "close"
Handler = Callable[[Any], Any]


@contextlib.asynccontextmanager
async def listening(serve: Callable[[Any, Any], Any]) -> AsyncIterator[int]:
    """A TCP server on 127.0.0.1 running ``serve(reader, writer)`` per connection; yields its
    port and closes it on exit."""
    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        server.close()
        await server.wait_closed()


@contextlib.asynccontextmanager
async def fake_broker(handler: Handler, versions: Any = None) -> AsyncIterator[int]:
    """A TCP server on 127.0.0.1 answering ApiVersions itself and everything else via
    ``handler``. Yields its port."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        frames = FrameReader()
        try:
            while data := await reader.read(65536):
                frames.feed(data)
                while (frame := frames.next_frame()) is not None:
                    try:
                        request = decode_request(frame)
                    except ServerUnsupported as exc:
                        parts = unsupported_version_response(exc)
                        writer.write(b"".join(parts or []))
                        continue
                    if request.header.api_key == API_VERSIONS:
                        body = versions(request) if versions else api_versions_response()
                        out: Any = encode_response(request.header, body)
                    else:
                        out = handler(request)
                    if out == "close":
                        return
                    if out is not None:
                        writer.write(b"".join(out))
        except (ProtocolError, ConnectionError):
            pass
        finally:
            writer.close()

    async with listening(serve) as port:
        yield port


def metadata_response(request: Any, correlation_id: int | None = None) -> list[bytes]:
    header = request.header
    if correlation_id is not None:
        header.correlation_id = correlation_id
    return encode_response(header, messages.MetadataResponse(brokers=[], topics=[]))


async def test_negotiates_the_highest_common_version() -> None:
    def narrow(_request: Any) -> Any:
        body = api_versions_response()
        for entry in body.api_keys:
            if entry.api_key == METADATA:
                entry.max_version = 5
        body.api_keys = [e for e in body.api_keys if e.api_key != messages.Fetch.key]
        return body

    async with fake_broker(metadata_response, versions=narrow) as port:
        conn = await Connection.open("127.0.0.1", port)
        try:
            assert conn.version(METADATA) == 5
            assert conn.version(messages.Produce.key) == 8
            with pytest.raises(UnsupportedVersionError, match="Fetch"):
                conn.version(messages.Fetch.key)
            response = await conn.request(METADATA, messages.MetadataRequest(topics=[]))
            assert response.brokers == []
        finally:
            conn.close()
            await conn.wait_closed()


async def test_pipelined_requests_on_one_connection() -> None:
    async with EmbeddedBroker() as broker:
        host, port = broker.bootstrap_servers.rsplit(":", 1)
        conn = await Connection.open(host, int(port))
        try:
            names = [f"t{i}" for i in range(20)]
            requests = [
                conn.request(METADATA, messages.MetadataRequest(
                    topics=[messages.MetadataRequest.MetadataRequestTopic(name=n)]))
                for n in names
            ]  # fmt: skip
            responses = await asyncio.gather(*requests)
            assert conn.in_flight == 0
            assert [r.topics[0].name for r in responses] == names
        finally:
            conn.close()
            await conn.wait_closed()


@contextlib.asynccontextmanager
async def trickling_broker(topic_counts: list[int], chunk: int) -> AsyncIterator[int]:
    """A fake broker that answers ApiVersions, then waits for ``len(topic_counts)`` pipelined
    Metadata requests and writes all their responses (the i-th naming ``topic_counts[i]``
    topics) back to back in ``chunk``-byte writes, so frames straddle reads in every way."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        frames = FrameReader()
        pending: list[Any] = []
        try:
            while len(pending) < len(topic_counts) and (data := await reader.read(65536)):
                frames.feed(data)
                while (frame := frames.next_frame()) is not None:
                    request = decode_request(frame)
                    if request.header.api_key == API_VERSIONS:
                        writer.write(
                            b"".join(encode_response(request.header, api_versions_response()))
                        )
                    else:
                        pending.append(request)
            out = bytearray()
            for request, count in zip(pending, topic_counts, strict=True):
                topic = messages.MetadataResponse.MetadataResponseTopic
                body = messages.MetadataResponse(brokers=[], topics=[
                    topic(error_code=0, name=f"topic-{request.header.correlation_id}-{i:06d}",
                          partitions=[])
                    for i in range(count)
                ])  # fmt: skip
                out += b"".join(encode_response(request.header, body))
            for start in range(0, len(out), chunk):
                writer.write(out[start : start + chunk])
                await writer.drain()
                await asyncio.sleep(0)
            await reader.read()  # until the client closes
        finally:
            writer.close()

    async with listening(serve) as port:
        yield port


@pytest.mark.parametrize(
    "chunk",
    [
        pytest.param(1, marks=pytest.mark.slow),
        pytest.param(7, marks=pytest.mark.slow),
        4096,
        1 << 20,
    ],
)
async def test_responses_split_and_joined_across_reads(chunk: int) -> None:
    # Small responses, and ones far above the reader's own-buffer threshold (~30 B per topic:
    # 10,000 topics ~ 300 KB, beyond the 256 KiB shared buffer too), in one stream.
    counts = [0, 3, 10_000, 1, 2_500, 0, 10_000, 5] if chunk > 1 else [0, 3, 2_500, 1]
    async with trickling_broker(counts, chunk) as port:
        conn = await Connection.open("127.0.0.1", port)
        try:
            responses = await asyncio.gather(
                *[conn.request(METADATA, messages.MetadataRequest(topics=[])) for _ in counts]
            )
            assert [len(r.topics) for r in responses] == counts
            for r in responses:
                names = [t.name for t in r.topics]
                assert names == sorted(set(names))  # each frame decoded from its own bytes
            assert conn.in_flight == 0
        finally:
            conn.close()
            await conn.wait_closed()


async def test_big_fetch_records_stay_valid_after_later_responses() -> None:
    # A Fetch response's records are views of its frame: later responses must not overwrite
    # them, whether the frame came through the shared buffer or a buffer of its own.
    async with EmbeddedBroker() as broker:
        async with Producer(broker.bootstrap_servers, linger_ms=0) as p:
            for i in range(40):
                await p.send_and_wait("big", bytes([i]) * 20_000, partition=0)
        host, port = broker.bootstrap_servers.rsplit(":", 1)
        conn = await Connection.open(host, int(port))
        req = messages.FetchRequest

        async def fetch(offset: int, max_bytes: int) -> Any:
            body = req(
                replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=max_bytes,
                isolation_level=0, session_id=0, session_epoch=-1,
                topics=[req.FetchTopic(topic="big", partitions=[
                    req.FetchTopic.FetchPartition(
                        partition=0, current_leader_epoch=-1, fetch_offset=offset,
                        log_start_offset=-1, partition_max_bytes=max_bytes)])],
                forgotten_topics_data=[], rack_id="",
            )  # fmt: skip
            response = await conn.request(messages.Fetch.key, body, version=12)  # by name
            return response.responses[0].partitions[0].records

        try:
            kept = []
            asked = [(0, 1 << 20), (3, 30_000), (10, 500_000), (39, 100)]
            for offset, max_bytes in asked:
                kept.append(await fetch(offset, max_bytes))
                # More responses of the same shape through the same buffers before the
                # records are read: a view of a reused buffer would now show other records.
                for other in (20, 30):
                    await fetch(other, 100)
            for (offset, _), records in zip(asked, kept, strict=True):
                offsets_values = [(r.offset, r.value) for _, r in iter_records(records)]
                assert offsets_values[0][0] == offset
                assert all(v == bytes([o]) * 20_000 for o, v in offsets_values)
            assert [len(records) > 500_000 for records in kept] == [True, False, False, False]
        finally:
            conn.close()
            await conn.wait_closed()


async def test_cancel_as_the_response_arrives_is_not_swallowed() -> None:
    # Python 3.11's asyncio.wait_for returns the result when its caller is cancelled just as
    # the awaited future completes, so the caller carries on as if never cancelled (a
    # Consumer.stop() waited forever for its fetcher). Cancel exactly then: it must stick.
    async with fake_broker(metadata_response) as port:
        conn = await Connection.open("127.0.0.1", port)
        task: asyncio.Task[Any] | None = None
        deliver = conn._on_frame

        def deliver_then_cancel(frame: memoryview) -> None:
            deliver(frame)  # resolves the request's future ...
            assert task is not None
            task.cancel()  # ... and the caller is cancelled in the same callback

        conn._on_frame = deliver_then_cancel  # type: ignore[method-assign]
        try:
            task = asyncio.create_task(conn.request(METADATA, messages.MetadataRequest(topics=[])))
            with pytest.raises(asyncio.CancelledError):
                await task
            assert task.cancelled()
            assert not conn.closed and conn.in_flight == 0  # the answer was consumed in order
        finally:
            conn.close()
            await conn.wait_closed()


@pytest.mark.slow
async def test_broker_that_stops_reading_times_out_and_closes() -> None:
    # A broker that answers ApiVersions and then never reads again: a request bigger than the
    # socket buffers leaves the transport paused. The request must still time out, close()
    # must fail it and wait_closed() must return (a stuck Producer/Consumer.stop() otherwise).
    stop = asyncio.Event()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        frames = FrameReader()
        while (frame := frames.next_frame()) is None:
            data = await reader.read(65536)
            if not data:
                return
            frames.feed(data)
        request = decode_request(frame)
        writer.write(b"".join(encode_response(request.header, api_versions_response())))
        await stop.wait()  # never read again
        writer.transport.abort()

    async with listening(serve) as port:
        conn = await Connection.open("127.0.0.1", port, request_timeout_ms=500)
        topic = messages.MetadataRequest.MetadataRequestTopic
        body = messages.MetadataRequest(topics=[topic(name=f"t{i:07d}") for i in range(600_000)])
        try:
            async with asyncio.timeout(10):
                with pytest.raises(KafkaTimeoutError, match="not sent"):
                    await conn.request(METADATA, body)
                assert conn.closed
                await conn.wait_closed()  # the unsent bytes are aborted after the timeout
        finally:
            stop.set()


async def test_wait_closed_keeps_its_callers_cancellation() -> None:
    async with fake_broker(metadata_response) as port:
        conn = await Connection.open("127.0.0.1", port)
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.2):
                await conn.wait_closed()  # still open: the caller's timeout must fire
        conn.close()
        await conn.wait_closed()


async def test_wrong_correlation_id_breaks_the_connection() -> None:
    async with fake_broker(lambda r: metadata_response(r, correlation_id=999_999)) as port:
        conn = await Connection.open("127.0.0.1", port)
        with pytest.raises(KafkaConnectionError, match="correlation id"):
            await conn.request(METADATA, messages.MetadataRequest(topics=[]))
        assert conn.closed
        with pytest.raises(KafkaConnectionError):
            await conn.request(METADATA, messages.MetadataRequest(topics=[]))
        await conn.wait_closed()


async def test_broker_closing_fails_requests_in_flight() -> None:
    async with fake_broker(lambda r: "close") as port:
        conn = await Connection.open("127.0.0.1", port)
        with pytest.raises(KafkaConnectionError, match="lost"):
            await conn.request(METADATA, messages.MetadataRequest(topics=[]))
        await conn.wait_closed()


async def test_silent_broker_times_out() -> None:
    async with fake_broker(lambda r: None) as port:
        conn = await Connection.open("127.0.0.1", port, request_timeout_ms=200)
        with pytest.raises(KafkaTimeoutError):
            await conn.request(METADATA, messages.MetadataRequest(topics=[]))
        assert conn.closed  # a late answer would desynchronise the pipeline
        await conn.wait_closed()


async def test_garbage_response_is_a_connection_error() -> None:
    async with fake_broker(
        lambda r: [b"\x00\x00\x00\x06" + r.header.correlation_id.to_bytes(4, "big") + b"\xff\xff"]
    ) as port:
        conn = await Connection.open("127.0.0.1", port)
        with pytest.raises(ProtocolError):
            await conn.request(METADATA, messages.MetadataRequest(topics=[]))
        assert conn.closed
        await conn.wait_closed()


async def test_nothing_listening() -> None:
    with pytest.raises(KafkaConnectionError, match="cannot connect"):
        await Connection.open("127.0.0.1", 1, connect_timeout_ms=2_000)


async def test_corrupt_batch_on_disk_reaches_the_consumer() -> None:
    async with EmbeddedBroker() as broker:
        async with Producer(broker.bootstrap_servers, linger_ms=0) as p:
            for i in range(2):
                await p.send_and_wait("bad", b"record-%d" % i, partition=0)
        segment = next((broker.data_dir / "bad-0").glob("*.log"))
        data = bytearray(segment.read_bytes())
        data[-3] ^= 0xFF  # inside the second batch's records: its CRC no longer matches
        segment.write_bytes(bytes(data))
        async with Consumer(broker.bootstrap_servers, auto_offset_reset="earliest") as c:
            tp = TopicPartition("bad", 0)
            c.assign([tp])
            first = await c.getmany(timeout_ms=5_000)
            assert [r.value for r in first[tp]] == [b"record-0"]
            with pytest.raises(ProtocolError, match="CRC"):
                await c.getmany(timeout_ms=5_000)
            assert c.position(tp) == 1
