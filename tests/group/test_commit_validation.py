"""OffsetCommit validation in Kafka's order, as a table: group state x (member, generation).

Kafka's ``GroupCoordinator.handleCommitOffsets`` / ``doCommitOffsets`` /
``validateOffsetCommit`` / ``validateCurrentMember`` (classic protocol):

1. no group: generation >= 0 -> ILLEGAL_GENERATION; else a new (Empty) group, go on;
2. a request naming a member (generation >= 0, a member id or an instance id): the instance id,
   if given, must map to the member id (another id: FENCED_INSTANCE_ID, unknown instance:
   UNKNOWN_MEMBER_ID), else the member id must be a member (UNKNOWN_MEMBER_ID); then the
   generation must be the group's (ILLEGAL_GENERATION); an anonymous request (-1, "", no
   instance) only while the group is Empty (else UNKNOWN_MEMBER_ID);
3. only then the state: Empty, PreparingRebalance and Stable store the offsets;
   CompletingRebalance answers REBALANCE_IN_PROGRESS.

The table below is that code written out for each state; each cell is one real OffsetCommit v7
over a socket. Member A is static (``inst-a``), so the instance rows test step 2's first half.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from sluice.protocol import messages as m
from sluice.server.server import Server
from tests.broker_util import WireClient
from tests.group.test_groups import WAIT, connect, join, start, sync

NONE, ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, REBALANCE_IN_PROGRESS = 0, 22, 25, 27
FENCED_INSTANCE_ID = 82

# (who, generation) of each request. who: "A" (A's id), "A@inst-a" (A's id and instance),
# "ghost" (an id that is no member), "ghost@inst-a" (A's instance, another id),
# "A@inst-x" (A's id, an instance nobody has), "anonymous" ("" and no instance).
# generation: the group's current one, one less, one more, or -1.
ROWS = [
    ("A", "current"),
    ("A", "stale"),
    ("A", "next"),
    ("A", "-1"),
    ("A@inst-a", "current"),
    ("A@inst-a", "stale"),
    ("ghost", "current"),
    ("ghost@inst-a", "current"),
    ("A@inst-x", "current"),
    ("anonymous", "-1"),
]

_U, _I, _F, _R = UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION, FENCED_INSTANCE_ID, REBALANCE_IN_PROGRESS
#: Kafka's answer per state, in the order of ROWS.
TABLE: dict[str, list[int]] = {
    #                     A   stale next  -1  A@a  stale ghost g@a  A@x  anon
    "NoGroup":          [_I,  _I,   _I,   _U,  _I,  _I,   _I,   _I,  _I,  NONE],
    "Empty":            [_U,  _U,   _U,   _U,  _U,  _U,   _U,   _U,  _U,  NONE],
    "PreparingRebalance": [NONE, _I, _I, _I, NONE, _I,   _U,   _F,  _U,  _U],
    "CompletingRebalance": [_R,  _I,  _I,  _I,  _R,  _I,   _U,   _F,  _U,  _U],
    "Stable":           [NONE, _I,  _I,   _I, NONE,  _I,   _U,   _F,  _U,  _U],
}  # fmt: skip


@dataclass
class Setup:
    group: str
    member: str  # A's member id ("" for no group)
    generation: int
    clients: list[WireClient] = field(default_factory=list)
    tasks: list[asyncio.Future[Any]] = field(default_factory=list)


async def _stable_a(server: Server, group: str) -> tuple[WireClient, str]:
    a = await connect(server)
    ja = await join(a, group=group, instance="inst-a")
    assert ja.error_code == NONE and ja.generation_id == 1
    synced = await sync(a, 1, ja.member_id, {ja.member_id: b"A"}, group=group, instance="inst-a")
    assert synced.error_code == NONE
    return a, ja.member_id


async def make_state(server: Server, state: str) -> Setup:
    """Group ``g-<state>`` in ``state``, A (static, inst-a) a member where the state has one."""
    group = f"g-{state}"
    if state == "NoGroup":
        return Setup(group, "A-never-joined", 1)
    a, me = await _stable_a(server, group)
    setup = Setup(group, me, 1, [a])
    if state == "Stable":
        return setup
    if state == "Empty":
        leave = m.LeaveGroupRequest(
            group_id=group,
            members=[m.LeaveGroupRequest.MemberIdentity(member_id=me, group_instance_id="inst-a")],
        )
        assert (await a.request(m.LeaveGroup.key, 3, leave)).error_code == NONE
        setup.generation = 2  # the rebalance with nobody left completed: generation 2, Empty
        return setup
    # B joins: PreparingRebalance until A rejoins (A's generation is still 1).
    b = await connect(server)
    setup.clients.append(b)
    setup.tasks.append(asyncio.ensure_future(join(b, version=3, group=group)))
    await _wait_state(a, group, "PreparingRebalance")
    if state == "PreparingRebalance":
        return setup
    ra = await join(a, group=group, member_id=me, instance="inst-a")
    assert ra.generation_id == 2
    await asyncio.wait_for(setup.tasks[0], WAIT)
    setup.generation = 2  # both joined, nobody synced: CompletingRebalance
    await _wait_state(a, group, "CompletingRebalance")
    return setup


async def _wait_state(client: WireClient, group: str, state: str) -> None:
    deadline = asyncio.get_running_loop().time() + WAIT
    while True:
        body = m.DescribeGroupsRequest(groups=[group])
        resp = await client.request(m.DescribeGroups.key, 4, body)
        if resp.groups[0].group_state == state:
            return
        assert asyncio.get_running_loop().time() < deadline, f"{group} never became {state}"
        await asyncio.sleep(0.01)


def request_for(setup: Setup, who: str, gen: str) -> tuple[str, int, str | None]:
    member_part, _, instance = who.partition("@")
    member = {"A": setup.member, "ghost": "ghost-member", "anonymous": ""}[member_part]
    generation = {
        "current": setup.generation,
        "stale": setup.generation - 1,
        "next": setup.generation + 1,
        "-1": -1,
    }[gen]
    return member, generation, instance or None


async def commit_code(
    client: WireClient, group: str, member: str, generation: int, instance: str | None
) -> int:
    topic_cls = m.OffsetCommitRequest.OffsetCommitRequestTopic
    part_cls = m.OffsetCommitRequest.OffsetCommitRequestPartition
    body = m.OffsetCommitRequest(
        group_id=group,
        generation_id_or_member_epoch=generation,
        member_id=member,
        group_instance_id=instance,
        topics=[topic_cls(name="t", partitions=[part_cls(partition_index=0, committed_offset=5,
                                                          committed_metadata="")])],
    )  # fmt: skip
    resp = await client.request(m.OffsetCommit.key, 7, body, timeout=WAIT)
    ((code,),) = [[p.error_code for p in t.partitions] for t in resp.topics]
    return int(code)


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[Server]:
    srv = await start(tmp_path)
    assert srv.log_manager is not None
    srv.log_manager.create_topic("t", 1)
    try:
        yield srv
    finally:
        await srv.shutdown()


def test_table_covers_every_row() -> None:
    assert all(len(codes) == len(ROWS) for codes in TABLE.values())


@pytest.mark.parametrize("state", list(TABLE))
@pytest.mark.parametrize("row", range(len(ROWS)), ids=[f"{w}-gen:{g}" for w, g in ROWS])
async def test_offset_commit_validation_table(server: Server, state: str, row: int) -> None:
    setup = await make_state(server, state)
    probe = await connect(server)
    try:
        member, generation, instance = request_for(setup, *ROWS[row])
        got = await commit_code(probe, setup.group, member, generation, instance)
        assert got == TABLE[state][row], (state, ROWS[row], (member, generation, instance))
        if got == NONE:  # stored, and the state did not change because of it
            body = m.OffsetFetchRequest(group_id=setup.group, topics=None)
            fetched = await probe.request(m.OffsetFetch.key, 5, body)
            assert [p.committed_offset for t in fetched.topics for p in t.partitions] == [5]
    finally:
        for task in setup.tasks:
            task.cancel()
        for c in [probe, *setup.clients]:
            await c.close()
