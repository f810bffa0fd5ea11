"""Credential stores: Kafka's ZooKeeper layout and change notices against a real ZooKeeper (one
broker's store sees another's change), and the standalone file."""

from __future__ import annotations

import asyncio
import json
import os
import stat
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from sluice.server.security.credentials import (
    FileCredentialStore,
    ZkCredentialStore,
    desanitize,
    sanitize,
    user_config_path,
)
from sluice.server.security.errors import InvalidCredential
from sluice.server.security.scram import credential_from_password
from sluice.server.zk.client import ZkClient

SHA512 = "SCRAM-SHA-512"
SHA256 = "SCRAM-SHA-256"


async def wait_for(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.01)


@pytest.mark.parametrize(
    ("name", "sanitized"),
    [
        ("alice", "alice"),
        ("a.b-c_d", "a.b-c_d"),
        ("user@example.com", "user%40example.com"),
        ("CN=x,O=y", "CN%3Dx%2CO%3Dy"),
        ("with space", "with%20space"),
        ("star*", "star%2A"),
        ("tilde~", "tilde%7E"),
        ("zoë", "zo%C3%AB"),
    ],
)
def test_sanitize_is_kafkas(name: str, sanitized: str) -> None:
    assert sanitize(name) == sanitized
    assert desanitize(sanitized) == name
    assert user_config_path(name) == f"/config/users/{sanitized}"


# --- file store ---------------------------------------------------------------------------------


async def test_file_store_round_trip_and_layout(tmp_path: Path) -> None:
    path = tmp_path / "users.json"
    store = FileCredentialStore(path)
    assert store.users() == {}
    cred = credential_from_password(SHA512, "secret")
    await store.alter("alice", {SHA512: cred})
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    doc = json.loads(path.read_text())
    assert doc == {"version": 1, "users": {"alice": {SHA512: cred.to_text()}}}
    again = FileCredentialStore(path)
    assert again.scram_credential("alice", SHA512) == cred
    assert again.scram_credential("alice", SHA256) is None
    assert again.verify_plain("alice", "secret") and not again.verify_plain("alice", "Secret")
    assert not again.verify_plain("bob", "secret")
    await again.alter("alice", deletions=[SHA512])
    assert FileCredentialStore(path).users() == {}
    assert not list(tmp_path.glob("*.tmp"))


def test_file_store_keeps_other_keys_and_refuses_garbage(tmp_path: Path) -> None:
    path = tmp_path / "users.json"
    cred = credential_from_password(SHA256, "pw")
    path.write_text(json.dumps({"version": 1, "users": {"bob": {"producer_byte_rate": "1024"}}}))
    store = FileCredentialStore(path)
    assert store.users() == {}  # no SCRAM credential yet
    store.alter_sync("bob", {SHA256: cred})
    assert json.loads(path.read_text())["users"]["bob"] == {
        "producer_byte_rate": "1024",
        SHA256: cred.to_text(),
    }
    with pytest.raises(InvalidCredential, match="unknown SCRAM mechanism"):
        store.alter_sync("bob", {"SCRAM-SHA-1": cred})
    path.write_text("{not json")
    with pytest.raises(InvalidCredential, match="not a credentials file"):
        FileCredentialStore(path)


# --- ZooKeeper store ----------------------------------------------------------------------------


@pytest.fixture
async def zk_clients(sluice_zookeeper_connect: str) -> AsyncIterator[list[ZkClient]]:
    clients = [ZkClient(sluice_zookeeper_connect, session_timeout=5.0) for _ in range(2)]
    for client in clients:
        await client.start()
    try:
        yield clients
    finally:
        for client in clients:
            await client.close()


async def test_zk_layout_is_kafkas(zk_clients: list[ZkClient]) -> None:
    zk = zk_clients[0]
    store = ZkCredentialStore(zk)
    await store.start()
    try:
        cred = credential_from_password(SHA512, "secret")
        await store.alter("user@example.com", {SHA512: cred})
        data, _ = await zk.get("/config/users/user%40example.com")
        assert data == (
            b'{"version":1,"config":{"SCRAM-SHA-512":"' + cred.to_text().encode() + b'"}}'
        )
        notices = await zk.get_children("/config/changes")
        assert len(notices) == 1 and notices[0].startswith("config_change_")
        assert len(notices[0]) == len("config_change_") + 10
        notice, _ = await zk.get(f"/config/changes/{notices[0]}")
        assert notice == b'{"version":2,"entity_path":"users/user%40example.com"}'
        assert store.scram_credential("user@example.com", SHA512) == cred
    finally:
        await store.close()


async def test_a_broker_sees_anothers_change(zk_clients: list[ZkClient]) -> None:
    one, two = (ZkCredentialStore(zk) for zk in zk_clients)
    cred = credential_from_password(SHA256, "first")
    await one.start()
    await one.alter("carol", {SHA256: cred})  # before the other starts: the full load has it
    await two.start()
    try:
        assert two.scram_credential("carol", SHA256) == cred
        newer = credential_from_password(SHA256, "second")
        await one.alter("carol", {SHA256: newer, SHA512: credential_from_password(SHA512, "x")})
        await wait_for(lambda: two.scram_credential("carol", SHA256) == newer)
        assert two.verify_plain("carol", "x")  # SHA-512 is preferred for PLAIN
        await one.alter("carol", deletions=[SHA256, SHA512])
        await wait_for(lambda: two.scram_credential("carol", SHA256) is None)
        assert two.users() == {}
    finally:
        await one.close()
        await two.close()


async def test_kafka_written_config_and_other_keys(zk_clients: list[ZkClient]) -> None:
    """A user config Kafka wrote (with a quota) is read, and our change keeps the quota."""
    zk = zk_clients[0]
    cred = credential_from_password(SHA512, "pw")
    kafkas = {"version": 1, "config": {"producer_byte_rate": "1024", SHA512: cred.to_text()}}
    await zk.create("/config/users/dave", json.dumps(kafkas).encode(), make_parents=True)
    store = ZkCredentialStore(zk)
    await store.start()
    try:
        assert store.scram_credential("dave", SHA512) == cred
        await store.alter("dave", deletions=[SHA512])
        data, _ = await zk.get("/config/users/dave")
        assert json.loads(data) == {"version": 1, "config": {"producer_byte_rate": "1024"}}
        assert store.users() == {}
    finally:
        await store.close()


async def test_old_notices_are_purged(zk_clients: list[ZkClient]) -> None:
    writer = ZkCredentialStore(zk_clients[0])
    reader = ZkCredentialStore(zk_clients[1], change_expiration_ms=-1)  # even this ms's
    await writer.start()
    await reader.start()
    try:
        await writer.alter("erin", {SHA256: credential_from_password(SHA256, "pw")})
        await wait_for(lambda: reader.changes_processed == 1)
        await wait_for(lambda: reader.scram_credential("erin", SHA256) is not None)
        assert await zk_clients[0].get_children("/config/changes") == []
    finally:
        await writer.close()
        await reader.close()


async def test_unrelated_and_garbage_notices_are_skipped(zk_clients: list[ZkClient]) -> None:
    zk = zk_clients[0]
    store = ZkCredentialStore(zk)
    await store.start()
    try:
        for data in (b'{"version":2,"entity_path":"topics/orders"}', b"garbage"):
            await zk.create("/config/changes/config_change_", data, sequence=True)
        await wait_for(lambda: store.changes_processed == 2)
        assert store.users() == {}
    finally:
        await store.close()


async def test_a_new_session_reloads_everything(zk_clients: list[ZkClient]) -> None:
    """Changes whose notices this broker never saw (purged while its session was gone) are
    picked up when a new session starts; a session that merely reconnects reads nothing."""
    from sluice.server.zk.client import SessionEvent, SessionState

    zk = zk_clients[0]
    store = ZkCredentialStore(zk)
    await store.start()
    try:
        await store.alter("gone", {SHA256: credential_from_password(SHA256, "pw")})
        cred = credential_from_password(SHA512, "pw")
        config = {"version": 1, "config": {SHA512: cred.to_text()}}
        await zk.create("/config/users/quiet", json.dumps(config).encode())  # no notice
        await zk.delete("/config/users/gone")  # no notice either
        await store._on_session(SessionEvent(SessionState.CONNECTED, 1, new_session=False))
        assert set(store.users()) == {"gone"}
        await store._on_session(SessionEvent(SessionState.CONNECTED, 2, new_session=True))
        assert set(store.users()) == {"quiet"}
        assert store.scram_credential("quiet", SHA512) == cred
    finally:
        await store.close()


async def test_concurrent_alters_of_one_user_lose_nothing(zk_clients: list[ZkClient]) -> None:
    stores = [ZkCredentialStore(zk) for zk in zk_clients]
    for store in stores:
        await store.start()
    try:
        sha256 = credential_from_password(SHA256, "a")
        sha512 = credential_from_password(SHA512, "b")
        for _ in range(5):
            await asyncio.gather(
                stores[0].alter("shared", {SHA256: sha256}),
                stores[1].alter("shared", {SHA512: sha512}),
            )
            data, _ = await zk_clients[0].get("/config/users/shared")
            assert set(json.loads(data)["config"]) == {SHA256, SHA512}
            await stores[0].alter("shared", deletions=[SHA256, SHA512])
    finally:
        for store in stores:
            await store.close()


def test_plain_check_of_an_unknown_user_costs_a_known_users_pbkdf2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found by a security review: an unknown user's PLAIN login answered at once while a known
    user's cost a PBKDF2, so the answer's timing told which users exist. Both now derive once,
    with the same hash and iterations."""
    from sluice.server.security import scram

    store = FileCredentialStore(tmp_path / "users.json")
    store.alter_sync("alice", {SHA512: credential_from_password(SHA512, "secret")})
    derived: list[tuple[str, int]] = []
    real = scram.salted_password

    def recording(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
        derived.append((mechanism, iterations))
        return real(mechanism, password, salt, iterations)

    monkeypatch.setattr(scram, "salted_password", recording)
    assert not store.verify_plain("alice", "wrong")
    known = list(derived)
    derived.clear()
    assert not store.verify_plain("mallory", "wrong")
    assert not store.verify_plain("mallory", "secret")
    assert not store.verify_plain("", "secret")
    assert known == [(SHA512, 4096)]
    assert derived == known * 3


def test_no_repr_shows_a_secret() -> None:
    """Found by a security review: ``ClientSecurity``'s repr included the password (a log line
    or a traceback showing the object would print it). Nor do the broker's config (its
    properties may hold ``ssl.key.password`` and ``sasl.jaas.config``) or a SCRAM credential's
    keys show theirs."""
    from sluice.net.security import ClientSecurity
    from sluice.server.config import Config

    security = ClientSecurity.from_properties({
        "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
        "sasl.username": "alice", "sasl.password": "pa55word",
    })  # fmt: skip
    assert security is not None and security.sasl_password == "pa55word"
    assert "pa55word" not in repr(security) and "alice" in repr(security)
    jaas = 'org.apache.kafka.common.security.plain.PlainLoginModule required password="pa55word";'
    config = Config.load(None, [f"sasl.jaas.config={jaas}", "ssl.key.password=pa55word",
                                "zookeeper.ssl.keystore.password=pa55word"])  # fmt: skip
    assert config.properties["ssl.key.password"] == "pa55word"
    assert config.zookeeper_ssl_keystore_password == "pa55word"
    assert "pa55word" not in repr(config)
    cred = credential_from_password(SHA512, "secret")
    text = repr(cred)
    assert cred.stored_key.hex() not in text and repr(cred.stored_key) not in text
    assert repr(cred.server_key) not in text and "iterations=4096" in text
