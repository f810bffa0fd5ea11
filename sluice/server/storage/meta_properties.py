"""``meta.properties``: which cluster and broker a data directory belongs to (Kafka's
``MetaProperties`` version 0, the form a ZooKeeper-mode broker writes)::

    #
    #<date>
    cluster.id=<the cluster's id: Kafka's Uuid in URL-safe base64, 22 characters>
    version=0
    broker.id=<node.id>

Written once, atomically, when a broker first starts on the directory; read at every start. A
standalone broker's cluster id is made here (a new random Uuid); a cluster member's is
ZooKeeper's ``/cluster/id``. A data directory an older Sluice wrote (no file, but data) keeps
the id it reported before (:data:`LEGACY_STANDALONE_CLUSTER_ID`), so clients that noted it see
no change. Java ``Properties`` syntax for reading (``key=value`` or ``key: value``, ``#``/``!``
comments); the values Kafka writes need no escapes.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from sluice.protocol.types import random_uuid, uuid_to_str
from sluice.server.storage.index import StorageError
from sluice.server.storage.layout import META_PROPERTIES_FILE
from sluice.server.storage.vfs import DEFAULT_VFS, VFS, atomic_write, read_file

__all__ = [
    "LEGACY_STANDALONE_CLUSTER_ID",
    "META_PROPERTIES_FILE",
    "CorruptMetaPropertiesError",
    "MetaProperties",
    "new_cluster_id",
    "read_meta_properties",
    "write_meta_properties",
]

#: The cluster id every standalone Sluice reported before data directories kept their own.
LEGACY_STANDALONE_CLUSTER_ID = "sluice-single-node"


class CorruptMetaPropertiesError(StorageError):
    """``meta.properties`` exists but is not a version 0 file with a cluster id."""


@dataclass(frozen=True, slots=True)
class MetaProperties:
    cluster_id: str
    broker_id: int

    def encode(self) -> bytes:
        """Kafka's ``PropertiesUtils.writePropertiesFile`` output (``Properties.store`` with an
        empty comment, then the date)."""
        date = time.strftime("%a %b %d %H:%M:%S UTC %Y", time.gmtime())
        return (
            f"#\n#{date}\ncluster.id={self.cluster_id}\nversion=0\nbroker.id={self.broker_id}\n"
        ).encode()


def new_cluster_id() -> str:
    """A new cluster id in Kafka's form (``Uuid.randomUuid().toString()``)."""
    return uuid_to_str(random_uuid())


def read_meta_properties(log_dir: Path, vfs: VFS = DEFAULT_VFS) -> MetaProperties | None:
    """The file in ``log_dir``; None without one."""
    path = log_dir / META_PROPERTIES_FILE
    try:
        text = read_file(path, vfs).decode("utf-8")
    except FileNotFoundError:
        return None
    except UnicodeDecodeError as exc:
        raise CorruptMetaPropertiesError(f"{path}: not UTF-8 text") from exc
    props: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        cut = min((i for i in (line.find("="), line.find(":")) if i >= 0), default=-1)
        if cut < 0:
            props[line] = ""
        else:
            props[line[:cut].strip()] = line[cut + 1 :].strip()
    if props.get("version") != "0":
        raise CorruptMetaPropertiesError(
            f"{path}: version {props.get('version')!r}; a ZooKeeper-mode broker's is 0"
        )
    cluster_id = props.get("cluster.id", "")
    if not cluster_id:
        raise CorruptMetaPropertiesError(f"{path}: no cluster.id")
    try:
        broker_id = int(props.get("broker.id", "-1"))
    except ValueError:
        raise CorruptMetaPropertiesError(f"{path}: broker.id is not a number") from None
    return MetaProperties(cluster_id, broker_id)


def write_meta_properties(log_dir: Path, meta: MetaProperties, vfs: VFS = DEFAULT_VFS) -> None:
    atomic_write(log_dir / META_PROPERTIES_FILE, meta.encode(), vfs)
