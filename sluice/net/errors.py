"""Errors of one connection to a broker, raised on this side of the wire (the client re-exports
them with its own): cannot connect, timed out, no common API version."""

from __future__ import annotations

from sluice.protocol.errors import SluiceError

__all__ = ["ClientError", "KafkaConnectionError", "KafkaTimeoutError", "UnsupportedVersionError"]


class ClientError(SluiceError):
    """Base of every error raised by the client itself (not carried in a response)."""

    retriable = False


class KafkaConnectionError(ClientError):
    """Could not connect to a broker, or the connection broke with requests in flight."""

    retriable = True


class KafkaTimeoutError(ClientError):
    """A request, a metadata wait or a delivery did not finish in its time bound."""

    retriable = True


class UnsupportedVersionError(ClientError):
    """The broker implements no version of an API that this client can speak."""
