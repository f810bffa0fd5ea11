"""Per-listener and per-mechanism overrides of security settings, as Kafka applies them."""

from __future__ import annotations

import pytest

from sluice.server.security.listeners import (
    SecurityProtocol,
    listener_settings,
    mechanism_settings,
)

CONFIG = {
    "ssl.keystore.location": "/etc/kafka/default.p12",
    "sasl.enabled.mechanisms": "SCRAM-SHA-512",
    "connections.max.reauth.ms": "0",
    "listener.name.external.ssl.keystore.location": "/etc/kafka/external.p12",
    "listener.name.external.ssl.client.auth": "required",
    "listener.name.sasl_ssl.scram-sha-512.connections.max.reauth.ms": "3600000",
    "listener.name.sasl_ssl.sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512",
}


def test_listener_overrides() -> None:
    external = listener_settings(CONFIG, "EXTERNAL")
    assert external["ssl.keystore.location"] == "/etc/kafka/external.p12"
    assert external["ssl.client.auth"] == "required"
    assert not any(k.startswith("listener.name.") for k in external)
    internal = listener_settings(CONFIG, "INTERNAL")
    assert internal["ssl.keystore.location"] == "/etc/kafka/default.p12"
    assert "ssl.client.auth" not in internal


def test_mechanism_overrides() -> None:
    scram = mechanism_settings(CONFIG, "SASL_SSL", "SCRAM-SHA-512")
    assert scram["connections.max.reauth.ms"] == "3600000"
    assert scram["sasl.enabled.mechanisms"] == "PLAIN,SCRAM-SHA-512"
    plain = mechanism_settings(CONFIG, "SASL_SSL", "PLAIN")
    assert plain["connections.max.reauth.ms"] == "0"


def test_security_protocols() -> None:
    assert [(p.uses_tls, p.uses_sasl) for p in SecurityProtocol] == [
        (False, False), (True, False), (False, True), (True, True)
    ]  # fmt: skip
    assert SecurityProtocol.parse("sasl_ssl") is SecurityProtocol.SASL_SSL
    with pytest.raises(ValueError, match="unknown security protocol"):
        SecurityProtocol.parse("TLS")
