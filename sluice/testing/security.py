"""A SASL_SSL cluster for tests: certificates, broker and client settings, SCRAM users.

:class:`SaslSsl` holds what a cluster whose brokers talk to each other over SASL_SSL
(SCRAM-SHA-512) needs:

* a trustme CA and one leaf for ``127.0.0.1`` / ``localhost`` (PEM, in :attr:`SaslSsl.directory`):
  the inter-broker client and librdkafka check the host name (Kafka's default
  ``ssl.endpoint.identification.algorithm=https``), which any proxy on 127.0.0.1 also fits;
* two listeners per broker, ``PLAINTEXT`` first (what :meth:`EmbeddedCluster.metadata
  <sluice.testing.cluster.EmbeddedCluster.metadata>` and ``bootstrap_servers`` use) and
  ``SASL_SSL``, ``inter.broker.listener.name``: replica fetches and the controller's requests
  are SASL_SSL;
* the SCRAM users, ``broker`` (the brokers' own login) and ``client`` (for clients:
  :meth:`SaslSsl.client_properties`), written to ``/config/users`` of the cluster's chroot
  before the first broker starts, as an operator does with ``kafka-configs --zookeeper``.

``EmbeddedCluster(secured=SaslSsl.create())`` builds such a cluster; the ``sluice_cluster``
fixture does with ``@pytest.mark.sluice_cluster(security="sasl_ssl")`` or, for a whole run,
``SLUICE_TEST_CLUSTER_SECURITY=sasl_ssl``. ``trustme`` (a test dependency) is imported only
here.
"""

from __future__ import annotations

import shutil
import socket
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["SECURITY", "SaslSsl", "free_ports"]

#: The security choices of test clusters.
SECURITY = ("plaintext", "sasl_ssl")
MECHANISM = "SCRAM-SHA-512"
USERS = {"broker": "broker-secret", "client": "client-secret"}


@dataclass
class SaslSsl:
    """Certificates (in ``directory``) and settings of a SASL_SSL cluster (module docstring)."""

    directory: Path

    @classmethod
    def create(cls) -> SaslSsl:
        import trustme

        directory = Path(tempfile.mkdtemp(prefix="sluice-tls-"))
        ca = trustme.CA()
        ca.cert_pem.write_to_path(str(directory / "ca.pem"))
        leaf = ca.issue_cert("127.0.0.1", "localhost")
        (directory / "broker.pem").write_bytes(leaf.private_key_and_cert_chain_pem.bytes())
        return cls(directory)

    def close(self) -> None:
        shutil.rmtree(self.directory, ignore_errors=True)

    @property
    def ca(self) -> Path:
        """The CA certificate (PEM) clients trust."""
        return self.directory / "ca.pem"

    @staticmethod
    def listeners(plain_port: int, secure_port: int) -> str:
        return f"PLAINTEXT://127.0.0.1:{plain_port},SASL_SSL://127.0.0.1:{secure_port}"

    @staticmethod
    def advertised_listeners(plain_port: int, proxy_port: int) -> str:
        return f"PLAINTEXT://127.0.0.1:{plain_port},SASL_SSL://127.0.0.1:{proxy_port}"

    def broker_properties(self) -> dict[str, str]:
        jaas = (
            "org.apache.kafka.common.security.scram.ScramLoginModule required "
            f'username="broker" password="{USERS["broker"]}";'
        )
        return {
            "inter.broker.listener.name": "SASL_SSL",
            "sasl.enabled.mechanisms": MECHANISM,
            "sasl.mechanism.inter.broker.protocol": MECHANISM,
            f"listener.name.sasl_ssl.{MECHANISM.lower()}.sasl.jaas.config": jaas,
            "ssl.keystore.location": str(self.directory / "broker.pem"),
            "ssl.truststore.location": str(self.ca),
        }

    def client_properties(self) -> dict[str, Any]:
        """librdkafka's settings for a client of the SASL_SSL listeners (bootstrap servers
        apart), logged in as ``client``."""
        return {
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": MECHANISM,
            "sasl.username": "client",
            "sasl.password": USERS["client"],
            "ssl.ca.location": str(self.ca),
        }

    @staticmethod
    def create_users(zookeeper_connect: str) -> None:
        """Write the SCRAM users to ``zookeeper_connect`` (``host:port/chroot``)."""
        from sluice.testing.cluster import _run

        async def write() -> None:
            from sluice.server.security.credentials import ZkCredentialStore
            from sluice.server.security.scram import credential_from_password
            from sluice.server.zk.client import ZkClient

            zk = ZkClient(zookeeper_connect, connect_timeout=10.0)
            await zk.start()
            try:
                store = ZkCredentialStore(zk)
                for user, password in USERS.items():
                    credential = credential_from_password(MECHANISM, password)
                    await store.alter(user, {MECHANISM: credential})
            finally:
                await zk.close()

        _run(write, 30.0)


def free_ports(count: int) -> list[int]:
    """``count`` distinct ports free now (bound to 0 together, then released)."""
    socks = [socket.socket() for _ in range(count)]
    try:
        for sock in socks:
            sock.bind(("127.0.0.1", 0))
        return [int(sock.getsockname()[1]) for sock in socks]
    finally:
        for sock in socks:
            sock.close()
