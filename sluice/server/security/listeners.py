"""Security protocols of listeners and Kafka's per-listener configuration overrides.

A listener (``listeners=SASL_SSL://:9094,INTERNAL://:9093``) has a security protocol, from
``listener.security.protocol.map`` (``INTERNAL:SSL``) or its own name when that is a protocol
(:class:`~sluice.server.zk.data.EndPoint` parses both). Every ``ssl.*`` / ``sasl.*`` /
``connections.max.reauth.ms`` key may be overridden for one listener with the prefix
``listener.name.<listener, lower case>.`` (``ListenerName.configPrefix``), and a SASL key for one
mechanism with ``listener.name.<listener>.<mechanism, lower case>.``
(``saslMechanismConfigPrefix``, e.g. ``listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config``).
:func:`listener_settings` applies those overrides, as ``valuesWithPrefixOverride`` does.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping

__all__ = [
    "SUPPORTED_SASL_MECHANISMS",
    "SecurityProtocol",
    "listener_settings",
    "mechanism_settings",
]

#: The SASL mechanisms Sluice implements (Kafka's GSSAPI and OAUTHBEARER are not among them).
SUPPORTED_SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


class SecurityProtocol(enum.Enum):
    PLAINTEXT = "PLAINTEXT"
    SSL = "SSL"
    SASL_PLAINTEXT = "SASL_PLAINTEXT"
    SASL_SSL = "SASL_SSL"

    @property
    def uses_tls(self) -> bool:
        return self in (SecurityProtocol.SSL, SecurityProtocol.SASL_SSL)

    @property
    def uses_sasl(self) -> bool:
        return self in (SecurityProtocol.SASL_PLAINTEXT, SecurityProtocol.SASL_SSL)

    @classmethod
    def parse(cls, name: str) -> SecurityProtocol:
        try:
            return cls(name.strip().upper())
        except ValueError:
            known = ", ".join(p.value for p in cls)
            raise ValueError(f"unknown security protocol {name!r} (known: {known})") from None


def _prefixed(config: Mapping[str, str], prefix: str) -> dict[str, str]:
    return {
        key[len(prefix) :]: value
        for key, value in config.items()
        if key.startswith(prefix) and len(key) > len(prefix)
    }


def listener_settings(config: Mapping[str, str], listener: str) -> dict[str, str]:
    """``config`` with ``listener.name.<listener>.<key>`` overriding ``<key>``."""
    out = {k: v for k, v in config.items() if not k.startswith("listener.name.")}
    out.update(_prefixed(config, f"listener.name.{listener.lower()}."))
    return out


def mechanism_settings(config: Mapping[str, str], listener: str, mechanism: str) -> dict[str, str]:
    """:func:`listener_settings` then ``listener.name.<listener>.<mechanism>.<key>`` overrides
    (per-mechanism SASL settings such as ``connections.max.reauth.ms``)."""
    out = listener_settings(config, listener)
    prefix = f"{mechanism.lower()}."
    for key in [k for k in out if k.startswith(prefix)]:
        value = out.pop(key)
        out[key[len(prefix) :]] = value
    return out
