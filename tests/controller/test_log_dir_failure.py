"""The controller's answer to a log dir event notification (a broker's log went offline):
leadership moves off the offline replica, which leaves the ISR; the notices are consumed. Real
ZooKeeper, fake brokers (:class:`tests.controller.test_controller.Harness`)."""

from __future__ import annotations

from sluice.protocol.structs import TopicPartition
from sluice.server.zk.data import LOG_DIR_EVENT_NOTIFICATION_PATH, LogDirEvent
from tests.controller.test_controller import Harness, h, until

__all__ = ["h"]  # the fixture


async def notices_consumed(h: Harness) -> None:
    async def none_left() -> bool:
        return not await h.observer.zk.get_children(LOG_DIR_EVENT_NOTIFICATION_PATH)

    await until(none_left, "every log dir event notification consumed")


async def test_an_offline_replica_loses_its_leadership_and_leaves_the_isr(h: Harness) -> None:
    for b in (1, 2, 3):
        await h.broker(b)
    await h.active()
    await h.topic("t", {0: [1, 2, 3], 1: [2, 1, 3], 2: [1, 2, 3]})
    for p, leader in ((0, 1), (1, 2), (2, 1)):
        await h.wait_state("t", p, leader=leader)
    offline = (TopicPartition("t", 0), TopicPartition("t", 1))
    await h.brokers[1].propagate_log_dir_event(LogDirEvent(1, offline))
    moved = await h.wait_state("t", 0, leader=2, isr=[2, 3])
    assert moved.leader_epoch == 1
    left = await h.wait_state("t", 1, leader=2, isr=[2, 3])
    assert left.leader_epoch == 1
    untouched = await h.wait_state("t", 2, leader=1)
    assert (untouched.isr, untouched.leader_epoch) == ((1, 2, 3), 0)
    await notices_consumed(h)


async def test_a_notice_in_kafkas_form_takes_every_replica_of_the_broker(h: Harness) -> None:
    for b in (1, 2):
        await h.broker(b)
    await h.active()
    await h.topic("t", {0: [1, 2], 1: [2, 1]})
    await h.wait_state("t", 0, leader=1, isr=[1, 2])
    await h.wait_state("t", 1, leader=2, isr=[2, 1])
    await h.brokers[1].zk.create(
        f"{LOG_DIR_EVENT_NOTIFICATION_PATH}/log_dir_event_",
        b'{"version":1,"broker":1,"event":1}',
        sequence=True,
    )
    await h.wait_state("t", 0, leader=2, isr=[2])
    await h.wait_state("t", 1, leader=2, isr=[2])
    await notices_consumed(h)


async def test_a_notice_from_before_the_brokers_registration_is_stale(h: Harness) -> None:
    await h.broker(1)
    await h.broker(2)
    await h.topic("t", {0: [1, 2]})
    # Written by broker 1's previous incarnation; it registered again since (its restart
    # recovered the log), so the notice is ignored.
    await h.observer.propagate_log_dir_event(LogDirEvent(1, (TopicPartition("t", 0),)))
    await h.kill(1)
    await h.broker(1)
    await h.active()
    await notices_consumed(h)
    state = await h.wait_state("t", 0, leader=1)
    assert state.isr == (1, 2)


async def test_the_offline_replica_is_not_elected_again(h: Harness) -> None:
    for b in (1, 2, 3):
        await h.broker(b)
    await h.active()
    await h.topic("t", {0: [1, 2, 3]})
    await h.wait_state("t", leader=1, isr=[1, 2, 3])
    await h.brokers[1].propagate_log_dir_event(LogDirEvent(1, (TopicPartition("t", 0),)))
    await h.wait_state("t", leader=2, isr=[2, 3])
    # Broker 1 is still registered but its replica is offline: when the leader dies the
    # other in-sync replica leads, and when that one dies too, nobody (never broker 1).
    await h.kill(2)
    await h.wait_state("t", leader=3, isr=[3])
    await h.leader_writes_isr("t", 0, [3, 1])  # as if it had caught up (it cannot, offline)
    await h.kill(3)
    state = await h.wait_state("t", leader=-1)
    assert state.isr == (3, 1)
