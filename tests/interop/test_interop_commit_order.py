"""Issue 16: OffsetCommit validates member and generation before the group state, as Kafka's
``GroupCoordinator.handleCommitOffsets`` does -- driven by a client we did not write.

kafka-python's own protocol classes (its JoinGroup v3, SyncGroup v1 and OffsetCommit v2
encoders and decoders) over its own client connections, two members on two
connections, walk a group through the states its public consumer API cannot hold still:

* Stable, then member B joins: PreparingRebalance; A's commit at the current generation is
  accepted (Kafka 2.6 ``doCommitOffsets``: a member commits what it consumed before it rejoins,
  the commit consumers make when their partitions are revoked);
* A rejoins too: CompletingRebalance at generation 2; A's commit with the old generation 1 gets
  ILLEGAL_GENERATION (22) -- not REBALANCE_IN_PROGRESS, which the old order answered first --;
  with generation 2 REBALANCE_IN_PROGRESS; an unknown member UNKNOWN_MEMBER_ID (25) whatever
  the state;
* after both synced (Stable), a stale generation is ILLEGAL_GENERATION and the current one
  commits.

The wire-level table of every state x (member, generation):
``tests/group/test_commit_validation.py``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from sluice.testing.embedded import EmbeddedBroker

kafka = pytest.importorskip("kafka")

from kafka.net.compat import KafkaNetClient  # noqa: E402
from kafka.protocol.old.commit import OffsetCommitRequest_v2  # noqa: E402
from kafka.protocol.old.group import JoinGroupRequest_v3, SyncGroupRequest_v1  # noqa: E402

pytestmark = pytest.mark.interop

NODE = 0
GROUP = "commit-order"
NONE, ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, REBALANCE_IN_PROGRESS = 0, 22, 25, 27


@pytest.fixture
def broker() -> Iterator[EmbeddedBroker]:
    props = {"group.initial.rebalance.delay.ms": "0", "num.partitions": "1"}
    with EmbeddedBroker(properties=props) as b:
        b.call(lambda server: server.log_manager.create_topic("t", 1))  # what A commits for
        yield b


class Member:
    """One kafka-python client (its 3.0 network layer, ``KafkaNetClient``) speaking for one
    group member."""

    def __init__(self, broker: EmbeddedBroker) -> None:
        self.client = KafkaNetClient(bootstrap_servers=[broker.bootstrap_servers])
        self.client.check_version(timeout_ms=15_000)  # bootstrap: learns broker 0 from Metadata
        self.client.await_ready(NODE, timeout_ms=15_000)
        self.member_id = ""
        self.generation = -1
        self.leader_id = ""

    def send(self, request: Any) -> Any:
        return self.client.send(NODE, request)

    def wait(self, future: Any) -> Any:
        self.client.poll(future=future, timeout_ms=15_000)
        assert future.succeeded(), future.exception
        return future.value

    def join(self) -> Any:
        return self.send(JoinGroupRequest_v3(
            group_id=GROUP, session_timeout_ms=30_000, rebalance_timeout_ms=30_000,
            member_id=self.member_id, protocol_type="consumer", protocols=[("range", b"")],
        ))  # fmt: skip

    def joined(self, future: Any) -> Any:
        resp = self.wait(future)
        assert resp.error_code == NONE, resp
        self.member_id, self.generation = resp.member_id, resp.generation_id
        self.leader_id = resp.leader
        return resp

    def sync(self, assignments: list[tuple[str, bytes]]) -> None:
        resp = self.wait(self.send(SyncGroupRequest_v1(
            group_id=GROUP, generation_id=self.generation, member_id=self.member_id,
            assignments=assignments,
        )))  # fmt: skip
        assert resp.error_code == NONE, resp

    def commit(self, generation: int, member_id: str | None = None) -> int:
        resp = self.wait(self.send(OffsetCommitRequest_v2(
            group_id=GROUP, generation_id_or_member_epoch=generation,
            member_id=self.member_id if member_id is None else member_id,
            retention_time_ms=-1, topics=[("t", [(0, 7, "")])],
        )))  # fmt: skip
        ((_, [(_, code)]),) = resp.topics
        return int(code)

    def close(self) -> None:
        self.client.close()


def state(broker: EmbeddedBroker) -> str:
    def read(server: Any) -> str:
        group = server.group_coordinator.describe_group(GROUP)
        return "" if group is None else group.state.value

    return broker.call(read)


def until_state(broker: EmbeddedBroker, wanted: str, pump: Member | None = None) -> None:
    """Wait for the group state; ``pump`` polls a member's client meanwhile (kafka-python
    sends what it queued only while polled)."""
    deadline = time.monotonic() + 15
    while state(broker) != wanted:
        assert time.monotonic() < deadline, f"group not {wanted}: {state(broker)}"
        if pump is not None:
            pump.client.poll(timeout_ms=10)
        else:
            time.sleep(0.01)


def test_commit_checks_member_and_generation_before_the_group_state(
    broker: EmbeddedBroker,
) -> None:
    a, b = Member(broker), Member(broker)
    try:
        a.joined(a.join())
        assert a.generation == 1
        a.sync([(a.member_id, b"")])
        until_state(broker, "Stable")
        assert a.commit(1) == NONE

        pending_b = b.join()  # waits at the broker for A to rejoin
        until_state(broker, "PreparingRebalance", pump=b)
        assert a.commit(1) == NONE  # a current member, a current generation: the revoke commit
        assert a.commit(1, member_id="nobody") == UNKNOWN_MEMBER_ID

        pending_a = a.join()
        a.joined(pending_a)
        b.joined(pending_b)
        assert a.generation == b.generation == 2
        until_state(broker, "CompletingRebalance")
        assert a.commit(1) == ILLEGAL_GENERATION  # stale generation first, then the state
        assert a.commit(2) == REBALANCE_IN_PROGRESS
        assert a.commit(2, member_id="nobody") == UNKNOWN_MEMBER_ID

        # The leader's SyncGroup (with every assignment) completes the round for both.
        leader = a if a.leader_id == a.member_id else b
        leader.sync([(a.member_id, b""), (b.member_id, b"")])
        until_state(broker, "Stable")
        assert a.commit(1) == ILLEGAL_GENERATION
        assert a.commit(2) == NONE
    finally:
        a.close()
        b.close()
