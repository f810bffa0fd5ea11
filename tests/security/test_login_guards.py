"""What a client that has not logged in can cost a broker (found by a security review), on a real
broker in this process with a SASL_PLAINTEXT and a PLAINTEXT listener:

* a failed login's answer waits ``connection.failed.authentication.delay.ms`` (Kafka delays the
  answer and then closes), while the broker keeps serving other connections;
* while a login step is pending (a PLAIN password's PBKDF2 runs off the event loop), the
  broker stops reading that connection, so what it buffers stays bounded by one frame of
  ``sasl.server.max.receive.size`` and one read, however much the client sends.
"""

from __future__ import annotations

import asyncio
import struct
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from sluice.protocol import errors
from sluice.protocol import messages as m
from sluice.protocol.framing import decode_response
from sluice.server.security.credentials import FileCredentialStore
from sluice.server.security.scram import credential_from_password
from sluice.server.server import Server
from tests.broker.test_server import start_server
from tests.broker_util import WireClient

DELAY_MS = 400
MAX_RECEIVE = 64 * 1024


@pytest.fixture
async def broker(tmp_path: Path) -> AsyncIterator[Server]:
    users = FileCredentialStore(tmp_path / "users.json")
    users.alter_sync("alice", {"SCRAM-SHA-512": credential_from_password("SCRAM-SHA-512", "pw")})
    server = await start_server(
        tmp_path,
        "listeners=SASL_PLAINTEXT://127.0.0.1:0,PLAINTEXT://127.0.0.1:0",
        "sasl.enabled.mechanisms=PLAIN",
        f"sluice.security.credentials.file={tmp_path / 'users.json'}",
        f"connection.failed.authentication.delay.ms={DELAY_MS}",
        f"sasl.server.max.receive.size={MAX_RECEIVE}",
    )
    try:
        yield server
    finally:
        await server.shutdown()


async def plain_handshake(server: Server) -> WireClient:
    client = await WireClient.connect("127.0.0.1", server.ports["SASL_PLAINTEXT"])
    answer = await client.request(m.SaslHandshake.key, 1, m.SaslHandshakeRequest(mechanism="PLAIN"))
    assert answer.error_code == 0
    return client


async def test_a_failed_logins_answer_is_delayed_without_holding_up_others(
    broker: Server,
) -> None:
    client = await plain_handshake(broker)
    other = await WireClient.connect("127.0.0.1", broker.ports["PLAINTEXT"])
    try:
        sent = time.monotonic()
        correlation = await client.send(
            m.SaslAuthenticate.key, 1, m.SaslAuthenticateRequest(auth_bytes=b"\0alice\0wrong")
        )
        answer = asyncio.create_task(
            client.receive(m.SaslAuthenticate.key, 1, correlation, timeout=10)
        )
        # another connection is served while the failed login waits
        metadata = asyncio.create_task(
            other.request(m.Metadata.key, 1, m.MetadataRequest(topics=[]), timeout=10)
        )
        done, _ = await asyncio.wait({answer, metadata}, return_when=asyncio.FIRST_COMPLETED)
        assert done == {metadata} and len(metadata.result().brokers) == 1
        failed = await answer
        waited = time.monotonic() - sent
        assert failed.error_code == errors.SaslAuthenticationFailed.code
        assert failed.error_message == "Authentication failed: Invalid username or password"
        assert waited >= DELAY_MS / 1000
        assert await client.read_frame(timeout=10) is None  # then closed
    finally:
        await client.close()
        await other.close()
    assert broker.metrics.get("connections.failed_authentication") == 1


async def test_a_pending_login_stops_reading_the_connection(broker: Server) -> None:
    store = broker.credentials
    assert store is not None
    verify = store.verify_plain
    checking, release = threading.Event(), threading.Event()

    def slow(user: str, password: str) -> bool:  # runs in the executor: may block
        checking.set()
        release.wait(20)
        return bool(verify(user, password))

    store.verify_plain = slow  # type: ignore[method-assign]
    client = await plain_handshake(broker)
    try:
        await client.send(
            m.SaslAuthenticate.key, 1, m.SaslAuthenticateRequest(auth_bytes=b"\0alice\0wrong")
        )
        assert await asyncio.to_thread(checking.wait, 10)
        (connection,) = [c for c in broker.connections if c.authenticating]
        # 16 MiB of frames just under the pre-login bound, sent while the check runs
        frame = struct.pack(">i", MAX_RECEIVE - 4) + bytes(MAX_RECEIVE - 4)
        client.writer.write(frame * 256)
        most = 0
        deadline = time.monotonic() + 2.0  # bounded: the client's bytes that can get in
        while time.monotonic() < deadline and client.writer.transport.get_write_buffer_size():
            most = max(most, connection.buffered_bytes)
            await asyncio.sleep(0.01)
        most = max(most, connection.buffered_bytes)
        assert client.writer.transport.get_write_buffer_size() > 0  # the broker stopped reading
        assert most <= MAX_RECEIVE + 256 * 1024  # one frame and one read, not 16 MiB
    finally:
        release.set()
        store.verify_plain = verify  # type: ignore[method-assign]
    # The login's answer after the delay, then the close; closing a socket with unread bytes
    # resets it, which may discard the answer before the client reads it.
    answers = []
    while (frame := await client.read_frame(timeout=10)) is not None:
        answers.append(frame)
    await client.close()
    assert len(answers) <= 1
    if answers:
        _, response = decode_response(m.SaslAuthenticate.key, 1, answers[0])
        assert response.error_code == errors.SaslAuthenticationFailed.code
    assert broker.metrics.get("connections.failed_authentication") == 1
    assert broker.metrics.get("requests") == 0  # nothing served on that connection
