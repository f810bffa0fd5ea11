"""Entity configs: client quotas (users, client ids) and dynamic broker configs, where Kafka keeps
them.

An entity is named by Kafka's *entity path* (``AdminZkClient`` / ``ConfigEntityName``), the
znode below ``/config`` and the ``entity_path`` of its change notice:

* ``users/<user>``, ``users/<user>/clients/<client-id>``, ``clients/<client-id>``: client quotas
  (``producer_byte_rate``, ``consumer_byte_rate``, ``request_percentage``). ``<default>`` in
  place of a name is the default entity of that type (``users/<default>/clients/<default>`` ...).
* ``brokers/<id>`` and ``brokers/<default>``: dynamic broker configs, per broker and for every
  broker of the cluster.

Names are Kafka's ``Sanitizer.sanitize`` (:func:`~sluice.server.security.notifications.sanitize`),
so ``<default>`` (written as it is) cannot be confused with a user named ``<default>``
(``%3Cdefault%3E``).

**ZooKeeper** (:class:`ZkEntityConfigs`): ``/config/<entity path>`` holds ``{"version":1,
"config":{...}}``; a change is announced as Kafka announces it (``/config/changes/
config_change_<n>``, ``{"version":2,"entity_path":"<entity path>"}``, the notices
:class:`~sluice.server.security.credentials.ZkCredentialStore` follows too). A user's znode is
shared with its SCRAM credentials: every write here is a read-modify-write conditional on the
znode's version that keeps the keys it does not change (the credential store does the same), so
neither a quota change nor a password change loses the other.

**Locally** (:class:`LocalEntityConfigs`, a standalone broker): one JSON file
``{"version":1,"entities":{"<entity path>":{...}}}`` in the data directory, replaced atomically.
The SCRAM credentials of a standalone broker stay in their own file (``users.json``): the two
never hold the same keys, so nothing needs to be shared there.

Whoever applies the configs (the quota manager, the dynamic broker config) registers a listener:
``listener(entity_path, config)`` runs for every entity loaded and after every change, on the
event loop.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from sluice.server.logging import get_logger

from .errors import SecurityError
from .files import write_atomically
from .notifications import (
    CHANGE_EXPIRATION_MS,
    CHANGE_PREFIX,
    CONFIG_CHANGES_PATH,
    MAX_UPDATE_RETRIES,
    ChangeListener,
    entity_path_of,
    notify,
)

if TYPE_CHECKING:
    from sluice.server.zk.client import SessionEvent, ZkClient

__all__ = [
    "DEFAULT_ENTITY",
    "EntityConfigs",
    "LocalEntityConfigs",
    "ZkEntityConfigs",
]

log = get_logger("sluice.configs")

#: Kafka's ``ConfigEntityName.DEFAULT``.
DEFAULT_ENTITY = "<default>"
#: The entity types below ``/config`` this module follows (topics are the metadata view's).
ENTITY_TYPES = ("users", "clients", "brokers")

Listener = Callable[[str, Mapping[str, str]], None]


def _valid_path(path: str) -> bool:
    parts = path.split("/")
    if len(parts) == 2:
        return parts[0] in ENTITY_TYPES and bool(parts[1])
    return len(parts) == 4 and parts[0] == "users" and parts[2] == "clients" and all(parts)


class EntityConfigs:
    """Every entity's config in memory; subclasses persist :meth:`alter`. An entity without a
    config is absent (its empty config is not kept)."""

    def __init__(self) -> None:
        self._configs: dict[str, dict[str, str]] = {}
        self.listeners: list[Listener] = []

    def get(self, path: str) -> dict[str, str]:
        return dict(self._configs.get(path, {}))

    def items(self) -> Iterator[tuple[str, dict[str, str]]]:
        return ((path, dict(config)) for path, config in self._configs.items())

    def _apply(self, path: str, config: Mapping[str, str]) -> None:
        old = self._configs.get(path, {})
        if config == old:
            return
        if config:
            self._configs[path] = dict(config)
        else:
            self._configs.pop(path, None)
        for listener in self.listeners:
            try:
                listener(path, config)
            except Exception:  # one bad listener must not stop the others
                log.exception("entity config listener failed", entity=path)

    @staticmethod
    def _edited(
        config: Mapping[str, str], upserts: Mapping[str, str], deletions: Iterable[str]
    ) -> dict[str, str]:
        out = dict(config)
        for key in deletions:
            out.pop(key, None)
        out.update(upserts)
        return out

    async def alter(
        self, path: str, upserts: Mapping[str, str], deletions: Iterable[str] = ()
    ) -> None:
        """Set ``upserts`` and remove ``deletions`` in ``path``'s config, durably."""
        if not _valid_path(path):
            raise ValueError(f"not an entity path: {path!r}")
        self._apply(path, self._edited(self._configs.get(path, {}), upserts, deletions))


class LocalEntityConfigs(EntityConfigs):
    """A standalone broker's entity configs in one JSON file (module docstring)."""

    VERSION = 1

    def __init__(self, path: str | os.PathLike[str]) -> None:
        super().__init__()
        self.path = Path(path)
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return
        try:
            doc = json.loads(raw)
            entities = doc["entities"]
            if doc.get("version") != self.VERSION or not isinstance(entities, dict):
                raise ValueError("unsupported version or layout")
            for entity, config in entities.items():
                self._configs[str(entity)] = {str(k): str(v) for k, v in config.items()}
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise SecurityError(f"{self.path}: not an entity configs file ({exc})") from exc

    async def alter(
        self, path: str, upserts: Mapping[str, str], deletions: Iterable[str] = ()
    ) -> None:
        if not _valid_path(path):
            raise ValueError(f"not an entity path: {path!r}")
        config = self._edited(self._configs.get(path, {}), upserts, deletions)
        entities = {p: c for p, c in self._configs.items() if p != path}
        if config:
            entities[path] = config
        data = json.dumps({"version": self.VERSION, "entities": entities}, indent=1,
                          sort_keys=True)  # fmt: skip
        write_atomically(self.path, data.encode() + b"\n")
        self._apply(path, config)


def _dumps(config: Mapping[str, str]) -> bytes:
    return json.dumps({"version": 1, "config": dict(config)}, separators=(",", ":"),
                      ensure_ascii=False).encode()  # fmt: skip


def _decode(data: bytes, what: str) -> dict[str, str]:
    if not data:
        return {}
    try:
        config = json.loads(data).get("config") or {}
        if not isinstance(config, dict):
            raise ValueError("config is not an object")
    except (ValueError, AttributeError) as exc:
        raise SecurityError(f"{what}: not an entity config ({exc})") from exc
    return {str(k): str(v) for k, v in config.items()}


class ZkEntityConfigs(EntityConfigs):
    """Entity configs in ZooKeeper with Kafka's layout and change notices (module docstring).
    :meth:`start` loads every entity of :data:`ENTITY_TYPES` and follows ``/config/changes``;
    ``changes_processed`` counts the notices handled (tests wait on it)."""

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
        for entity_type in ENTITY_TYPES:
            await self.zk.ensure_path(f"/config/{entity_type}")
        await self._listener.start()  # notices from now on; the full load covers the rest
        await self.load_all()
        self.zk.add_session_listener(self._on_session)

    async def close(self) -> None:
        self.zk.remove_session_listener(self._on_session)
        self._listener.close()

    async def load_all(self) -> None:
        """Read every entity again (start-up, and after a new ZooKeeper session)."""
        from sluice.server.zk.errors import NoNodeError

        paths = []
        for entity_type in ENTITY_TYPES:
            for name in await self.zk.get_children(f"/config/{entity_type}"):
                paths.append(f"{entity_type}/{name}")
                if entity_type == "users":
                    try:
                        clients = await self.zk.get_children(f"/config/users/{name}/clients")
                    except NoNodeError:
                        continue
                    paths += [f"users/{name}/clients/{c}" for c in clients]
        for path in paths:
            await self._reload(path)
        for path in set(self._configs) - set(paths):
            self._apply(path, {})

    async def _on_session(self, event: SessionEvent) -> None:
        from sluice.server.zk.client import SessionState

        if event.state is SessionState.CONNECTED and event.new_session:
            await self.load_all()

    async def _reload(self, path: str) -> None:
        from sluice.server.zk.errors import NoNodeError

        znode = f"/config/{path}"
        try:
            data, _ = await self.zk.get(znode)
        except NoNodeError:
            self._apply(path, {})
            return
        try:
            self._apply(path, _decode(data, znode))
        except SecurityError:
            log.error("unreadable entity config ignored", path=znode)

    async def _on_notice(self, data: bytes) -> None:
        entity = entity_path_of(data)
        if entity is not None and _valid_path(entity):
            await self._reload(entity)

    async def alter(
        self, path: str, upserts: Mapping[str, str], deletions: Iterable[str] = ()
    ) -> None:
        from sluice.server.zk.errors import BadVersionError, NodeExistsError, NoNodeError

        if not _valid_path(path):
            raise ValueError(f"not an entity path: {path!r}")
        znode = f"/config/{path}"
        for _ in range(MAX_UPDATE_RETRIES + 1):
            try:
                data, stat = await self.zk.get(znode)
                version = stat.version
            except NoNodeError:
                data, version = b"", -1
            config = self._edited(_decode(data, znode), upserts, deletions)
            try:
                if version < 0:
                    await self.zk.create(znode, _dumps(config), make_parents=True)
                else:
                    await self.zk.set(znode, _dumps(config), version)
                break
            except (NodeExistsError, BadVersionError, NoNodeError):
                continue  # another writer changed it meanwhile: apply ours to theirs
        else:
            raise SecurityError(f"Failed to update {znode} after {MAX_UPDATE_RETRIES} retries")
        notice = json.dumps({"version": 2, "entity_path": path}, separators=(",", ":"))
        await notify(self.zk, CONFIG_CHANGES_PATH, CHANGE_PREFIX, notice.encode())
        self._apply(path, config)
