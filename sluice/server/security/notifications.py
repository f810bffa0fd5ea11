"""Kafka's ZooKeeper change notices (``ZkNodeChangeNotificationListener``), shared by the
credential and ACL stores.

A writer changes its znode and then creates a sequential notice ``<path>/<prefix><10 digits>``
naming what changed. Each broker follows ``<path>``'s children and handles every notice whose
sequence number is above the last it handled, in order; a broker that starts loads the full state
first and handles only notices created after that. Notices older than ``expiration_ms`` (Kafka:
15 minutes) are deleted by whichever broker handles them, so the directory stays small without a
coordinator.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import urllib.parse
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from sluice.server.logging import get_logger

if TYPE_CHECKING:  # ZooKeeper's modules load only when a ZooKeeper store is used
    from sluice.server.zk.client import Watcher, ZkClient

log = get_logger("sluice.security")

#: Kafka's entity config changes (``/config/changes/config_change_<n>``, AdminZkClient).
CONFIG_CHANGES_PATH = "/config/changes"
CHANGE_PREFIX = "config_change_"
#: Conditional writes retried on a conflict, as Kafka's ACL updates (``maxUpdateRetries``).
MAX_UPDATE_RETRIES = 10
#: Kafka's ``ZkNodeChangeNotificationListener`` default ``changeExpirationMs``.
CHANGE_EXPIRATION_MS = 15 * 60 * 1000


def sanitize(name: str) -> str:
    """Kafka's ``Sanitizer.sanitize``: Java's ``URLEncoder`` with ``*`` and spaces encoded."""
    return urllib.parse.quote(name, safe="").replace("~", "%7E")


def desanitize(name: str) -> str:
    """Kafka's ``Sanitizer.desanitize``."""
    return urllib.parse.unquote(name)


def sequence_of(name: str, prefix: str) -> int | None:
    if not name.startswith(prefix):
        return None
    digits = name[len(prefix) :]
    return int(digits) if digits.isascii() and digits.isdigit() else None


async def notify(zk: ZkClient, path: str, prefix: str, data: bytes) -> str:
    """Create a notice under ``path``; returns its path."""
    created, _ = await zk.create(f"{path}/{prefix}", data, sequence=True, make_parents=True)
    return created


class ChangeListener:
    """Follows one notice directory; ``handler(data)`` runs for each new notice, in order.

    ``processed`` counts handled notices (tests wait on it). A handler that raises is logged and
    the notice counts as handled, as Kafka's listener does."""

    def __init__(
        self,
        zk: ZkClient,
        path: str,
        prefix: str,
        handler: Callable[[bytes], Awaitable[None]],
        *,
        expiration_ms: int = CHANGE_EXPIRATION_MS,
    ) -> None:
        self.zk = zk
        self.path = path
        self.prefix = prefix
        self.handler = handler
        self.expiration_ms = expiration_ms
        self.processed = 0
        self._last = -1
        self._watcher: Watcher | None = None
        self._lock = asyncio.Lock()

    async def start(self) -> None:
        """Skip the notices already there (the caller loads the full state after this), then
        follow the directory."""
        await self.zk.ensure_path(self.path)
        existing = [sequence_of(n, self.prefix) for n in await self.zk.get_children(self.path)]
        self._last = max([s for s in existing if s is not None], default=-1)
        self._watcher = self.zk.watch_children(self.path, self._on_children)

    def close(self) -> None:
        if self._watcher is not None:
            self._watcher.cancel()
            self._watcher = None

    async def _on_children(self, children: list[str] | None) -> None:
        from sluice.server.zk.errors import NoNodeError

        if not children:
            return
        async with self._lock:
            now_ms = time.time() * 1000
            for name in children:  # sorted: sequence order
                seq = sequence_of(name, self.prefix)
                if seq is None or seq <= self._last:
                    continue
                path = f"{self.path}/{name}"
                try:
                    data, stat = await self.zk.get(path)
                except NoNodeError:  # purged by another broker meanwhile
                    self._last = seq
                    continue
                try:
                    await self.handler(data)
                except Exception:
                    log.exception("change notice handler failed", path=path)
                self._last = seq
                if now_ms - stat.ctime > self.expiration_ms:
                    with contextlib.suppress(NoNodeError):
                        await self.zk.delete(path)
                self.processed += 1


def entity_path_of(data: bytes) -> str | None:
    """The entity of a change notice: version 2 ``entity_path``; version 1 (``entity_type`` +
    ``entity_name``, Kafka before 0.10.1) read too."""
    try:
        obj = json.loads(data)
        if obj.get("version") == 2:
            return str(obj["entity_path"])
        if obj.get("version") == 1:
            return f"{obj['entity_type']}/{obj['entity_name']}"
    except (ValueError, KeyError, AttributeError, TypeError):
        pass
    log.warning("unreadable config change notice ignored", data=data[:200])
    return None
