"""Connection: version negotiation, pipelining, correlation ids and failure modes, against the
real broker and against a scripted fake broker (built on protocol/'s broker-side framing) that
misbehaves on purpose."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from client import Consumer, Producer, TopicPartition
from client.connection import Connection
from client.errors import KafkaConnectionError, KafkaTimeoutError, UnsupportedVersionError
from protocol import messages
from protocol.errors import ProtocolError
from protocol.framing import (
    FrameReader,
    api_versions_response,
    decode_request,
    encode_response,
    unsupported_version_response,
)
from protocol.framing import (
    UnsupportedVersionError as ServerUnsupported,
)
from server.embedded import EmbeddedBroker

METADATA = messages.Metadata.key
API_VERSIONS = messages.ApiVersions.key

# handler(request) -> list of byte parts to write, or None to stay silent, or "close"
Handler = Callable[[Any], Any]


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

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        server.close()
        await server.wait_closed()


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
