"""Admin APIs of issue 15 on the wire (our codec, real sockets): DescribeLogDirs at every version
with the null "every partition" request no admin client sends, CreatePartitions' request-level
checks that the clients make impossible to send (a topic twice, too few assignments, a replica
on another broker), ListGroups' filters at v4."""

from __future__ import annotations

from pathlib import Path

import pytest

from sluice.protocol import errors
from sluice.protocol import messages as m
from sluice.server.server import Server
from tests.broker.test_server import batch, create_topic, produce
from tests.broker_util import WireClient


@pytest.mark.parametrize("version", range(5))
async def test_describe_log_dirs_null_means_every_partition(
    server: Server, client: WireClient, tmp_path: Path, version: int
) -> None:
    assert await create_topic(client, "a", 2) == 0
    assert await create_topic(client, "b", 1) == 0
    assert (await produce(client, "a", batch(5), partition=1)).error_code == 0
    resp = await client.request(
        m.DescribeLogDirs.key, version, m.DescribeLogDirsRequest(topics=None)
    )
    (result,) = resp.results
    assert (result.error_code, result.log_dir) == (0, str((tmp_path / "data").resolve()))
    listed = {
        (t.name, p.partition_index): (p.partition_size, p.offset_lag, p.is_future_key)
        for t in result.topics
        for p in t.partitions
    }
    files = {
        (topic, p): sum(
            f.stat().st_size for f in (tmp_path / "data" / f"{topic}-{p}").glob("*.log")
        )
        for topic, p in (("a", 0), ("a", 1), ("b", 0))
    }
    assert {k: v for k, v in listed.items() if k[0] in ("a", "b")} == {
        k: (size, 0, False) for k, size in files.items()
    }
    assert files[("a", 1)] > 0 and files[("a", 0)] == 0
    if version >= 4:
        assert result.total_bytes >= result.usable_bytes > 0
    else:
        assert result.total_bytes == -1  # not on the wire before v4


async def create_partitions(
    client: WireClient, *topics: tuple[str, int, list[list[int]] | None]
) -> list[tuple[str, int]]:
    req = m.CreatePartitionsRequest
    body = req(
        topics=[
            req.CreatePartitionsTopic(
                name=name,
                count=count,
                assignments=None
                if assignments is None
                else [req.CreatePartitionsAssignment(broker_ids=a) for a in assignments],
            )
            for name, count, assignments in topics
        ],
        timeout_ms=1000,
        validate_only=False,
    )
    resp = await client.request(m.CreatePartitions.key, 3, body)
    return [(r.name, r.error_code) for r in resp.results]


async def test_create_partitions_request_checks(server: Server, client: WireClient) -> None:
    assert await create_topic(client, "g", 1) == 0
    assert await create_partitions(client, ("g", 3, None), ("g", 4, None)) == [
        ("g", errors.InvalidRequest.code),
        ("g", errors.InvalidRequest.code),
    ]
    assert await create_partitions(client, ("g", 3, [[0]])) == [
        ("g", errors.InvalidReplicaAssignment.code)  # 2 new partitions, 1 assignment
    ]
    assert await create_partitions(client, ("g", 2, [[1]])) == [
        ("g", errors.InvalidReplicaAssignment.code)  # not this broker
    ]
    assert server.log_manager is not None and server.log_manager.topics()["g"] == 1
    assert await create_partitions(client, ("g", 3, [[0], [0]])) == [("g", 0)]
    assert server.log_manager.topics()["g"] == 3


async def test_list_groups_v4_filter_without_groups(client: WireClient) -> None:
    for version in (3, 4, 5):
        body = m.ListGroupsRequest(states_filter=["Stable"], types_filter=["classic"])
        resp = await client.request(m.ListGroups.key, version, body)
        assert (resp.error_code, resp.groups) == (0, [])
