"""Group coordinator over real sockets: the classic protocol's state machine and error codes.

An in-process :class:`sluice.server.server.Server` on 127.0.0.1:0 and
:class:`tests.broker_util.WireClient`
connections speaking our codec (one connection per member, as JoinGroup/SyncGroup block their
connection while the rebalance runs). Real clients are in ``test_interop_groups.py``; these tests
pin down the error codes and transitions a client sees in the corner cases.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from sluice.protocol import messages as m
from sluice.server.config import Config
from sluice.server.server import Server
from tests.broker_util import WireClient

OFFSET_COMMIT, OFFSET_FETCH, FIND_COORDINATOR = (
    m.OffsetCommit.key,
    m.OffsetFetch.key,
    m.FindCoordinator.key,
)
JOIN, HEARTBEAT, LEAVE, SYNC = m.JoinGroup.key, m.Heartbeat.key, m.LeaveGroup.key, m.SyncGroup.key
DESCRIBE, LIST, DELETE = m.DescribeGroups.key, m.ListGroups.key, m.DeleteGroups.key
NONE, ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, REBALANCE_IN_PROGRESS = 0, 22, 25, 27
INVALID_SESSION_TIMEOUT, INCONSISTENT_GROUP_PROTOCOL, MEMBER_ID_REQUIRED = 26, 23, 79
FENCED_INSTANCE_ID, INVALID_GROUP_ID, OFFSET_METADATA_TOO_LARGE = 82, 24, 12
UNKNOWN_TOPIC_OR_PARTITION = 3
WAIT = 10.0  # bound of every wait


async def start(tmp_path: Path, *overrides: str) -> Server:
    config = Config.load(
        None,
        [
            "listeners=PLAINTEXT://127.0.0.1:0",
            f"log.dirs={tmp_path / 'data'}",
            "group.initial.rebalance.delay.ms=0",
            "group.min.session.timeout.ms=100",
            *overrides,
        ],
    )
    server = Server(config)
    await server.start()
    return server


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[Server]:
    srv = await start(tmp_path)
    try:
        yield srv
    finally:
        await srv.shutdown()


async def connect(server: Server) -> WireClient:
    return await WireClient.connect("127.0.0.1", server.port)


def join_body(
    member_id: str = "",
    *,
    group: str = "g",
    session_ms: int = 5000,
    rebalance_ms: int = 3000,
    protocols: tuple[tuple[str, bytes], ...] = (("range", b"meta"),),
    instance: str | None = None,
    protocol_type: str = "consumer",
) -> Any:
    proto = m.JoinGroupRequest.JoinGroupRequestProtocol
    return m.JoinGroupRequest(
        group_id=group,
        session_timeout_ms=session_ms,
        rebalance_timeout_ms=rebalance_ms,
        member_id=member_id,
        group_instance_id=instance,
        protocol_type=protocol_type,
        protocols=[proto(name=n, metadata=md) for n, md in protocols],
    )


async def join(client: WireClient, version: int = 5, **kw: Any) -> Any:
    return await client.request(JOIN, version, join_body(**kw), timeout=WAIT)


async def join_new(client: WireClient, **kw: Any) -> Any:
    """v5 join: the MEMBER_ID_REQUIRED round, then the real join."""
    first = await join(client, **kw)
    assert first.error_code == MEMBER_ID_REQUIRED and first.member_id
    return await join(client, member_id=first.member_id, **kw)


async def sync(
    client: WireClient,
    generation: int,
    member: str,
    assignments: dict[str, bytes] | None = None,
    *,
    group: str = "g",
    instance: str | None = None,
) -> Any:
    item = m.SyncGroupRequest.SyncGroupRequestAssignment
    body = m.SyncGroupRequest(
        group_id=group,
        generation_id=generation,
        member_id=member,
        group_instance_id=instance,
        assignments=[item(member_id=k, assignment=v) for k, v in (assignments or {}).items()],
    )
    return await client.request(SYNC, 3, body, timeout=WAIT)


async def heartbeat(client: WireClient, generation: int, member: str, group: str = "g") -> int:
    body = m.HeartbeatRequest(group_id=group, generation_id=generation, member_id=member)
    return int((await client.request(HEARTBEAT, 3, body, timeout=WAIT)).error_code)


async def heartbeat_until(client: WireClient, generation: int, member: str, want: int) -> bool:
    """Heartbeat every 20 ms until the answer is ``want`` (True) or WAIT passed (False)."""
    deadline = asyncio.get_running_loop().time() + WAIT
    while asyncio.get_running_loop().time() < deadline:
        if await heartbeat(client, generation, member) == want:
            return True
        await asyncio.sleep(0.02)
    return False


async def commit(
    client: WireClient,
    generation: int,
    member: str,
    offsets: dict[tuple[str, int], int],
    *,
    group: str = "g",
    metadata: str | None = "",
) -> dict[tuple[str, int], int]:
    topic_cls = m.OffsetCommitRequest.OffsetCommitRequestTopic
    part_cls = m.OffsetCommitRequest.OffsetCommitRequestPartition
    topics: dict[str, list[Any]] = {}
    for (t, p), o in offsets.items():
        topics.setdefault(t, []).append(
            part_cls(partition_index=p, committed_offset=o, committed_metadata=metadata)
        )
    body = m.OffsetCommitRequest(
        group_id=group,
        generation_id_or_member_epoch=generation,
        member_id=member,
        topics=[topic_cls(name=t, partitions=ps) for t, ps in topics.items()],
    )
    resp = await client.request(OFFSET_COMMIT, 7, body, timeout=WAIT)
    return {(t.name, p.partition_index): p.error_code for t in resp.topics for p in t.partitions}


async def fetch_offsets(client: WireClient, group: str = "g") -> dict[tuple[str, int], Any]:
    body = m.OffsetFetchRequest(group_id=group, topics=None)
    resp = await client.request(OFFSET_FETCH, 5, body, timeout=WAIT)
    assert resp.error_code == 0
    return {
        (t.name, p.partition_index): (p.committed_offset, p.metadata)
        for t in resp.topics
        for p in t.partitions
    }


async def describe(client: WireClient, group: str = "g") -> Any:
    resp = await client.request(DESCRIBE, 4, m.DescribeGroupsRequest(groups=[group]))
    (g,) = resp.groups
    return g


async def test_find_coordinator_is_this_broker_and_creates_the_offsets_topic(
    server: Server,
) -> None:
    c = await connect(server)
    try:
        assert server.log_manager is not None
        assert "__consumer_offsets" not in server.log_manager.topics()
        body = m.FindCoordinatorRequest(key="g", key_type=0)
        resp = await c.request(FIND_COORDINATOR, 2, body)
        assert (resp.error_code, resp.node_id, resp.port) == (0, 0, server.port)
        assert server.log_manager.topics()["__consumer_offsets"] == 1
        md = await c.request(3, 1, m.MetadataRequest(topics=None))
        assert {t.name: t.is_internal for t in md.topics} == {"__consumer_offsets": True}
        # a transactional id: this broker too, __transaction_state created then (internal)
        txn = await c.request(FIND_COORDINATOR, 2, m.FindCoordinatorRequest(key="t", key_type=1))
        assert (txn.error_code, txn.node_id, txn.port) == (0, 0, server.port)
        md = await c.request(3, 1, m.MetadataRequest(topics=None))
        assert {t.name: t.is_internal for t in md.topics} == {
            "__consumer_offsets": True,
            "__transaction_state": True,
        }
    finally:
        await c.close()


async def test_single_member_lifecycle_and_error_codes(server: Server) -> None:
    c = await connect(server)
    try:
        joined = await join_new(c)
        assert joined.error_code == NONE
        assert joined.generation_id == 1 and joined.leader == joined.member_id
        assert [(x.member_id, x.metadata) for x in joined.members] == [(joined.member_id, b"meta")]
        me, gen = joined.member_id, joined.generation_id
        assert (await sync(c, gen + 1, me)).error_code == ILLEGAL_GENERATION
        assert (await sync(c, gen, "nobody")).error_code == UNKNOWN_MEMBER_ID
        synced = await sync(c, gen, me, {me: b"assign-me"})
        assert (synced.error_code, synced.assignment) == (NONE, b"assign-me")
        assert await heartbeat(c, gen, me) == NONE
        assert await heartbeat(c, gen - 1, me) == ILLEGAL_GENERATION
        assert await heartbeat(c, gen, "nobody") == UNKNOWN_MEMBER_ID
        assert await heartbeat(c, gen, me, group="other") == UNKNOWN_MEMBER_ID
        # A rejoin without changes from a Stable group's follower would not rebalance; the
        # leader's rejoin does: generation 2.
        again = await join(c, member_id=me)
        assert (again.error_code, again.generation_id) == (NONE, 2)
        g = await describe(c)
        assert (g.group_state, g.protocol_type) == ("CompletingRebalance", "consumer")
        assert (await sync(c, 2, me, {me: b"x"})).assignment == b"x"
        g = await describe(c)
        assert (g.group_state, g.protocol_data) == ("Stable", "range")
        assert [(x.member_id, x.member_metadata, x.member_assignment) for x in g.members] == [
            (me, b"meta", b"x")
        ]
        leave = m.LeaveGroupRequest(group_id="g", member_id=me)
        assert (await c.request(LEAVE, 1, leave)).error_code == NONE
        assert (await c.request(LEAVE, 1, leave)).error_code == UNKNOWN_MEMBER_ID
        assert (await describe(c)).group_state == "Empty"
        assert await heartbeat(c, 2, me) == UNKNOWN_MEMBER_ID
    finally:
        await c.close()


async def test_join_validation_errors(server: Server) -> None:
    c = await connect(server)
    try:
        assert (await join(c, group="")).error_code == INVALID_GROUP_ID
        assert (await join(c, session_ms=10)).error_code == INVALID_SESSION_TIMEOUT
        assert (await join(c, member_id="ghost")).error_code == UNKNOWN_MEMBER_ID
        assert (await join(c, protocols=())).error_code == INCONSISTENT_GROUP_PROTOCOL
        # v3 has no MEMBER_ID_REQUIRED round: the first join completes.
        first = await join(c, version=3)
        assert (first.error_code, first.generation_id) == (NONE, 1)
        await sync(c, 1, first.member_id, {first.member_id: b""})
        other = await connect(server)
        try:
            bad = await join(other, version=3, protocols=(("roundrobin", b""),))
            assert bad.error_code == INCONSISTENT_GROUP_PROTOCOL
            bad = await join(other, version=3, protocol_type="connect")
            assert bad.error_code == INCONSISTENT_GROUP_PROTOCOL
        finally:
            await other.close()
    finally:
        await c.close()


async def test_two_members_rebalance_and_rebalance_in_progress(server: Server) -> None:
    a, b = await connect(server), await connect(server)
    try:
        ja = await join_new(a)
        await sync(a, ja.generation_id, ja.member_id, {ja.member_id: b"all"})
        # b joins: a's heartbeat says REBALANCE_IN_PROGRESS until a rejoins.
        first_b = await join(b)
        join_b = asyncio.ensure_future(join(b, member_id=first_b.member_id))
        assert await heartbeat_until(a, ja.generation_id, ja.member_id, REBALANCE_IN_PROGRESS)
        # A commit with the old generation during the rebalance: the member is known, the
        # generation is still 1 while PreparingRebalance, so it is accepted (Kafka's rule).
        assert await commit(a, 1, ja.member_id, {("t", 0): 3}) == {
            ("t", 0): UNKNOWN_TOPIC_OR_PARTITION
        }
        ra = await join(a, member_id=ja.member_id)
        rb = await asyncio.wait_for(join_b, WAIT)
        assert ra.generation_id == rb.generation_id == 2
        assert ra.leader == rb.leader == ja.member_id
        assert {x.member_id for x in ra.members} == {ja.member_id, rb.member_id}
        assert rb.members == []
        # Follower syncs first and waits for the leader's assignment.
        follower = asyncio.ensure_future(sync(b, 2, rb.member_id))
        await asyncio.sleep(0.05)
        assert not follower.done()
        assert await heartbeat(a, 2, ja.member_id) == NONE  # CompletingRebalance: fine
        assert await commit(a, 2, ja.member_id, {("t", 0): 1}) == {("t", 0): REBALANCE_IN_PROGRESS}
        leader = await sync(a, 2, ja.member_id, {ja.member_id: b"A", rb.member_id: b"B"})
        assert leader.assignment == b"A"
        assert (await asyncio.wait_for(follower, WAIT)).assignment == b"B"
        # b leaves: a learns through its heartbeat and rejoins alone.
        body = m.LeaveGroupRequest(
            group_id="g",
            members=[m.LeaveGroupRequest.MemberIdentity(member_id=rb.member_id)],
        )
        resp = await b.request(LEAVE, 3, body)
        assert resp.error_code == NONE and [x.error_code for x in resp.members] == [NONE]
        assert await heartbeat(a, 2, ja.member_id) == REBALANCE_IN_PROGRESS
        ra = await join(a, member_id=ja.member_id)
        assert ra.generation_id == 3 and len(ra.members) == 1
    finally:
        await a.close()
        await b.close()


async def test_session_timeout_removes_a_silent_member(server: Server) -> None:
    a, b = await connect(server), await connect(server)
    try:
        ja = await join_new(a, session_ms=5000)
        await sync(a, 1, ja.member_id, {})
        first_b = await join(b, session_ms=1000)
        join_b = asyncio.ensure_future(join(b, member_id=first_b.member_id, session_ms=1000))
        ra = await join(a, member_id=ja.member_id, session_ms=5000)
        rb = await asyncio.wait_for(join_b, WAIT)
        await asyncio.gather(sync(a, 2, ra.member_id, {}), sync(b, 2, rb.member_id))
        # b goes silent; a keeps heartbeating and is told to rejoin once b's session expires.
        assert await heartbeat_until(a, 2, ra.member_id, REBALANCE_IN_PROGRESS)
        ra = await join(a, member_id=ra.member_id)
        assert ra.generation_id == 3 and [x.member_id for x in ra.members] == [ra.member_id]
        assert await heartbeat(b, 2, rb.member_id) == UNKNOWN_MEMBER_ID
    finally:
        await a.close()
        await b.close()


async def test_rebalance_timeout_drops_members_that_do_not_rejoin(server: Server) -> None:
    a, b = await connect(server), await connect(server)
    try:
        ja = await join_new(a, session_ms=5000, rebalance_ms=300)
        await sync(a, 1, ja.member_id, {})
        # b joins; a (alive: it heartbeats) never rejoins -> after 300 ms b's join completes alone.
        first_b = await join(b, rebalance_ms=300)
        rb = await join(b, member_id=first_b.member_id, rebalance_ms=300)
        assert rb.generation_id == 2 and rb.leader == rb.member_id
        assert [x.member_id for x in rb.members] == [rb.member_id]
        assert await heartbeat(a, 1, ja.member_id) == UNKNOWN_MEMBER_ID
    finally:
        await a.close()
        await b.close()


async def test_static_member_rejoins_without_rebalance_and_fences_the_old_id(
    server: Server,
) -> None:
    a, b, b2 = await connect(server), await connect(server), await connect(server)
    try:
        ja = await join(a, instance="inst-a")  # static: no MEMBER_ID_REQUIRED round
        assert ja.error_code == NONE
        await sync(a, 1, ja.member_id, {ja.member_id: b"A"}, instance="inst-a")
        jb_task = asyncio.ensure_future(join(b, instance="inst-b"))
        assert await heartbeat_until(a, 1, ja.member_id, REBALANCE_IN_PROGRESS)
        ra = await join(a, member_id=ja.member_id, instance="inst-a")
        jb = await asyncio.wait_for(jb_task, WAIT)
        assert ra.generation_id == jb.generation_id == 2
        await asyncio.gather(
            sync(a, 2, ra.member_id, {ra.member_id: b"A", jb.member_id: b"B"}, instance="inst-a"),
            sync(b, 2, jb.member_id, instance="inst-b"),
        )
        # inst-b restarts (new connection, no member id): same generation, old assignment.
        again = await join(b2, instance="inst-b")
        assert again.error_code == NONE and again.generation_id == 2
        assert again.member_id != jb.member_id
        synced = await sync(b2, 2, again.member_id, instance="inst-b")
        assert synced.assignment == b"B"
        # The old incarnation is fenced.
        body = m.HeartbeatRequest(
            group_id="g", generation_id=2, member_id=jb.member_id, group_instance_id="inst-b"
        )
        assert (await b.request(HEARTBEAT, 3, body)).error_code == FENCED_INSTANCE_ID
        assert await heartbeat(a, 2, ra.member_id) == NONE  # no rebalance happened
    finally:
        for c in (a, b, b2):
            await c.close()


async def test_offset_commit_rules_and_fetch(server: Server) -> None:
    c = await connect(server)
    try:
        assert server.log_manager is not None
        server.log_manager.create_topic("t", 2)
        # A standalone commit (generation -1, no member): allowed for a group without members.
        assert await commit(c, -1, "", {("t", 0): 5, ("t", 1): 6}, metadata="m") == {
            ("t", 0): NONE,
            ("t", 1): NONE,
        }
        assert await fetch_offsets(c) == {("t", 0): (5, "m"), ("t", 1): (6, "m")}
        assert await commit(c, -1, "", {("nope", 0): 1}) == {
            ("nope", 0): UNKNOWN_TOPIC_OR_PARTITION
        }
        too_big = await commit(c, -1, "", {("t", 0): 9}, metadata="x" * 5000)
        assert too_big == {("t", 0): OFFSET_METADATA_TOO_LARGE}
        # A generation for a group that does not exist: ILLEGAL_GENERATION.
        assert await commit(c, 3, "m1", {("t", 0): 1}, group="fresh") == {
            ("t", 0): ILLEGAL_GENERATION
        }
        # Once the group has members, commits need the member id and generation.
        joined = await join_new(c)
        await sync(c, joined.generation_id, joined.member_id, {})
        assert await commit(c, -1, "", {("t", 0): 7}) == {("t", 0): UNKNOWN_MEMBER_ID}
        assert await commit(c, 9, joined.member_id, {("t", 0): 7}) == {("t", 0): ILLEGAL_GENERATION}
        ok = await commit(c, joined.generation_id, joined.member_id, {("t", 0): 7})
        assert ok == {("t", 0): NONE}
        # OffsetFetch of given partitions (v1) includes unknown ones as -1.
        tcls = m.OffsetFetchRequest.OffsetFetchRequestTopic
        body = m.OffsetFetchRequest(group_id="g", topics=[tcls(name="t", partition_indexes=[0, 9])])
        resp = await c.request(OFFSET_FETCH, 1, body)
        got = {p.partition_index: p.committed_offset for t in resp.topics for p in t.partitions}
        assert got == {0: 7, 9: -1}
        empty = await fetch_offsets(c, group="never-seen")
        assert empty == {}
    finally:
        await c.close()


async def test_list_describe_delete(server: Server) -> None:
    c = await connect(server)
    try:
        assert server.log_manager is not None
        server.log_manager.create_topic("t", 1)
        await commit(c, -1, "", {("t", 0): 1}, group="standalone")
        joined = await join_new(c, group="busy")
        await sync(c, 1, joined.member_id, {}, group="busy")
        listed = await c.request(LIST, 2, m.ListGroupsRequest())
        assert {(g.group_id, g.protocol_type) for g in listed.groups} == {
            ("standalone", ""),
            ("busy", "consumer"),
        }
        assert (await describe(c, "nothing")).group_state == "Dead"
        names = ["busy", "standalone", "nothing"]
        resp = await c.request(DELETE, 1, m.DeleteGroupsRequest(groups_names=names))
        assert [(r.group_id, r.error_code) for r in resp.results] == [
            ("busy", 68),
            ("standalone", 0),
            ("nothing", 69),
        ]
        assert await fetch_offsets(c, "standalone") == {}
    finally:
        await c.close()


async def test_offsets_and_membership_survive_restart(tmp_path: Path) -> None:
    srv = await start(tmp_path)
    try:
        assert srv.log_manager is not None
        srv.log_manager.create_topic("t", 3)
        c = await connect(srv)
        joined = await join_new(c, session_ms=5000)
        me = joined.member_id
        await sync(c, 1, me, {me: b"mine"})
        await commit(c, 1, me, {("t", 0): 10, ("t", 1): 20}, metadata="first")
        for superseded in range(5):  # records the log cleaner can drop
            await commit(c, 1, me, {("t", 0): superseded})
        await commit(c, 1, me, {("t", 0): 11})
        await commit(c, -1, "", {("t", 2): 2}, group="other")
        await c.close()
    finally:
        await srv.shutdown()
    for _restart in range(2):
        srv = await start(tmp_path)
        try:
            c = await connect(srv)
            assert await fetch_offsets(c) == {("t", 0): (11, ""), ("t", 1): (20, "first")}
            assert await fetch_offsets(c, "other") == {("t", 2): (2, "")}
            # The member came back with the group's generation: its heartbeats still work.
            assert await heartbeat(c, 1, me) == NONE
            g = await describe(c)
            assert (g.group_state, [x.member_assignment for x in g.members]) == (
                "Stable",
                [b"mine"],
            )
            await c.close()
        finally:
            await srv.shutdown()


async def test_initial_rebalance_delay_gathers_members_into_one_generation(
    tmp_path: Path,
) -> None:
    srv = await start(tmp_path, "group.initial.rebalance.delay.ms=400")
    a, b = await connect(srv), await connect(srv)
    try:
        first_a, first_b = await join(a), await join(b)
        # Both join an Empty group within the delay: a single generation holds both.
        ja, jb = await asyncio.gather(
            join(a, member_id=first_a.member_id), join(b, member_id=first_b.member_id)
        )
        assert ja.generation_id == jb.generation_id == 1
        leader = ja if ja.members else jb
        assert {x.member_id for x in leader.members} == {first_a.member_id, first_b.member_id}
    finally:
        await a.close()
        await b.close()
        await srv.shutdown()
