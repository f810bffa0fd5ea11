"""Errors of the ZooKeeper room: the few ZooKeeper outcomes callers act on, one base class.

kazoo's exceptions never leave :mod:`sluice.server.zk`: :func:`translate` maps each to one of
these (``raise ... from`` the kazoo one). What a caller does with each:

* :class:`NoNodeError` / :class:`NodeExistsError` / :class:`BadVersionError` /
  :class:`NotEmptyError`: the request reached ZooKeeper and was refused; nothing changed.
* :class:`ConnectionLossError`: the outcome is **unknown** (the request may have been applied and
  the reply lost); the session may still be alive. Re-read before deciding (Kafka's
  ``ReplicationUtils.checkLeaderAndIsrZkData`` does exactly that for ISR updates).
* :class:`SessionExpiredError`: the session is gone with its ephemeral nodes and watches; the
  client reconnects on a new session (reported as ``SessionEvent(new_session=True)``), after
  which the caller re-registers and re-reads. :class:`ClientClosedError`: :meth:`close` was
  called; nothing more will be sent. :class:`AuthFailedError`: ZooKeeper refused the login
  (SASL); the client does not reconnect.

``path`` is the znode concerned (chroot-relative) when known; ``op_index`` is the index of the
operation that failed in a ``multi``.
"""

from __future__ import annotations

from typing import ClassVar

from sluice.protocol.errors import SluiceError

__all__ = [
    "AuthFailedError",
    "BadVersionError",
    "ClientClosedError",
    "ConnectionLossError",
    "ControllerMovedError",
    "NoNodeError",
    "NodeExistsError",
    "NotEmptyError",
    "SessionExpiredError",
    "ZkConnectionError",
    "ZkDataError",
    "ZkError",
]


class ZkError(SluiceError):
    """Base of every error the ZooKeeper room raises. ``code`` is ZooKeeper's (KeeperException
    code), ``None`` when the error is ours (a timeout, a closed client)."""

    code: ClassVar[int | None] = None

    def __init__(
        self, message: str = "", *, path: str | None = None, op_index: int | None = None
    ) -> None:
        detail = message or type(self).__doc__ or type(self).__name__
        if path is not None:
            detail = f"{detail.splitlines()[0]} (path {path})"
        if op_index is not None:
            detail = f"{detail} (operation {op_index} of the multi)"
        super().__init__(detail)
        self.message = message
        self.path = path
        self.op_index = op_index


class NoNodeError(ZkError):
    """The znode does not exist."""

    code = -101


class NodeExistsError(ZkError):
    """The znode already exists."""

    code = -110


class BadVersionError(ZkError):
    """The znode's version is not the expected one: someone else wrote it first."""

    code = -103


class NotEmptyError(ZkError):
    """The znode has children and cannot be deleted."""

    code = -111


class ZkConnectionError(ZkError):
    """No usable connection: the request's outcome is unknown or the session is gone."""


class ConnectionLossError(ZkConnectionError):
    """The connection dropped (or no reply came in time) before the reply: outcome unknown."""

    code = -4


class SessionExpiredError(ZkConnectionError):
    """The session expired: its ephemeral nodes and watches are gone."""

    code: ClassVar[int | None] = -112


class AuthFailedError(ZkConnectionError):
    """ZooKeeper refused this client's login (SASL: a wrong username or password): the client
    stops connecting; nothing more will be sent."""

    code = -115


class ClientClosedError(SessionExpiredError):
    """The client was closed."""

    code = None


_BY_KAZOO_NAME: dict[str, type[ZkError]] = {
    "NoNodeError": NoNodeError,
    "NodeExistsError": NodeExistsError,
    "BadVersionError": BadVersionError,
    "NotEmptyError": NotEmptyError,
    "ConnectionLoss": ConnectionLossError,
    "ConnectionDropped": ConnectionLossError,
    "OperationTimeoutError": ConnectionLossError,
    "KazooTimeoutError": ConnectionLossError,
    "SessionExpiredError": SessionExpiredError,
    "ConnectionClosedError": ClientClosedError,
    "AuthFailedError": AuthFailedError,
    # ZooKeeper closes a session that has not logged in when it requires SASL
    "SessionClosedRequireSaslError": AuthFailedError,
}


def translate(
    exc: BaseException, *, path: str | None = None, op_index: int | None = None
) -> ZkError:
    """The :class:`ZkError` for a kazoo exception (by class, walking its bases so kazoo's own
    subclasses map like their parents); anything unknown becomes a plain :class:`ZkError` with
    kazoo's code and message."""
    for cls in type(exc).__mro__:
        mapped = _BY_KAZOO_NAME.get(cls.__name__)
        if mapped is not None:
            return mapped(str(exc), path=path, op_index=op_index)
    code = getattr(exc, "code", None)
    return ZkError(
        f"ZooKeeper error {code}: {type(exc).__name__} {exc}".rstrip(),
        path=path,
        op_index=op_index,
    )


class ZkDataError(ZkError, ValueError):
    """A znode's content does not follow Kafka's format (bad JSON, a missing or mistyped field,
    an unsupported version). Raised by the codecs of :mod:`sluice.server.zk.data`."""


class ControllerMovedError(ZkError):
    """A controller's write was fenced: ``/controller_epoch`` is no longer at the zkVersion this
    controller's election left it at, so another broker has become controller since (Kafka's
    ``ControllerMovedException``). Nothing was written; the caller resigns."""
