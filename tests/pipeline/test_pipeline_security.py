"""The Spark source and sink against a secured broker (issue 24): the ``kafka.security.protocol``,
``kafka.sasl.*`` and ``kafka.ssl.*`` options Spark's Kafka connector passes through to its
client reach the pipeline's client (TLS, then a SASL login as Kafka's Java client does it),
are checked on the driver, and never show in a repr. A real broker with SASL_SSL and
SASL_PLAINTEXT listeners; Spark itself in the last test."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trustme

from sluice.pipeline.offsets import OptionError, TopicPartition
from sluice.pipeline.options import parse, parse_sink
from sluice.pipeline.wire import SyncClient, WireError
from sluice.protocol.errors import SaslAuthenticationFailed
from sluice.protocol.records import RecordBatchBuilder, decode_batch_columns, iter_batches
from sluice.server.security.credentials import FileCredentialStore
from sluice.server.security.scram import credential_from_password
from sluice.testing import EmbeddedBroker

JAAS = 'org.apache.kafka.common.security.scram.ScramLoginModule required username="alice" password="{}";'  # noqa: E501


class Secured:
    def __init__(self, broker: EmbeddedBroker, ca: Path) -> None:
        self.broker, self.ca = broker, ca

    def options(self, listener: str, mechanism: str, password: str = "alice-pw") -> dict[str, str]:
        """Spark options as a user of Spark's Kafka connector writes them."""
        options = {
            "kafka.bootstrap.servers": self.broker.bootstrap(listener),
            "kafka.security.protocol": listener,
            "kafka.sasl.mechanism": mechanism,
            "kafka.sasl.jaas.config": JAAS.format(password),
        }
        if listener.endswith("SSL"):
            options["kafka.ssl.truststore.location"] = str(self.ca)
        return options


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    tmp = tmp_path_factory.mktemp("spark-secured")
    ca = trustme.CA()
    server = ca.issue_cert("127.0.0.1", "localhost")
    (tmp / "server.pem").write_bytes(server.private_key_and_cert_chain_pem.bytes())
    ca.cert_pem.write_to_path(str(tmp / "ca.pem"))
    users = FileCredentialStore(tmp / "users.json")
    for mechanism in ("SCRAM-SHA-512", "SCRAM-SHA-256"):
        users.alter_sync("alice", {mechanism: credential_from_password(mechanism, "alice-pw")})
    properties = {
        "listeners": "SASL_SSL://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        "ssl.keystore.location": str(tmp / "server.pem"),
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "sluice.security.credentials.file": str(tmp / "users.json"),
        "connection.failed.authentication.delay.ms": "0",
    }
    with EmbeddedBroker(properties=properties) as broker:
        yield Secured(broker, tmp / "ca.pem")


@pytest.mark.parametrize(
    ("listener", "mechanism"),
    [("SASL_SSL", "SCRAM-SHA-512"), ("SASL_PLAINTEXT", "PLAIN"), ("SASL_SSL", "SCRAM-SHA-256")],
)
def test_the_pipeline_client_logs_in_and_round_trips(
    secured: Secured, listener: str, mechanism: str
) -> None:
    topic = f"wire-{listener}-{mechanism}".lower()
    sink = parse_sink({**secured.options(listener, mechanism), "topic": topic})
    with SyncClient.of(sink) as client:
        client.create_topic(topic, 1)
        builder = RecordBatchBuilder()
        builder.append(1000, b"k", b"secured")
        tp = TopicPartition(topic, 0)
        assert client.produce({tp: builder.build()}, acks=-1) == {tp: 0}
        result = client.fetch(tp, 0, max_bytes=1 << 20)
    values = [
        v
        for _, _, batch in iter_batches(result.records or b"", allow_partial_tail=True)
        for v in decode_batch_columns(batch).values
    ]
    assert values == [b"secured"]


def test_a_wrong_password_gets_kafkas_answer(secured: Secured) -> None:
    source = parse(
        {**secured.options("SASL_PLAINTEXT", "PLAIN", "nope"), "subscribe": "t"}, streaming=False
    )
    with pytest.raises(SaslAuthenticationFailed, match="Invalid username or password"):
        SyncClient.of(source)


def test_an_untrusted_broker_certificate_fails_the_connection(
    secured: Secured, tmp_path: Path
) -> None:
    other = tmp_path / "other-ca.pem"
    trustme.CA().cert_pem.write_to_path(str(other))
    options = secured.options("SASL_SSL", "SCRAM-SHA-512")
    options["kafka.ssl.truststore.location"] = str(other)
    with pytest.raises(WireError, match="TLS handshake"):
        SyncClient.of(parse_sink(options))


def test_security_options_are_checked_on_the_driver_and_kept_out_of_reprs(
    secured: Secured,
) -> None:
    options = secured.options("SASL_SSL", "SCRAM-SHA-512", "s3cret-pw")
    source = parse({**options, "subscribe": "t"}, streaming=True)
    assert dict(source.security)["sasl.jaas.config"].endswith('password="s3cret-pw";')
    assert "s3cret-pw" not in repr(source) and "s3cret-pw" not in repr(parse_sink(options))
    bad: list[dict[str, Any]] = [
        {**options, "kafka.security.protocol": "SASL_TLS"},
        {**options, "kafka.sasl.mechanism": "GSSAPI"},
        {**options, "kafka.sasl.jaas.config": "no login here"},
        {**options, "kafka.ssl.truststore.location": "/nonexistent/ca.pem"},
    ]
    for wrong in bad:
        with pytest.raises(OptionError, match=r"kafka\.security\.protocol / kafka\.sasl"):
            parse_sink(wrong)
    with pytest.raises(OptionError, match=r"kafka\.ssl\.truststore\.type is not an option"):
        parse_sink({**options, "kafka.ssl.truststore.type": "JKS"})


def test_spark_reads_and_writes_over_sasl_ssl(secured: Secured, spark: Any) -> None:
    topic = "spark-secured"
    options = secured.options("SASL_SSL", "SCRAM-SHA-512")
    rows = spark.createDataFrame([("k1", "v1"), ("k2", "v2")], ["key", "value"])
    rows.write.format("sluice").options(**options).option("topic", topic).mode("append").save()
    read = spark.read.format("sluice").options(**options).option("subscribe", topic).load()
    assert sorted(bytes(r.value) for r in read.collect()) == [b"v1", b"v2"]
