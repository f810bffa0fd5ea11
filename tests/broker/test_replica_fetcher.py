"""Two real brokers, one partition replicated by the follower's fetcher over a real socket.

No ZooKeeper: the partition state is applied to both by hand, as the state watcher will apply
it, and the follower's fetcher manager is told whom to follow.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

from sluice.server.replication.replica_fetcher import FetcherConfig, ReplicaFetcherManager
from sluice.server.server import Server
from tests.broker.test_follower_fetch import produce_request
from tests.broker.test_server import PRODUCE, batch, create_topic, start_server
from tests.broker_util import WireClient

LEADER, FOLLOWER = 0, 1
WAIT_S = 15.0


async def _until(condition: Callable[[], bool]) -> None:
    while not condition():
        await asyncio.sleep(0.005)


def segment_bytes(server: Server, topic: str) -> bytes:
    assert server.replica_manager is not None
    partition = server.replica_manager.get_partition(topic, 0)
    assert partition is not None
    return b"".join(s.log_path.read_bytes() for s in partition.log.segments)


async def test_follower_copies_the_leader_and_acks_all_waits_for_it(tmp_path: Path) -> None:
    leader = await start_server(tmp_path / "a", "node.id=0")
    follower = await start_server(tmp_path / "b", "node.id=1")
    addresses = {LEADER: ("127.0.0.1", leader.port), FOLLOWER: ("127.0.0.1", follower.port)}
    assert follower.replica_manager is not None and leader.replica_manager is not None
    fetchers = ReplicaFetcherManager(
        follower.replica_manager, addresses.get, FetcherConfig(wait_max_ms=200, backoff_ms=50)
    )
    client = await WireClient.connect("127.0.0.1", leader.port)
    peer = await WireClient.connect("127.0.0.1", follower.port)
    try:
        assert await create_topic(client, "r") == 0
        assert await create_topic(peer, "r") == 0
        # The follower holds records the leader never had (a diverged former leader).
        resp = await peer.request(PRODUCE, 8, produce_request("r", batch(5, size=33), acks=1))
        assert resp.responses[0].partition_responses[0].error_code == 0
        state = ([LEADER, FOLLOWER], [LEADER, FOLLOWER])
        assert leader.replica_manager.apply_partition_state("r", 0, LEADER, 1, *state, 1)
        assert follower.replica_manager.apply_partition_state("r", 0, LEADER, 1, *state, 1)
        fetchers.follow(("r", 0), LEADER, 1)
        for i in range(3):
            resp = await client.request(PRODUCE, 8, produce_request("r", batch(4, i * 4), -1))
            result = resp.responses[0].partition_responses[0]
            assert (result.error_code, result.base_offset) == (0, i * 4)
        lp = leader.replica_manager.get_partition("r", 0)
        fp = follower.replica_manager.get_partition("r", 0)
        assert lp is not None and fp is not None
        assert lp.log.high_watermark == 12
        # The follower truncated its own records away, copied the leader's, and learns HW.
        await asyncio.wait_for(_until(lambda: fp.log.high_watermark == 12), WAIT_S)
        assert fp.log.log_end_offset == 12
        assert segment_bytes(follower, "r") == segment_bytes(leader, "r")
        assert fp.log.leader_epoch_cache.entries == lp.log.leader_epoch_cache.entries
    finally:
        await fetchers.shutdown()
        await client.close()
        await peer.close()
        await leader.shutdown()
        await follower.shutdown()


def test_the_fetcher_writes_the_log_only_through_partition() -> None:
    """The follower's writes (append, HW, log start, truncation) go through ``Partition``, which
    owns the log's state; the fetcher only reads ``partition.log``."""
    import ast

    from sluice.server.replication import replica_fetcher

    writes = {
        "append_as_follower",
        "update_high_watermark",
        "delete_records",
        "truncate_to",
        "truncate_fully_and_start_at",
    }
    source = Path(replica_fetcher.__file__).read_text()
    direct = [
        f"{ast.unparse(node.func)} (line {node.lineno})"
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in writes
        and not (isinstance(node.func.value, ast.Name) and node.func.value.id == "partition")
    ]
    assert direct == []
