"""The SASL authenticator and TLS contexts over real sockets against real clients
(confluent-kafka/librdkafka, kafka-python, aiokafka): a minimal server on 127.0.0.1 runs the
authenticator exactly as a connection will, then answers Metadata so each client finishes its
bootstrap. Wrong passwords, unknown users and a request before authentication get Kafka's
answers."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import warnings
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import confluent_kafka
import confluent_kafka.admin
import pytest
import trustme
from aiokafka import AIOKafkaConsumer
from aiokafka.errors import KafkaConnectionError

from sluice.protocol import messages as m
from sluice.protocol.framing import (
    DEFAULT_MAX_FRAME_SIZE,
    FrameReader,
    FrameTooLarge,
    api_versions_response,
    decode_request,
    encode_response,
)
from sluice.server.security.authenticator import SaslServerAuthenticator
from sluice.server.security.credentials import FileCredentialStore
from sluice.server.security.scram import credential_from_password
from sluice.server.security.tls import server_context
from tests.interop_helpers import librdkafka_login_refused

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    import kafka
    import kafka.errors

MECHANISMS = ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]


@dataclass
class MiniBroker:
    """Authenticates like a Sluice connection will, then serves ApiVersions and Metadata."""

    store: FileCredentialStore
    ssl_context: Any = None
    port: int = 0
    principals: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    answered_before_auth: list[int] = field(default_factory=list)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        auth = SaslServerAuthenticator(
            MECHANISMS, self.store, peer=str(writer.get_extra_info("peername"))
        )
        frames = FrameReader(auth.max_frame_size or DEFAULT_MAX_FRAME_SIZE)
        try:
            while data := await reader.read(65536):
                try:
                    frames.feed(data)
                    pending = []
                    while (frame := frames.next_frame()) is not None:
                        pending.append(bytes(frame))
                except FrameTooLarge as exc:
                    self.failures.append(auth.frame_too_large(exc.size).failed or "")
                    return
                for frame in pending:
                    if auth.authenticating:
                        step = auth.receive(frame)
                        for out in step.send:
                            writer.write(out)
                        await writer.drain()
                        if step.close:
                            self.failures.append(step.failed or "closed")
                            return
                        if step.authenticated:
                            assert auth.principal is not None
                            self.principals.append(auth.principal)
                            frames.max_frame_size = DEFAULT_MAX_FRAME_SIZE
                        continue
                    request = decode_request(frame)
                    if request.header.api_key == m.ApiVersions.key:
                        body: Any = api_versions_response()
                    elif request.header.api_key == m.Metadata.key:
                        R = m.MetadataResponse
                        body = R(brokers=[R.MetadataResponseBroker(node_id=1, host="127.0.0.1",
                                                                    port=self.port)],
                                 cluster_id="sasl-interop", controller_id=1, topics=[])  # fmt: skip
                    else:
                        return
                    for part in encode_response(request.header, body):
                        writer.write(bytes(part))
                    await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            writer.close()


@pytest.fixture
async def broker(tmp_path: Path) -> AsyncIterator[MiniBroker]:
    store = FileCredentialStore(tmp_path / "users.json")
    for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
        await store.alter("alice", {mechanism: credential_from_password(mechanism, "alice-pw")})
    mini = MiniBroker(store)
    server = await asyncio.start_server(mini.handle, "127.0.0.1", 0)
    mini.port = server.sockets[0].getsockname()[1]
    try:
        yield mini
    finally:
        server.close()
        await server.wait_closed()


def confluent_config(
    port: int, mechanism: str, user: str, password: str, **extra: Any
) -> dict[str, Any]:
    return {
        "bootstrap.servers": f"127.0.0.1:{port}",
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": mechanism,
        "sasl.username": user,
        "sasl.password": password,
        "socket.timeout.ms": 10000,
        **extra,
    }


@pytest.mark.parametrize("mechanism", MECHANISMS)
async def test_confluent_kafka_authenticates(broker: MiniBroker, mechanism: str) -> None:
    admin = confluent_kafka.admin.AdminClient(
        confluent_config(broker.port, mechanism, "alice", "alice-pw")
    )
    metadata = await asyncio.to_thread(admin.list_topics, timeout=15)
    assert metadata.cluster_id == "sasl-interop"
    assert broker.principals and set(broker.principals) == {"User:alice"}
    assert broker.failures == []


@pytest.mark.parametrize(
    ("mechanism", "user", "password", "message"),
    [
        ("PLAIN", "alice", "wrong", "Authentication failed: Invalid username or password"),
        (
            "SCRAM-SHA-512",
            "alice",
            "wrong",
            "invalid credentials with SASL mechanism SCRAM-SHA-512",
        ),
        ("SCRAM-SHA-256", "mallory", "x", "invalid credentials with SASL mechanism SCRAM-SHA-256"),
    ],
)
async def test_confluent_kafka_is_refused_with_kafkas_message(
    broker: MiniBroker, mechanism: str, user: str, password: str, message: str
) -> None:
    errors: list[confluent_kafka.KafkaError] = []
    config = confluent_config(broker.port, mechanism, user, password, error_cb=errors.append)
    admin = confluent_kafka.admin.AdminClient(config)
    assert await asyncio.to_thread(librdkafka_login_refused, admin, errors, message), [
        e.str() for e in errors
    ]
    assert broker.principals == [] and broker.failures


async def test_confluent_kafka_sasl_ssl(broker: MiniBroker, tmp_path: Path) -> None:
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1", "localhost")
    keystore = tmp_path / "server.pem"
    keystore.write_bytes(cert.private_key_and_cert_chain_pem.bytes())
    ca_file = tmp_path / "ca.pem"
    ca_file.write_bytes(ca.cert_pem.bytes())
    ctx = server_context({"ssl.keystore.location": str(keystore)})
    tls_server = await asyncio.start_server(broker.handle, "127.0.0.1", 0, ssl=ctx)
    port = tls_server.sockets[0].getsockname()[1]
    broker.port = port
    try:
        tls = {"security.protocol": "SASL_SSL", "ssl.ca.location": str(ca_file)}
        config = confluent_config(port, "SCRAM-SHA-512", "alice", "alice-pw", **tls)
        metadata = await asyncio.to_thread(
            confluent_kafka.admin.AdminClient(config).list_topics, timeout=15
        )
        assert metadata.cluster_id == "sasl-interop"
        assert set(broker.principals) == {"User:alice"}
    finally:
        tls_server.close()
        await tls_server.wait_closed()


@pytest.mark.parametrize("mechanism", MECHANISMS)
async def test_kafka_python_authenticates(broker: MiniBroker, mechanism: str) -> None:
    def bootstrap() -> Any:
        consumer = kafka.KafkaConsumer(
            bootstrap_servers=f"127.0.0.1:{broker.port}",
            security_protocol="SASL_PLAINTEXT",
            sasl_mechanism=mechanism,
            sasl_plain_username="alice",
            sasl_plain_password="alice-pw",
            request_timeout_ms=10000,
        )
        try:
            return consumer.topics()
        finally:
            consumer.close()

    assert await asyncio.to_thread(bootstrap) == set()
    assert broker.principals and set(broker.principals) == {"User:alice"}


@pytest.mark.parametrize("mechanism", MECHANISMS)
async def test_aiokafka_authenticates(broker: MiniBroker, mechanism: str) -> None:
    consumer = AIOKafkaConsumer(
        bootstrap_servers=f"127.0.0.1:{broker.port}",
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism=mechanism,
        sasl_plain_username="alice",
        sasl_plain_password="alice-pw",
        request_timeout_ms=10000,
    )
    await consumer.start()
    try:
        assert await consumer.topics() == set()
    finally:
        await consumer.stop()
    assert broker.principals and set(broker.principals) == {"User:alice"}


async def test_aiokafka_wrong_password(broker: MiniBroker) -> None:
    consumer = AIOKafkaConsumer(
        bootstrap_servers=f"127.0.0.1:{broker.port}",
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="PLAIN",
        sasl_plain_username="alice",
        sasl_plain_password="nope",
        request_timeout_ms=5000,
    )
    with pytest.raises(KafkaConnectionError, match="Unable to bootstrap"):
        await consumer.start()
    with contextlib.suppress(Exception):
        await consumer.stop()
    assert broker.principals == []
    assert "Authentication failed: Invalid username or password" in broker.failures


async def test_a_request_before_authentication_is_closed_unanswered(broker: MiniBroker) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", broker.port)
    # Metadata v1: header (key, version, correlation id, client id "x"), all topics (null)
    frame = struct.pack(">hhih", m.Metadata.key, 1, 9, 1) + b"x" + struct.pack(">i", -1)
    writer.write(struct.pack(">i", len(frame)) + frame)
    await writer.drain()
    assert await asyncio.wait_for(reader.read(), 10) == b""  # closed, nothing answered
    writer.close()
    assert broker.failures == ["Unexpected Kafka request of type METADATA during SASL handshake."]


async def test_oversized_frame_before_authentication_is_closed(broker: MiniBroker) -> None:
    with socket.create_connection(("127.0.0.1", broker.port), timeout=10) as sock:
        sock.sendall(struct.pack(">i", 1_000_000) + b"\x00" * 16)
        assert await asyncio.to_thread(sock.recv, 10) == b""
    assert broker.failures == [
        "Failing SASL authentication due to invalid receive size (1000000 > 524288)"
    ]
