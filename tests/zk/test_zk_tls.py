"""The ZooKeeper link over TLS (Kafka's ``zookeeper.ssl.*`` keys), against a real ZooKeeper
serving its ``secureClientPort`` with client authentication required (``ssl.clientAuth=need``):
a broker with the keys joins the cluster over TLS; one without a client certificate, or not
trusting ZooKeeper's certificate, does not get in. With ``zookeeper.set.acl`` the znodes it
creates are Kafka's secure ACLs: writable by its certificate's identity only, readable by
anyone but the credentials."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import trustme
from cryptography.hazmat.primitives import serialization

from sluice.server.config import Config, ConfigError
from sluice.server.server import Server
from sluice.server.zk.client import ZkClient, ZkTls
from sluice.server.zk.errors import ConnectionLossError
from sluice.testing.zookeeper import ZooKeeperServer
from tests.broker.test_server import start_server


@dataclass
class Tls:
    zookeeper: ZooKeeperServer
    ca: Path
    client: Path  # the broker's key and certificate chain (PEM)
    other_ca: Path


def _pem_keystore(cert: trustme.LeafCert) -> bytes:
    """Key (PKCS#8, what ZooKeeper's PEMFileLoader reads) and certificate chain, one PEM."""
    key = serialization.load_pem_private_key(cert.private_key_pem.bytes(), None)
    pkcs8 = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    return pkcs8 + b"".join(c.bytes() for c in cert.cert_chain_pems)


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tls]:
    tmp = tmp_path_factory.mktemp("zk-tls")
    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(tmp / "ca.pem"))
    (tmp / "zookeeper.pem").write_bytes(_pem_keystore(ca.issue_cert("127.0.0.1", "localhost")))
    (tmp / "broker.pem").write_bytes(_pem_keystore(ca.issue_cert("broker", common_name="broker")))
    trustme.CA().cert_pem.write_to_path(str(tmp / "other-ca.pem"))
    server = ZooKeeperServer(tls_keystore=tmp / "zookeeper.pem", tls_truststore=tmp / "ca.pem")
    with server:
        yield Tls(server, tmp / "ca.pem", tmp / "broker.pem", tmp / "other-ca.pem")


def zookeeper_keys(tls: Tls, *, keystore: bool = True) -> list[str]:
    keys = [
        f"zookeeper.connect={tls.zookeeper.secure_hosts}/tls",
        "zookeeper.ssl.client.enable=true",
        f"zookeeper.ssl.truststore.location={tls.ca}",
        "zookeeper.ssl.truststore.type=PEM",
        "zookeeper.connection.timeout.ms=4000",
    ]
    if keystore:
        keys += [f"zookeeper.ssl.keystore.location={tls.client}", "zookeeper.ssl.keystore.type=PEM"]
    return keys


async def test_a_broker_joins_its_cluster_over_tls(tls: Tls, tmp_path: Path) -> None:
    server = await start_server(
        tmp_path, "node.id=7", "controlled.shutdown.enable=false", *zookeeper_keys(tls)
    )
    try:
        assert server.cluster is not None and server.cluster.zk is not None
        assert server.cluster.zk.tls is not None
        registered = await server.cluster.zk.get_children("/brokers/ids")
        assert registered == ["7"]
    finally:
        await server.shutdown()


async def test_a_broker_without_a_client_certificate_is_refused(tls: Tls, tmp_path: Path) -> None:
    config = Config.load(None, [
        "listeners=PLAINTEXT://127.0.0.1:0", f"log.dirs={tmp_path / 'data'}", "node.id=8",
        *zookeeper_keys(tls, keystore=False),
        # refused at every attempt (the handshake takes milliseconds): no need to try for 4 s
        "zookeeper.connection.timeout.ms=1500",
    ])  # fmt: skip
    server = Server(config)
    with pytest.raises(ConnectionLossError):
        await server.start()
    assert server.log_manager is None  # nothing left open


async def test_zookeeper_must_present_a_certificate_the_truststore_trusts(tls: Tls) -> None:
    untrusting = ZkTls(truststore=str(tls.other_ca), keystore=str(tls.client))
    client = ZkClient(tls.zookeeper.secure_hosts, connect_timeout=1.5, tls=untrusting)
    with pytest.raises(ConnectionLossError):
        await client.start()
    trusting = ZkTls(truststore=str(tls.ca), keystore=str(tls.client))
    client = ZkClient(tls.zookeeper.secure_hosts, connect_timeout=10.0, tls=trusting)
    await client.start()
    try:
        assert "zookeeper" in await client.get_children("/")
    finally:
        await client.close()


async def test_set_acl_makes_the_brokers_znodes_its_own(tls: Tls, tmp_path: Path) -> None:
    from kazoo.client import KazooClient
    from kazoo.exceptions import NoAuthError
    from kazoo.security import Permissions

    keys = [k.replace("/tls", "/tls-acl") for k in zookeeper_keys(tls)]
    server = await start_server(
        tmp_path, "node.id=9", "controlled.shutdown.enable=false", "zookeeper.set.acl=true", *keys
    )

    def check() -> None:
        owner = KazooClient(hosts=tls.zookeeper.secure_hosts, use_ssl=True, ca=str(tls.ca),
                            certfile=str(tls.client), keyfile=str(tls.client))  # fmt: skip
        anyone = KazooClient(hosts=tls.zookeeper.hosts)  # plaintext: no identity
        owner.start(timeout=10)
        anyone.start(timeout=10)
        try:
            registration, _ = owner.get_acls("/tls-acl/brokers/ids/9")
            users, _ = owner.get_acls("/tls-acl/config/users")
            assert {(a.id.scheme, a.perms) for a in registration} == {
                ("x509", Permissions.ALL),
                ("world", Permissions.READ),
            }
            assert [(a.id.scheme, a.perms) for a in users] == [("x509", Permissions.ALL)]
            assert "CN=broker" in users[0].id.id
            assert anyone.get("/tls-acl/brokers/ids/9")[0]  # readable by anyone
            with pytest.raises(NoAuthError):
                anyone.set("/tls-acl/brokers/ids/9", b"{}")
            with pytest.raises(NoAuthError):
                anyone.get_children("/tls-acl/config/users")
        finally:
            for client in (owner, anyone):
                client.stop()
                client.close()

    try:
        await asyncio.to_thread(check)
    finally:
        await server.shutdown()


def test_set_acl_needs_a_zookeeper_identity() -> None:
    with pytest.raises(ConfigError, match=r"zookeeper\.set\.acl is true"):
        Config.load(None, ["zookeeper.connect=127.0.0.1:2181", "zookeeper.set.acl=true"])


def test_only_pem_stores_are_read() -> None:
    with pytest.raises(ConfigError, match=r"zookeeper\.ssl\.keystore\.type.*PEM files only"):
        Config.load(None, ["zookeeper.ssl.keystore.type=JKS"])
    assert Config.load(None, ["zookeeper.ssl.truststore.type=pem"]).zookeeper_ssl_truststore_type
