"""Where SCRAM credentials live: Kafka's ZooKeeper layout in cluster mode, a file standalone.

Both stores keep every user's credentials in memory (Kafka's ``CredentialCache``): the SASL
exchange looks a user up synchronously on the event loop, and only a change goes to storage.

**ZooKeeper** (:class:`ZkCredentialStore`), exactly Kafka's znodes so that users made by
``kafka-configs --zookeeper`` / ``--bootstrap-server`` against a Kafka cluster carry over:

* ``/config/users/<sanitized user>``: ``{"version":1,"config":{"SCRAM-SHA-512":"salt=...,
  stored_key=...,server_key=...,iterations=4096"}}`` -- the user's entity config; keys that are
  not SCRAM mechanisms (client quotas such as ``producer_byte_rate``) are kept as they are. A
  change is written conditionally on the znode's version and retried on a conflict (Kafka sets
  it unconditionally), so two brokers altering one user lose neither change.
* a change is announced by a sequential znode ``/config/changes/config_change_<10 digits>``
  holding ``{"version":2,"entity_path":"users/<sanitized user>"}`` (``AdminZkClient
  .changeConfigs``). Every broker follows ``/config/changes`` and re-reads the user of each
  notice newer than the last it processed (``ZkNodeChangeNotificationListener``); notices older
  than 15 minutes are deleted by whichever broker sees them (``changeExpirationMs``).

The user name in a path is Kafka's ``Sanitizer.sanitize``: URL encoding in which only
``[A-Za-z0-9._-]`` stay as they are (``*`` becomes ``%2A``, a space ``%20``).

**File** (:class:`FileCredentialStore`), for a standalone broker and for creating the first user
before any broker starts: one JSON document ``{"version":1,"users":{"alice":{"SCRAM-SHA-512":
"salt=..."}}}`` (the same per-user config objects), replaced atomically (write a temporary file,
fsync, rename, fsync the directory) so a crash leaves the old or the new file, never a torn one.

PLAIN is checked against the same credentials (:meth:`CredentialStore.verify_plain`, as
Redpanda does): one store, one password per user.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sluice.server.logging import get_logger

if TYPE_CHECKING:  # ZooKeeper's modules load only when a ZooKeeper store is used
    from sluice.server.zk.client import SessionEvent, ZkClient

from .errors import InvalidCredential, SecurityError
from .files import write_atomically
from .notifications import (
    CHANGE_EXPIRATION_MS,
    CHANGE_PREFIX,
    CONFIG_CHANGES_PATH,
    MAX_UPDATE_RETRIES,
    ChangeListener,
    desanitize,
    entity_path_of,
    notify,
    sanitize,
)
from .scram import DEFAULT_ITERATIONS, SCRAM_MECHANISMS, ScramCredential, verify_password

__all__ = [
    "CONFIG_CHANGES_PATH",
    "CONFIG_USERS_PATH",
    "CredentialStore",
    "FileCredentialStore",
    "ZkCredentialStore",
    "desanitize",
    "sanitize",
    "user_config_path",
]

log = get_logger("sluice.security")

CONFIG_USERS_PATH = "/config/users"

UserCredentials = dict[str, ScramCredential]  # mechanism -> credential

#: What a PLAIN login of an unknown user is checked against: the work of a known user's check
#: (one PBKDF2 of Kafka's default 4096 iterations, SHA-512 as PLAIN prefers), matching nothing
#: (an empty stored key), so that the answer's timing does not tell which users exist.
_UNKNOWN_USER = ("SCRAM-SHA-512", ScramCredential(bytes(32), b"", b"", DEFAULT_ITERATIONS))


def user_config_path(user: str) -> str:
    return f"{CONFIG_USERS_PATH}/{sanitize(user)}"


def _scram_of(config: Mapping[str, str], what: str) -> UserCredentials:
    """The SCRAM credentials of a user's config (other keys ignored; a bad value is logged and
    skipped, as Kafka's cache update does not stop at one bad user)."""
    creds: UserCredentials = {}
    for mechanism in SCRAM_MECHANISMS:
        text = config.get(mechanism)
        if text is None:
            continue
        try:
            creds[mechanism] = ScramCredential.from_text(text)
        except InvalidCredential:
            log.error("invalid SCRAM credential ignored", where=what, mechanism=mechanism)
    return creds


def _check_alteration(upserts: Mapping[str, ScramCredential], deletions: Iterable[str]) -> None:
    for mechanism in [*upserts, *deletions]:
        if mechanism not in SCRAM_MECHANISMS:
            raise InvalidCredential(f"unknown SCRAM mechanism {mechanism!r}")


class CredentialStore:
    """The in-memory view shared by both stores; subclasses persist :meth:`alter`."""

    def __init__(self) -> None:
        self._users: dict[str, UserCredentials] = {}

    def scram_credential(self, user: str, mechanism: str) -> ScramCredential | None:
        """``user``'s credential for ``mechanism``, ``None`` if there is none."""
        return self._users.get(user, {}).get(mechanism)

    def users(self) -> dict[str, dict[str, ScramCredential]]:
        """Every user with at least one credential: ``{user: {mechanism: credential}}``."""
        return {user: dict(creds) for user, creds in self._users.items() if creds}

    def verify_plain(self, user: str, password: str) -> bool:
        """Whether ``password`` is ``user``'s (checked against the strongest SCRAM credential
        the user has; one PBKDF2 of its iterations). An unknown user costs the same PBKDF2
        (:data:`_UNKNOWN_USER`): a login timing probe cannot enumerate the users."""
        creds = self._users.get(user, {})
        for mechanism in ("SCRAM-SHA-512", "SCRAM-SHA-256"):
            if mechanism in creds:
                return verify_password(mechanism, creds[mechanism], password)
        mechanism, dummy = _UNKNOWN_USER
        verify_password(mechanism, dummy, password)  # never matches: b"" is no stored key
        return False

    def _set(self, user: str, creds: UserCredentials) -> None:
        if creds:
            self._users[user] = creds
        else:
            self._users.pop(user, None)

    async def alter(
        self,
        user: str,
        upserts: Mapping[str, ScramCredential] | None = None,
        deletions: Iterable[str] = (),
    ) -> None:
        """Set and/or delete ``user``'s credentials per mechanism, durably, in one change."""
        raise NotImplementedError


class FileCredentialStore(CredentialStore):
    """Credentials in one JSON file (see the module docstring). Loaded at construction; only
    this object writes the file while a broker runs (a CLI writes it before start-up)."""

    VERSION = 1

    def __init__(self, path: str | os.PathLike[str]) -> None:
        super().__init__()
        self.path = Path(path)
        self._configs: dict[str, dict[str, str]] = {}
        self.reload()

    def reload(self) -> None:
        """Read the file again (absent: no users)."""
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            self._configs, self._users = {}, {}
            return
        try:
            doc = json.loads(raw)
            users = doc["users"]
            if doc.get("version") != self.VERSION or not isinstance(users, dict):
                raise ValueError("unsupported version or layout")
            configs = {str(u): {str(k): str(v) for k, v in c.items()} for u, c in users.items()}
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise InvalidCredential(f"{self.path}: not a credentials file ({exc})") from exc
        self._configs = configs
        self._users = {}
        for user, config in configs.items():
            self._set(user, _scram_of(config, f"{self.path}: {user}"))

    def alter_sync(
        self,
        user: str,
        upserts: Mapping[str, ScramCredential] | None = None,
        deletions: Iterable[str] = (),
    ) -> None:
        """:meth:`alter` for a tool that runs before the broker (no event loop needed)."""
        upserts = dict(upserts or {})
        deletions = list(deletions)
        _check_alteration(upserts, deletions)
        config = dict(self._configs.get(user, {}))
        for mechanism in deletions:
            config.pop(mechanism, None)
        for mechanism, cred in upserts.items():
            config[mechanism] = cred.to_text()
        configs = dict(self._configs)
        if config:
            configs[user] = config
        else:
            configs.pop(user, None)
        self._write(configs)
        self._configs = configs
        self._set(user, _scram_of(config, f"{self.path}: {user}"))

    async def alter(
        self,
        user: str,
        upserts: Mapping[str, ScramCredential] | None = None,
        deletions: Iterable[str] = (),
    ) -> None:
        self.alter_sync(user, upserts, deletions)

    def _write(self, configs: Mapping[str, Mapping[str, str]]) -> None:
        data = json.dumps({"version": self.VERSION, "users": configs}, indent=1, sort_keys=True)
        write_atomically(self.path, data.encode() + b"\n")


def _dumps(obj: Mapping[str, Any]) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


def _decode_config(data: bytes, what: str) -> dict[str, str]:
    """An entity config znode: ``{"version":1,"config":{...}}`` (empty data: no config)."""
    if not data:
        return {}
    try:
        obj = json.loads(data)
        config = obj.get("config") or {}
        if not isinstance(config, dict):
            raise ValueError("config is not an object")
    except (ValueError, AttributeError) as exc:
        raise InvalidCredential(f"{what}: not an entity config ({exc})") from exc
    return {str(k): str(v) for k, v in config.items()}


class ZkCredentialStore(CredentialStore):
    """Credentials in ZooKeeper with Kafka's layout and change notices (module docstring).

    :meth:`start` loads every user and follows ``/config/changes``; :meth:`alter` writes the
    user's config and a notice. ``changes_processed`` counts the notices handled (tests wait on
    it). Only the event loop touches the cache."""

    def __init__(self, zk: ZkClient, *, change_expiration_ms: int = CHANGE_EXPIRATION_MS) -> None:
        super().__init__()
        self.zk = zk
        self._listener = ChangeListener(
            zk, CONFIG_CHANGES_PATH, CHANGE_PREFIX, self._on_notice,
            expiration_ms=change_expiration_ms,
        )  # fmt: skip

    @property
    def changes_processed(self) -> int:
        return self._listener.processed

    async def start(self) -> None:
        await self.zk.ensure_path(CONFIG_USERS_PATH)
        await self._listener.start()  # notices from now on; the full load covers the rest
        await self.load_all()
        self.zk.add_session_listener(self._on_session)

    async def close(self) -> None:
        self.zk.remove_session_listener(self._on_session)
        self._listener.close()

    async def load_all(self) -> None:
        """Read every user again (start-up, and a new ZooKeeper session: notices written
        while the old session was gone may have been purged before this broker saw them)."""
        users = {desanitize(name) for name in await self.zk.get_children(CONFIG_USERS_PATH)}
        for user in users:
            await self._reload_user(user)
        for user in set(self._users) - users:
            self._set(user, {})

    async def _on_session(self, event: SessionEvent) -> None:
        from sluice.server.zk.client import SessionState

        if event.state is SessionState.CONNECTED and event.new_session:
            await self.load_all()

    async def _reload_user(self, user: str) -> None:
        from sluice.server.zk.errors import NoNodeError

        path = user_config_path(user)
        try:
            data, _ = await self.zk.get(path)
        except NoNodeError:
            self._set(user, {})
            return
        try:
            config = _decode_config(data, path)
        except InvalidCredential:
            log.error("unreadable user config ignored", path=path)
            return
        self._set(user, _scram_of(config, path))

    async def _on_notice(self, data: bytes) -> None:
        entity = entity_path_of(data)
        if entity is not None and entity.startswith("users/") and entity.count("/") == 1:
            await self._reload_user(desanitize(entity[len("users/") :]))

    async def alter(
        self,
        user: str,
        upserts: Mapping[str, ScramCredential] | None = None,
        deletions: Iterable[str] = (),
    ) -> None:
        from sluice.server.zk.errors import BadVersionError, NodeExistsError, NoNodeError

        upserts = dict(upserts or {})
        deletions = list(deletions)
        _check_alteration(upserts, deletions)
        path = user_config_path(user)
        for _ in range(MAX_UPDATE_RETRIES + 1):
            try:
                data, stat = await self.zk.get(path)
                version = stat.version
            except NoNodeError:
                data, version = b"", -1
            config = _decode_config(data, path)
            for mechanism in deletions:
                config.pop(mechanism, None)
            for mechanism, cred in upserts.items():
                config[mechanism] = cred.to_text()
            value = _dumps({"version": 1, "config": config})
            try:
                if version < 0:
                    await self.zk.create(path, value, make_parents=True)
                else:
                    await self.zk.set(path, value, version)
                break
            except (NodeExistsError, BadVersionError, NoNodeError):
                continue  # another writer changed the user meanwhile: apply ours to theirs
        else:
            raise SecurityError(
                f"Failed to update the credentials of {user} after {MAX_UPDATE_RETRIES} retries"
            )
        notice = _dumps({"version": 2, "entity_path": f"users/{sanitize(user)}"})
        await notify(self.zk, CONFIG_CHANGES_PATH, CHANGE_PREFIX, notice)
        self._set(user, _scram_of(config, path))
