"""A real Apache ZooKeeper for tests and local clusters: one JVM, standalone, on 127.0.0.1.

Usage::

    from sluice.testing.zookeeper import ZooKeeperServer

    with ZooKeeperServer() as zk:                   # free port, temporary dataDir
        connect = zk.connect_string("/sluice-tests/abc")  # "127.0.0.1:PORT/sluice-tests/abc"
        ...
        zk.pause()      # SIGSTOP: clients see no answers (a hung server, a GC pause)
        zk.resume()     # SIGCONT
        zk.restart()    # stop (SIGTERM) and start again on the same port and dataDir

Where ZooKeeper comes from: Debian's ``zookeeper`` package (``make setup`` installs it as root)
puts ``/usr/share/java/zookeeper.jar`` there, whose manifest ``Class-Path`` names every jar it
needs, so ``java -cp zookeeper.jar QuorumPeerMain zoo.cfg`` is the whole command (what
``zkServer.sh start-foreground`` runs, without its config directory). ``slf4j-simple.jar``, when
present, goes on the classpath too so the server logs (to ``zookeeper.log`` in the scratch dir; its
tail is in every start-up error). ``SLUICE_ZOOKEEPER_CLASSPATH`` overrides the classpath (e.g. the
``lib/*`` of an Apache tarball); ``JAVA_HOME`` or ``java`` on ``PATH`` gives the JVM.

The configuration (spec ``replication.md`` §7), chosen for fast start and short sessions:

* ``clientPortAddress=127.0.0.1`` and a free port (or the one given): loopback only; no admin
  server (``admin.enableServer=false``), no quorum ports (standalone);
* ``4lw.commands.whitelist=srvr,ruok,mntr``: readiness is ``srvr`` answering ``Mode: standalone``;
* ``tickTime=100``: sessions are negotiated in [``minSessionTimeout``, ``maxSessionTimeout``],
  2 and 20 ticks by default; we set 200 ms and 60 s so tests can use 0.5-1 s sessions and a dev
  cluster Kafka's 18 s;
* ``-Dzookeeper.forceSync=no`` (no fsync of the transaction log: tests do not survive power
  loss anyway), ``-XX:TieredStopAtLevel=1 -XX:+UseSerialGC`` (JIT and GC for a short-lived
  small JVM): about 0.3-0.6 s to ready, ~60 MiB RSS.

SASL (``sasl_users``): ZooKeeper's ``Server`` JAAS section with ``DigestLoginModule`` and a
``user_<name>="<password>"`` per user (DIGEST-MD5), its ``SASLAuthenticationProvider``, and a
``super`` user (``zookeeper.superUser``, a random password) that this class's own clients
(:meth:`delete_tree`, :meth:`expire_session`) log in as; ``sasl_required`` closes every
session that has not logged in with SASL (``enforce.auth.enabled``, ZooKeeper 3.7+).

Every wait is bounded (``startup_timeout``, ``shutdown_timeout``); the JVM is stopped by its PID
(SIGTERM, then SIGKILL). Not thread-safe: one owner drives start/stop/pause.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = [
    "ZooKeeperNotFoundError",
    "ZooKeeperServer",
    "find_zookeeper",
    "four_letter_word",
]

#: Debian's ``zookeeper`` / ``libzookeeper-java`` packages.
DEBIAN_JAR = Path("/usr/share/java/zookeeper.jar")
#: A logging backend for slf4j (Debian's ``libslf4j-java``, a dependency of the above).
DEBIAN_SLF4J_SIMPLE = Path("/usr/share/java/slf4j-simple.jar")
#: What ZooKeeper's Netty server (TLS) needs beyond the jars zookeeper.jar's manifest names.
DEBIAN_NETTY_TLS = (
    Path("/usr/share/java/netty-codec.jar"),
    Path("/usr/share/java/netty-resolver.jar"),
)
MAIN_CLASS = "org.apache.zookeeper.server.quorum.QuorumPeerMain"
JVM_FLAGS = (
    "-Dzookeeper.forceSync=no",
    "-XX:TieredStopAtLevel=1",
    "-XX:+UseSerialGC",
    "-Xmx256m",
    "-Dorg.slf4j.simpleLogger.showDateTime=true",
)
_LOG_TAIL_LINES = 40


class ZooKeeperNotFoundError(RuntimeError):
    """No JVM or no ZooKeeper jars: ``make setup`` (as root) installs Debian's ``zookeeper``."""


def find_zookeeper() -> tuple[str, str]:
    """``(java, classpath)`` to run ZooKeeper with, or :class:`ZooKeeperNotFoundError`."""
    java_home = os.environ.get("JAVA_HOME")
    java = str(Path(java_home) / "bin" / "java") if java_home else shutil.which("java")
    if not java or not os.access(java, os.X_OK):
        raise ZooKeeperNotFoundError(
            "no Java runtime (java not on PATH, JAVA_HOME unset): "
            "apt-get install openjdk-17-jre-headless"
        )
    classpath = os.environ.get("SLUICE_ZOOKEEPER_CLASSPATH")
    if not classpath:
        if not DEBIAN_JAR.is_file():
            raise ZooKeeperNotFoundError(
                f"no ZooKeeper ({DEBIAN_JAR} missing): run `make setup` as root "
                "(it installs Debian's zookeeper package), or set SLUICE_ZOOKEEPER_CLASSPATH"
            )
        jars = [DEBIAN_JAR, *([DEBIAN_SLF4J_SIMPLE] if DEBIAN_SLF4J_SIMPLE.is_file() else [])]
        classpath = os.pathsep.join(str(j) for j in jars)
    return java, classpath


def four_letter_word(host: str, port: int, word: str, timeout: float = 1.0) -> str:
    """Send a ZooKeeper four-letter command (``srvr``, ``ruok``, ``mntr``); return the answer.

    Raises ``OSError`` when nothing listens or no answer comes within ``timeout``.
    """
    with socket.create_connection((host, port), timeout=timeout) as sock:
        sock.settimeout(timeout)
        sock.sendall(word.encode("ascii"))
        sock.shutdown(socket.SHUT_WR)
        chunks = []
        while chunk := sock.recv(4096):
            chunks.append(chunk)
    return b"".join(chunks).decode("utf-8", "replace")


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


class ZooKeeperServer:
    """One standalone ZooKeeper JVM; see the module docstring.

    ``data_dir``: kept as given (and not removed); by default a temporary directory, removed by
    :meth:`stop`. ``port=0`` picks a free port at the first start and keeps it for restarts.
    """

    def __init__(
        self,
        data_dir: str | Path | None = None,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        tick_time_ms: int = 100,
        min_session_timeout_ms: int = 200,
        max_session_timeout_ms: int = 60_000,
        startup_timeout: float = 30.0,
        shutdown_timeout: float = 10.0,
        tls_keystore: str | Path | None = None,
        tls_truststore: str | Path | None = None,
        sasl_users: Mapping[str, str] | None = None,
        sasl_required: bool = False,
    ) -> None:
        self.host = host
        self.port = port
        #: TLS (``secureClientPort``, ZooKeeper's Netty server): a PEM keystore (a PKCS#8 key
        #: and its certificate chain, what ZooKeeper's PEMFileLoader reads) and the PEM CA
        #: certificates client certificates must chain to (``ssl.clientAuth=need``). The
        #: plaintext port stays, for the readiness check and for tests.
        self.tls_keystore = Path(tls_keystore) if tls_keystore is not None else None
        self.tls_truststore = Path(tls_truststore) if tls_truststore is not None else None
        self.secure_port = 0
        #: SASL DIGEST-MD5 users (name -> password), and whether a session must log in.
        self.sasl_users = dict(sasl_users or {})
        self.sasl_required = sasl_required
        if sasl_required and not sasl_users:
            raise ValueError("sasl_required needs sasl_users")
        self.super_password = secrets.token_hex(16)
        self.tick_time_ms = tick_time_ms
        self.min_session_timeout_ms = min_session_timeout_ms
        self.max_session_timeout_ms = max_session_timeout_ms
        self.startup_timeout = startup_timeout
        self.shutdown_timeout = shutdown_timeout
        # Absolute: the JVM runs in the scratch directory, where a relative dataDir would be
        # created and removed with it at stop.
        self._given_data_dir = Path(data_dir).resolve() if data_dir is not None else None
        self._scratch: Path | None = None  # holds zoo.cfg, the log and (by default) the dataDir
        self.process: subprocess.Popen[bytes] | None = None
        self.paused = False
        self._pick_port = port == 0

    # --- what tests use ----------------------------------------------------------------------

    @property
    def hosts(self) -> str:
        """``127.0.0.1:PORT`` (valid once started)."""
        if self.port == 0:
            raise RuntimeError("ZooKeeper has not been started")
        return f"{self.host}:{self.port}"

    @property
    def secure_hosts(self) -> str:
        """``127.0.0.1:SECURE_PORT``, the TLS port (with ``tls_keystore``, once started)."""
        if self.secure_port == 0:
            raise RuntimeError("ZooKeeper has not been started with TLS")
        return f"{self.host}:{self.secure_port}"

    def connect_string(self, chroot: str = "", *, copies: int = 1) -> str:
        """``zookeeper.connect`` for this server, with an optional chroot (``/a/b``).

        ``copies`` names the server that many times, for sessions that must outlive
        :meth:`restart`. A connect request that reaches the JVM while it starts can go
        unanswered; the client (kazoo, like ZooKeeper's Java client) waits for the answer
        session timeout / number of hosts -- the whole session with one host, which then
        expires. With the server named four times the wait is a quarter of the session.
        """
        if chroot and (not chroot.startswith("/") or chroot.endswith("/")):
            raise ValueError(f"a chroot starts with '/' and does not end with it: {chroot!r}")
        if copies < 1:
            raise ValueError(f"copies must be at least 1: {copies}")
        return ",".join([self.hosts] * copies) + chroot

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    @property
    def data_dir(self) -> Path:
        if self._given_data_dir is not None:
            return self._given_data_dir
        if self._scratch is None:
            raise RuntimeError("ZooKeeper has not been started")
        return self._scratch / "data"

    @property
    def log_path(self) -> Path:
        if self._scratch is None:
            raise RuntimeError("ZooKeeper has not been started")
        return self._scratch / "zookeeper.log"

    def srvr(self, timeout: float = 1.0) -> dict[str, str]:
        """The ``srvr`` answer as a dict (``Mode``, ``Zxid``, ``Node count``, ...)."""
        text = four_letter_word(self.host, self.port, "srvr", timeout)
        return {
            k.strip(): v.strip()
            for k, sep, v in (line.partition(":") for line in text.splitlines())
            if sep
        }

    def expire_session(self, session_id: int, password: bytes, timeout: float = 10.0) -> None:
        """Expire a client's session the standard way (Curator's ``KillSession``, kazoo's test
        harness): a second client connects with the same session id and password, taking the
        session over, and closes it. The first client then learns on reconnect that its session
        has expired; its ephemeral nodes are gone at once."""
        thief = self.kazoo_client(client_id=(session_id, password))
        thief.start(timeout=timeout)
        try:
            if thief.client_id is None or thief.client_id[0] != session_id:
                raise RuntimeError(f"could not take over session {session_id:#x}")
        finally:
            thief.stop()
            thief.close()

    def delete_tree(self, path: str, timeout: float = 10.0) -> None:
        """Delete ``path`` and everything below it (absent is fine): a test's chroot."""
        client = self.kazoo_client()
        client.start(timeout=timeout)
        try:
            if client.exists(path):
                client.delete(path, recursive=True)
        finally:
            client.stop()
            client.close()

    def kazoo_client(self, **kwargs: Any) -> Any:
        """A kazoo client of this server (not started), logged in as the super user when the
        server has SASL users."""
        from kazoo.client import KazooClient

        if self.sasl_users:
            kwargs.setdefault("sasl_options", self.sasl_options("super", self.super_password))
        return KazooClient(hosts=self.hosts, **kwargs)

    @staticmethod
    def sasl_options(user: str, password: str) -> dict[str, str]:
        """kazoo's ``sasl_options`` for a DIGEST-MD5 login."""
        return {"mechanism": "DIGEST-MD5", "username": user, "password": password}

    def log_tail(self, lines: int = _LOG_TAIL_LINES) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except (OSError, RuntimeError):
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    # --- lifecycle ---------------------------------------------------------------------------

    def start(self) -> ZooKeeperServer:
        """Start the JVM and return once ``srvr`` reports ``Mode: standalone``."""
        if self.running:
            raise RuntimeError("ZooKeeper is already running")
        java, classpath = find_zookeeper()
        if self._scratch is None:
            self._scratch = Path(tempfile.mkdtemp(prefix="sluice-zookeeper-"))
        self.data_dir.mkdir(parents=True, exist_ok=True)
        # A picked port can be taken between our probe and the JVM's bind: pick again (3 tries).
        try:
            for attempt in range(3):
                if self._pick_port and (attempt > 0 or self.port == 0):
                    self.port = _free_port(self.host)
                if self.tls_keystore is not None and (attempt > 0 or self.secure_port == 0):
                    self.secure_port = _free_port(self.host)
                try:
                    self._launch(java, classpath)
                    return self
                except _AddressInUse:
                    if not self._pick_port:
                        break
        except BaseException:  # also Ctrl-C: in its own session, the JVM would outlive us
            self.stop()
            raise
        message = f"ZooKeeper could not bind {self.host}:{self.port}:\n{self.log_tail()}"
        self.stop()
        raise RuntimeError(message)

    def stop(self) -> None:
        """SIGTERM (SIGKILL after ``shutdown_timeout``), then remove the temporary dirs."""
        try:
            self._terminate()
        finally:
            if self._scratch is not None:  # a given data_dir lives elsewhere and is kept
                shutil.rmtree(self._scratch, ignore_errors=True)
                self._scratch = None

    def restart(self) -> None:
        """Stop the JVM and start it again on the same port with the same dataDir: sessions and
        znodes survive (ZooKeeper recovers them from its snapshot and log); clients reconnect."""
        self._terminate()
        assert self._scratch is not None
        java, classpath = find_zookeeper()
        self._launch(java, classpath)

    def kill(self) -> None:
        """SIGKILL the JVM (a crash); :meth:`restart` brings it back."""
        proc = self.process
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait(self.shutdown_timeout)
        self.paused = False

    def pause(self) -> None:
        """SIGSTOP: the server holds its connections but answers nothing."""
        if not self.running:
            raise RuntimeError("ZooKeeper is not running")
        assert self.process is not None
        self.process.send_signal(signal.SIGSTOP)
        self.paused = True

    def resume(self) -> None:
        """SIGCONT after :meth:`pause`."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGCONT)
        self.paused = False

    def __enter__(self) -> ZooKeeperServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- internals ---------------------------------------------------------------------------

    def _config(self) -> str:
        tls = []
        if self.tls_keystore is not None:
            tls = [
                f"secureClientPort={self.secure_port}",
                f"secureClientPortAddress={self.host}",
                "serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory",
                f"ssl.keyStore.location={self.tls_keystore.resolve()}",
                "ssl.keyStore.type=PEM",
                "ssl.clientAuth=need",
                # a client certificate's subject is the session's identity (znode ACLs)
                "authProvider.x509=org.apache.zookeeper.server.auth.X509AuthenticationProvider",
            ]
            if self.tls_truststore is not None:
                tls += [f"ssl.trustStore.location={self.tls_truststore.resolve()}",
                        "ssl.trustStore.type=PEM"]  # fmt: skip
        sasl = []
        if self.sasl_users:
            sasl = ["authProvider.sasl=org.apache.zookeeper.server.auth.SASLAuthenticationProvider"]
            if self.sasl_required:
                sasl += ["enforce.auth.enabled=true", "enforce.auth.schemes=sasl"]
        return "\n".join(
            [
                *tls,
                *sasl,
                f"tickTime={self.tick_time_ms}",
                f"dataDir={self.data_dir}",
                f"clientPort={self.port}",
                f"clientPortAddress={self.host}",
                f"minSessionTimeout={self.min_session_timeout_ms}",
                f"maxSessionTimeout={self.max_session_timeout_ms}",
                "maxClientCnxns=0",
                "admin.enableServer=false",
                "4lw.commands.whitelist=srvr,ruok,mntr",
                "",
            ]
        )

    def _launch(self, java: str, classpath: str) -> None:
        assert self._scratch is not None
        cfg = self._scratch / "zoo.cfg"
        cfg.write_text(self._config())
        if self.tls_keystore is not None and not os.environ.get("SLUICE_ZOOKEEPER_CLASSPATH"):
            extra = [str(jar) for jar in DEBIAN_NETTY_TLS if jar.is_file()]
            classpath = os.pathsep.join([classpath, *extra])
        flags = list(JVM_FLAGS)
        if self.sasl_users:
            flags += [f"-Djava.security.auth.login.config={self._write_jaas()}",
                      "-Dzookeeper.superUser=super"]  # fmt: skip
        with open(self.log_path, "ab") as log:
            log.write(f"--- starting ZooKeeper on {self.host}:{self.port}\n".encode())
            log.flush()
            self.process = subprocess.Popen(
                [java, *flags, "-cp", classpath, MAIN_CLASS, str(cfg)],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=self._scratch,
                # Its own session: a terminal's Ctrl-C must not kill ZooKeeper under brokers
                # that still need it for their controlled shutdown; the owner stops it last.
                start_new_session=True,
            )
        self.paused = False
        deadline = time.monotonic() + self.startup_timeout
        while True:
            with contextlib.suppress(OSError):
                if self.srvr(timeout=0.5).get("Mode") == "standalone":
                    return
            if self.process.poll() is not None:
                tail = self.log_tail()
                if "Address already in use" in tail:
                    raise _AddressInUse
                raise RuntimeError(
                    f"ZooKeeper exited with {self.process.returncode} before it was ready "
                    f"({self.log_path}):\n{tail}"
                )
            if time.monotonic() > deadline:
                self._terminate()
                raise TimeoutError(
                    f"ZooKeeper not ready after {self.startup_timeout}s "
                    f"(srvr never said Mode: standalone):\n{self.log_tail()}"
                )
            time.sleep(0.02)

    def _write_jaas(self) -> Path:
        """ZooKeeper's ``Server`` JAAS section: a ``user_<name>`` option per SASL user."""
        assert self._scratch is not None
        users = {**self.sasl_users, "super": self.super_password}
        options = " ".join(f'user_{name}="{password}"' for name, password in users.items())
        path = self._scratch / "jaas.conf"
        path.write_text(
            "Server {\n  org.apache.zookeeper.server.auth.DigestLoginModule required "
            f"{options};\n}};\n"
        )
        return path

    def _terminate(self) -> None:
        proc = self.process
        if proc is None or proc.poll() is not None:
            self.paused = False
            return
        if self.paused:  # a stopped process does not act on SIGTERM until continued
            proc.send_signal(signal.SIGCONT)
            self.paused = False
        proc.terminate()
        try:
            proc.wait(self.shutdown_timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(self.shutdown_timeout)


class _AddressInUse(Exception):
    pass
