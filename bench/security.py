"""What security costs per login and per decision: ``python -m bench security``.

* PLAIN checked against a SCRAM credential: one PBKDF2 of the credential's iterations;
* a SCRAM login on the broker's side (both ``evaluate`` calls; the client's half excluded);
* TLS handshakes per second on loopback (client and server in this one process, so the figure
  is for both ends on one core) against plain TCP connects;
* one ACL decision among ``--acls`` ACLs (literal and prefixed), and the authorized-operations
  field of one topic;
* with ``--broker``: a subprocess broker with a PLAINTEXT and a SASL_SSL (SCRAM-SHA-512)
  listener, in one run: confluent-kafka produce (acks=1) and fetch MB/s through each, and full
  logins per second (TCP + TLS + ApiVersions + SCRAM, Sluice's own client) against bare
  PLAINTEXT connects. Over TLS the broker cannot ``sendfile``: Fetch takes the copy path.

The figures and what follows from them: bench/NOTES.md.
"""

from __future__ import annotations

import argparse
import asyncio
import ssl
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import scramp
import trustme

from sluice.protocol.acl import AclOperation, AclPermissionType, PatternType, ResourceType
from sluice.server.security.acl import AccessControlEntry, ResourcePattern
from sluice.server.security.authorizer import AclAuthorizer, AclStore
from sluice.server.security.credentials import FileCredentialStore
from sluice.server.security.scram import (
    ScramServerExchange,
    credential_from_password,
    verify_password,
)
from sluice.server.security.tls import server_context
from sluice.testing import EmbeddedBroker


def per_call(fn: Callable[[], object], rounds: int) -> float:
    """Median seconds per call over ``rounds`` calls (timed one by one)."""
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def scram_server_login(mechanism: str, iterations: int, rounds: int) -> float:
    cred = credential_from_password(mechanism, "pw", iterations)
    nonce = "server-nonce-fixed"
    client = scramp.ScramClient([mechanism], "alice", "pw")
    first = client.get_client_first()
    probe = ScramServerExchange(mechanism, {"alice": cred}.get, nonce=nonce)
    client.set_server_first(probe.evaluate(first.encode()).decode())
    final = client.get_client_final().encode()

    def login() -> None:
        exchange = ScramServerExchange(mechanism, {"alice": cred}.get, nonce=nonce)
        exchange.evaluate(first.encode())
        exchange.evaluate(final)
        assert exchange.complete

    return per_call(login, rounds)


async def connects_per_second(seconds: float, tls: bool, tmp: Path) -> float:
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    keystore = tmp / "server.pem"
    keystore.write_bytes(cert.private_key_and_cert_chain_pem.bytes())
    server_ctx = server_context({"ssl.keystore.location": str(keystore)}) if tls else None
    client_ctx: ssl.SSLContext | None = None
    if tls:
        client_ctx = ssl.create_default_context()
        ca.configure_trust(client_ctx)

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"x")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=server_ctx)
    port = server.sockets[0].getsockname()[1]
    done = 0
    deadline = time.perf_counter() + seconds
    start = time.perf_counter()
    while time.perf_counter() < deadline:
        reader, writer = await asyncio.open_connection(
            "127.0.0.1", port, ssl=client_ctx, server_hostname="127.0.0.1" if tls else None
        )
        await reader.readexactly(1)
        writer.close()
        done += 1
    elapsed = time.perf_counter() - start
    server.close()
    await server.wait_closed()
    return done / elapsed


def authorizer_with(n: int) -> AclAuthorizer:
    store = AclStore()
    for i in range(n):
        pattern_type = PatternType.PREFIXED if i % 10 == 0 else PatternType.LITERAL
        pattern = ResourcePattern(ResourceType.TOPIC, f"team-{i % 50}-topic-{i}", pattern_type)
        entry = AccessControlEntry(
            f"User:u{i % 100}", "*", AclOperation.READ, AclPermissionType.ALLOW
        )
        store.put(pattern, store.cache.get(pattern, frozenset()) | {entry})
    return AclAuthorizer(store)


def _secured_broker(tmp: Path) -> tuple[EmbeddedBroker, Path]:
    ca = trustme.CA()
    (tmp / "server.pem").write_bytes(
        ca.issue_cert("127.0.0.1").private_key_and_cert_chain_pem.bytes()
    )
    ca.cert_pem.write_to_path(str(tmp / "ca.pem"))
    FileCredentialStore(tmp / "users.json").alter_sync(
        "alice", {"SCRAM-SHA-512": credential_from_password("SCRAM-SHA-512", "alice-pw")}
    )
    properties = {
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0",
        "ssl.keystore.location": str(tmp / "server.pem"),
        "sasl.enabled.mechanisms": "SCRAM-SHA-512",
        "sluice.security.credentials.file": str(tmp / "users.json"),
    }
    return EmbeddedBroker(tmp / "data", mode="subprocess", properties=properties), tmp / "ca.pem"


def _client_config(broker: EmbeddedBroker, listener: str, ca: Path) -> dict[str, object]:
    config: dict[str, object] = {"bootstrap.servers": broker.bootstrap(listener)}
    if listener == "SASL_SSL":
        config.update({"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
                       "sasl.username": "alice", "sasl.password": "alice-pw",
                       "ssl.ca.location": str(ca)})  # fmt: skip
    return config


def produce_mb_s(config: dict[str, object], topic: str, count: int, size: int) -> float:
    import confluent_kafka

    producer = confluent_kafka.Producer({**config, "acks": 1, "linger.ms": 5,
                                         "batch.size": 1 << 20})  # fmt: skip
    value = b"x" * size
    start = time.perf_counter()
    for _ in range(count):
        while True:
            try:
                producer.produce(topic, value)
                break
            except BufferError:
                producer.poll(0.01)
    if producer.flush(120) != 0:
        raise RuntimeError("produce did not finish")
    return count * size / (time.perf_counter() - start) / 1e6


def fetch_mb_s(config: dict[str, object], topic: str, count: int, size: int) -> float:
    import confluent_kafka

    consumer = confluent_kafka.Consumer({**config, "group.id": f"bench-{time.time_ns()}",
                                         "enable.auto.commit": False,
                                         "fetch.max.bytes": 52428800})  # fmt: skip
    consumer.assign([confluent_kafka.TopicPartition(topic, 0, confluent_kafka.OFFSET_BEGINNING)])
    got = 0
    start = time.perf_counter()
    deadline = start + 120
    while got < count and time.perf_counter() < deadline:
        got += sum(1 for msg in consumer.consume(10_000, 1.0) if msg.error() is None)
    elapsed = time.perf_counter() - start
    consumer.close()
    if got < count:
        raise RuntimeError(f"fetched {got} of {count}")
    return count * size / elapsed / 1e6


async def logins_per_second(
    broker: EmbeddedBroker, listener: str, ca: Path, seconds: float
) -> float:
    from sluice.net.connection import Connection
    from sluice.net.security import ClientSecurity

    host, port = broker.bootstrap(listener).split(":")
    security = None
    if listener == "SASL_SSL":
        ctx = ssl.create_default_context(cafile=str(ca))
        security = ClientSecurity(ctx, "SCRAM-SHA-512", "alice", "alice-pw")
    done = 0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        conn = await Connection.open(host, int(port), security=security)
        conn.close()
        await conn.wait_closed()
        done += 1
    return done / (time.perf_counter() - start)


def broker_comparison(records: int, size: int, seconds: float) -> None:
    """Produce, fetch and logins through PLAINTEXT and SASL_SSL of one broker, in one run."""
    with tempfile.TemporaryDirectory() as tmp:
        broker, ca = _secured_broker(Path(tmp))
        with broker:
            for listener in ("PLAINTEXT", "SASL_SSL"):
                config = _client_config(broker, listener, ca)
                topic = f"bench-{listener.lower()}"
                produced = produce_mb_s(config, topic, records, size)
                fetched = fetch_mb_s(config, topic, records, size)
                logins = asyncio.run(logins_per_second(broker, listener, ca, seconds))
                print(f"{listener}: produce {produced:.1f} MB/s, fetch {fetched:.1f} MB/s "
                      f"({records} x {size} B), connects+logins {logins:.0f}/s")  # fmt: skip


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench security")
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--acls", type=int, default=10_000)
    parser.add_argument("--broker", action="store_true", help="also PLAINTEXT vs SASL_SSL")
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--record-size", type=int, default=1000)
    args = parser.parse_args(argv)
    if args.broker:
        broker_comparison(args.records, args.record_size, args.seconds)
    for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
        for iterations in (4096, 8192):
            cred = credential_from_password(mechanism, "pw", iterations)
            plain = per_call(lambda c=cred, m=mechanism: verify_password(m, c, "pw"), args.rounds)
            scram = scram_server_login(mechanism, iterations, args.rounds)
            print(f"{mechanism} i={iterations}: PLAIN check {plain * 1e3:.2f} ms, "
                  f"SCRAM server side {scram * 1e3:.3f} ms per login")  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        plain_cps = asyncio.run(connects_per_second(args.seconds, False, Path(tmp)))
        tls_cps = asyncio.run(connects_per_second(args.seconds, True, Path(tmp)))
    print(f"loopback connects/s (both ends, one process): TCP {plain_cps:.0f}, TLS {tls_cps:.0f}")
    auth = authorizer_with(args.acls)
    name = "team-7-topic-7007"
    decide = per_call(
        lambda: auth.authorize("User:u7", "10.0.0.1", AclOperation.READ, ResourceType.TOPIC, name,
                               audit=False), args.rounds * 10)  # fmt: skip
    ops = per_call(
        lambda: auth.authorized_operations("User:u7", "10.0.0.1", ResourceType.TOPIC, name),
        args.rounds,
    )
    print(f"{args.acls} ACLs: one decision {decide * 1e6:.1f} us, "
          f"authorized operations of a topic {ops * 1e6:.1f} us")  # fmt: skip
    return 0
