"""Our client's consumer groups (sluice.client.group + Consumer.subscribe/commit) against the
broker,
and mixed with kafka-python members in one group (same ConsumerProtocol bytes, same assignors).
"""

from __future__ import annotations

import asyncio
import time
import warnings
from collections.abc import AsyncIterator
from typing import Any

import pytest

from sluice.client import Consumer, Producer, TopicPartition
from sluice.client.group import (
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
    range_assign,
    roundrobin_assign,
)
from sluice.testing.embedded import EmbeddedBroker

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    import kafka
    from kafka.protocol.consumer.metadata import (
        ConsumerProtocolAssignment,
        ConsumerProtocolSubscription,
    )

WAIT = 15.0
GROUP_PROPS = {"group.initial.rebalance.delay.ms": "0", "group.min.session.timeout.ms": "500"}


@pytest.fixture
async def broker() -> AsyncIterator[EmbeddedBroker]:
    async with EmbeddedBroker(properties=GROUP_PROPS) as b:
        yield b


def member(broker: EmbeddedBroker, group: str, **kw: Any) -> Consumer:
    options: dict[str, Any] = {
        "group_id": group,
        "auto_offset_reset": "earliest",
        "heartbeat_interval_ms": 100,
        "session_timeout_ms": 3000,
        **kw,
    }
    return Consumer(broker.bootstrap_servers, **options)


async def produce(broker: EmbeddedBroker, topic: str, partitions: int, per: int) -> None:
    async with Producer(broker.bootstrap_servers) as p:
        futs = [
            await p.send(topic, b"%d-%d" % (part, i), partition=part)
            for part in range(partitions)
            for i in range(per)
        ]
        await asyncio.gather(*futs)


async def create(broker: EmbeddedBroker, topic: str, partitions: int) -> None:
    assert broker.server is not None and broker.server.log_manager is not None
    broker.server.log_manager.create_topic(topic, partitions)


async def until(what: str, condition: Any) -> None:
    """Our consumer keeps its membership in the background: no polling needed (and none done,
    so no record is taken while waiting)."""
    deadline = time.monotonic() + WAIT
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)


def test_consumer_protocol_bytes_match_kafka_python() -> None:
    ours = encode_subscription(["b", "a"])
    theirs = ConsumerProtocolSubscription(topics=["a", "b"], user_data=None)
    assert ours == bytes(theirs.encode(version=0))
    assert decode_subscription(ours) == ["a", "b"]
    assert ConsumerProtocolSubscription.decode(ours).topics == ["a", "b"]
    tps = {TopicPartition("t", p) for p in range(3)} | {TopicPartition("u", 1)}
    encoded = encode_assignment(tps)
    assert decode_assignment(encoded) == tps
    assert {(tp.topic, tp.partition) for tp in ConsumerProtocolAssignment.decode(encoded)
            .partitions()} == {(tp.topic, tp.partition) for tp in tps}  # fmt: skip
    subs = {"m-1": ["t"], "m-2": ["t"]}
    ours_split = range_assign(subs, {"t": 5})
    assert ours_split == {
        "m-1": {TopicPartition("t", p) for p in (0, 1, 2)},
        "m-2": {TopicPartition("t", p) for p in (3, 4)},
    }
    rr = roundrobin_assign({"a": ["t", "u"], "b": ["t"]}, {"t": 3, "u": 2})
    assert rr == {
        "a": {TopicPartition("t", 0), TopicPartition("t", 2), TopicPartition("u", 0),
              TopicPartition("u", 1)},
        "b": {TopicPartition("t", 1)},
    }  # fmt: skip


@pytest.mark.slow
async def test_two_members_split_consume_once_and_rebalance_on_leave(
    broker: EmbeddedBroker,
) -> None:
    await create(broker, "split", 4)
    await produce(broker, "split", 4, 25)
    a, b = member(broker, "g-split"), member(broker, "g-split")
    await a.start()
    await b.start()
    try:
        a.subscribe(["split"])
        b.subscribe(["split"])
        await until(
            "a 2-2 split",
            lambda: len(a.assignment()) == 2 and len(b.assignment()) == 2
            and not a.assignment() & b.assignment(),
        )  # fmt: skip
        seen: list[bytes] = []
        deadline = time.monotonic() + WAIT
        while len(seen) < 100 and time.monotonic() < deadline:
            for c in (a, b):
                for records in (await c.getmany(timeout_ms=50)).values():
                    seen.extend(r.value for r in records if r.value is not None)
        assert sorted(seen) == sorted(b"%d-%d" % (p, i) for p in range(4) for i in range(25))
        await a.commit()
        await b.commit()
        for tp in a.assignment() | b.assignment():
            owner = a if tp in a.assignment() else b
            assert await owner.committed(tp) == 25
    finally:
        await b.stop()  # commits and leaves the group
    try:
        await until("a to own all 4 partitions", lambda: len(a.assignment()) == 4)
        # Nothing is re-delivered: b's partitions resume at its commits.
        assert await a.getmany(timeout_ms=300) == {}
    finally:
        await a.stop()


async def test_restarted_member_resumes_after_last_commit(broker: EmbeddedBroker) -> None:
    await create(broker, "resume", 1)
    await produce(broker, "resume", 1, 50)
    tp = TopicPartition("resume", 0)
    async with member(broker, "g-resume", enable_auto_commit=False) as c:
        c.subscribe(["resume"])
        got: list[Any] = []
        deadline = time.monotonic() + WAIT
        while len(got) < 20 and time.monotonic() < deadline:
            got.extend(r for rs in (await c.getmany(timeout_ms=50, max_records=1)).values()
                       for r in rs)  # fmt: skip
        await c.commit({tp: got[19].offset + 1})  # exactly after the 20th record
    async with member(broker, "g-resume") as c:
        c.subscribe(["resume"])
        first = await asyncio.wait_for(c.getone(), WAIT)
        assert first.offset == 20
        assert await c.committed(tp) == 20
    # The auto-commit at stop stored the position after the one record taken.
    async with Consumer(broker.bootstrap_servers, group_id="g-resume") as c:
        assert await c.committed(tp) == 21


async def test_mixed_group_with_kafka_python(broker: EmbeddedBroker) -> None:
    """kafka-python is blocking: it runs in a worker thread while the broker (in process) and
    our consumer share this event loop."""
    await create(broker, "mixed", 4)
    ours = member(broker, "g-mixed")
    theirs = await asyncio.to_thread(
        kafka.KafkaConsumer,
        "mixed",
        bootstrap_servers=broker.bootstrap_servers,
        group_id="g-mixed",
        heartbeat_interval_ms=100,
        session_timeout_ms=6000,
        enable_auto_commit=False,
    )
    await ours.start()
    try:
        ours.subscribe(["mixed"])
        deadline = time.monotonic() + WAIT
        while True:
            await asyncio.to_thread(theirs.poll, timeout_ms=20)
            await ours.getmany(timeout_ms=20)
            mine = {tp.partition for tp in ours.assignment()}
            other = {tp.partition for tp in theirs.assignment()}
            if len(mine) == 2 and len(other) == 2 and not mine & other:
                break
            assert time.monotonic() < deadline, (mine, other)
    finally:
        await asyncio.to_thread(theirs.close)
        await ours.stop()


async def test_standalone_commit_with_assign(broker: EmbeddedBroker) -> None:
    await create(broker, "solo", 1)
    tp = TopicPartition("solo", 0)
    async with Consumer(broker.bootstrap_servers, group_id="g-solo") as c:
        assert await c.committed(tp) is None
        c.assign([tp])
        await c.commit({tp: 7})
        assert await c.committed(tp) == 7
    async with Consumer(broker.bootstrap_servers) as c:
        with pytest.raises(NotImplementedError):
            c.subscribe(["solo"])  # no group_id


async def test_describe_group_reports_members_and_lag(broker: EmbeddedBroker) -> None:
    from sluice.client.cluster import Cluster
    from sluice.client.group import delete_groups, describe_group, list_groups

    await create(broker, "lag", 2)
    await produce(broker, "lag", 2, 10)
    c = member(broker, "g-lag", enable_auto_commit=False)
    ends = Consumer(broker.bootstrap_servers)
    cluster = Cluster(broker.bootstrap_servers)
    await c.start()
    await ends.start()
    await cluster.start()
    try:
        c.subscribe(["lag"])
        await until("the assignment", lambda: len(c.assignment()) == 2)
        await c.commit({TopicPartition("lag", 0): 4, TopicPartition("lag", 1): 10})
        assert ("g-lag", "consumer") in await list_groups(cluster)
        d = await describe_group(cluster, "g-lag", ends.end_offsets)
        assert (d.state, d.protocol_type, d.protocol) == ("Stable", "consumer", "range")
        (m,) = d.members
        assert m.assignment == {TopicPartition("lag", 0), TopicPartition("lag", 1)}
        rows = [(r.tp.partition, r.committed, r.log_end_offset, r.lag) for r in d.partitions]
        assert rows == [(0, 4, 10, 6), (1, 10, 10, 0)]
        assert {r.member_id for r in d.partitions} == {m.member_id}
        await c.stop()
        d = await describe_group(cluster, "g-lag", ends.end_offsets)
        assert d.state == "Empty" and d.members == ()
        assert [(r.tp.partition, r.lag, r.member_id) for r in d.partitions] == [
            (0, 6, None),
            (1, 0, None),
        ]
        assert await delete_groups(cluster, ["g-lag"]) == {"g-lag": None}
        assert ("g-lag", "consumer") not in await list_groups(cluster)
    finally:
        await c.stop()
        await ends.stop()
        await cluster.close()


async def test_coordinator_lookup_gives_up_when_the_broker_keeps_answering_retriable_errors() -> (
    None
):
    """A commit (and so Consumer.stop) must not loop forever on COORDINATOR_NOT_AVAILABLE."""
    from sluice.client.errors import KafkaTimeoutError
    from sluice.client.group import GroupMember
    from sluice.protocol import messages

    class NoCoordinator:
        closed = False
        calls = 0

        async def request(self, api_key: int, body: Any, **kw: Any) -> Any:
            NoCoordinator.calls += 1
            return messages.FindCoordinatorResponse(error_code=15, error_message="loading")

    class Cluster:
        def __init__(self) -> None:
            self.brokers: dict[int, Any] = {}

        async def any_connection(self) -> NoCoordinator:
            return NoCoordinator()

    async def nothing(_: set[TopicPartition]) -> None:
        return None

    member_ = GroupMember(
        Cluster(),  # type: ignore[arg-type]
        "g-stuck",
        topics=["t"],
        on_assign=nothing,
        on_revoke=nothing,
        retry_backoff_ms=10,
        coordinator_timeout_ms=200,
    )
    with pytest.raises(KafkaTimeoutError, match="no coordinator for group 'g-stuck'"):
        await asyncio.wait_for(member_.coordinator(), 10)
    assert NoCoordinator.calls >= 2
