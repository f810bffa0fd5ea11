"""The controller against a real ZooKeeper (a chroot per test).

Fake brokers are ZooKeeper sessions of their own that register ``/brokers/ids/<id>``; one dies
when its client closes (its node goes at once) or its session is expired. Controllers run on
sessions of their own. Every check reads the znodes (state JSON, zkVersion, controller epoch) and
waits on a condition with a bound, never on a sleep.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from sluice.protocol import errors
from sluice.protocol.structs import TopicPartition
from sluice.server.controller.controller import (
    Controller,
    ControllerSettings,
    imbalanced_partitions,
)
from sluice.server.zk.client import ZkClient
from sluice.server.zk.data import (
    BrokerInfo,
    EndPoint,
    PartitionState,
    ReplicaAssignment,
    TopicAssignment,
    delete_topic_path,
    topic_config_path,
    topic_path,
)
from sluice.server.zk.errors import ControllerMovedError
from sluice.server.zk.kafka_zk import KafkaZkClient
from sluice.testing.zookeeper import ZooKeeperServer

SESSION = 1.0
WAIT = 10.0


def tp(topic: str, partition: int = 0) -> TopicPartition:
    return TopicPartition(topic, partition)


async def until(condition: Callable[[], Awaitable[bool]], what: str, timeout: float = WAIT) -> None:
    """Poll ``condition`` (a ZooKeeper read) every 20 ms until true; fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    while not await condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not true within {timeout}s: {what}")
        await asyncio.sleep(0.02)


class Harness:
    """Sessions on the test's chroot: fake brokers, controllers, and an observer that reads."""

    def __init__(
        self, connect: str, zookeeper: ZooKeeperServer, session_timeout: float = SESSION
    ) -> None:
        self.connect = connect
        self.zookeeper = zookeeper
        self.session_timeout = session_timeout
        self.clients: list[ZkClient] = []
        self.controllers: list[Controller] = []
        self.brokers: dict[int, KafkaZkClient] = {}
        self.observer: KafkaZkClient

    async def session(self) -> KafkaZkClient:
        client = ZkClient(
            self.connect,
            session_timeout=self.session_timeout,
            connect_timeout=10.0,
            request_timeout=10.0,
        )
        self.clients.append(client)
        await client.start()
        kzk = KafkaZkClient(client)
        await kzk.create_top_level_paths()
        return kzk

    async def broker(
        self,
        broker_id: int,
        *,
        lost_unflushed: bool = False,
        offline: tuple[TopicPartition, ...] = (),
    ) -> int:
        """Register a fake broker on a new session (``lost_unflushed``: back from a power
        loss; ``offline``: its logs of these are offline); returns its broker epoch."""
        kzk = await self.session()
        self.brokers[broker_id] = kzk
        endpoints = (EndPoint("PLAINTEXT", "127.0.0.1", 9000 + broker_id),)
        info = BrokerInfo(broker_id, endpoints, may_have_lost_unflushed=lost_unflushed,
                          offline_partitions=offline)  # fmt: skip
        return await kzk.register_broker(info, wait=5.0)

    async def kill(self, broker_id: int) -> None:
        """A broker dies: its session closes and its registration goes at once."""
        await self.brokers.pop(broker_id).zk.close()

    async def controller(self, broker_id: int = 100, **settings: Any) -> Controller:
        settings.setdefault("auto_leader_rebalance_enable", False)
        controller = Controller(await self.session(), broker_id, ControllerSettings(**settings))
        self.controllers.append(controller)
        await controller.start()
        return controller

    async def active(self, **settings: Any) -> Controller:
        controller = await self.controller(**settings)
        await until(self._is(controller), "the controller is elected")
        return controller

    @staticmethod
    def _is(controller: Controller) -> Callable[[], Awaitable[bool]]:
        async def active() -> bool:
            return controller.is_active

        return active

    async def topic(
        self, name: str, partitions: dict[int, list[int]], config: dict[str, str] | None = None
    ) -> None:
        assignment = TopicAssignment(
            name, uuid.uuid4(), {p: ReplicaAssignment(tuple(r)) for p, r in partitions.items()}
        )
        await self.observer.create_topic(assignment, config)

    async def state(self, topic: str, partition: int = 0) -> PartitionState | None:
        return await self.observer.get_partition_state(tp(topic, partition))

    async def wait_state(
        self,
        topic: str,
        partition: int = 0,
        *,
        leader: int | None = None,
        isr: list[int] | None = None,
        leader_epoch: int | None = None,
        elr: tuple[int, ...] | None = None,
        timeout: float = WAIT,
    ) -> PartitionState:
        """Wait for the state znode to show the given values; returns it."""
        found: list[PartitionState] = []

        async def matches() -> bool:
            state = await self.state(topic, partition)
            found[:] = [state] if state is not None else []
            return (
                state is not None
                and (leader is None or state.leader == leader)
                and (isr is None or list(state.isr) == isr)
                and (leader_epoch is None or state.leader_epoch == leader_epoch)
                and (elr is None or state.eligible_leader_replicas == elr)
            )

        want = f"{topic}-{partition}: leader={leader} isr={isr} epoch={leader_epoch}"
        try:
            await until(matches, want, timeout)
        except AssertionError as exc:
            raise AssertionError(f"{exc}; last state {found}") from None
        return found[0]

    async def leader_writes_isr(
        self, topic: str, partition: int, isr: list[int], elr: tuple[int, ...] = ()
    ) -> None:
        """The partition's leader changes its ISR (and eligible leader replicas), conditionally,
        as a broker does."""
        state = await self.state(topic, partition)
        assert state is not None
        new = PartitionState(
            state.leader, state.leader_epoch, tuple(isr), state.controller_epoch, state.zk_version,
            eligible_leader_replicas=elr,
        )  # fmt: skip
        ok, _ = await self.observer.update_leader_and_isr(tp(topic, partition), new)
        assert ok

    async def close(self) -> None:
        for controller in reversed(self.controllers):
            await controller.stop()
        for client in reversed(self.clients):
            await client.close()


@pytest.fixture
async def h(
    sluice_zookeeper_connect: str, sluice_zookeeper: ZooKeeperServer
) -> AsyncIterator[Harness]:
    harness = Harness(sluice_zookeeper_connect, sluice_zookeeper)
    harness.observer = await harness.session()
    try:
        yield harness
    finally:
        await harness.close()


# --- new topics -----------------------------------------------------------------------------


async def test_initial_states_for_a_new_topic(h: Harness) -> None:
    for b in (1, 2, 3):
        await h.broker(b)
    controller = await h.active()
    assert controller.epoch is not None
    await h.topic("t", {0: [1, 2, 3], 1: [2, 3, 1], 2: [4, 3, 1]})
    s0 = await h.wait_state("t", 0)
    s1 = await h.wait_state("t", 1)
    s2 = await h.wait_state("t", 2)
    # First live replica in assignment order leads; ISR = the live replicas in that order.
    assert (s0.leader, s0.isr, s0.leader_epoch, s0.zk_version) == (1, (1, 2, 3), 0, 0)
    assert (s1.leader, s1.isr) == (2, (2, 3, 1))
    assert (s2.leader, s2.isr) == (3, (3, 1))  # broker 4 is not registered
    assert {s.controller_epoch for s in (s0, s1, s2)} == {controller.epoch.epoch}

    # No live replica at all: no state (Kafka's NewPartition that cannot go online) until one
    # of its replicas registers.
    await h.topic("later", {0: [7, 8]})
    await h.topic("marker", {0: [1]})
    await h.wait_state("marker")  # processed after "later"
    assert await h.state("later") is None
    await h.broker(8)
    s = await h.wait_state("later", leader=8)
    assert (s.isr, s.leader_epoch) == ((8,), 0)


async def test_partitions_added_to_a_topic_get_states(h: Harness) -> None:
    await h.broker(1)
    await h.broker(2)
    await h.active()
    await h.topic("grow", {0: [1, 2]})
    await h.wait_state("grow", 0, leader=1)
    assignment = await h.observer.get_topic_assignment("grow")
    assert assignment is not None
    grown = TopicAssignment(
        "grow",
        assignment.topic_id,
        {**assignment.partitions, 1: ReplicaAssignment((2, 1))},
        assignment.zk_version,
    )
    await h.observer.zk.set(topic_path("grow"), grown.encode(), assignment.zk_version)
    s = await h.wait_state("grow", 1, leader=2)
    assert s.isr == (2, 1)


# --- broker failures ------------------------------------------------------------------------


async def test_leader_death_elects_the_first_live_isr_replica(h: Harness) -> None:
    for b in (1, 2, 3):
        await h.broker(b)
    await h.active()
    await h.topic("t", {0: [1, 3, 2], 1: [2, 1, 3]})
    await h.wait_state("t", 0, leader=1)
    await h.wait_state("t", 1, leader=2)
    await h.kill(1)
    led = await h.wait_state("t", 0, leader=3)
    assert (led.isr, led.leader_epoch) == ((3, 2), 1)  # assignment order, dead one removed
    followed = await h.wait_state("t", 1, isr=[2, 3])
    assert (followed.leader, followed.leader_epoch) == (2, 1)


async def test_follower_death_shrinks_the_isr_but_never_below_one(h: Harness) -> None:
    await h.broker(1)
    await h.broker(2)
    await h.active()
    await h.topic("t", {0: [1, 2]})
    await h.wait_state("t", leader=1, isr=[1, 2])
    await h.kill(2)
    s = await h.wait_state("t", isr=[1])
    assert (s.leader, s.leader_epoch) == (1, 1)
    await h.kill(1)
    s = await h.wait_state("t", leader=-1)
    assert (s.isr, s.leader_epoch) == ((1,), 2)  # the last ISR member stays


async def test_clean_election_refuses_an_out_of_sync_replica_until_an_isr_member_returns(
    h: Harness,
) -> None:
    await h.broker(1)
    await h.broker(2)
    await h.active()
    await h.topic("t", {0: [1, 2]})
    await h.wait_state("t", leader=1, isr=[1, 2])
    await h.leader_writes_isr("t", 0, [1])  # broker 2 fell behind
    await h.kill(1)
    s = await h.wait_state("t", leader=-1)
    assert (s.isr, s.leader_epoch) == ((1,), 1)  # offline, ISR kept; 2 is alive but not chosen

    # Broker 1 comes back (a new incarnation): the offline partition is led again.
    await h.broker(1)
    s = await h.wait_state("t", leader=1)
    assert (s.isr, s.leader_epoch) == ((1,), 2)


async def test_an_eligible_replica_leads_when_the_isr_is_gone_and_leaves_after_a_power_loss(
    h: Harness,
) -> None:
    """KIP-966: the leader shrank the ISR below min ISR, naming 2 and 3 eligible; it dies and the
    first live eligible replica leads alone (ISR [2]; 3 still eligible, and so is 1, which left
    the ISR below min ISR). Broker 3 restarts in the same boot (kill -9: its page cache kept
    everything): still eligible. It then comes back from a power loss (it may have lost
    unflushed writes): no longer eligible, at the same leader epoch."""
    for b in (1, 2, 3):
        await h.broker(b)
    await h.active()
    await h.topic("t", {0: [1, 2, 3]}, {"min.insync.replicas": "2"})
    await h.wait_state("t", leader=1, isr=[1, 2, 3])
    await h.leader_writes_isr("t", 0, [1], elr=(2, 3))
    await h.kill(1)
    s = await h.wait_state("t", leader=2)
    assert (s.isr, s.eligible_leader_replicas, s.leader_epoch) == ((2,), (3, 1), 1)
    await h.kill(3)
    await h.broker(3)
    await h.kill(3)
    await h.broker(3, lost_unflushed=True)
    s = await h.wait_state("t", leader=2, isr=[2], elr=(1,))
    assert s.leader_epoch == 1


async def test_followers_the_controller_drops_below_min_isr_become_eligible(h: Harness) -> None:
    """Dead followers leave the ISR by the controller's hand too (their sessions expired before
    the leader shrank it): below min ISR they hold every acknowledged record, as when the leader
    drops them, and are eligible (KIP-966). Without it, the leader alone was all there was."""
    for b in (1, 2, 3):
        await h.broker(b)
    await h.active()
    await h.topic("t", {0: [1, 2, 3]}, {"min.insync.replicas": "2"})
    await h.wait_state("t", leader=1, isr=[1, 2, 3])
    await h.kill(2)
    await h.kill(3)
    await h.wait_state("t", leader=1, isr=[1], elr=(2, 3))


async def test_the_lone_isr_member_back_from_a_power_loss_waits_for_an_eligible_replica(
    h: Harness,
) -> None:
    """The sole ISR member (1) and both eligible replicas are down; 1 comes back from a power
    loss (it may lack records it had acknowledged, which 2 and 3 hold). It must not lead with
    less: the partition stays without a leader (1 out of the ISR, so that no later state
    counts it as holding them) until an eligible replica is back, which leads. Before, 1 led
    on what it kept and 2 and 3 truncated to it."""
    for b in (1, 2, 3):
        await h.broker(b)
    await h.active()
    await h.topic("t", {0: [1, 2, 3]}, {"min.insync.replicas": "2"})
    await h.wait_state("t", leader=1, isr=[1, 2, 3])
    await h.leader_writes_isr("t", 0, [1], elr=(2, 3))
    await h.kill(2)
    await h.kill(3)
    await h.kill(1)
    await h.wait_state("t", leader=-1, isr=[1], elr=(2, 3))
    await h.broker(1, lost_unflushed=True)
    await h.wait_state("t", leader=-1, isr=[], elr=(2, 3))
    await h.broker(3)
    s = await h.wait_state("t", leader=3, isr=[3])
    assert s.eligible_leader_replicas == (2,)


async def test_the_lone_isr_member_back_from_a_crash_in_the_same_boot_leads_again(
    h: Harness,
) -> None:
    """The same, but 1 was killed without losing its page cache: it holds everything it
    acknowledged, and leads again at once (the eligible replicas are down)."""
    for b in (1, 2, 3):
        await h.broker(b)
    await h.active()
    await h.topic("t", {0: [1, 2, 3]}, {"min.insync.replicas": "2"})
    await h.wait_state("t", leader=1, isr=[1, 2, 3])
    await h.leader_writes_isr("t", 0, [1], elr=(2, 3))
    await h.kill(2)
    await h.kill(3)
    await h.kill(1)
    await h.wait_state("t", leader=-1, isr=[1], elr=(2, 3))
    await h.broker(1)
    await h.wait_state("t", leader=1, isr=[1], elr=(2, 3))


@pytest.mark.parametrize(
    ("broker_default", "override", "unclean"),
    [(False, "true", True), (True, None, True), (True, "false", False), (False, None, False)],
)
async def test_unclean_election_per_topic_overrides_the_broker_default(
    h: Harness, broker_default: bool, override: str | None, unclean: bool
) -> None:
    await h.broker(1)
    await h.broker(2)
    await h.active(unclean_leader_election_enable=broker_default)
    config = {} if override is None else {"unclean.leader.election.enable": override}
    await h.topic("t", {0: [1, 2]}, config)
    await h.wait_state("t", leader=1, isr=[1, 2])
    await h.leader_writes_isr("t", 0, [1])
    await h.kill(1)
    if unclean:
        s = await h.wait_state("t", leader=2)
        assert (s.isr, s.leader_epoch) == ((2,), 1)  # the out-of-sync replica leads alone
    else:
        s = await h.wait_state("t", leader=-1)
        assert s.isr == (1,)


async def test_a_bounced_broker_loses_its_leadership_and_gets_a_new_epoch(h: Harness) -> None:
    """KIP-380: broker 1 restarts faster than anyone sees it gone. The controller sees the same
    id with a larger broker epoch: dead, then alive."""
    await h.broker(1)
    await h.broker(2)
    controller = await h.active()
    await h.topic("shared", {0: [1, 2]})
    await h.topic("solo", {0: [1]})
    await h.wait_state("shared", leader=1, isr=[1, 2])
    await h.wait_state("solo", leader=1)

    # Hold the controller's broker read until broker 1 is registered again, so the change it
    # sees is the bounce (same ids, new epoch) and not a death.
    real = controller.kzk.get_all_brokers
    bounced: list[int] = []

    async def read_after_the_bounce(watch: Any = None) -> Any:
        if not bounced:
            bounced.append(await h.broker(1))
        return await real(watch)

    controller.kzk.get_all_brokers = read_after_the_bounce  # type: ignore[method-assign]
    await h.kill(1)
    solo = await h.wait_state("solo", leader_epoch=2)
    assert (solo.leader, solo.isr) == (1, (1,))  # offline at epoch 1, back at 2
    shared = await h.wait_state("shared", leader=2)
    assert (shared.isr, shared.leader_epoch) == ((2,), 1)
    assert len(bounced) == 1
    await controller.wait_idle()


async def test_a_new_controller_elects_again_where_the_leader_registered_after_its_state(
    h: Harness,
) -> None:
    """The bounce no controller saw: broker 1 restarts while the controller is away, and the
    next controller finds it registered and named leader -- by a state written for its previous
    registration (found by the fault suite: a leader that lost its unflushed writes came back
    as leader with an empty log, and its followers truncated to it). The state's mzxid is older
    than broker 1's broker epoch: elect again. With another in-sync replica, that one leads and
    broker 1 leaves the ISR; alone in the ISR, broker 1 leads at a new epoch."""
    await h.broker(1)
    await h.broker(2)
    first = await h.active()
    await h.topic("shared", {0: [1, 2]})
    await h.topic("solo", {0: [1]})
    await h.wait_state("shared", leader=1, isr=[1, 2])
    await h.wait_state("solo", leader=1)
    await first.stop()
    await h.kill(1)
    epoch = await h.broker(1)  # back, on a new registration, before any controller looked
    state = await h.state("shared")
    assert state is not None and 0 <= state.mzxid < epoch
    second = await h.active()
    shared = await h.wait_state("shared", leader=2)
    assert (shared.isr, shared.leader_epoch) == ((2,), 1)
    solo = await h.wait_state("solo", leader_epoch=1)
    assert (solo.leader, solo.isr) == (1, (1,))
    await second.wait_idle()


# --- controller election and fencing --------------------------------------------------------


async def test_exactly_one_controller_and_failover_on_session_expiry(h: Harness) -> None:
    await h.broker(1)
    await h.broker(2)
    contenders = [await h.controller(broker_id=b) for b in (11, 12, 13)]

    async def one_active() -> bool:
        return sum(c.is_active for c in contenders) == 1

    await until(one_active, "one controller")
    first = next(c for c in contenders if c.is_active)
    old_fence = first.epoch
    assert old_fence is not None and old_fence.epoch == 1
    current = await h.observer.get_controller()
    assert current is not None and current.broker_id == first.broker_id
    await h.topic("t", {0: [1, 2]})
    await h.wait_state("t", leader=1)

    # The active controller's session expires (a long pause): another takes over at epoch 2.
    client_id = first.kzk.zk.client_id
    assert client_id is not None
    await asyncio.to_thread(h.zookeeper.expire_session, *client_id)

    async def taken_over() -> bool:
        return not first.is_active and any(c.is_active for c in contenders)

    await until(taken_over, "another controller")
    second = next(c for c in contenders if c.is_active)
    info = await h.observer.get_controller()
    assert info is not None and info.broker_id == second.broker_id != first.broker_id
    assert second.epoch is not None and second.epoch.epoch == 2
    assert (await h.observer.get_controller_epoch()) == second.epoch

    # The deposed controller's writes are fenced; the new one acts on broker deaths.
    state = await h.state("t")
    assert state is not None
    await first.kzk.zk.wait_connected(WAIT)  # back on a new session, with its old fence
    with pytest.raises(ControllerMovedError):
        await first.kzk.set_partition_states("t", {0: state}, old_fence)
    await h.kill(1)
    s = await h.wait_state("t", leader=2)
    assert s.controller_epoch == 2
    await first.wait_idle()
    assert not first.is_active
    with pytest.raises(errors.NotController):
        await first.elect_preferred_leaders()


async def test_stop_resigns_and_another_takes_over_at_once(h: Harness) -> None:
    first = await h.active()
    second = await h.controller(broker_id=101)
    await first.stop()
    assert not first.is_active

    async def second_active() -> bool:
        return second.is_active

    # (first's session is still open: only its resignation lets the second in)
    await until(second_active, "the second controller takes over")
    assert second.epoch is not None and second.epoch.epoch == 2
    with pytest.raises(errors.NotController):
        await first.controlled_shutdown(1, -1)


async def test_a_new_controller_catches_up_with_what_happened_without_one(h: Harness) -> None:
    """onControllerFailover: states for topics created while no controller ran, the offline
    election for partitions whose leader died meanwhile, pending deletions."""
    for b in (1, 2):
        await h.broker(b)
    first = await h.active()
    await h.topic("t", {0: [1, 2]})
    await h.topic("doomed", {0: [2]})
    await h.wait_state("t", leader=1, isr=[1, 2])
    await first.stop()
    await h.kill(1)
    await h.topic("unseen", {0: [1, 2], 1: [2, 1]})
    await h.observer.request_topic_deletion("doomed")
    second = await h.active(broker_id=101)
    assert second.epoch is not None and second.epoch.epoch == 2
    s = await h.wait_state("t", leader=2)
    assert (s.isr, s.leader_epoch, s.controller_epoch) == ((2,), 1, 2)
    for partition in (0, 1):
        s = await h.wait_state("unseen", partition, leader=2)
        assert (s.isr, s.leader_epoch) == ((2,), 0)
    assert await h.observer.get_topics() == ["t", "unseen"]


async def test_a_leaders_isr_write_racing_the_controller_is_decided_again(h: Harness) -> None:
    """BADVERSION: the leader shrinks the ISR between the controller's read and its write; the
    controller re-reads and decides again from the new state."""
    for b in (1, 2, 3):
        await h.broker(b)
    controller = await h.active()
    await h.topic("t", {0: [1, 2, 3]})
    await h.wait_state("t", leader=1, isr=[1, 2, 3])

    real = controller.kzk.set_partition_states
    calls: list[dict[int, Any]] = []

    async def leader_writes_first(topic: str, states: Any, fence: Any) -> Any:
        if not calls:
            await h.leader_writes_isr("t", 0, [1, 2])  # leader 1 drops the lagging 3
        result = await real(topic, states, fence)
        calls.append(result)
        return result

    controller.kzk.set_partition_states = leader_writes_first  # type: ignore[method-assign]
    await h.kill(2)  # the controller removes dead follower 2 from [1, 2, 3] -> conflict
    s = await h.wait_state("t", isr=[1])
    assert (s.leader, s.leader_epoch) == (1, 1)
    assert s.zk_version == 2  # the leader's write (1), then the controller's (2)
    assert [type(c[0]).__name__ for c in calls] == ["BadVersionError", "PartitionState"]


async def test_watches_are_set_again_after_zookeeper_restarts(
    sluice_zookeeper_factory: Callable[..., ZooKeeperServer],
) -> None:
    """A ZooKeeper restart drops every connection (and with it kazoo's watches); sessions
    survive. The controller re-reads and re-arms: it still sees brokers die and topics appear."""
    zookeeper = sluice_zookeeper_factory()
    # The sessions must outlast the restart (nothing re-registers a fake broker whose session
    # expired; the controller would then rightly see no live replica): see ``copies``.
    h = Harness(zookeeper.connect_string("/c", copies=4), zookeeper, session_timeout=20.0)
    try:
        h.observer = await h.session()
        await h.broker(1)
        await h.broker(2)
        controller = await h.active()
        await h.topic("t", {0: [1, 2]})
        await h.wait_state("t", leader=1)
        sessions = [c.session_id for c in h.clients]
        await asyncio.to_thread(zookeeper.restart)
        for client in h.clients:
            await client.wait_connected(WAIT)
        # The premise: every session survived (else this test measures the machine's load).
        assert [c.session_id for c in h.clients] == sessions
        assert sorted(await h.observer.get_broker_ids()) == [1, 2]
        await h.kill(1)
        # (Longer waits: on a loaded machine the restarted server and the re-armed watches took
        # more than the usual 10 s in a full run.)
        s = await h.wait_state("t", leader=2, timeout=30)
        assert (s.isr, s.leader_epoch) == ((2,), 1)
        await h.topic("after", {0: [2]})
        await h.wait_state("after", leader=2, timeout=30)
        assert controller.is_active and controller.epoch is not None
        assert controller.epoch.epoch == 1  # the same term throughout
    finally:
        await h.close()


# --- controlled shutdown --------------------------------------------------------------------


async def test_controlled_shutdown_moves_leadership_and_returns_what_cannot_move(
    h: Harness,
) -> None:
    epochs = {b: await h.broker(b) for b in (1, 2, 3)}
    controller = await h.active()
    await h.topic("r", {0: [1, 2, 3], 1: [2, 1, 3]})
    await h.topic("lagging", {0: [1, 2]})
    await h.topic("solo", {0: [1]})
    await h.wait_state("r", 0, leader=1)
    await h.wait_state("r", 1, leader=2)
    await h.wait_state("solo", leader=1)
    await h.wait_state("lagging", leader=1)
    await h.leader_writes_isr("lagging", 0, [1])

    remaining = await controller.controlled_shutdown(1, epochs[1])
    # "lagging" has no other in-sync replica; "solo" has one replica (nothing can ever move it,
    # so it is not reported, as in Kafka).
    assert remaining == [tp("lagging")]
    led = await h.state("r", 0)
    followed = await h.state("r", 1)
    assert led is not None and followed is not None
    assert (led.leader, led.isr, led.leader_epoch) == (2, (2, 3), 1)
    assert (followed.leader, followed.isr, followed.leader_epoch) == (2, (2, 3), 1)
    lagging, solo = await h.state("lagging"), await h.state("solo")
    assert lagging is not None and (lagging.leader, lagging.isr) == (1, (1,))
    assert solo is not None and (solo.leader, solo.leader_epoch) == (1, 0)
    assert controller.shutting_down == {1}

    # While shutting down, broker 1 is never chosen: a new topic it is first in goes to 2.
    await h.topic("new", {0: [1, 2]})
    s = await h.wait_state("new", leader=2)
    assert s.isr == (2,)
    # Once it is gone it is forgotten; its partitions get the offline election.
    await h.kill(1)
    await h.wait_state("solo", leader=-1)
    assert controller.shutting_down == frozenset()


async def test_controlled_shutdown_refusals(h: Harness) -> None:
    old_epoch = await h.broker(1)
    await h.kill(1)
    new_epoch = await h.broker(1)
    assert new_epoch > old_epoch
    controller = await h.active()
    with pytest.raises(errors.StaleBrokerEpoch):
        await controller.controlled_shutdown(1, old_epoch)
    with pytest.raises(errors.BrokerNotAvailable):
        await controller.controlled_shutdown(9, -1)
    assert controller.shutting_down == frozenset()
    # -1 (ControlledShutdown v0-1 carry no epoch) is accepted.
    assert await controller.controlled_shutdown(1, -1) == []
    inactive = await h.controller(broker_id=101)
    await inactive.wait_idle()
    with pytest.raises(errors.NotController):
        await inactive.controlled_shutdown(1, new_epoch)


# --- preferred leaders ----------------------------------------------------------------------


async def _leaders_moved_to_2(h: Harness) -> None:
    await h.broker(1)
    await h.broker(2)
    await h.topic("p", {0: [1, 2], 1: [1, 2], 2: [2, 1]})
    for partition in range(3):
        await h.wait_state("p", partition, isr=[1, 2] if partition < 2 else [2, 1])
    await h.kill(1)
    for partition in range(2):
        await h.wait_state("p", partition, leader=2, isr=[2])
    await h.broker(1)
    for partition in range(2):  # leader 2 lets the caught-up replica 1 back in
        await h.leader_writes_isr("p", partition, [2, 1])


async def test_preferred_leader_election_on_demand(h: Harness) -> None:
    controller = await h.active()
    await _leaders_moved_to_2(h)
    moved = await controller.elect_preferred_leaders()
    assert moved == [tp("p", 0), tp("p", 1)]
    for partition in range(2):
        s = await h.state("p", partition)
        assert s is not None and (s.leader, s.isr, s.leader_epoch) == (1, (2, 1), 2)
    assert await controller.elect_preferred_leaders([tp("p", 0)]) == []  # nothing to do


async def test_auto_rebalance_gives_leadership_back(h: Harness) -> None:
    await h.active(auto_leader_rebalance_enable=True, leader_imbalance_check_interval_s=0.1)
    await _leaders_moved_to_2(h)
    for partition in range(2):
        s = await h.wait_state("p", partition, leader=1)
        assert s.leader_epoch == 2
    s = await h.state("p", 2)
    assert s is not None and (s.leader, s.leader_epoch) == (2, 1)  # 2 is its preferred leader


def test_imbalance_is_measured_per_preferred_broker() -> None:
    assignment = TopicAssignment(
        "t",
        None,
        {p: ReplicaAssignment((1, 2) if p < 4 else (2, 1)) for p in range(6)},
    )
    states = {tp("t", p): PartitionState(2, 1, (2, 1) if p != 3 else (2,), 1) for p in range(6)}
    # Broker 1 should lead 0-3 and leads none (100%); 3's ISR lacks it. Broker 2 leads all its.
    assert imbalanced_partitions({"t": assignment}, states, {1, 2}, 10) == [
        tp("t", 0), tp("t", 1), tp("t", 2),
    ]  # fmt: skip
    assert imbalanced_partitions({"t": assignment}, states, {2}, 10) == []  # 1 not live
    states[tp("t", 0)] = PartitionState(1, 2, (1, 2), 1)
    states[tp("t", 1)] = PartitionState(1, 2, (1, 2), 1)
    states[tp("t", 2)] = PartitionState(1, 2, (1, 2), 1)
    # 1 of 4 not led = 25%: above 20, not above 25.
    assert imbalanced_partitions({"t": assignment}, states, {1, 2}, 20) == []  # 3 lacks ISR
    states[tp("t", 3)] = PartitionState(2, 1, (2, 1), 1)
    assert imbalanced_partitions({"t": assignment}, states, {1, 2}, 20) == [tp("t", 3)]
    assert imbalanced_partitions({"t": assignment}, states, {1, 2}, 25) == []


# --- deletion, settings ---------------------------------------------------------------------


async def test_topic_deletion_removes_its_znodes(h: Harness) -> None:
    await h.broker(1)
    await h.active()
    await h.topic("gone", {0: [1], 1: [1]}, {"retention.ms": "1000"})
    await h.topic("kept", {0: [1]})
    await h.wait_state("gone", 1, leader=1)
    await h.wait_state("kept", leader=1)
    await h.observer.request_topic_deletion("gone")

    async def deleted() -> bool:
        zk = h.observer.zk
        paths = (topic_path("gone"), topic_config_path("gone"), delete_topic_path("gone"))
        return [await zk.exists(p) for p in paths] == [None, None, None]

    await until(deleted, "the topic's znodes are gone")
    assert await h.observer.get_topics() == ["kept"]
    # A request for a topic that does not exist is just removed.
    await h.observer.request_topic_deletion("never")

    async def request_gone() -> bool:
        return await h.observer.get_topic_deletions() == []

    await until(request_gone, "the stray request is removed")


def test_settings_from_the_broker_config() -> None:
    from sluice.server.config import Config

    config = Config.load(
        None,
        [
            "unclean.leader.election.enable=true",
            "auto.leader.rebalance.enable=false",
            "leader.imbalance.check.interval.seconds=7",
            "leader.imbalance.per.broker.percentage=25",
        ],
    )
    assert ControllerSettings.from_config(config) == ControllerSettings(
        unclean_leader_election_enable=True,
        auto_leader_rebalance_enable=False,
        leader_imbalance_check_interval_s=7.0,
        leader_imbalance_per_broker_percentage=25,
    )
    assert ControllerSettings.from_config(Config()) == ControllerSettings()


async def test_topic_deletion_waits_for_a_replicas_broker_that_is_down(h: Harness) -> None:
    """Kafka's TopicDeletionManager: a topic with a replica on a dead broker is ineligible for
    deletion until that broker is back (else its replica would outlive the topic, a stray log
    the broker keeps). The request and the topic stay; the broker's return finishes it."""
    await h.broker(1)
    await h.broker(2)
    controller = await h.active()
    await h.topic("doomed", {0: [1, 2], 1: [2]})
    await h.topic("local", {0: [1]})
    await h.wait_state("doomed", 1, leader=2)
    await h.kill(2)
    await h.wait_state("doomed", 0, leader=1, isr=[1])
    await h.observer.request_topic_deletion("doomed")
    await h.observer.request_topic_deletion("local")

    async def local_deleted() -> bool:
        return await h.observer.get_topics() == ["doomed"]

    await until(local_deleted, "the topic whose brokers are all up is deleted")
    await controller.wait_idle()
    assert await h.observer.get_topic_deletions() == ["doomed"]
    assert await h.observer.get_topic_assignment("doomed") is not None
    await h.broker(2)

    async def doomed_deleted() -> bool:
        zk = h.observer.zk
        paths = (topic_path("doomed"), delete_topic_path("doomed"))
        return [await zk.exists(p) for p in paths] == [None, None]

    await until(doomed_deleted, "deleted once broker 2 is back")
    assert await h.observer.get_topics() == []
