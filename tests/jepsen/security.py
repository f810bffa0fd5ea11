"""The fault suite on a secured cluster (``python -m tests.jepsen --security sasl_ssl``).

With :class:`SaslSsl` every link the faults cut is TLS with SCRAM-SHA-512:

* each broker has two listeners: ``SASL_SSL`` (behind its listener proxy, advertised as the
  proxy's port, and ``inter.broker.listener.name``: replica fetches and the controller's
  requests go through the proxies as in the PLAINTEXT suite) and ``PLAINTEXT`` first, on its own
  port and never proxied, which is how the harness observes the brokers around the faults
  (:meth:`sluice.testing.cluster.EmbeddedCluster.metadata`);
* the proxies are byte pipes, so TLS passes through them: the brokers' certificate (one
  trustme CA, a leaf for ``127.0.0.1``) matches the proxies' address, and the inter-broker
  client and librdkafka check it (``ssl.endpoint.identification.algorithm=https``);
* the SCRAM users (``broker`` for the brokers' own traffic, ``jepsen`` for the workload's
  producer, consumer and admin client) are written to the chroot's ``/config/users`` before the
  first broker starts, as an operator does with ``kafka-configs --zookeeper``.

``plaintext`` (the default) is the suite as it always was.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: The ``--security`` choices.
SECURITY = ("plaintext", "sasl_ssl")
MECHANISM = "SCRAM-SHA-512"
USERS = {"broker": "broker-secret", "jepsen": "jepsen-secret"}


@dataclass
class SaslSsl:
    """Certificates (in ``directory``) and settings of a SASL_SSL fault cluster."""

    directory: Path

    @classmethod
    def create(cls) -> SaslSsl:
        import trustme

        directory = Path(tempfile.mkdtemp(prefix="sluice-jepsen-tls-"))
        ca = trustme.CA()
        ca.cert_pem.write_to_path(str(directory / "ca.pem"))
        leaf = ca.issue_cert("127.0.0.1", "localhost")
        (directory / "broker.pem").write_bytes(leaf.private_key_and_cert_chain_pem.bytes())
        return cls(directory)

    def close(self) -> None:
        shutil.rmtree(self.directory, ignore_errors=True)

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
            "ssl.truststore.location": str(self.directory / "ca.pem"),
        }

    def client_properties(self) -> dict[str, Any]:
        """librdkafka's settings for the workload's clients (bootstrap servers apart)."""
        return {
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": MECHANISM,
            "sasl.username": "jepsen",
            "sasl.password": USERS["jepsen"],
            "ssl.ca.location": str(self.directory / "ca.pem"),
        }

    @staticmethod
    def create_users(zookeeper_connect: str) -> None:
        """Write the SCRAM users to ``zookeeper_connect`` (``host:port/chroot``)."""

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

        asyncio.run(write())
