"""Kafka's ``AclAuthorizer``: who may do what, from ACLs kept in ZooKeeper or a file.

**The decision** (:meth:`AclAuthorizer.authorize`, ``AclAuthorizer.authorizeAction``) for a
principal connecting from a host, an operation and a concrete resource:

1. a principal in ``super.users`` (``User:admin;User:broker``) may do anything;
2. the ACLs that apply are those on the literal name, on the literal ``*`` of the resource type,
   and on every PREFIXED pattern the name starts with;
3. none apply: ``allow.everyone.if.no.acl.found`` decides (default false: refused);
4. a DENY entry for the principal (or ``User:*``), from the host (or ``*``), for the operation
   (or ALL) refuses -- deny wins over any allow;
5. otherwise an ALLOW entry for the principal/host and the operation, ALL, or an operation that
   implies it (:func:`~sluice.server.security.acl.implied_by`: Read/Write/Delete/Alter imply
   Describe, AlterConfigs implies DescribeConfigs) allows; nothing else does.

Denials are logged at INFO as Kafka's ``kafka.authorizer.logger`` does, allowed requests at
DEBUG; the authorized-operations bit fields (:meth:`~AclAuthorizer.authorized_operations`) log
nothing.

**Storage** (:class:`ZkAclStore`), Kafka's znodes, so ACLs made with ``kafka-acls`` on a Kafka
cluster carry over:

* LITERAL patterns: ``/kafka-acl/<ResourceType>/<name>``; PREFIXED:
  ``/kafka-acl-extended/prefixed/<ResourceType>/<name>`` (``Topic``, ``Group``, ``Cluster``,
  ``TransactionalId``...), each holding ``{"version":1,"acls":[{"principal":"User:alice",
  "permissionType":"Allow","operation":"Read","host":"*"}]}``. A pattern with no entries left
  has no znode. Writes are conditional on the znode's version and retried on a conflict
  (``updateResourceAcls``), so two brokers changing one resource lose nothing.
* after a change, a notice: ``/kafka-acl-changes/acl_changes_<seq>`` holding
  ``TOPIC:orders`` for a literal pattern, ``/kafka-acl-extended-changes/acl_changes_<seq>``
  holding ``{"version":1,"resourceType":"TOPIC","name":"orders-","patternType":"PREFIXED"}``
  otherwise; every broker re-reads the named pattern
  (:mod:`sluice.server.security.notifications`).

:class:`FileAclStore` keeps the same entries in one JSON file for a standalone broker.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from sluice.server.logging import get_logger

if TYPE_CHECKING:  # ZooKeeper's modules load only when a ZooKeeper store is used
    from sluice.server.zk.client import SessionEvent, ZkClient

from .acl import (
    WILDCARD_HOST,
    WILDCARD_PRINCIPAL,
    WILDCARD_RESOURCE,
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
    implied_by,
    name_of,
    parse_name,
    supported_operations,
)
from .config import AUTHORIZER_CLASS_NAMES as AUTHORIZER_CLASS_NAMES
from .errors import SecurityError
from .files import write_atomically
from .notifications import CHANGE_EXPIRATION_MS, ChangeListener, notify

__all__ = [
    "AUTHORIZER_CLASS_NAMES",
    "AclAuthorizer",
    "AclStore",
    "FileAclStore",
    "ZkAclStore",
    "acl_path",
]

log = get_logger("sluice.authorizer")

LITERAL_ACL_PATH = "/kafka-acl"
EXTENDED_ACL_PATH = "/kafka-acl-extended"
LITERAL_CHANGES_PATH = "/kafka-acl-changes"
EXTENDED_CHANGES_PATH = "/kafka-acl-extended-changes"
CHANGE_PREFIX = "acl_changes_"
#: Kafka's ``maxUpdateRetries`` for a conditional ACL write.
MAX_UPDATE_RETRIES = 10

Entries = frozenset[AccessControlEntry]


def acl_path(pattern: ResourcePattern) -> str:
    """The znode of a pattern's ACLs (``ZkAclStore.path``)."""
    if pattern.pattern_type == PatternType.LITERAL:
        root = LITERAL_ACL_PATH
    else:
        root = f"{EXTENDED_ACL_PATH}/{pattern.pattern_type.name.lower()}"
    return f"{root}/{name_of(pattern.resource_type)}/{pattern.name}"


def encode_acls(entries: Iterable[AccessControlEntry]) -> bytes:
    """A pattern's znode JSON (entries sorted, so equal sets encode equally)."""
    acls = [e.to_json() for e in sorted(entries, key=_entry_key)]
    return json.dumps({"version": 1, "acls": acls}, separators=(",", ":")).encode()


def decode_acls(data: bytes, what: str = "ACL znode") -> Entries:
    """``AclEntry.fromBytes``: empty data is no ACLs; version must be 1."""
    if not data:
        return frozenset()
    try:
        obj = json.loads(data)
        if obj.get("version") != 1:
            raise ValueError(f"unsupported version {obj.get('version')!r}")
        return frozenset(AccessControlEntry.from_json(item) for item in obj["acls"])
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise SecurityError(f"{what}: not an ACL list ({exc})") from exc


def _entry_key(e: AccessControlEntry) -> tuple[str, str, int, int]:
    return (e.principal, e.host, int(e.operation), int(e.permission_type))


def encode_change(pattern: ResourcePattern) -> bytes:
    """A change notice's data (``LiteralAclChangeStore`` / ``ExtendedAclChangeStore``)."""
    if pattern.pattern_type == PatternType.LITERAL:
        return f"{pattern.resource_type.name}:{pattern.name}".encode()
    event = {
        "version": 1,
        "resourceType": pattern.resource_type.name,
        "name": pattern.name,
        "patternType": pattern.pattern_type.name,
    }
    return json.dumps(event, separators=(",", ":")).encode()


def decode_change(data: bytes, literal: bool) -> ResourcePattern:
    text = data.decode("utf-8")
    if literal:
        kind, sep, name = text.partition(":")
        if not sep:
            raise ValueError(
                f"expected a string in format ResourceType:ResourceName but got {text}"
            )
        return ResourcePattern(parse_name(ResourceType, kind), name, PatternType.LITERAL)
    obj = json.loads(text)
    if obj.get("version", 0) > 1:
        raise ValueError(f"Acl change event received for unsupported version: {obj['version']}")
    return ResourcePattern(
        parse_name(ResourceType, obj["resourceType"]),
        obj["name"],
        parse_name(PatternType, obj["patternType"]),
    )


class AclStore:
    """The ACL cache, ``{pattern: entries}`` (read it; change it with :meth:`put`), and the
    persistence of changes (:meth:`update`, in subclasses; this base is memory only).

    ``prefixes[resource_type]`` indexes the PREFIXED names, so that a decision on a resource
    with no prefixed ACL of its type costs no lookup per character of its name."""

    def __init__(self) -> None:
        self.cache: dict[ResourcePattern, Entries] = {}
        self.prefixes: dict[ResourceType, set[str]] = {}

    def put(self, pattern: ResourcePattern, entries: Entries) -> None:
        """Set a pattern's entries in the cache (none: forget the pattern)."""
        prefixed = pattern.pattern_type == PatternType.PREFIXED
        if entries:
            self.cache[pattern] = entries
            if prefixed:
                self.prefixes.setdefault(pattern.resource_type, set()).add(pattern.name)
        else:
            self.cache.pop(pattern, None)
            if prefixed:
                self.prefixes.get(pattern.resource_type, set()).discard(pattern.name)

    async def update(
        self, pattern: ResourcePattern, change: Callable[[Entries], Entries]
    ) -> Entries:
        """Apply ``change`` to ``pattern``'s entries durably; returns the new entries."""
        raise NotImplementedError


class FileAclStore(AclStore):
    """ACLs in one JSON file: ``{"version":1,"resources":[{"resourceType":"Topic",
    "patternType":"Literal","name":"orders","acls":[...]}]}``, replaced atomically."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        super().__init__()
        self.path = Path(path)
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return
        try:
            doc = json.loads(raw)
            if doc.get("version") != 1:
                raise ValueError("unsupported version")
            for item in doc["resources"]:
                pattern = ResourcePattern(
                    parse_name(ResourceType, item["resourceType"]),
                    item["name"],
                    parse_name(PatternType, item["patternType"]),
                )
                self.put(pattern, frozenset(AccessControlEntry.from_json(a) for a in item["acls"]))
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise SecurityError(f"{self.path}: not an ACL file ({exc})") from exc

    async def update(
        self, pattern: ResourcePattern, change: Callable[[Entries], Entries]
    ) -> Entries:
        entries = frozenset(change(self.cache.get(pattern, frozenset())))
        before = self.cache.get(pattern)
        self.put(pattern, entries)
        try:
            self._write()
        except OSError:
            self.put(pattern, before or frozenset())
            raise
        return entries

    def _write(self) -> None:
        resources = [
            {
                "resourceType": name_of(p.resource_type),
                "patternType": name_of(p.pattern_type),
                "name": p.name,
                "acls": [e.to_json() for e in sorted(entries, key=_entry_key)],
            }
            for p, entries in sorted(
                self.cache.items(),
                key=lambda kv: (kv[0].resource_type, kv[0].pattern_type, kv[0].name),
            )
        ]
        data = json.dumps({"version": 1, "resources": resources}, indent=1).encode() + b"\n"
        write_atomically(self.path, data)


class ZkAclStore(AclStore):
    """ACLs in ZooKeeper with Kafka's layout and change notices (module docstring)."""

    def __init__(self, zk: ZkClient, *, change_expiration_ms: int = CHANGE_EXPIRATION_MS) -> None:
        super().__init__()
        self.zk = zk
        self._listeners = [
            ChangeListener(zk, path, CHANGE_PREFIX, handler, expiration_ms=change_expiration_ms)
            for path, handler in (
                (LITERAL_CHANGES_PATH, self._on_literal_notice),
                (EXTENDED_CHANGES_PATH, self._on_extended_notice),
            )
        ]
        self._lock = asyncio.Lock()

    @property
    def changes_processed(self) -> int:
        return sum(listener.processed for listener in self._listeners)

    async def start(self) -> None:
        """Create Kafka's ACL paths, follow the notices, load every ACL."""
        for path in (LITERAL_ACL_PATH, EXTENDED_ACL_PATH):
            await self.zk.ensure_path(path)
        for listener in self._listeners:
            await listener.start()
        await self.load_all()
        self.zk.add_session_listener(self._on_session)

    async def close(self) -> None:
        self.zk.remove_session_listener(self._on_session)
        for listener in self._listeners:
            listener.close()

    async def load_all(self) -> None:
        """Read every ACL znode again (start-up, and a new ZooKeeper session: notices written
        while the old session was gone may have been purged before this broker saw them)."""
        from sluice.server.zk.errors import NoNodeError

        roots = [(LITERAL_ACL_PATH, PatternType.LITERAL)] + [
            (f"{EXTENDED_ACL_PATH}/{pt.name.lower()}", pt) for pt in (PatternType.PREFIXED,)
        ]
        seen: set[ResourcePattern] = set()
        for root, pattern_type in roots:
            try:
                types = await self.zk.get_children(root)
            except NoNodeError:
                continue
            for type_name in types:
                resource_type = parse_name(ResourceType, type_name)
                if resource_type == ResourceType.UNKNOWN:
                    log.warning("unknown ACL resource type ignored", path=f"{root}/{type_name}")
                    continue
                try:
                    names = await self.zk.get_children(f"{root}/{type_name}")
                except NoNodeError:
                    continue
                for name in names:
                    pattern = ResourcePattern(resource_type, name, pattern_type)
                    seen.add(pattern)
                    await self._reload(pattern)
        for pattern in set(self.cache) - seen:
            self.put(pattern, frozenset())

    async def _on_session(self, event: SessionEvent) -> None:
        from sluice.server.zk.client import SessionState

        if event.state is SessionState.CONNECTED and event.new_session:
            await self.load_all()

    async def _read(self, pattern: ResourcePattern) -> tuple[Entries, int]:
        from sluice.server.zk.errors import NoNodeError

        path = acl_path(pattern)
        try:
            data, stat = await self.zk.get(path)
        except NoNodeError:
            return frozenset(), -1
        return decode_acls(data, path), stat.version

    async def _reload(self, pattern: ResourcePattern) -> None:
        try:
            entries, _ = await self._read(pattern)
        except SecurityError:
            log.error("unreadable ACL znode ignored", path=acl_path(pattern))
            return
        self.put(pattern, entries)

    async def _on_literal_notice(self, data: bytes) -> None:
        await self._reload(decode_change(data, literal=True))

    async def _on_extended_notice(self, data: bytes) -> None:
        await self._reload(decode_change(data, literal=False))

    async def update(
        self, pattern: ResourcePattern, change: Callable[[Entries], Entries]
    ) -> Entries:
        from sluice.server.zk.errors import BadVersionError, NodeExistsError, NoNodeError

        path = acl_path(pattern)
        async with self._lock:
            entries, version = await self._read(pattern)
            for _ in range(MAX_UPDATE_RETRIES + 1):
                new = frozenset(change(entries))
                try:
                    if new == entries:
                        break
                    if not new:
                        await self.zk.delete(path, version)
                    elif version < 0:
                        await self.zk.create(path, encode_acls(new), make_parents=True)
                    else:
                        await self.zk.set(path, encode_acls(new), version)
                except (BadVersionError, NodeExistsError, NoNodeError):
                    entries, version = await self._read(pattern)  # another broker wrote first
                    continue
                changes = LITERAL_CHANGES_PATH
                if pattern.pattern_type != PatternType.LITERAL:
                    changes = EXTENDED_CHANGES_PATH
                await notify(self.zk, changes, CHANGE_PREFIX, encode_change(pattern))
                entries = new
                break
            else:
                raise SecurityError(
                    f"Failed to update ACLs for {pattern} after trying a maximum of "
                    f"{MAX_UPDATE_RETRIES} times"
                )
            self.put(pattern, entries)
            return entries


class AclAuthorizer:
    """The decision over an :class:`AclStore` (module docstring) and the ACL admin operations
    behind CreateAcls / DescribeAcls / DeleteAcls."""

    def __init__(
        self,
        store: AclStore,
        *,
        super_users: Iterable[str] = (),
        allow_everyone_if_no_acl_found: bool = False,
    ) -> None:
        self.store = store
        self.super_users = frozenset(super_users)
        self.allow_everyone_if_no_acl_found = allow_everyone_if_no_acl_found

    # --- decisions -------------------------------------------------------------------------

    def matching_entries(self, resource_type: ResourceType, name: str) -> list[AccessControlEntry]:
        """Every entry whose pattern covers the resource (literal, ``*``, prefixes)."""
        cache = self.store.cache
        found: list[AccessControlEntry] = []
        for pattern in (
            ResourcePattern(resource_type, name, PatternType.LITERAL),
            ResourcePattern(resource_type, WILDCARD_RESOURCE, PatternType.LITERAL),
        ):
            found.extend(cache.get(pattern, ()))
        prefixes = self.store.prefixes.get(resource_type)
        if prefixes:
            for end in range(1, len(name) + 1):  # the name's prefixes that have ACLs
                if name[:end] in prefixes:
                    prefixed = ResourcePattern(resource_type, name[:end], PatternType.PREFIXED)
                    found.extend(cache.get(prefixed, ()))
        return found

    def authorize(
        self,
        principal: str,
        host: str,
        operation: AclOperation,
        resource_type: ResourceType,
        name: str,
        *,
        audit: bool = True,
    ) -> bool:
        allowed = self._decide(principal, host, operation, resource_type, name)
        if audit:
            self._audit(principal, host, operation, resource_type, name, allowed)
        return allowed

    def _decide(
        self,
        principal: str,
        host: str,
        operation: AclOperation,
        resource_type: ResourceType,
        name: str,
    ) -> bool:
        if principal in self.super_users:
            return True
        entries = self.matching_entries(resource_type, name)
        if not entries:
            return self.allow_everyone_if_no_acl_found
        principals = (principal, WILDCARD_PRINCIPAL)
        hosts = (host, WILDCARD_HOST)

        def exists(permission: AclPermissionType, operations: frozenset[AclOperation]) -> bool:
            return any(
                e.permission_type == permission
                and e.principal in principals
                and e.host in hosts
                and (e.operation in operations or e.operation == AclOperation.ALL)
                for e in entries
            )

        if exists(AclPermissionType.DENY, frozenset({operation})):
            return False
        return exists(AclPermissionType.ALLOW, implied_by(operation))

    def authorized_operations(
        self, principal: str, host: str, resource_type: ResourceType, name: str
    ) -> set[AclOperation]:
        """The operations of ``resource_type`` the principal may do on the resource (the
        authorized-operations fields of Metadata, DescribeGroups, DescribeCluster)."""
        return {
            op
            for op in supported_operations(resource_type)
            if self.authorize(principal, host, op, resource_type, name, audit=False)
        }

    def authorize_by_resource_type(
        self, principal: str, host: str, operation: AclOperation, resource_type: ResourceType
    ) -> bool:
        """Whether some resource of the type could allow ``operation`` (KIP-679: an idempotent
        producer needs IdempotentWrite on the cluster or Write on any topic) --
        ``AclAuthorizer.authorizeByResourceType``: only the operation itself and ALL count."""
        if principal in self.super_users:
            return True

        def names(permission: AclPermissionType, pattern_type: PatternType) -> set[str]:
            return {
                p.name
                for p, entries in self.store.cache.items()
                if p.resource_type == resource_type
                and p.pattern_type == pattern_type
                and any(
                    e.permission_type == permission
                    and e.principal in (principal, WILDCARD_PRINCIPAL)
                    and e.host in (host, WILDCARD_HOST)
                    and e.operation in (operation, AclOperation.ALL)
                    for e in entries
                )
            }

        deny_literals = names(AclPermissionType.DENY, PatternType.LITERAL)
        if WILDCARD_RESOURCE in deny_literals:
            return False
        if self.allow_everyone_if_no_acl_found:
            return True
        deny_prefixes = names(AclPermissionType.DENY, PatternType.PREFIXED)
        allow_literals = names(AclPermissionType.ALLOW, PatternType.LITERAL)
        allow_prefixes = names(AclPermissionType.ALLOW, PatternType.PREFIXED)

        def dominated(name: str) -> bool:  # a denied prefix covers it
            return any(name[:end] in deny_prefixes for end in range(1, len(name) + 1))

        return any(not dominated(p) for p in allow_prefixes) or any(
            lit == WILDCARD_RESOURCE or (lit not in deny_literals and not dominated(lit))
            for lit in allow_literals
        )

    def _audit(
        self,
        principal: str,
        host: str,
        operation: AclOperation,
        resource_type: ResourceType,
        name: str,
        allowed: bool,
    ) -> None:
        fields = {
            "principal": principal,
            "operation": name_of(operation),
            "host": host,
            "resource": f"{name_of(resource_type)}:LITERAL:{name}",
        }
        if allowed:
            log.debug("authorized", **fields)
        else:
            log.info("denied", **fields)

    # --- administration --------------------------------------------------------------------

    def acls(self, binding_filter: AclBindingFilter | None = None) -> list[AclBinding]:
        """Every binding the filter matches (all without one: DescribeAcls), in a stable order."""
        binding_filter = binding_filter or AclBindingFilter()
        out = [
            AclBinding(pattern, entry)
            for pattern, entries in self.store.cache.items()
            for entry in entries
            if binding_filter.matches(AclBinding(pattern, entry))
        ]
        out.sort(
            key=lambda b: (
                b.pattern.resource_type,
                b.pattern.pattern_type,
                b.pattern.name,
                _entry_key(b.entry),
            )
        )
        return out

    async def create_acls(self, bindings: Sequence[AclBinding]) -> list[str | None]:
        """Add bindings; per binding ``None`` or the error message (Kafka answers such a
        binding with INVALID_REQUEST, "Failed to create ACL" and the reason)."""
        results: list[str | None] = [None] * len(bindings)
        by_pattern: dict[ResourcePattern, list[int]] = {}
        for i, binding in enumerate(bindings):
            error = binding.validation_error()
            if error is not None:
                results[i] = error
            else:
                by_pattern.setdefault(binding.pattern, []).append(i)
        for pattern, indexes in by_pattern.items():
            new = frozenset(bindings[i].entry for i in indexes)

            def add(current: Entries, new: Entries = new) -> Entries:
                return current | new

            try:
                await self.store.update(pattern, add)
            except Exception as exc:
                log.error("creating ACLs failed", pattern=str(pattern), error=repr(exc))
                for i in indexes:
                    results[i] = f"Failed to create ACL: {exc}"
        return results

    async def delete_acls(
        self, filters: Sequence[AclBindingFilter]
    ) -> list[list[tuple[AclBinding, str | None]]]:
        """Remove what each filter matches; per filter the bindings deleted, each with ``None``
        or the error that kept it (a binding matched by several filters is reported under the
        first)."""
        results: list[list[tuple[AclBinding, str | None]]] = [[] for _ in filters]
        patterns = set(self.store.cache)
        for f in filters:  # a filter naming one pattern exactly may hit one the cache lacks
            if f.pattern.matches_at_most_one() and f.pattern.name is not None:
                patterns.add(
                    ResourcePattern(f.pattern.resource_type, f.pattern.name, f.pattern.pattern_type)
                )
        for pattern in sorted(patterns, key=lambda p: (p.resource_type, p.pattern_type, p.name)):
            matching = [(i, f) for i, f in enumerate(filters) if f.pattern.matches(pattern)]
            if not matching:
                continue
            removed: dict[AccessControlEntry, int] = {}

            def change(
                current: Entries,
                matching: list[tuple[int, AclBindingFilter]] = matching,
                removed: dict[AccessControlEntry, int] = removed,
            ) -> Entries:
                removed.clear()
                for entry in current:
                    for i, f in matching:
                        if f.entry.matches(entry):
                            removed.setdefault(entry, i)
                return current - removed.keys()

            error: str | None = None
            try:
                await self.store.update(pattern, change)
            except Exception as exc:
                log.error("deleting ACLs failed", pattern=str(pattern), error=repr(exc))
                error = str(exc)
            for entry, i in removed.items():
                results[i].append((AclBinding(pattern, entry), error))
        return results
