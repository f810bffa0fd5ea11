"""Errors of the security room: authentication failures and bad security data.

A mechanism (PLAIN, SCRAM) raises :class:`AuthenticationFailed`. Kafka tells the two kinds apart
by exception class: a ``SaslAuthenticationException`` carries a message meant for the client
(``"Authentication failed: Invalid username or password"``), a plain ``SaslException`` (an
unknown SCRAM user, a wrong proof) is answered with one generic message so that a client cannot
tell an unknown user from a wrong password. ``client_message`` is the first kind; ``None`` means
the generic answer (:func:`generic_failure_message`).
"""

from __future__ import annotations


class SecurityError(Exception):
    """Base of the security room's errors."""


class AuthenticationFailed(SecurityError):
    """A SASL exchange failed. ``str(exc)`` is for the broker's log; ``client_message`` (or the
    generic message when ``None``) is what the client is told."""

    def __init__(self, log_message: str, client_message: str | None = None) -> None:
        super().__init__(log_message)
        self.client_message = client_message


class InvalidCredential(SecurityError, ValueError):
    """Credential text or parameters that Kafka would refuse (``Credentials not valid``,
    iterations out of bounds, an unknown mechanism)."""


def generic_failure_message(mechanism: str, reauthenticating: bool = False) -> str:
    """Kafka's answer to a failed exchange whose details stay on the broker
    (``SaslServerAuthenticator.handleSaslToken``)."""
    what = "re-authentication" if reauthenticating else "authentication"
    return (
        f"Authentication failed during {what} due to invalid credentials with SASL mechanism "
        f"{mechanism}"
    )
