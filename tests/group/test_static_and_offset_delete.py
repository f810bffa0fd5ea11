"""KIP-345 static members rejoining a Stable group (also the leader) and OffsetDelete (KIP-496),
over real sockets with our codec. The real-client versions are in
``tests/interop/test_interop_conformance.py``."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from sluice.protocol import messages as m
from sluice.protocol.consumer_protocol import encode_subscription
from sluice.server.server import Server
from tests.broker_util import WireClient
from tests.group.test_groups import (
    WAIT,
    commit,
    connect,
    describe,
    heartbeat,
    join,
    start,
    sync,
)

NONE, REBALANCE_IN_PROGRESS, FENCED_INSTANCE_ID = 0, 27, 82
UNKNOWN_TOPIC_OR_PARTITION, NON_EMPTY_GROUP, GROUP_ID_NOT_FOUND = 3, 68, 69
GROUP_SUBSCRIBED_TO_TOPIC = 86


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[Server]:
    srv = await start(tmp_path)
    try:
        yield srv
    finally:
        await srv.shutdown()


async def stable_pair(
    server: Server, protocols: tuple[tuple[str, bytes], ...] = (("range", b"meta"),)
) -> tuple[list[WireClient], Any, Any]:
    """Static inst-a (joined first: the leader) and inst-b, Stable at generation 2."""
    a, b = await connect(server), await connect(server)
    ja = await join(a, instance="inst-a", protocols=protocols)
    await sync(a, 1, ja.member_id, {ja.member_id: b"A"}, instance="inst-a")
    jb_task = asyncio.ensure_future(join(b, instance="inst-b", protocols=protocols))
    deadline = asyncio.get_running_loop().time() + WAIT
    while await heartbeat(a, 1, ja.member_id) != REBALANCE_IN_PROGRESS:
        assert asyncio.get_running_loop().time() < deadline
        await asyncio.sleep(0.02)
    ra = await join(a, member_id=ja.member_id, instance="inst-a", protocols=protocols)
    jb = await asyncio.wait_for(jb_task, WAIT)
    assert ra.generation_id == jb.generation_id == 2 and ra.leader == ra.member_id
    await asyncio.gather(
        sync(a, 2, ra.member_id, {ra.member_id: b"A", jb.member_id: b"B"}, instance="inst-a"),
        sync(b, 2, jb.member_id, instance="inst-b"),
    )
    return [a, b], ra, jb


async def test_restarted_static_leader_keeps_the_group_stable(server: Server) -> None:
    (a, b), ra, jb = await stable_pair(server)
    a2 = await connect(server)
    try:
        again = await join(a2, instance="inst-a")  # the leader restarted: no member id
        assert again.error_code == NONE and again.generation_id == 2
        assert again.member_id != ra.member_id
        # The answer names the leader as it was: the restarted member acts as a follower ...
        assert again.leader == ra.member_id and again.members == []
        synced = await sync(a2, 2, again.member_id, instance="inst-a")
        assert (synced.error_code, synced.assignment) == (NONE, b"A")
        # ... nobody else rebalances, and the group stays Stable.
        assert await heartbeat(b, 2, jb.member_id) == NONE
        assert await heartbeat(a2, 2, again.member_id) == NONE
        g = await describe(b)
        assert g.group_state == "Stable"
        assert {x.member_id: x.member_assignment for x in g.members} == {
            again.member_id: b"A",
            jb.member_id: b"B",
        }
        # The old incarnation is fenced.
        body = m.HeartbeatRequest(group_id="g", generation_id=2, member_id=ra.member_id,
                                  group_instance_id="inst-a")  # fmt: skip
        assert (await a.request(m.Heartbeat.key, 3, body)).error_code == (FENCED_INSTANCE_ID)
        # It is still the leader: at the next rebalance the new id gets the members.
        leave = m.LeaveGroupRequest(group_id="g", members=[
            m.LeaveGroupRequest.MemberIdentity(member_id=jb.member_id, group_instance_id="inst-b")
        ])  # fmt: skip
        assert (await b.request(m.LeaveGroup.key, 3, leave)).error_code == NONE
        assert await heartbeat(a2, 2, again.member_id) == REBALANCE_IN_PROGRESS
        rejoined = await join(a2, member_id=again.member_id, instance="inst-a")
        assert rejoined.generation_id == 3 and rejoined.leader == again.member_id
        assert [x.member_id for x in rejoined.members] == [again.member_id]
    finally:
        for c in (a, b, a2):
            await c.close()


async def test_static_rejoin_that_changes_the_selected_protocol_rebalances(
    server: Server,
) -> None:
    both = (("range", b"m"), ("roundrobin", b"m"))
    (a, b), ra, _ = await stable_pair(server, both)
    b2 = await connect(server)
    try:
        # inst-b comes back preferring roundrobin: the vote is 1:1 and the leader's order
        # keeps range -- no change, no rebalance.
        same = await join(b2, instance="inst-b", protocols=(("roundrobin", b"m"), ("range", b"m")))
        assert (same.error_code, same.generation_id, same.protocol_name) == (NONE, 2, "range")
        # It comes back with only roundrobin: the selection must change -> a rebalance.
        task = asyncio.ensure_future(
            join(connect_b3 := await connect(server), instance="inst-b",
                 protocols=(("roundrobin", b"m"),))
        )  # fmt: skip
        deadline = asyncio.get_running_loop().time() + WAIT
        while await heartbeat(a, 2, ra.member_id) != REBALANCE_IN_PROGRESS:
            assert asyncio.get_running_loop().time() < deadline
            await asyncio.sleep(0.02)
        ra3 = await join(a, member_id=ra.member_id, instance="inst-a", protocols=both)
        jb3 = await asyncio.wait_for(task, WAIT)
        assert ra3.generation_id == jb3.generation_id == 3
        assert ra3.protocol_name == "roundrobin"
        await connect_b3.close()
    finally:
        for c in (a, b, b2):
            await c.close()


async def test_static_rejoin_while_completing_rebalance_rebalances(server: Server) -> None:
    a, b, b2 = await connect(server), await connect(server), await connect(server)
    try:
        ja = await join(a, instance="inst-a")
        await sync(a, 1, ja.member_id, {}, instance="inst-a")
        jb_task = asyncio.ensure_future(join(b, instance="inst-b"))
        deadline = asyncio.get_running_loop().time() + WAIT
        while await heartbeat(a, 1, ja.member_id) != REBALANCE_IN_PROGRESS:
            assert asyncio.get_running_loop().time() < deadline
            await asyncio.sleep(0.02)
        ra = await join(a, member_id=ja.member_id, instance="inst-a")
        await asyncio.wait_for(jb_task, WAIT)
        assert (await describe(a)).group_state == "CompletingRebalance"
        # inst-b restarts before the leader synced: the leader may be assigning to the old id.
        task = asyncio.ensure_future(join(b2, instance="inst-b"))
        deadline = asyncio.get_running_loop().time() + WAIT
        while (await describe(a)).group_state != "PreparingRebalance":
            assert asyncio.get_running_loop().time() < deadline
            await asyncio.sleep(0.01)
        assert (await sync(a, 2, ra.member_id, {}, instance="inst-a")).error_code == (
            REBALANCE_IN_PROGRESS
        )
        ra3 = await join(a, member_id=ra.member_id, instance="inst-a")
        jb3 = await asyncio.wait_for(task, WAIT)
        assert ra3.generation_id == jb3.generation_id == 3
    finally:
        for c in (a, b, b2):
            await c.close()


# ----------------------------------------------------------------------------- OffsetDelete


async def offset_delete(
    c: WireClient, group: str, partitions: dict[str, list[int]]
) -> tuple[int, dict[tuple[str, int], int]]:
    tcls = m.OffsetDeleteRequest.OffsetDeleteRequestTopic
    pcls = m.OffsetDeleteRequest.OffsetDeleteRequestPartition
    body = m.OffsetDeleteRequest(
        group_id=group,
        topics=[tcls(name=t, partitions=[pcls(partition_index=p) for p in ps])
                for t, ps in partitions.items()],
    )  # fmt: skip
    resp = await c.request(m.OffsetDelete.key, 0, body)
    got = {(t.name, p.partition_index): p.error_code for t in resp.topics for p in t.partitions}
    return resp.error_code, got


async def committed(c: WireClient, group: str) -> dict[tuple[str, int], int]:
    resp = await c.request(m.OffsetFetch.key, 5, m.OffsetFetchRequest(group_id=group, topics=None))
    return {(t.name, p.partition_index): p.committed_offset for t in resp.topics
            for p in t.partitions}  # fmt: skip


async def test_offset_delete_empty_group_unknown_group_and_unknown_topic(server: Server) -> None:
    assert server.log_manager is not None
    server.log_manager.create_topic("t", 2)
    c = await connect(server)
    try:
        await commit(c, -1, "", {("t", 0): 5, ("t", 1): 6}, group="e")
        assert await offset_delete(c, "nope", {"t": [0]}) == (GROUP_ID_NOT_FOUND, {})
        code, got = await offset_delete(c, "e", {"t": [0], "missing": [0]})
        assert (code, got) == (NONE, {("t", 0): NONE, ("missing", 0): UNKNOWN_TOPIC_OR_PARTITION})
        assert await committed(c, "e") == {("t", 1): 6}
        # The last offset of an Empty group goes: the group goes too.
        assert await offset_delete(c, "e", {"t": [1, 1]}) == (NONE, {("t", 1): NONE})
        listed = await c.request(m.ListGroups.key, 2, m.ListGroupsRequest())
        assert "e" not in {g.group_id for g in listed.groups}
        assert await offset_delete(c, "e", {"t": [1]}) == (GROUP_ID_NOT_FOUND, {})
    finally:
        await c.close()


async def test_offset_delete_live_groups(server: Server) -> None:
    assert server.log_manager is not None
    server.log_manager.create_topic("mine", 1)
    server.log_manager.create_topic("other", 1)
    c, d = await connect(server), await connect(server)
    try:
        meta = encode_subscription(["mine"])
        joined = await join(c, version=3, protocols=(("range", meta),))
        await sync(c, 1, joined.member_id, {})
        await commit(c, 1, joined.member_id, {("mine", 0): 3, ("other", 0): 4})
        code, got = await offset_delete(c, "g", {"mine": [0], "other": [0]})
        assert (code, got) == (NONE, {("mine", 0): GROUP_SUBSCRIBED_TO_TOPIC, ("other", 0): NONE})
        assert await committed(c, "g") == {("mine", 0): 3}
        # A live group of another protocol type: NON_EMPTY_GROUP, no partition errors.
        other = await join(d, version=3, group="conn", protocol_type="connect")
        await sync(d, 1, other.member_id, {}, group="conn")
        assert await offset_delete(d, "conn", {"mine": [0]}) == (NON_EMPTY_GROUP, {})
    finally:
        await c.close()
        await d.close()
