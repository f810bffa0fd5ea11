"""SASL on the ZooKeeper link, configured as a Kafka broker's is (a JAAS ``Client`` section
named by ``-Djava.security.auth.login.config`` in ``KAFKA_OPTS``), against a real ZooKeeper
that requires SASL (DIGEST-MD5, ``enforce.auth.enabled``): a broker with the right password
joins and, with ``zookeeper.set.acl``, owns its znodes as ``sasl:<user>``; another SASL user
cannot write them nor read the credentials; a client that does not log in is shut out; a wrong
password stops the broker's start with an error naming the user."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from sluice.server.config import Config, ConfigError
from sluice.server.server import Server
from sluice.server.zk.client import ZkClient
from sluice.server.zk.errors import AuthFailedError
from sluice.server.zk.sasl import ZkSasl, jvm_system_properties, parse_jaas, zookeeper_sasl
from sluice.testing.zookeeper import ZooKeeperServer
from tests.broker.test_server import start_server

USERS = {"kafka": "kafka-secret", "other": "other-secret"}


def jaas_client(tmp_path: Path, password: str, *, section: str = "Client") -> Path:
    path = tmp_path / "kafka_server_jaas.conf"
    path.write_text(
        "// the broker's logins\n"
        f"{section} {{\n"
        "    org.apache.zookeeper.server.auth.DigestLoginModule required\n"
        '    username="kafka"\n'
        f'    password="{password}";\n'
        "};\n"
    )
    return path


@pytest.fixture(scope="module")
def zookeeper() -> Iterator[ZooKeeperServer]:
    with ZooKeeperServer(sasl_users=USERS, sasl_required=True) as server:
        yield server


# --- the JAAS file and KAFKA_OPTS -----------------------------------------------------------


def test_jaas_sections_comments_and_quoting() -> None:
    sections = parse_jaas(
        """/* Kafka's listener section, then ZooKeeper's */
        KafkaServer {
            org.apache.kafka.common.security.scram.ScramLoginModule required
            username=admin password="a \\"quoted\\" one;}";
        };
        Client { org.apache.zookeeper.server.auth.DigestLoginModule required
                 username="kafka" password="pw"; // trailing comment
        };"""
    )
    assert list(sections) == ["KafkaServer", "Client"]
    assert sections["KafkaServer"][0].options == {
        "username": "admin",
        "password": 'a "quoted" one;}',
    }
    assert sections["Client"][0].flag == "required"
    with pytest.raises(ValueError, match="unexpected end"):
        parse_jaas("Client { m required a=b; }")


def test_kafka_opts_names_the_file_and_the_section(tmp_path: Path) -> None:
    jaas = jaas_client(tmp_path, "pw", section="ZkLogin")
    opts = (
        f"-Xmx1g -Djava.security.auth.login.config='{jaas}' -Dzookeeper.sasl.clientconfig=ZkLogin"
    )
    assert jvm_system_properties(opts)["zookeeper.sasl.clientconfig"] == "ZkLogin"
    sasl = zookeeper_sasl({"KAFKA_OPTS": opts})
    assert sasl == ZkSasl("kafka", "pw", source=f"{jaas} section ZkLogin")
    assert "pw" not in repr(sasl)
    # Kafka's rules: no section of that name is no SASL; the section with SASL turned off is
    # a contradiction; no KAFKA_OPTS, no SASL.
    assert zookeeper_sasl({"KAFKA_OPTS": f"-Djava.security.auth.login.config={jaas}"}) is None
    with pytest.raises(ValueError, match=r"zookeeper\.sasl\.client is set to false"):
        zookeeper_sasl({"KAFKA_OPTS": f"{opts} -Dzookeeper.sasl.client=false"})
    assert zookeeper_sasl({}) is None
    with pytest.raises(ValueError, match="Exception while loading ZooKeeper JAAS"):
        zookeeper_sasl({"KAFKA_OPTS": f"-Djava.security.auth.login.config={tmp_path}/none"})


def test_only_digest_logins(tmp_path: Path) -> None:
    (tmp_path / "jaas").write_text(
        "Client { com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true; };"
    )
    env = {"KAFKA_OPTS": f"-Djava.security.auth.login.config={tmp_path / 'jaas'}"}
    with pytest.raises(ValueError, match="Krb5LoginModule is not supported"):
        zookeeper_sasl(env)


def test_set_acl_accepts_a_sasl_identity(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    keys = ["zookeeper.connect=127.0.0.1:2181", "zookeeper.set.acl=true"]
    with pytest.raises(ConfigError, match=r"verification of the JAAS login file failed"):
        Config.load(None, keys)
    jaas = jaas_client(tmp_path, "pw")
    monkeypatch.setenv("KAFKA_OPTS", f"-Djava.security.auth.login.config={jaas}")
    assert Config.load(None, keys).zookeeper_set_acl
    jaas.write_text("Client {")  # a broken file fails the load, not a later connect
    with pytest.raises(ConfigError, match="unexpected end"):
        Config.load(None, keys[:1])


# --- against ZooKeeper ----------------------------------------------------------------------


async def test_a_broker_logs_in_and_owns_its_znodes(
    zookeeper: ZooKeeperServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kazoo.exceptions import NoAuthError
    from kazoo.security import Permissions

    jaas = jaas_client(tmp_path, USERS["kafka"])
    monkeypatch.setenv("KAFKA_OPTS", f"-Djava.security.auth.login.config={jaas}")
    server = await start_server(
        tmp_path, "node.id=11", "controlled.shutdown.enable=false", "zookeeper.set.acl=true",
        f"zookeeper.connect={zookeeper.hosts}/sasl-acl", "zookeeper.connection.timeout.ms=6000",
    )  # fmt: skip

    def check() -> None:
        admin = zookeeper.kazoo_client()
        other = zookeeper.kazoo_client(sasl_options=zookeeper.sasl_options("other", USERS["other"]))
        admin.start(timeout=10)
        other.start(timeout=10)
        try:
            registration, _ = admin.get_acls("/sasl-acl/brokers/ids/11")
            users, _ = admin.get_acls("/sasl-acl/config/users")
            assert {(a.id.scheme, a.id.id, a.perms) for a in registration} == {
                ("sasl", "kafka", Permissions.ALL),
                ("world", "anyone", Permissions.READ),
            }
            assert [(a.id.scheme, a.id.id, a.perms) for a in users] == [
                ("sasl", "kafka", Permissions.ALL)
            ]
            assert other.get("/sasl-acl/brokers/ids/11")[0]  # readable by anyone logged in
            with pytest.raises(NoAuthError):
                other.set("/sasl-acl/brokers/ids/11", b"{}")
            with pytest.raises(NoAuthError):
                other.create("/sasl-acl/brokers/topics/stolen", b"{}")
            with pytest.raises(NoAuthError):
                other.get_children("/sasl-acl/config/users")
        finally:
            for client in (admin, other):
                client.stop()
                client.close()

    try:
        assert server.cluster is not None and server.cluster.zk is not None
        assert server.cluster.zk.sasl is not None
        await asyncio.to_thread(check)
    finally:
        await server.shutdown()


async def test_a_client_that_does_not_log_in_is_shut_out(zookeeper: ZooKeeperServer) -> None:
    client = ZkClient(zookeeper.hosts, connect_timeout=5.0)
    await client.start()  # the TCP session is accepted; its first request closes it
    try:
        with pytest.raises(AuthFailedError):
            await client.create("/sasl-anonymous", b"")
    finally:
        await client.close()
    assert "sasl-anonymous" not in _children(zookeeper, "/")


def _children(zookeeper: ZooKeeperServer, path: str) -> list[str]:
    admin = zookeeper.kazoo_client()
    admin.start(timeout=10)
    try:
        return list(admin.get_children(path))
    finally:
        admin.stop()
        admin.close()


async def test_a_wrong_password_stops_the_start_clearly(
    zookeeper: ZooKeeperServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    jaas = jaas_client(tmp_path, "not-the-password")
    monkeypatch.setenv("KAFKA_OPTS", f"-Djava.security.auth.login.config={jaas}")
    config = Config.load(None, [
        "listeners=PLAINTEXT://127.0.0.1:0", f"log.dirs={tmp_path / 'data'}", "node.id=12",
        f"zookeeper.connect={zookeeper.hosts}/sasl-wrong", "zookeeper.connection.timeout.ms=6000",
    ])  # fmt: skip
    server = Server(config)
    with pytest.raises(AuthFailedError, match=r"refused the SASL DIGEST-MD5 login of user 'kafka'"):
        async with asyncio.timeout(20):
            await server.start()
    assert server.log_manager is None  # nothing left open
    assert "sasl-wrong" not in _children(zookeeper, "/")


def test_the_users_tool_logs_in_as_the_brokers_do(
    zookeeper: ZooKeeperServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--zookeeper`` on a ZooKeeper that requires SASL: the first user is written with the
    JAAS file of ``KAFKA_OPTS`` (and Kafka's secure ACLs, as kafka-configs); a wrong password
    is a clear error."""
    from click.testing import CliRunner
    from kazoo.security import Permissions

    from sluice.server.security.users import main

    args = ["--zookeeper", f"{zookeeper.hosts}/sasl-users", "--entity-type", "users",
            "--entity-name", "alice", "--alter", "--add-config",
            "SCRAM-SHA-512=[password=alice-secret]"]  # fmt: skip
    monkeypatch.setenv(
        "KAFKA_OPTS", f"-Djava.security.auth.login.config={jaas_client(tmp_path, 'x')}"
    )
    refused = CliRunner().invoke(main, args)
    assert refused.exit_code == 1
    assert "refused the SASL DIGEST-MD5 login of user 'kafka'" in refused.output
    jaas_client(tmp_path, USERS["kafka"])
    done = CliRunner().invoke(main, args)
    assert done.exit_code == 0, done.output
    admin = zookeeper.kazoo_client()
    admin.start(timeout=10)
    try:
        acls, _ = admin.get_acls("/sasl-users/config/users/alice")
    finally:
        admin.stop()
        admin.close()
    assert [(a.id.scheme, a.id.id, a.perms) for a in acls] == [("sasl", "kafka", Permissions.ALL)]


async def test_the_login_is_made_again_on_every_reconnect(zookeeper: ZooKeeperServer) -> None:
    """kazoo logs in on each new connection: after ZooKeeper restarts (which requires SASL of
    every connection) the session carries on, and writes again."""
    sasl = ZkSasl("kafka", USERS["kafka"])
    client = ZkClient(zookeeper.connect_string(copies=4), connect_timeout=10.0, sasl=sasl)
    await client.start()
    try:
        await client.create("/sasl-reconnect", b"1")
        await asyncio.to_thread(zookeeper.restart)
        await client.wait_connected(20.0)
        await client.create("/sasl-reconnect/again", b"2")
        assert await client.get_children("/sasl-reconnect") == ["again"]
    finally:
        await client.close()
