"""An asyncio ZooKeeper client: kazoo underneath, nothing blocking the event loop.

kazoo is thread-based: a connection thread owns the socket (requests, replies, pings,
reconnects) and a callback thread runs completions and watchers. :class:`ZkClient` keeps all of
that off the event loop:

* every request goes out through kazoo's ``*_async`` methods (which only enqueue and wake the
  connection thread); the kazoo result's completion hops onto the loop with
  ``loop.call_soon_threadsafe`` and settles an asyncio future there;
* watches and session-state changes hop onto the loop the same way, so **every callback a caller
  gives runs on the event loop thread**, in the order kazoo saw the events (callbacks may be plain
  functions or return a coroutine, which is run as a task);
* starting and stopping kazoo (which join threads) run in a helper daemon thread, bounded.

Session states (:class:`SessionState`), Curator's/kazoo's simplification of ZooKeeper's:

* ``CONNECTED``: connected on a session. ``SessionEvent.new_session`` says it is not the session
  of the previous CONNECTED (the old one expired: its ephemeral nodes are gone; re-register,
  re-read and re-watch).
* ``SUSPENDED``: the connection dropped; the session may still be alive (its ephemeral nodes
  still exist) or may expire. A leader must not assume it still is one until CONNECTED again.
* ``LOST``: the session is gone (expired or closed). kazoo reconnects on a new session by itself
  (then CONNECTED with ``new_session=True``), unless the client was closed.

Watches are ZooKeeper's one-shot watches: a ``watch=`` callback fires at most once, with a
:class:`WatchEvent` (``CREATED``, ``DELETED``, ``CHANGED``, ``CHILD``). kazoo drops every
watch when the connection drops (it does not re-send them on reconnect) and says so by calling
each watcher with ``EventType.DISCONNECTED``; a caller that keeps watching re-reads with a new
watch once CONNECTED again (:mod:`sluice.server.zk.kafka_zk` does).

For state a caller keeps following, :meth:`ZkClient.watch_children` and
:meth:`ZkClient.watch_data` do the re-arming: they call back with the current value at once and
after every change, re-reading after a connection drop (a change missed while disconnected is
seen then) until cancelled. Values are delivered in order, one at a time; an unchanged value is
not delivered twice.

Requests wait at most ``request_timeout`` seconds (:class:`ConnectionLossError` after that: the
outcome is unknown, as for any connection loss). The chroot of the connect string
(``host:port/chroot``) is created if missing, like Kafka's broker does at start-up.

**TLS** (:class:`ZkTls`, Kafka's ``zookeeper.ssl.*``): the connection to ZooKeeper's
``secureClientPort`` is wrapped in Python's ``ssl`` (:func:`_tls_handler`), verifying
ZooKeeper's certificate (against the truststore, or the system's CAs) and its host name unless
disabled, and presenting the broker's certificate when a keystore is given (ZooKeeper's
``ssl.clientAuth``).

**SASL** (:class:`sluice.server.zk.sasl.ZkSasl`, the JAAS ``Client`` section Kafka's brokers
use): kazoo logs in with DIGEST-MD5 (``pure-sasl``) right after every connect, before any
request of the session is sent. :meth:`ZkClient.start` makes one round trip so that a refused
login fails the start with :class:`AuthFailedError` naming the user, instead of a later request.

Only the event loop thread may call the methods (they are not thread-safe). kazoo is imported
when a client is constructed, never at import: standalone brokers do not load it.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import inspect
import threading
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from sluice.server.logging import get_logger

from .errors import (
    AuthFailedError,
    ClientClosedError,
    ConnectionLossError,
    NoNodeError,
    ZkConnectionError,
    ZkError,
    translate,
)
from .sasl import ZkSasl

__all__ = [
    "CheckOp",
    "CreateOp",
    "DataCallback",
    "DeleteOp",
    "EventType",
    "Op",
    "SessionEvent",
    "SessionState",
    "SetDataOp",
    "WatchCallback",
    "WatchEvent",
    "Watcher",
    "ZkClient",
    "ZnodeStat",
    "split_connect_string",
]

log = get_logger("sluice.zk")
T = TypeVar("T")


class SessionState(enum.Enum):
    CONNECTED = "CONNECTED"
    SUSPENDED = "SUSPENDED"
    LOST = "LOST"


@dataclass(frozen=True, slots=True)
class SessionEvent:
    """A session state change. ``session_id`` is the session's id when CONNECTED, else the last
    one known; ``new_session``: CONNECTED on a session other than the previous CONNECTED's."""

    state: SessionState
    session_id: int | None
    new_session: bool = False


class EventType(enum.Enum):
    CREATED = "CREATED"
    DELETED = "DELETED"
    CHANGED = "CHANGED"
    CHILD = "CHILD"
    #: The watch was dropped with the connection (kazoo's ``NONE``): re-read and re-watch.
    DISCONNECTED = "DISCONNECTED"


@dataclass(frozen=True, slots=True)
class WatchEvent:
    type: EventType
    path: str | None


WatchCallback = Callable[[WatchEvent], Awaitable[None] | None]
SessionCallback = Callable[[SessionEvent], Awaitable[None] | None]
ChildrenCallback = Callable[[list[str] | None], Awaitable[None] | None]
#: ``(data, stat)`` of the znode, or None while it does not exist.
DataCallback = Callable[["tuple[bytes, ZnodeStat] | None"], Awaitable[None] | None]


@dataclass(frozen=True, slots=True)
class ZnodeStat:
    """ZooKeeper's ``Stat`` of a znode (times in ms since the epoch).

    ``version`` is the data version (Kafka's zkVersion: the partition epoch of a state znode);
    ``czxid`` the creating transaction (of ``/brokers/ids/<id>``: the broker epoch, KIP-380);
    ``ephemeral_owner`` the owning session id, 0 for a persistent znode.
    """

    czxid: int
    mzxid: int
    ctime: int
    mtime: int
    version: int
    cversion: int
    ephemeral_owner: int
    data_length: int
    num_children: int
    pzxid: int

    @classmethod
    def _from_kazoo(cls, stat: Any) -> ZnodeStat:
        return cls(
            czxid=stat.czxid,
            mzxid=stat.mzxid,
            ctime=stat.ctime,
            mtime=stat.mtime,
            version=stat.version,
            cversion=stat.cversion,
            ephemeral_owner=stat.ephemeralOwner,
            data_length=stat.dataLength,
            num_children=stat.numChildren,
            pzxid=stat.pzxid,
        )


# --- multi operations (ZooKeeper's Op): all applied or none ------------------------------------


@dataclass(frozen=True, slots=True)
class CreateOp:
    path: str
    data: bytes = b""
    ephemeral: bool = False
    sequence: bool = False


@dataclass(frozen=True, slots=True)
class SetDataOp:
    path: str
    data: bytes
    version: int = -1  # -1: any version


@dataclass(frozen=True, slots=True)
class DeleteOp:
    path: str
    version: int = -1


@dataclass(frozen=True, slots=True)
class CheckOp:
    """Fails the multi unless ``path`` is at ``version`` (Kafka's controller-epoch fence)."""

    path: str
    version: int


Op = CreateOp | SetDataOp | DeleteOp | CheckOp
#: One result per op: the created path (CreateOp), the new stat (SetDataOp), None otherwise.
OpResult = str | ZnodeStat | None


def split_connect_string(connect: str) -> tuple[str, str]:
    """``"h1:p1,h2:p2/chroot/path"`` -> ``("h1:p1,h2:p2", "/chroot/path")`` (chroot "" if none)."""
    hosts, slash, chroot = connect.partition("/")
    if not hosts:
        raise ValueError(f"zookeeper.connect has no host: {connect!r}")
    chroot = (slash + chroot).rstrip("/")
    if "//" in chroot:
        raise ValueError(f"zookeeper.connect has an empty chroot component: {connect!r}")
    return hosts, chroot


@dataclass(frozen=True, slots=True)
class ZkTls:
    """TLS to ZooKeeper (Kafka's ``zookeeper.ssl.*``): PEM files. ``keystore`` holds the
    client's key and certificate chain (None: no client certificate); ``truststore`` the CAs
    ZooKeeper's certificate must chain to (None: the system's)."""

    truststore: str | None = None
    keystore: str | None = None
    keystore_password: str | None = field(default=None, repr=False)
    check_hostname: bool = True


#: Kafka's ``ZkData.SensitiveRootPaths``: credentials and broker configs, not readable by all.
SENSITIVE_ROOT_PATHS = ("/config/users", "/config/brokers", "/delegation_token")


def secure_acl(path: str) -> list[Any]:
    """Kafka's ``ZkData.defaultAcls`` with ``zookeeper.set.acl``: everything for the creator
    (the session's authenticated identity, here its TLS certificate's subject), read for
    anyone, except below :data:`SENSITIVE_ROOT_PATHS`; the old consumers' ``/consumers`` stays
    open."""
    from kazoo.security import CREATOR_ALL_ACL, OPEN_ACL_UNSAFE, READ_ACL_UNSAFE

    if path == "/consumers":
        return list(OPEN_ACL_UNSAFE)
    if path.startswith(SENSITIVE_ROOT_PATHS):
        return list(CREATOR_ALL_ACL)
    return [*CREATOR_ALL_ACL, *READ_ACL_UNSAFE]


def _tls_handler(tls: ZkTls) -> Any:
    """kazoo's threading handler connecting over TLS with ``tls``'s context (built now: a file
    that does not load fails the start). Not kazoo's own ``use_ssl``: it wraps the socket
    before connecting and leaves it open when the handshake fails, a file descriptor lost per
    reconnect attempt to a ZooKeeper whose certificate is not trusted; here the TCP connection
    is made first and the handshake's failure closes it (``SSLContext.wrap_socket``)."""
    import socket
    import ssl

    from kazoo.handlers.threading import SequentialThreadingHandler

    context = ssl.create_default_context(cafile=tls.truststore)
    context.check_hostname = tls.check_hostname
    if tls.keystore is not None:
        context.load_cert_chain(tls.keystore, password=tls.keystore_password)

    class TlsHandler(SequentialThreadingHandler):  # type: ignore[misc]
        def create_connection(
            self, address: tuple[str, int], hostname: str | None = None,
            timeout: float | None = None, **_plain: Any,
        ) -> ssl.SSLSocket:  # fmt: skip
            sock = socket.create_connection(address, timeout)
            try:
                tls_sock = context.wrap_socket(sock, server_hostname=hostname or address[0])
            except BaseException:
                sock.close()
                raise
            tls_sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            return tls_sock

    return TlsHandler()


def _refused_login_stops(kz: Any) -> None:
    """ZooKeeper answers a failed SASL login with AUTHFAILED, or, when it requires SASL
    (``enforce.auth.enabled``), with SESSION_CLOSED_REQUIRE_SASL_AUTH. kazoo handles the first
    (state AUTH_FAILED, pending requests fail, no reconnect) but lets the second escape its
    connection thread, which dies with the requests left as connection losses. Both are the
    same refusal: the second is raised as the first."""
    from kazoo.exceptions import AuthFailedError as KazooAuthFailed
    from kazoo.exceptions import SessionClosedRequireSaslError

    connection = kz._connection
    authenticate = connection._authenticate_with_sasl

    def authenticate_or_fail(host: str, timeout: float) -> None:
        try:
            authenticate(host, timeout)
        except SessionClosedRequireSaslError as exc:
            raise KazooAuthFailed("ZooKeeper closed the session: SASL login refused") from exc

    connection._authenticate_with_sasl = authenticate_or_fail


class ZkClient:
    """An asyncio ZooKeeper session; see the module docstring.

    ``connect`` is ``zookeeper.connect`` (``host:port[,host:port...][/chroot]``);
    ``session_timeout`` (``zookeeper.session.timeout.ms`` / 1000) is what we ask for, the
    server bounds it to its [min, max]; ``connect_timeout`` bounds :meth:`start`
    (``zookeeper.connection.timeout.ms``); ``request_timeout`` bounds each request.
    """

    def __init__(
        self,
        connect: str,
        *,
        session_timeout: float = 18.0,
        connect_timeout: float = 18.0,
        request_timeout: float = 30.0,
        close_timeout: float = 10.0,
        tls: ZkTls | None = None,
        sasl: ZkSasl | None = None,
        secure_acls: bool = False,
    ) -> None:
        self.connect = connect
        self.tls = tls
        self.sasl = sasl
        #: Kafka's ``zookeeper.set.acl``: the znodes this client creates get :func:`secure_acl`.
        self.secure_acls = secure_acls
        self.hosts, self.chroot = split_connect_string(connect)
        self.session_timeout = session_timeout
        self.connect_timeout = connect_timeout
        self.request_timeout = request_timeout
        self.close_timeout = close_timeout
        self._loop: asyncio.AbstractEventLoop | None = None
        self._kz: Any = None
        self._state = SessionState.LOST
        self._session_id: int | None = None
        self._connected = asyncio.Event()
        self._session_listeners: list[SessionCallback] = []
        self._tasks: set[asyncio.Task[Any]] = set()
        self._closed = False

    # --- session ----------------------------------------------------------------------------

    @property
    def state(self) -> SessionState:
        return self._state

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def session_id(self) -> int | None:
        """The current session's id (the ``ephemeral_owner`` of the znodes it creates)."""
        return self._session_id

    @property
    def client_id(self) -> tuple[int, bytes] | None:
        """``(session id, password)`` while connected: what a second client needs to take the
        session over (and so expire it, see ``ZooKeeperServer.expire_session``)."""
        if self._kz is None:
            return None
        cid = self._kz.client_id
        return (int(cid[0]), bytes(cid[1])) if cid is not None else None

    def add_session_listener(self, callback: SessionCallback) -> None:
        """Call ``callback(SessionEvent)`` on the loop at every session state change."""
        self._session_listeners.append(callback)

    def remove_session_listener(self, callback: SessionCallback) -> None:
        with contextlib.suppress(ValueError):
            self._session_listeners.remove(callback)

    async def wait_connected(self, timeout: float | None = None) -> None:
        """Return once CONNECTED (at once if it is); :class:`ConnectionLossError` after
        ``timeout`` seconds."""
        if self._closed:
            raise ClientClosedError()
        try:
            async with asyncio.timeout(timeout):
                await self._connected.wait()
        except TimeoutError:
            raise ConnectionLossError(f"not connected to {self.hosts} within {timeout}s") from None

    async def start(self) -> None:
        """Connect (bounded by ``connect_timeout``) and make sure the chroot exists."""
        if self._kz is not None:
            raise RuntimeError("a ZkClient is started once")
        from kazoo.client import KazooClient
        from kazoo.handlers.threading import SequentialThreadingHandler
        from kazoo.retry import KazooRetry

        self._loop = asyncio.get_running_loop()
        handler = SequentialThreadingHandler() if self.tls is None else _tls_handler(self.tls)
        # Reconnect forever (the session decides what is lost), with a short cap on the backoff
        # so a restarted ZooKeeper is found again within a second.
        retry = KazooRetry(
            max_tries=-1, delay=0.05, backoff=2, max_delay=1.0, sleep_func=handler.sleep_func
        )
        # The chroot is applied only once it exists: kazoo prefixes it to every path.
        self._kz = KazooClient(
            hosts=self.hosts,
            timeout=self.session_timeout,
            handler=handler,
            connection_retry=retry,
            sasl_options=self.sasl.kazoo_options() if self.sasl is not None else None,
        )
        if self.sasl is not None:
            _refused_login_stops(self._kz)
        self._kz.add_listener(self._on_kazoo_state)
        try:
            await self._in_thread(self._kz.start_async, self.connect_timeout)
            await self.wait_connected(self.connect_timeout)
            if self.sasl is not None:
                await self._check_login(self.sasl)
            if self.chroot:
                await self.ensure_path(self.chroot)
                self._kz.chroot = self.chroot
        except BaseException:
            await self._stop_kazoo()
            raise
        log.info(
            "zookeeper connected", hosts=self.hosts, chroot=self.chroot, session_id=self._session_id
        )

    async def _check_login(self, sasl: ZkSasl) -> None:
        """One round trip: kazoo reports CONNECTED before its SASL exchange, and queues the
        session's requests behind it, so this answers once the login is through (or refused)."""
        try:
            await asyncio.wait_for(self.exists("/"), self.connect_timeout)
        except AuthFailedError:
            log.error(
                "zookeeper refused the SASL login",
                hosts=self.hosts, user=sasl.username, mechanism=sasl.mechanism, jaas=sasl.source,
            )  # fmt: skip
            raise AuthFailedError(
                f"ZooKeeper ({self.hosts}) refused the SASL {sasl.mechanism} login of user "
                f"{sasl.username!r} ({sasl.source}): wrong username or password?"
                " (ZooKeeper's log says why)"
            ) from None
        except TimeoutError:
            raise ConnectionLossError(
                f"no answer from {self.hosts} within {self.connect_timeout}s after the SASL login"
            ) from None

    async def close(self) -> None:
        """Close the session (its ephemeral nodes go at once) and stop kazoo's threads."""
        if self._closed:
            return
        self._closed = True
        self._state = SessionState.LOST
        self._connected.clear()
        await self._stop_kazoo()
        for task in list(self._tasks):
            task.cancel()

    async def __aenter__(self) -> ZkClient:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _stop_kazoo(self) -> None:
        kz = self._kz
        if kz is None:
            return

        def stop_and_close() -> None:
            # kazoo's close() frees the socket pair its connection thread polls and refuses to
            # run before that thread ended: it runs here, after the stop, also when the wait
            # below gave up (called then at once, it failed and the pair was left open).
            try:
                kz.stop()
            finally:
                with contextlib.suppress(Exception):
                    kz.close()

        try:
            await self._in_thread(stop_and_close, self.close_timeout)
        except Exception as exc:  # a hung server: its threads are daemons, leave them
            log.warning("zookeeper client did not stop cleanly", error=repr(exc))

    # --- requests ---------------------------------------------------------------------------

    async def get(self, path: str, watch: WatchCallback | None = None) -> tuple[bytes, ZnodeStat]:
        """Data and stat; ``watch`` fires once on CHANGED or DELETED (set only if it exists)."""
        data, stat = await self._request(
            path, lambda kz: kz.get_async(path, watch=self._watcher(watch))
        )
        return (data or b""), ZnodeStat._from_kazoo(stat)

    async def exists(self, path: str, watch: WatchCallback | None = None) -> ZnodeStat | None:
        """Stat or None; ``watch`` fires once on CREATED, CHANGED or DELETED."""
        stat = await self._request(
            path, lambda kz: kz.exists_async(path, watch=self._watcher(watch))
        )
        return ZnodeStat._from_kazoo(stat) if stat is not None else None

    async def get_children(self, path: str, watch: WatchCallback | None = None) -> list[str]:
        """Child names (unsorted, as ZooKeeper gives them); ``watch`` fires once on CHILD or
        DELETED."""
        children = await self._request(
            path, lambda kz: kz.get_children_async(path, watch=self._watcher(watch))
        )
        return list(children)

    async def create(
        self,
        path: str,
        data: bytes = b"",
        *,
        ephemeral: bool = False,
        sequence: bool = False,
        make_parents: bool = False,
    ) -> tuple[str, ZnodeStat]:
        """Create a znode; return its path (with the sequence suffix) and stat (``czxid``)."""
        created, stat = await self._request(
            path,
            lambda kz: kz.create_async(
                path,
                data,
                acl=self._acl(path),
                ephemeral=ephemeral,
                sequence=sequence,
                makepath=make_parents,
                include_data=True,
            ),
        )
        return created, ZnodeStat._from_kazoo(stat)

    async def set(self, path: str, data: bytes, version: int = -1) -> ZnodeStat:
        """Set the data, conditional on ``version`` unless -1; return the new stat."""
        stat = await self._request(path, lambda kz: kz.set_async(path, data, version))
        return ZnodeStat._from_kazoo(stat)

    async def delete(self, path: str, version: int = -1) -> None:
        await self._request(path, lambda kz: kz.delete_async(path, version))

    async def delete_recursive(self, path: str) -> None:
        """Delete ``path`` and everything below it (children first); absent is fine. Not atomic."""
        try:
            children = await self.get_children(path)
        except NoNodeError:
            return
        for child in children:
            await self.delete_recursive(f"{path.rstrip('/')}/{child}")
        with contextlib.suppress(NoNodeError):
            await self.delete(path)

    async def ensure_path(self, path: str) -> None:
        """Create ``path`` and its missing parents as empty persistent znodes."""
        await self._request(path, lambda kz: kz.ensure_path_async(path, self._acl(path)))

    def _acl(self, path: str) -> list[Any] | None:
        """The ACL of a znode this client creates (None: kazoo's default, open to all)."""
        return secure_acl(path) if self.secure_acls else None

    async def multi(self, ops: Sequence[Op]) -> list[OpResult]:
        """Apply ``ops`` atomically (ZooKeeper's multi). On failure nothing is applied and the
        error of the first failing op is raised with its ``op_index``."""
        if not ops:
            return []

        def send(kz: Any) -> Any:
            txn = kz.transaction()
            for op in ops:
                if isinstance(op, CreateOp):
                    txn.create(
                        op.path,
                        op.data,
                        acl=self._acl(op.path),
                        ephemeral=op.ephemeral,
                        sequence=op.sequence,
                    )
                elif isinstance(op, SetDataOp):
                    txn.set_data(op.path, op.data, op.version)
                elif isinstance(op, DeleteOp):
                    txn.delete(op.path, op.version)
                elif isinstance(op, CheckOp):
                    txn.check(op.path, op.version)
                else:
                    raise TypeError(f"not a ZooKeeper op: {op!r}")
            return txn.commit_async()

        raw = await self._request(None, send)
        return _multi_results(ops, raw)

    # --- continuous watches -----------------------------------------------------------------

    def watch_children(self, path: str, callback: ChildrenCallback) -> Watcher:
        """Follow ``path``'s children: ``callback(sorted names)`` now and after every change,
        ``callback(None)`` while ``path`` does not exist. Cancel with ``watcher.cancel()``."""

        async def read(fired: WatchCallback) -> list[str] | None:
            try:
                return sorted(await self.get_children(path, watch=fired))
            except NoNodeError:
                if await self.exists(path, watch=fired) is not None:
                    return await read(fired)  # created in between: read it
                return None

        return self._follow(path, read, callback)

    def watch_data(self, path: str, callback: DataCallback) -> Watcher:
        """Follow ``path``'s data: ``callback((data, stat))`` now and after every change,
        ``callback(None)`` while it does not exist. Cancel with ``watcher.cancel()``."""

        async def read(fired: WatchCallback) -> tuple[bytes, ZnodeStat] | None:
            try:
                return await self.get(path, watch=fired)
            except NoNodeError:
                if await self.exists(path, watch=fired) is not None:
                    return await read(fired)
                return None

        return self._follow(path, read, callback)

    def _follow(
        self,
        path: str,
        read: Callable[[WatchCallback], Awaitable[Any]],
        callback: Callable[[Any], Awaitable[None] | None],
    ) -> Watcher:
        if self._closed or self._loop is None:
            raise ClientClosedError(path=path)
        watcher = Watcher(self, path, read, callback)
        watcher._task = self._loop.create_task(watcher._run(), name=f"zk-watch {path}")
        self._tasks.add(watcher._task)
        watcher._task.add_done_callback(self._tasks.discard)
        return watcher

    # --- plumbing ---------------------------------------------------------------------------

    async def _request(self, path: str | None, send: Callable[[Any], Any]) -> Any:
        """Send one kazoo request and await its result on the loop, bounded by
        ``request_timeout``; kazoo errors come out translated."""
        if self._closed or self._kz is None:
            raise ClientClosedError(path=path)
        loop = self._loop
        assert loop is not None
        future: asyncio.Future[Any] = loop.create_future()

        def completed(result: Any) -> None:  # on a kazoo thread
            try:
                outcome: tuple[bool, Any] = (True, result.get_nowait())
            except Exception as exc:
                if type(exc).__module__.startswith("kazoo"):
                    error = translate(exc, path=path)
                    error.__cause__ = exc
                    outcome = (False, error)
                else:
                    outcome = (False, exc)
            with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits
                loop.call_soon_threadsafe(_settle, future, *outcome)

        send(self._kz).rawlink(completed)
        try:
            async with asyncio.timeout(self.request_timeout):
                return await future
        except TimeoutError:
            raise ConnectionLossError(
                f"no reply from ZooKeeper within {self.request_timeout}s", path=path
            ) from None

    def _watcher(self, callback: WatchCallback | None) -> Callable[[Any], None] | None:
        """A kazoo watcher that runs ``callback`` on the loop (None: no watch)."""
        if callback is None:
            return None
        loop = self._loop
        assert loop is not None

        def watcher(event: Any) -> None:  # on kazoo's callback thread
            kind = EventType.DISCONNECTED if event.type == "NONE" else EventType(event.type)
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(
                    self._run_callback, callback, WatchEvent(kind, event.path)
                )

        return watcher

    def _on_kazoo_state(self, state: str) -> None:
        """kazoo's state listener, on its connection thread: hop to the loop with the session id
        as it is now (kazoo sets it before it calls us)."""
        session = self._kz.client_id if state == "CONNECTED" else None
        loop = self._loop
        if loop is None:
            return
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(
                self._apply_state, SessionState(state), session[0] if session else None
            )

    def _apply_state(self, state: SessionState, session_id: int | None) -> None:  # on the loop
        if self._closed:
            return
        new_session = False
        if state is SessionState.CONNECTED:
            new_session = self._session_id is not None and session_id != self._session_id
            self._session_id = session_id
            self._connected.set()
        else:
            self._connected.clear()
        self._state = state
        log.info(
            "zookeeper session state",
            state=state.value,
            session_id=self._session_id,
            new_session=new_session,
        )
        event = SessionEvent(state, self._session_id, new_session)
        for listener in list(self._session_listeners):
            self._run_callback(listener, event)
        if state is SessionState.LOST and self._connection_died():
            self._run_callback(lambda _: self._reconnect(), None)

    def _connection_died(self) -> bool:  # on the loop
        """kazoo's connection thread ended though nobody stopped the client: it gives up for
        good on an exception it does not retry (seen: ``RuntimeError('xids do not match')``
        when replies went missing from a connection that then carried on), after reporting
        LOST. kazoo's own fields tell (``_stopped``: asked to stop; ``connection_stopped``:
        its loop has ended)."""
        kz = self._kz
        if kz is None or self._closed:
            return False
        return bool(kz._connection.connection_stopped.is_set() and not kz._stopped.is_set())

    async def _reconnect(self) -> None:
        """Start kazoo's connection again, on a new session (kazoo forgot the old one with the
        LOST it reported; ZooKeeper expires it after its timeout): CONNECTED with
        ``new_session`` follows, as after an expiry, so the broker registers again and re-reads
        its state. Kafka's ZooKeeperClient likewise re-creates its ZooKeeper handle rather than
        stay disconnected."""
        log.warning("zookeeper connection thread ended unasked: connecting again")
        try:
            await self._in_thread(self._kz.start_async, self.connect_timeout)
        except Exception as exc:
            log.error("zookeeper reconnect failed", error=repr(exc))

    def _run_callback(self, callback: Callable[[Any], Any], arg: Any) -> None:  # on the loop
        if self._closed:
            return
        try:
            result = callback(arg)
        except Exception:
            log.exception("zookeeper callback failed", callback=repr(callback))
            return
        if inspect.isawaitable(result):
            task = asyncio.ensure_future(result)
            self._tasks.add(task)
            task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("zookeeper callback failed", error=repr(task.exception()))

    async def _in_thread(self, fn: Callable[[], T], timeout: float) -> T:
        """Run a blocking kazoo call in a daemon thread of its own (not the loop's executor: a
        call stuck on a hung server must not hold up the loop's shutdown)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()

        def run() -> None:
            try:
                outcome: tuple[bool, Any] = (True, fn())
            except BaseException as exc:
                outcome = (False, exc)
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(_settle, future, *outcome)

        threading.Thread(target=run, name="sluice-zk-blocking", daemon=True).start()
        try:
            async with asyncio.timeout(timeout):
                return await future
        except TimeoutError:
            raise ZkConnectionError(f"ZooKeeper client call did not finish in {timeout}s") from None


def _settle(future: asyncio.Future[Any], ok: bool, value: Any) -> None:
    """Complete ``future`` on the loop with a result or exception from another thread, unless
    it timed out or was cancelled meanwhile."""
    if future.done():
        return
    if ok:
        future.set_result(value)
    else:
        future.set_exception(value)


class Watcher:
    """A continuous watch made by :meth:`ZkClient.watch_children` / :meth:`ZkClient.watch_data`.

    One task per watcher: read with a one-shot watch, deliver if the value changed, wait for
    the watch to fire, repeat. A connection problem (a failed read, a watch dropped with the
    connection) waits for CONNECTED and reads again. Stops when cancelled or the client closes.
    """

    def __init__(
        self,
        client: ZkClient,
        path: str,
        read: Callable[[WatchCallback], Awaitable[Any]],
        callback: Callable[[Any], Awaitable[None] | None],
    ) -> None:
        self.client = client
        self.path = path
        self._read = read
        self._callback = callback
        self._task: asyncio.Task[None] | None = None
        #: Values delivered so far (for tests and diagnostics).
        self.deliveries = 0

    def cancel(self) -> None:
        if self._task is not None:
            self._task.cancel()

    @property
    def done(self) -> bool:
        """Stopped (cancelled, or the client closed): no more deliveries."""
        return self._task is not None and self._task.done()

    async def _run(self) -> None:
        unset = object()
        last: Any = unset
        with contextlib.suppress(ClientClosedError):
            while True:
                fired = asyncio.Event()

                def on_fire(event: WatchEvent, fired: asyncio.Event = fired) -> None:
                    fired.set()

                try:
                    value = await self._read(on_fire)
                except ClientClosedError:
                    return
                except ZkConnectionError:
                    await self.client.wait_connected()
                    continue
                if value != last:
                    last = value
                    self.deliveries += 1
                    try:
                        result = self._callback(value)
                        if inspect.isawaitable(result):
                            await result
                    except Exception:
                        log.exception("zookeeper watch callback failed", path=self.path)
                await fired.wait()
                if self.client.state is not SessionState.CONNECTED:
                    await self.client.wait_connected()


def _multi_results(ops: Sequence[Op], raw: list[Any]) -> list[OpResult]:
    """kazoo's multi results -> ours, or the first real failure raised. When a multi fails,
    ZooKeeper reports code 0 (kazoo: RolledBackError) for the ops before the failing one and
    RUNTIMEINCONSISTENCY (-2) for those after it."""
    failures = [
        (i, r)
        for i, r in enumerate(raw)
        if isinstance(r, Exception)
        and type(r).__name__ not in ("RolledBackError", "RuntimeInconsistency")
    ]
    if failures:
        index, exc = failures[0]
        raise translate(exc, path=ops[index].path, op_index=index) from exc
    if any(isinstance(r, Exception) for r in raw):
        raise ZkError(f"multi rolled back without a failing op: {raw!r}")
    results: list[OpResult] = []
    for op, r in zip(ops, raw, strict=True):
        if isinstance(op, CreateOp):
            results.append(str(r))
        elif isinstance(op, SetDataOp):
            results.append(ZnodeStat._from_kazoo(r))
        else:
            results.append(None)
    return results
