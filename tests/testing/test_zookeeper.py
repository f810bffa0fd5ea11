"""The ZooKeeper launcher (``sluice.testing.zookeeper``) and the pytest fixtures built on it."""

from __future__ import annotations

import signal
import socket
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from sluice.testing.zookeeper import (
    ZooKeeperNotFoundError,
    ZooKeeperServer,
    find_zookeeper,
    four_letter_word,
)

Factory = Callable[..., ZooKeeperServer]


def _refused(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1):
            return False
    except OSError:
        return True


def _kazoo(server: ZooKeeperServer) -> KazooClient:
    # (copies: a session that outlives restart(); see ZooKeeperServer.connect_string.)
    client = KazooClient(hosts=server.connect_string(copies=4), timeout=20.0)
    client.start(timeout=10)
    return client


def test_starts_on_loopback_and_stops_by_pid() -> None:
    server = ZooKeeperServer()
    start = time.monotonic()
    with server:
        took = time.monotonic() - start
        assert server.running and server.pid is not None
        assert server.srvr()["Mode"] == "standalone"
        assert four_letter_word(server.host, server.port, "ruok") == "imok"
        assert server.connect_string("/a/b") == f"127.0.0.1:{server.port}/a/b"
        hp = f"127.0.0.1:{server.port}"
        assert server.connect_string("/a", copies=2) == f"{hp},{hp}/a"
        with pytest.raises(ValueError, match="copies"):
            server.connect_string(copies=0)
        # clientPortAddress=127.0.0.1: not even another loopback address reaches it.
        assert _refused("127.0.0.2", server.port)
        scratch = server.log_path.parent
        assert "INFO org.apache.zookeeper.server" in server.log_path.read_text()  # it logs
        proc = server.process
    assert took < 20
    assert proc is not None and proc.poll() is not None
    assert _refused("127.0.0.1", server.port)
    assert not scratch.exists()
    with pytest.raises(ValueError, match="chroot"):
        server.connect_string("no-slash")


def test_restart_keeps_port_data_and_sessions(sluice_zookeeper_factory: Factory) -> None:
    server = sluice_zookeeper_factory()
    port = server.port
    client = _kazoo(server)
    try:
        client.create("/kept", b"data")
        client.create("/eph", b"", ephemeral=True)
        server.restart()
        assert server.port == port
        assert client.get("/kept")[0] == b"data"
        assert client.exists("/eph") is not None  # same session after the restart
    finally:
        client.stop()
        client.close()


def test_kill_then_restart(sluice_zookeeper_factory: Factory) -> None:
    server = sluice_zookeeper_factory()
    server.kill()
    assert not server.running and _refused("127.0.0.1", server.port)
    server.restart()
    assert server.srvr()["Mode"] == "standalone"


def test_pause_and_resume(sluice_zookeeper_factory: Factory) -> None:
    server = sluice_zookeeper_factory()
    server.pause()
    assert server.paused
    with pytest.raises(OSError):
        server.srvr(timeout=0.3)  # the port accepts, nobody answers
    server.resume()
    # A JVM continued on a loaded machine may take a moment to answer: wait, bounded.
    deadline = time.monotonic() + 30
    while True:
        try:
            assert server.srvr()["Mode"] == "standalone"
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
    server.pause()
    process = server.process
    assert process is not None
    server.stop()  # a paused server is continued so that SIGTERM works
    assert not server.running
    # Ended by its SIGTERM (the JVM exits 143), not by the SIGKILL after the grace period that
    # a stopped process ignoring SIGTERM would have needed.
    assert process.returncode == 128 + signal.SIGTERM, process.returncode


def test_given_data_dir_is_kept(tmp_path: Path) -> None:
    data = tmp_path / "zk-data"
    with ZooKeeperServer(data) as server:
        client = _kazoo(server)
        client.create("/persisted", b"x")
        client.stop()
        client.close()
    assert (data / "version-2").is_dir()
    with ZooKeeperServer(data) as again:
        client = _kazoo(again)
        try:
            assert client.get("/persisted")[0] == b"x"
        finally:
            client.stop()
            client.close()


def test_a_relative_data_dir_is_kept_where_the_caller_meant_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``make cluster`` passes ``cluster-data/zookeeper``: relative to the caller's directory,
    not to the JVM's (a scratch directory removed at stop, which lost every topic)."""
    monkeypatch.chdir(tmp_path)
    with ZooKeeperServer(Path("cluster-data/zookeeper")) as server:
        assert server.data_dir == tmp_path / "cluster-data" / "zookeeper"
        client = _kazoo(server)
        client.create("/persisted", b"x")
        client.stop()
        client.close()
    assert (tmp_path / "cluster-data" / "zookeeper" / "version-2").is_dir()
    with ZooKeeperServer("cluster-data/zookeeper") as again:
        client = _kazoo(again)
        try:
            assert client.get("/persisted")[0] == b"x"
        finally:
            client.stop()
            client.close()


def test_port_taken_is_a_clear_error() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        server = ZooKeeperServer(port=port)
        try:
            with pytest.raises(RuntimeError, match="could not bind") as err:
                server.start()
            assert "Address already in use" in str(err.value)  # the log tail is in the error
        finally:
            server.stop()


def test_startup_timeout_stops_the_jvm() -> None:
    server = ZooKeeperServer(startup_timeout=0.01)
    try:
        with pytest.raises(TimeoutError, match="not ready"):
            server.start()
        assert server.process is not None and server.process.poll() is not None
    finally:
        server.stop()


def test_a_broken_classpath_shows_the_jvms_complaint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLUICE_ZOOKEEPER_CLASSPATH", "/nonexistent.jar")
    server = ZooKeeperServer()
    try:
        with pytest.raises(RuntimeError, match="exited with") as err:
            server.start()
        assert "QuorumPeerMain" in str(err.value)
    finally:
        server.stop()


def test_missing_java_or_zookeeper_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    java, classpath = find_zookeeper()
    assert Path(java).name == "java" and "zookeeper" in classpath
    monkeypatch.setenv("JAVA_HOME", "/nonexistent")
    with pytest.raises(ZooKeeperNotFoundError, match="no Java runtime"):
        find_zookeeper()


# --- the pytest fixtures ------------------------------------------------------------------------

_previous_chroot: list[str] = []


def test_each_test_gets_its_own_chroot(
    sluice_zookeeper: ZooKeeperServer, sluice_zookeeper_connect: str
) -> None:
    hosts, _, chroot = sluice_zookeeper_connect.partition("/")
    assert hosts == sluice_zookeeper.hosts
    assert chroot.startswith("sluice-tests/") and len(chroot) > len("sluice-tests/") + 30
    client = _kazoo(sluice_zookeeper)
    try:
        client.create(f"/{chroot}/left-behind", b"x", makepath=True)
    finally:
        client.stop()
        client.close()
    _previous_chroot.append("/" + chroot)


def test_the_previous_tests_chroot_was_removed(sluice_zookeeper: ZooKeeperServer) -> None:
    if not _previous_chroot:
        pytest.skip("runs after test_each_test_gets_its_own_chroot")
    client = _kazoo(sluice_zookeeper)
    try:
        assert client.exists(_previous_chroot[0]) is None
    finally:
        client.stop()
        client.close()


def test_ctrl_c_during_start_stops_the_jvm(monkeypatch: pytest.MonkeyPatch) -> None:
    # The JVM runs in a session of its own (a terminal's Ctrl-C does not reach it): a start
    # interrupted while waiting for it to be ready must stop it, or it outlives the program.
    server = ZooKeeperServer()

    def interrupted(*_: object, **__: object) -> dict[str, str]:
        raise KeyboardInterrupt

    monkeypatch.setattr(server, "srvr", interrupted)
    with pytest.raises(KeyboardInterrupt):
        server.start()
    assert server.process is not None and server.process.poll() is not None
    assert server._scratch is None  # removed
