"""A real Sluice broker with four listeners (PLAINTEXT, SSL with client certificates,
SASL_PLAINTEXT, SASL_SSL) against real clients: confluent-kafka (librdkafka), kafka-python,
aiokafka and Sluice's own. Each login ends with the principal the handlers see; wrong passwords,
unknown users, requests before authentication and plaintext on a TLS port get Kafka's answers,
and the broker keeps serving."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import shutil
import socket
import ssl
import struct
import subprocess
import time
import uuid
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import confluent_kafka
import confluent_kafka.admin
import pytest
import trustme
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.helpers import create_ssl_context

from sluice.client import Admin, Consumer, Producer
from sluice.protocol import messages as m
from sluice.server.network.request import REQUEST_CONTEXT
from sluice.server.security.credentials import FileCredentialStore
from sluice.server.security.scram import credential_from_password
from sluice.testing import EmbeddedBroker
from tests.interop_helpers import librdkafka_login_refused

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    import kafka
    import kafka.errors

LISTENERS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SCRAM = ("SCRAM-SHA-256", "SCRAM-SHA-512")


@dataclass
class Secured:
    broker: EmbeddedBroker
    ca_file: Path
    client_cert: Path  # PEM: key and chain of CN=app
    client_key: Path
    client_chain: Path
    #: (listener, principal) of every Metadata request the handlers saw
    seen: list[tuple[str, str]]

    def port(self, listener: str) -> int:
        return self.broker.ports[listener]

    def bootstrap(self, listener: str) -> str:
        return self.broker.bootstrap(listener)

    def principals(self, listener: str) -> set[str]:
        return {p for name, p in self.seen if name == listener}


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    tmp = tmp_path_factory.mktemp("secured")
    ca = trustme.CA()
    server = ca.issue_cert("127.0.0.1", "localhost")
    (tmp / "server.pem").write_bytes(server.private_key_and_cert_chain_pem.bytes())
    ca.cert_pem.write_to_path(str(tmp / "ca.pem"))
    client = ca.issue_cert("app@example.com", common_name="app")
    (tmp / "client.pem").write_bytes(client.private_key_and_cert_chain_pem.bytes())
    client.private_key_pem.write_to_path(str(tmp / "client.key"))
    (tmp / "client.crt").write_bytes(b"".join(p.bytes() for p in client.cert_chain_pems))
    users = FileCredentialStore(tmp / "users.json")
    for mechanism in SCRAM:
        users.alter_sync("alice", {mechanism: credential_from_password(mechanism, "alice-pw")})
    properties = {
        "listeners": ",".join(f"{name}://127.0.0.1:0" for name in LISTENERS),
        "ssl.keystore.location": str(tmp / "server.pem"),
        "ssl.truststore.location": str(tmp / "ca.pem"),
        "listener.name.ssl.ssl.client.auth": "required",
        "ssl.principal.mapping.rules": "RULE:^CN=([^,]+),.*$/$1/,DEFAULT",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "sluice.security.credentials.file": str(tmp / "users.json"),
        "connection.failed.authentication.delay.ms": "50",
    }
    seen: list[tuple[str, str]] = []
    with EmbeddedBroker(properties=properties) as broker:
        handlers = broker.call(lambda s: s.handlers)
        metadata = handlers.metadata

        def recording(header: Any, body: Any) -> Any:
            context = REQUEST_CONTEXT.get()
            seen.append((context.listener_name, context.principal))
            return metadata(header, body)

        broker.call(lambda s: s.handlers._dispatch.register(m.Metadata, recording))
        yield Secured(
            broker, tmp / "ca.pem", tmp / "client.pem", tmp / "client.key",
            tmp / "client.crt", seen,
        )  # fmt: skip


def _confluent(secured: Secured, listener: str, **extra: Any) -> dict[str, Any]:
    config: dict[str, Any] = {
        "bootstrap.servers": secured.bootstrap(listener),
        "security.protocol": listener,
        "socket.timeout.ms": 10000,
        **extra,
    }
    if listener.endswith("SSL"):
        config["ssl.ca.location"] = str(secured.ca_file)
    return config


def _confluent_roundtrip(config: dict[str, Any], topic: str) -> list[bytes]:
    producer = confluent_kafka.Producer({**config, "acks": "all"})
    producer.produce(topic, b"secret")
    assert producer.flush(20) == 0
    consumer = confluent_kafka.Consumer(
        {**config, "group.id": f"g-{topic}", "auto.offset.reset": "earliest"}
    )
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                return [message.value()]
        return []
    finally:
        consumer.close()


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-512", "PLAIN"])
def test_confluent_kafka_sasl_ssl_produces_and_consumes(secured: Secured, mechanism: str) -> None:
    config = _confluent(
        secured, "SASL_SSL", **{"sasl.mechanism": mechanism, "sasl.username": "alice",
                                "sasl.password": "alice-pw"}
    )  # fmt: skip
    assert _confluent_roundtrip(config, f"sasl-ssl-{mechanism.lower()}") == [b"secret"]
    assert secured.principals("SASL_SSL") == {"User:alice"}


def test_confluent_kafka_ssl_client_certificate_is_the_principal(secured: Secured) -> None:
    config = _confluent(
        secured, "SSL", **{"ssl.certificate.location": str(secured.client_chain),
                           "ssl.key.location": str(secured.client_key)}
    )  # fmt: skip
    metadata = confluent_kafka.admin.AdminClient(config).list_topics(timeout=15)
    # Metadata answers with the endpoints of the listener the client came in on
    assert [(b.host, b.port) for b in metadata.brokers.values()] == [
        ("127.0.0.1", secured.port("SSL"))
    ]
    assert secured.principals("SSL") == {"User:app"}


def test_a_tls_client_without_a_certificate_is_refused_where_one_is_required(
    secured: Secured,
) -> None:
    ctx = ssl.create_default_context(cafile=str(secured.ca_file))
    with socket.create_connection(("127.0.0.1", secured.port("SSL")), timeout=10) as raw:
        answer = b"?"
        with (
            contextlib.suppress(ssl.SSLError, ConnectionError),
            ctx.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
        ):
            tls.sendall(_api_versions_frame())
            answer = tls.recv(10)  # TLS 1.3: the refusal arrives with the first read
        assert answer in (b"?", b"")  # refused in the handshake, or closed unanswered
    _assert_healthy(secured)


@pytest.mark.parametrize("listener", LISTENERS)
def test_metadata_advertises_the_listener_the_client_came_in_on(
    secured: Secured, listener: str
) -> None:
    extra: dict[str, Any] = {}
    if listener.startswith("SASL"):
        extra = {"sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "alice",
                 "sasl.password": "alice-pw"}  # fmt: skip
    if listener == "SSL":
        extra = {"ssl.certificate.location": str(secured.client_chain),
                 "ssl.key.location": str(secured.client_key)}  # fmt: skip
    metadata = confluent_kafka.admin.AdminClient(
        _confluent(secured, listener, **extra)
    ).list_topics(timeout=15)
    assert [b.port for b in metadata.brokers.values()] == [secured.port(listener)]
    expected = {"PLAINTEXT": "User:ANONYMOUS", "SSL": "User:app"}.get(listener, "User:alice")
    assert expected in secured.principals(listener)


@pytest.mark.parametrize(
    "user, password, message",
    [
        (
            "alice",
            "wrong",
            "Authentication failed during authentication due to invalid credentials",
        ),
        ("mallory", "alice-pw", "Authentication failed during authentication due to invalid"),
    ],
)
def test_confluent_kafka_wrong_login_gets_kafkas_answer(
    secured: Secured, user: str, password: str, message: str
) -> None:
    errors: list[confluent_kafka.KafkaError] = []
    config = _confluent(
        secured, "SASL_SSL", **{"sasl.mechanism": "SCRAM-SHA-512", "sasl.username": user,
                                "sasl.password": password, "error_cb": errors.append}
    )  # fmt: skip
    before = _metric(secured, "connections.failed_authentication")
    admin = confluent_kafka.admin.AdminClient(config)
    assert librdkafka_login_refused(admin, errors, message), [e.str() for e in errors]
    assert _metric(secured, "connections.failed_authentication") > before
    _assert_healthy(secured)


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256"])
def test_kafka_python_sasl_plaintext(secured: Secured, mechanism: str) -> None:
    topic = f"kp-{mechanism.lower()}"
    common: dict[str, Any] = {
        "bootstrap_servers": secured.bootstrap("SASL_PLAINTEXT"),
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": mechanism,
        "sasl_plain_username": "alice",
        "sasl_plain_password": "alice-pw",
        "request_timeout_ms": 15000,
    }
    producer = kafka.KafkaProducer(acks="all", **common)
    producer.send(topic, b"kp").get(timeout=20)
    producer.close()
    consumer = kafka.KafkaConsumer(
        topic, auto_offset_reset="earliest", consumer_timeout_ms=15000, **common
    )
    try:
        # The first record, not the whole iteration: that always waits out consumer_timeout_ms.
        first = next(iter(consumer), None)
        assert first is not None and first.value == b"kp"
    finally:
        consumer.close()


def test_kafka_python_ssl(secured: Secured) -> None:
    consumer = kafka.KafkaConsumer(
        bootstrap_servers=secured.bootstrap("SSL"),
        security_protocol="SSL",
        ssl_cafile=str(secured.ca_file),
        ssl_certfile=str(secured.client_chain),
        ssl_keyfile=str(secured.client_key),
        request_timeout_ms=15000,
    )
    try:
        assert isinstance(consumer.topics(), set)
    finally:
        consumer.close()
    assert "User:app" in secured.principals("SSL")


@pytest.mark.parametrize(
    "listener, mechanism",
    [("SASL_PLAINTEXT", "SCRAM-SHA-512"), ("SASL_PLAINTEXT", "PLAIN"), ("SSL", None)],
)
async def test_aiokafka(secured: Secured, listener: str, mechanism: str | None) -> None:
    options: dict[str, Any] = {
        "bootstrap_servers": secured.bootstrap(listener),
        "security_protocol": listener,
        "request_timeout_ms": 15000,
    }
    if mechanism is not None:
        options.update(sasl_mechanism=mechanism, sasl_plain_username="alice",
                       sasl_plain_password="alice-pw")  # fmt: skip
    else:
        options["ssl_context"] = create_ssl_context(
            cafile=str(secured.ca_file), certfile=str(secured.client_chain),
            keyfile=str(secured.client_key),
        )  # fmt: skip
    topic = f"aio-{listener.lower()}-{(mechanism or 'cert').lower()}"
    producer = AIOKafkaProducer(acks="all", **options)
    await producer.start()
    try:
        await producer.send_and_wait(topic, b"aio")
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer(topic, auto_offset_reset="earliest", **options)
    await consumer.start()
    try:
        record = await asyncio.wait_for(consumer.getone(), 20)
        assert record.value == b"aio"
    finally:
        await consumer.stop()


async def test_sluice_client_over_sasl_ssl(secured: Secured) -> None:
    security = {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "alice",
        "sasl.password": "alice-pw",
        "ssl.ca.location": str(secured.ca_file),
    }
    bootstrap = secured.bootstrap("SASL_SSL")
    topic = f"own-{uuid.uuid4().hex[:8]}"
    async with Admin(bootstrap, security=security) as admin:
        await admin.create_topics({topic: (1, {})})
    async with Producer(bootstrap, security=security) as producer:
        await producer.send_and_wait(topic, b"own")
    async with Consumer(bootstrap, auto_offset_reset="earliest", security=security) as consumer:
        consumer.assign([(topic, 0)])
        records = await consumer.getmany(timeout_ms=20000)
    assert [r.value for batch in records.values() for r in batch] == [b"own"]
    assert "User:alice" in secured.principals("SASL_SSL")


async def test_sluice_client_with_a_wrong_password_gets_kafkas_error(secured: Secured) -> None:
    from sluice.protocol.errors import SaslAuthenticationFailed

    security = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                "sasl.username": "alice", "sasl.password": "nope"}  # fmt: skip
    with pytest.raises(SaslAuthenticationFailed, match="Invalid username or password"):
        async with Admin(secured.bootstrap("SASL_PLAINTEXT"), security=security):
            pass


def _api_versions_frame() -> bytes:
    body = struct.pack(">hhih", m.ApiVersions.key, 0, 1, 1) + b"x"
    return struct.pack(">i", len(body)) + body


def test_a_request_before_authentication_closes_the_connection(secured: Secured) -> None:
    before = _metric(secured, "connections.failed_authentication")
    with socket.create_connection(("127.0.0.1", secured.port("SASL_PLAINTEXT")), timeout=10) as s:
        frame = struct.pack(">hhih", m.Metadata.key, 1, 9, 1) + b"x" + struct.pack(">i", -1)
        s.sendall(struct.pack(">i", len(frame)) + frame)
        assert s.recv(10) == b""  # closed, nothing answered
    assert _metric(secured, "connections.failed_authentication") == before + 1
    _assert_healthy(secured)


def test_an_oversized_frame_before_authentication_closes_the_connection(secured: Secured) -> None:
    with socket.create_connection(("127.0.0.1", secured.port("SASL_PLAINTEXT")), timeout=10) as s:
        s.sendall(struct.pack(">i", 524289) + b"\x00" * 64)  # one byte over the default bound
        assert s.recv(10) == b""
    _assert_healthy(secured)


def test_a_plaintext_client_on_a_tls_port_gets_no_kafka_answer(secured: Secured) -> None:
    with socket.create_connection(("127.0.0.1", secured.port("SASL_SSL")), timeout=10) as s:
        s.sendall(_api_versions_frame())
        answer = b""
        with contextlib.suppress(ConnectionError):
            while chunk := s.recv(4096):
                answer += chunk
    # what comes back, if anything, is a TLS alert record (content type 21), never a response
    assert answer == b"" or answer[0] == 21
    _assert_healthy(secured)


def _metric(secured: Secured, name: str) -> int:
    return int(secured.broker.metrics().get(name, 0))


def _assert_healthy(secured: Secured) -> None:
    metadata = confluent_kafka.admin.AdminClient(
        {"bootstrap.servers": secured.bootstrap("PLAINTEXT")}
    ).list_topics(timeout=10)
    assert len(metadata.brokers) == 1


@pytest.fixture(scope="module")
def reauth_broker(secured: Secured) -> Iterator[EmbeddedBroker]:
    """A SASL_PLAINTEXT broker whose sessions last 1.5 s (KIP-368; the broker refuses a
    re-authentication less than a second after the previous one, as Kafka does)."""
    properties = {
        "listeners": "SASL_PLAINTEXT://127.0.0.1:0",
        "sasl.enabled.mechanisms": "SCRAM-SHA-256,PLAIN",
        "sluice.security.credentials.file": str(secured.ca_file.parent / "users.json"),
        "connections.max.reauth.ms": "1500",
    }
    with EmbeddedBroker(properties=properties) as broker:
        yield broker


async def test_a_client_that_does_not_reauthenticate_is_closed_when_its_session_ends(
    reauth_broker: EmbeddedBroker,
) -> None:
    from sluice.net.connection import Connection
    from sluice.net.errors import KafkaConnectionError
    from sluice.net.security import ClientSecurity

    security = ClientSecurity(None, "SCRAM-SHA-256", "alice", "alice-pw", reauthenticate=False)
    host, port = reauth_broker.bootstrap("SASL_PLAINTEXT").split(":")
    conn = await Connection.open(host, int(port), security=security)
    try:
        await conn.request(m.Metadata.key, m.MetadataRequest(topics=[]))  # within the session
        closed_before = reauth_broker.metrics().get("connections.closed.session_expired", 0)
        await asyncio.sleep(1.7)  # the session's length, not a synchronisation
        with pytest.raises(KafkaConnectionError):
            await conn.request(m.Metadata.key, m.MetadataRequest(topics=[]))
        assert reauth_broker.metrics()["connections.closed.session_expired"] == closed_before + 1
    finally:
        conn.close()


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "PLAIN"])
async def test_our_client_reauthenticates_on_the_same_connection(
    reauth_broker: EmbeddedBroker, mechanism: str
) -> None:
    from sluice.net.connection import Connection
    from sluice.net.security import ClientSecurity

    security = ClientSecurity(None, mechanism, "alice", "alice-pw")
    host, port = reauth_broker.bootstrap("SASL_PLAINTEXT").split(":")
    before = reauth_broker.metrics()
    conn = await Connection.open(host, int(port), security=security)

    def logins() -> int:
        now = reauth_broker.metrics()
        return int(now["connections.authenticated"]) - int(before["connections.authenticated"])

    try:
        deadline = time.monotonic() + 15
        while logins() < 3 and time.monotonic() < deadline:  # three sessions
            # pipelined: two requests at once, across the re-authentications
            await asyncio.gather(
                conn.request(m.Metadata.key, m.MetadataRequest(topics=[])),
                conn.request(m.Metadata.key, m.MetadataRequest(topics=[])),
            )
            await asyncio.sleep(0.05)
        assert not conn.closed
    finally:
        conn.close()
    after = reauth_broker.metrics()
    assert int(after["connections.accepted"]) - int(before.get("connections.accepted", 0)) == 1
    assert logins() >= 3
    expired = after.get("connections.closed.session_expired", 0)
    assert expired == before.get("connections.closed.session_expired", 0)


def test_librdkafka_reauthenticates_on_the_same_connection(reauth_broker: EmbeddedBroker) -> None:
    config = {
        "bootstrap.servers": reauth_broker.bootstrap("SASL_PLAINTEXT"),
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-256",
        "sasl.username": "alice",
        "sasl.password": "alice-pw",
    }
    producer = confluent_kafka.Producer(config)
    before = reauth_broker.metrics()
    after = before

    def grew(name: str) -> int:
        return int(after.get(name, 0)) - int(before.get(name, 0))

    def logged_in_again() -> bool:
        return grew("connections.authenticated") >= grew("connections.accepted") + 2

    # producing for three sessions' worth (each lasts 1.5 s), as long as it takes
    deadline = time.monotonic() + 15
    while not logged_in_again() and time.monotonic() < deadline:
        producer.produce("reauth", b"x")
        producer.poll(0.1)
        after = reauth_broker.metrics()
    assert producer.flush(15) == 0
    after = reauth_broker.metrics()
    # logged in again on the same connections, none closed for expiry
    assert logged_in_again()
    assert grew("connections.closed.session_expired") == 0


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed")
def test_kcat_produces_and_lists_over_sasl_ssl(secured: Secured) -> None:
    options = [
        "-b", secured.bootstrap("SASL_SSL"), "-X", "security.protocol=SASL_SSL",
        "-X", "sasl.mechanisms=SCRAM-SHA-512", "-X", "sasl.username=alice",
        "-X", "sasl.password=alice-pw", "-X", f"ssl.ca.location={secured.ca_file}",
    ]  # fmt: skip
    produced = subprocess.run(
        ["kcat", *options, "-P", "-t", "kcat-secured"], input=b"from-kcat\n",
        capture_output=True, timeout=30, check=False,
    )  # fmt: skip
    assert produced.returncode == 0, produced.stderr
    listed = subprocess.run(
        ["kcat", *options, "-L", "-J"], capture_output=True, timeout=30, check=False
    )
    assert listed.returncode == 0, listed.stderr
    metadata = json.loads(listed.stdout)
    assert [b["name"] for b in metadata["brokers"]] == [secured.bootstrap("SASL_SSL")]
    assert "kcat-secured" in {t["topic"] for t in metadata["topics"]}


def test_the_cli_reads_client_properties_from_command_config(
    secured: Secured, tmp_path: Path
) -> None:
    from click.testing import CliRunner

    from sluice.cli.main import cli

    config = tmp_path / "client.properties"
    config.write_text(
        "# kafka-topics --command-config\nsecurity.protocol=SASL_SSL\n"
        "sasl.mechanism=SCRAM-SHA-256\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
        'username="alice" password="alice-pw";\n'
        f"ssl.truststore.location={secured.ca_file}\n"
    )
    bootstrap = ["--bootstrap-server", secured.bootstrap("SASL_SSL")]
    created = CliRunner().invoke(
        cli, ["topics", "create", "--topic", "cli-secured", "--partitions", "1", *bootstrap,
              "--command-config", str(config)],
    )  # fmt: skip
    assert created.exit_code == 0, created.output
    listed = CliRunner().invoke(
        cli, ["topics", "list", *bootstrap, "--command-config", str(config)]
    )
    assert listed.exit_code == 0 and "cli-secured" in listed.output.split(), listed.output
    refused = CliRunner().invoke(cli, ["topics", "list", *bootstrap])  # TLS port, no TLS
    assert refused.exit_code != 0


def test_random_frames_before_authentication_are_never_served(secured: Secured) -> None:
    """A seeded fuzz of the pre-authentication state: frames with random API keys, versions
    and bodies (some after a valid ApiVersions / SaslHandshake) reach no handler but
    ApiVersions, crash nothing, and every connection ends closed or waiting for a login."""
    import random

    rng = random.Random(24)
    before = secured.broker.metrics()
    handshake = struct.pack(">hhih", m.SaslHandshake.key, 1, 2, 1) + b"x"
    handshake += struct.pack(">h", 5) + b"PLAIN"
    streams = []
    for _ in range(120):
        frames = []
        if rng.random() < 0.5:
            frames.append(_api_versions_frame()[4:])
        if rng.random() < 0.3:
            frames.append(handshake)
        for _ in range(rng.randint(1, 3)):
            header = struct.pack(">hhi", rng.randrange(-2, 70), rng.randrange(-1, 14), 7)
            frames.append(header + rng.randbytes(rng.randrange(0, 64)))
        streams.append(b"".join(struct.pack(">i", len(f)) + f for f in frames))

    def send(stream: bytes) -> None:
        with socket.create_connection(("127.0.0.1", secured.port("SASL_PLAINTEXT")), 10) as s:
            s.settimeout(2)
            s.sendall(stream)
            # The broker reads every frame before the end of the stream, then closes: recv
            # returns as soon as it has handled them all (a connection still waiting for a
            # login does not hold the test up for the timeout).
            s.shutdown(socket.SHUT_WR)
            with contextlib.suppress(TimeoutError, ConnectionError):
                while s.recv(65536):
                    pass

    # Several connections at a time: a refused one is closed only after
    # connection.failed.authentication.delay.ms, one after the other that added up to seconds.
    with concurrent.futures.ThreadPoolExecutor(max_workers=12) as pool:
        list(pool.map(send, streams))
    after = secured.broker.metrics()
    served = {
        name: int(after[name]) - int(before.get(name, 0))
        for name in after
        if name.startswith("requests.") and name != "requests.ApiVersions"
        and int(after[name]) != int(before.get(name, 0))
    }  # fmt: skip
    assert served == {}
    _assert_healthy(secured)


def test_a_user_added_to_the_file_while_the_broker_runs_can_log_in(secured: Secured) -> None:
    """``python -m sluice.server.security --credentials-file`` beside a running broker: the
    next SASL connection sees the new user."""
    users = FileCredentialStore(secured.ca_file.parent / "users.json")
    mechanism = "SCRAM-SHA-256"
    config = _confluent(
        secured, "SASL_PLAINTEXT", **{"sasl.mechanism": mechanism, "sasl.username": "bob",
                                      "sasl.password": "bob-pw"}
    )  # fmt: skip
    errors: list[confluent_kafka.KafkaError] = []
    refused = confluent_kafka.admin.AdminClient({**config, "error_cb": errors.append})
    assert librdkafka_login_refused(
        refused, errors, "Authentication failed during authentication due to invalid"
    ), [e.str() for e in errors]
    users.alter_sync("bob", {mechanism: credential_from_password(mechanism, "bob-pw")})
    metadata = confluent_kafka.admin.AdminClient(config).list_topics(timeout=15)
    assert len(metadata.brokers) == 1
    assert "User:bob" in secured.principals("SASL_PLAINTEXT")


def test_a_plain_login_after_a_v0_handshake_is_checked_off_the_event_loop(
    secured: Secured,
) -> None:
    """A PLAIN password costs a PBKDF2: after a SaslHandshake v0 the token comes raw (no
    SaslAuthenticate header), and must still be checked outside the event loop, or a client not
    yet logged in could stall every connection with wrong passwords (found by a review)."""
    store = secured.broker.call(lambda s: s.credentials)
    verify = store.verify_plain
    on_loop: list[bool] = []

    def recording(user: str, password: str) -> bool:
        try:
            asyncio.get_running_loop()
            on_loop.append(True)
        except RuntimeError:
            on_loop.append(False)
        return bool(verify(user, password))

    store.verify_plain = recording
    try:
        with socket.create_connection(
            ("127.0.0.1", secured.port("SASL_PLAINTEXT")), timeout=10
        ) as s:
            mechanism = b"PLAIN"
            body = struct.pack(">hhih", m.SaslHandshake.key, 0, 1, 1) + b"x"
            body += struct.pack(">h", len(mechanism)) + mechanism
            s.sendall(struct.pack(">i", len(body)) + body)
            (size,) = struct.unpack(">i", s.recv(4, socket.MSG_WAITALL))
            answer = s.recv(size, socket.MSG_WAITALL)
            assert struct.unpack_from(">h", answer, 4)[0] == 0  # handshake accepted
            token = b"\0alice\0alice-pw"
            s.sendall(struct.pack(">i", len(token)) + token)
            assert s.recv(4, socket.MSG_WAITALL) == b"\0\0\0\0"  # v0: an empty frame = logged in
    finally:
        store.verify_plain = verify
    assert on_loop == [False]
