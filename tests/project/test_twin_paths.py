"""Issue 25: a handler has one path, standalone and clustered alike. What differs between a
standalone broker (a one-broker cluster) and a cluster member is the metadata view
(:mod:`sluice.server.metadata.view`), never a ``self.cluster`` branch in a handler (nor one on
``cluster_mode`` or on which view it is).

The uses left: the handlers' ``cluster`` attribute is declared and set on joining
(``api/base.py``, which also hands the standalone view the transaction coordinator's
readiness), and ControlledShutdown, a broker-to-controller API served only by a cluster member,
asks the cluster's controller (``api/cluster.py``)."""

from __future__ import annotations

import re
from pathlib import Path

API = Path(__file__).resolve().parents[2] / "sluice" / "server" / "api"
#: A twin path's test: ``self.cluster``, the configured mode, or which metadata view it is.
SELF_CLUSTER = re.compile(
    r"\bself\.cluster\b|\bcluster_mode\b|isinstance\([^)]*\b(?:LocalMetadata|ZkMetadata)\b"
)

#: File (under sluice/server/api) -> the uses it may have (base.py: also the standalone view
#: handed the transaction coordinator's readiness when the coordinator is set).
ALLOWED = {"base.py": 3, "cluster.py": 2}


def _uses() -> dict[str, int]:
    counts = {}
    for path in sorted(API.rglob("*.py")):
        found = len(SELF_CLUSTER.findall(path.read_text()))
        if found:
            counts[str(path.relative_to(API))] = found
    return counts


def test_no_standalone_cluster_twin_paths_in_the_handlers() -> None:
    over = {f: n for f, n in _uses().items() if n > ALLOWED.get(f, 0)}
    assert over == {}, (
        f"self.cluster branches in sluice/server/api beyond those allowed {ALLOWED}: {over}; "
        "put what differs between standalone and cluster behind MetadataView instead"
    )


def test_the_count_sees_a_branch() -> None:
    """The pattern finds what a twin path looks like (and not ``self.cluster_id``)."""
    code = "if self.cluster is not None:\n    x = self.cluster.cache\ny = self.cluster_id\n"
    assert len(SELF_CLUSTER.findall(code)) == 2
    code = "if self.config.cluster_mode or isinstance(self.metadata_view, ZkMetadata):\n"
    assert len(SELF_CLUSTER.findall(code)) == 2
