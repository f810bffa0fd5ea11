"""Interop: consumer groups and committed offsets with confluent-kafka, kafka-python, aiokafka.

Each test uses its own group and topic on one broker process per module (started with
``group.initial.rebalance.delay.ms=0`` and a low ``group.min.session.timeout.ms`` so rebalances
are quick). The clients run their default ``subscribe()`` code paths: FindCoordinator, JoinGroup
(librdkafka: v5 with MEMBER_ID_REQUIRED), SyncGroup with their own range / roundrobin /
cooperative-sticky assignors, Heartbeat, LeaveGroup, OffsetCommit, OffsetFetch. Assertions are
about what the clients observe: the partitions each member owns, the offsets they resume from,
the lag the admin APIs report. Every wait is bounded (:data:`DEADLINE_S`).
"""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time
import uuid
import warnings
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any, TypeVar

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.broker_util import REPO, BrokerProcess, start_broker
from tests.interop_helpers import DEADLINE_S, broker_fixture

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    import kafka
    from kafka.admin import KafkaAdminClient
    from kafka.structs import OffsetAndMetadata as KpOffsetAndMetadata
    from kafka.structs import TopicPartition as KpTopicPartition

pytestmark = pytest.mark.interop

T = TypeVar("T")

GROUP_OVERRIDES = ("group.initial.rebalance.delay.ms=0", "group.min.session.timeout.ms=500")


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    yield from broker_fixture(tmp_path_factory, "groups", GROUP_OVERRIDES)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def create_topic(broker: BrokerProcess, name: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(DEADLINE_S)


def produce(broker: BrokerProcess, topic: str, partitions: int, per_partition: int) -> None:
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 2})
    for p in range(partitions):
        for i in range(per_partition):
            producer.produce(topic, value=b"%d-%d" % (p, i), partition=p)
    assert producer.flush(DEADLINE_S) == 0


def ck_consumer(broker: BrokerProcess, group: str, **conf: Any) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 100,
            "topic.metadata.refresh.interval.ms": 1000,
            **conf,
        }
    )


def kp_consumer(broker: BrokerProcess, group: str, topic: str, **conf: Any) -> Any:
    return kafka.KafkaConsumer(
        topic,
        bootstrap_servers=broker.bootstrap,
        group_id=group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        **{"session_timeout_ms": 6000, "heartbeat_interval_ms": 100, **conf},
    )


def wait_for(what: str, condition: Callable[[], bool], step: Callable[[], None]) -> None:
    """Run ``step`` until ``condition`` holds, at most DEADLINE_S."""
    deadline = time.monotonic() + DEADLINE_S
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        step()


def ck_assignment(c: Consumer) -> set[int]:
    return {tp.partition for tp in c.assignment()}


def kp_assignment(c: Any) -> set[int]:
    return {tp.partition for tp in c.assignment()}


def poll_all(consumers: list[Consumer]) -> None:
    for c in consumers:
        msg = c.poll(0.05)
        err = msg.error() if msg is not None else None
        assert err is None or err.retriable(), err


def split_ok(assignments: list[set[int]], partitions: int) -> bool:
    """Every member owns something, nobody shares, everything is owned."""
    union: set[int] = set().union(*assignments)
    return (
        all(assignments)
        and sum(len(a) for a in assignments) == partitions
        and union == set(range(partitions))
    )


# ------------------------------------------------------------------------------ confluent-kafka


@pytest.mark.parametrize("strategy", ["range", "roundrobin", "cooperative-sticky"])
def test_confluent_two_then_three_members_split_partitions(
    broker: BrokerProcess, strategy: str
) -> None:
    topic, group = unique("split"), unique("g")
    create_topic(broker, topic, 6)
    conf = {"partition.assignment.strategy": strategy}
    consumers = [ck_consumer(broker, group, **conf) for _ in range(2)]
    try:
        for c in consumers:
            c.subscribe([topic])
        wait_for(
            "two members to split 6 partitions",
            lambda: split_ok([ck_assignment(c) for c in consumers], 6),
            lambda: poll_all(consumers),
        )
        consumers.append(ck_consumer(broker, group, **conf))
        consumers[-1].subscribe([topic])
        wait_for(
            "three members to split 6 partitions",
            lambda: (
                split_ok([ck_assignment(c) for c in consumers], 6)
                and all(len(ck_assignment(c)) == 2 for c in consumers)
            ),
            lambda: poll_all(consumers),
        )
        # A member leaves (close sends LeaveGroup): its partitions move to the other two.
        consumers.pop().close()
        wait_for(
            "two members to own all 6 partitions again",
            lambda: split_ok([ck_assignment(c) for c in consumers], 6),
            lambda: poll_all(consumers),
        )
    finally:
        for c in consumers:
            c.close()


_VICTIM = """
import sys, time
from confluent_kafka import Consumer
c = Consumer({"bootstrap.servers": sys.argv[1], "group.id": sys.argv[2],
              "session.timeout.ms": 1500, "heartbeat.interval.ms": 100,
              "auto.offset.reset": "earliest", "enable.auto.commit": False})
c.subscribe([sys.argv[3]])
deadline = time.monotonic() + 30
while time.monotonic() < deadline:
    c.poll(0.1)
    if c.assignment():
        print("assigned", flush=True)
        break
while time.monotonic() < deadline:
    c.poll(0.1)
"""


def test_confluent_member_dies_and_its_partitions_move(broker: BrokerProcess) -> None:
    """A member killed with SIGKILL (no LeaveGroup) is dropped after its session timeout."""
    topic, group = unique("die"), unique("g")
    create_topic(broker, topic, 4)
    survivor = ck_consumer(broker, group)
    survivor.subscribe([topic])
    victim = subprocess.Popen(
        [sys.executable, "-c", _VICTIM, broker.bootstrap, group, topic],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        cwd=REPO,
    )
    try:
        wait_for("the survivor's first assignment", lambda: bool(ck_assignment(survivor)),
                 lambda: poll_all([survivor]))  # fmt: skip
        assert victim.stdout is not None
        os.set_blocking(victim.stdout.fileno(), False)
        seen = b""

        def victim_assigned() -> bool:
            nonlocal seen
            seen += victim.stdout.read() or b""  # type: ignore[union-attr]
            return b"assigned" in seen

        wait_for("the victim to get partitions", victim_assigned, lambda: poll_all([survivor]))
        wait_for("a 2-2 split", lambda: len(ck_assignment(survivor)) == 2,
                 lambda: poll_all([survivor]))  # fmt: skip
        os.kill(victim.pid, signal.SIGKILL)
        victim.wait(10)
        wait_for("the survivor to own all 4 partitions", lambda: ck_assignment(survivor) ==
                 {0, 1, 2, 3}, lambda: poll_all([survivor]))  # fmt: skip
    finally:
        if victim.poll() is None:
            victim.kill()
            victim.wait(10)
        if victim.stdout is not None:
            victim.stdout.close()
        survivor.close()
    assert "member session expired" in broker.log_text()


def consume_values(c: Consumer, count: int) -> list[Any]:
    got: list[Any] = []

    def step() -> None:
        msg = c.poll(0.1)
        if msg is not None and not msg.error():
            got.append(msg)

    wait_for(f"{count} messages", lambda: len(got) >= count, step)
    return got


def test_confluent_restarted_consumer_resumes_after_last_commit(broker: BrokerProcess) -> None:
    topic, group = unique("resume"), unique("g")
    create_topic(broker, topic, 1)
    produce(broker, topic, 1, 100)
    first = ck_consumer(broker, group)
    first.subscribe([topic])
    got = consume_values(first, 37)
    first.commit(message=got[36], asynchronous=False)  # commits offset 37
    first.close()
    second = ck_consumer(broker, group)
    second.subscribe([topic])
    try:
        rest = consume_values(second, 100 - 37)
        assert [m.offset() for m in rest[: 100 - 37]] == list(range(37, 100))
        assert second.committed([TopicPartition(topic, 0)], timeout=DEADLINE_S)[0].offset == 37
    finally:
        second.close()


@pytest.mark.slow
@pytest.mark.parametrize("how", ["sigterm", "sigkill"])
def test_commits_survive_a_broker_restart(tmp_path: Path, how: str) -> None:
    data_dir = tmp_path / "data"
    topic, group = "durable", "g-durable"
    broker = start_broker(data_dir, overrides=GROUP_OVERRIDES)
    try:
        create_topic(broker, topic, 3)
        produce(broker, topic, 3, 20)
        c = ck_consumer(broker, group)
        c.subscribe([topic])
        consume_values(c, 60)
        commits = [TopicPartition(topic, p, 5 + p, f"meta-{p}") for p in range(3)]
        c.commit(offsets=commits, asynchronous=False)
        c.commit(offsets=[TopicPartition(topic, 0, 11)], asynchronous=False)  # latest wins
        c.close()
    finally:
        if how == "sigterm":
            assert broker.stop() == 0
        else:
            broker.kill()
    broker = start_broker(data_dir, overrides=GROUP_OVERRIDES)
    try:
        c = ck_consumer(broker, group)
        try:
            got = c.committed([TopicPartition(topic, p) for p in range(3)], timeout=DEADLINE_S)
            assert [tp.offset for tp in got] == [11, 6, 7]
            assert got[1].metadata == "meta-1"
            # ...and a subscribing consumer starts exactly there.
            c.subscribe([topic])
            msgs = consume_values(c, 60 - 11 - 6 - 7)
            firsts = {p: min(m.offset() for m in msgs if m.partition() == p) for p in range(3)}
            assert firsts == {0: 11, 1: 6, 2: 7}
        finally:
            c.close()
    finally:
        assert broker.stop() == 0
    assert (data_dir / "__consumer_offsets-0" / "00000000000000000000.log").stat().st_size > 0


# ------------------------------------------------------------------------------ kafka-python


#: How long a member's poll may wait (:class:`KpMember`).
POLL_MS = 1000


class KpMember:
    """A kafka-python group member polled by a thread of its own, as an application runs one.

    Polled in turn from the test's thread (50 ms each), a member rejoined only when its turn
    came, and on a loaded machine kafka-python 3.0's rejoins on stale REBALANCE_IN_PROGRESS
    heartbeat answers (a leader's rejoin starts a new rebalance, Kafka's rule) chained
    generations for the whole deadline: 1 run in 3 failed under a 2-core busy load. Polled
    from its own thread with 50 ms polls, 1 in 8 still failed: a poll that gave up while the
    member's JoinGroup/SyncGroup was in flight left it "rebalancing" for good although the
    coordinator had answered its SyncGroup (kafka-python's log shows the response). A poll
    of up to :data:`POLL_MS` lets the join finish inside it: 12 of 12 under the same load.

    The consumer is used by its thread only (kafka-python's are not thread-safe): :meth:`call`
    runs a function there; :attr:`assignment` is its view after the last poll.
    """

    def __init__(self, broker: BrokerProcess, group: str, topic: str) -> None:
        self.consumer = kp_consumer(broker, group, topic)
        self.assignment: frozenset[int] = frozenset()
        self._work: queue.Queue[tuple[Callable[[Any], Any], Future[Any]]] = queue.Queue()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="kp-member", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                self.consumer.poll(timeout_ms=POLL_MS)
                self.assignment = frozenset(kp_assignment(self.consumer))
                while not self._work.empty():
                    fn, future = self._work.get()
                    try:
                        future.set_result(fn(self.consumer))
                    except BaseException as exc:
                        future.set_exception(exc)
        finally:
            self.consumer.close()  # LeaveGroup, from the member's own thread

    def call(self, fn: Callable[[Any], T]) -> T:
        future: Future[T] = Future()
        self._work.put((fn, future))
        return future.result(DEADLINE_S)

    def leave(self) -> None:
        """Close (LeaveGroup); :attr:`left` once done."""
        self._stop.set()

    @property
    def left(self) -> bool:
        return not self._thread.is_alive()

    def close(self) -> None:
        self.leave()
        self._thread.join(DEADLINE_S)
        assert self.left, "a kafka-python member did not close"


def wait_until(what: str, condition: Callable[[], bool]) -> None:
    """Wait (at most DEADLINE_S) for ``condition``, which other threads bring about."""
    deadline = time.monotonic() + DEADLINE_S
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def test_kafka_python_members_split_leave_and_commit(broker: BrokerProcess) -> None:
    topic, group = unique("kp"), unique("g")
    create_topic(broker, topic, 4)
    produce(broker, topic, 4, 10)
    members = [KpMember(broker, group, topic) for _ in range(2)]
    try:
        wait_until(
            "kafka-python members to split 4 partitions",
            lambda: split_ok([set(m.assignment) for m in members], 4),
        )
        members.append(KpMember(broker, group, topic))
        wait_until(
            "three kafka-python members to split 4 partitions",
            lambda: split_ok([set(m.assignment) for m in members], 4),
        )
        # The leaver closes while the others keep polling, as members of a real group run: its
        # LeaveGroup may queue behind a JoinGroup of its own that completes only when the
        # others rejoin (requests on one connection are answered in order).
        leaver = members.pop(0)
        leaver.leave()
        wait_until(
            "two members to own all 4 partitions",
            lambda: split_ok([set(m.assignment) for m in members], 4) and leaver.left,
        )
        owner = members[0]
        tp = KpTopicPartition(topic, min(owner.assignment))
        deadline = time.monotonic() + DEADLINE_S
        while True:
            # kafka-python refuses a commit while it is (re)joining: retry after its next poll,
            # as its error message says (the group may still be settling after the leave).
            try:
                owner.call(lambda c: c.commit({tp: KpOffsetAndMetadata(7, "kp-meta", -1)}))
                break
            except (kafka.errors.RebalanceInProgressError, kafka.errors.CommitFailedError):
                assert time.monotonic() < deadline, "commit kept failing with a rebalance"
        assert owner.call(lambda c: c.committed(tp)) == 7
    finally:
        for member in members:
            member.leave()
        for member in members:
            member.close()
    # A new consumer of the group starts at the commit.
    fresh = kafka.KafkaConsumer(
        bootstrap_servers=broker.bootstrap, group_id=group, enable_auto_commit=False
    )
    try:
        assert fresh.committed(tp) == 7
        meta = fresh.committed(tp, metadata=True)
        assert meta is not None and meta.metadata == "kp-meta"
    finally:
        fresh.close()


def test_kafka_python_admin_lists_describes_lag_and_deletes(broker: BrokerProcess) -> None:
    topic, group = unique("lag"), unique("g")
    create_topic(broker, topic, 2)
    produce(broker, topic, 2, 25)  # end offsets 25 and 25
    c = ck_consumer(broker, group)
    c.subscribe([topic])
    consume_values(c, 50)
    c.commit(offsets=[TopicPartition(topic, 0, 20), TopicPartition(topic, 1, 5)],
             asynchronous=False)  # fmt: skip
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        listed = {g["group_id"]: g["protocol_type"] for g in admin.list_groups()}
        assert listed.get(group) == "consumer"
        described = admin.describe_groups([group])[group]
        assert described["error"] is None
        assert described["group_state"] == "Stable"
        assert described["protocol_type"] == "consumer"
        assert described["protocol_data"] == "range"
        (member,) = described["members"]
        # kafka-python decoded the subscription and assignment the client (librdkafka) sent
        assert topic in str(member["member_metadata"])
        assert topic in str(member["member_assignment"])
        offsets = admin.list_group_offsets({group: None})[group]
        committed = {tp.partition: om.offset for tp, om in offsets.items() if tp.topic == topic}
        assert committed == {0: 20, 1: 5}
        ends = kafka.KafkaConsumer(bootstrap_servers=broker.bootstrap)
        try:
            tps = [KpTopicPartition(topic, p) for p in range(2)]
            end = {tp.partition: o for tp, o in ends.end_offsets(tps).items()}
        finally:
            ends.close()
        assert {p: end[p] - committed[p] for p in (0, 1)} == {0: 5, 1: 20}  # the lag
        # A group with members cannot be deleted; an empty one can, offsets and all.
        assert admin.delete_groups([group]) == {group: "NonEmptyGroupError"}
        c.close()
        assert admin.describe_groups([group])[group]["group_state"] == "Empty"
        assert admin.delete_groups([group]) == {group: "OK"}
        assert admin.list_group_offsets({group: None})[group] == {}
        assert group not in {g["group_id"] for g in admin.list_groups()}
        assert admin.delete_groups([group]) == {group: "GroupIdNotFoundError"}
    finally:
        admin.close()


# ------------------------------------------------------------------------------ aiokafka


async def test_aiokafka_group_members_split_and_commit(broker: BrokerProcess) -> None:
    import asyncio

    from aiokafka import AIOKafkaConsumer
    from aiokafka.structs import TopicPartition as AioTopicPartition

    topic, group = unique("aio"), unique("g")
    create_topic(broker, topic, 4)
    produce(broker, topic, 4, 5)

    def member() -> AIOKafkaConsumer:
        return AIOKafkaConsumer(
            topic,
            bootstrap_servers=broker.bootstrap,
            group_id=group,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            session_timeout_ms=6000,
            heartbeat_interval_ms=100,
        )

    consumers = [member(), member()]
    try:
        for c in consumers:
            await asyncio.wait_for(c.start(), DEADLINE_S)
        deadline = time.monotonic() + DEADLINE_S
        while not split_ok([{tp.partition for tp in c.assignment()} for c in consumers], 4):
            assert time.monotonic() < deadline, "aiokafka members did not split 4 partitions"
            await asyncio.gather(*(c.getmany(timeout_ms=50) for c in consumers))
        owner = consumers[0]
        tp = AioTopicPartition(topic, min(tp.partition for tp in owner.assignment()))
        await asyncio.wait_for(owner.commit({tp: 3}), DEADLINE_S)
        assert await asyncio.wait_for(owner.committed(tp), DEADLINE_S) == 3
    finally:
        for c in consumers:
            await asyncio.wait_for(c.stop(), DEADLINE_S)
