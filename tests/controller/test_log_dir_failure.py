"""The controller's answer to a log dir event notification (a broker's log went offline):
leadership moves off the offline replica, which leaves the ISR; the notices are consumed. Real
ZooKeeper, fake brokers (:class:`tests.controller.test_controller.Harness`). A new controller
learns the offline replicas from the brokers' registrations (``offline_partitions``)."""

from __future__ import annotations

from sluice.protocol.structs import TopicPartition
from sluice.server.zk.data import (
    LOG_DIR_EVENT_NOTIFICATION_PATH,
    BrokerInfo,
    EndPoint,
    LogDirEvent,
)
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


# --- a new controller learns the offline replicas from the brokers' registrations -------------


async def report_offline(
    h: Harness, broker: int, partitions: tuple[TopicPartition, ...], *, notice: bool = True
) -> None:
    """What a broker whose logs went offline does: state them in its registration, then (unless
    ``notice`` is false: it has not got that far) write the notice."""
    endpoints = (EndPoint("PLAINTEXT", "127.0.0.1", 9000 + broker),)
    info = BrokerInfo(broker, endpoints, offline_partitions=partitions)
    await h.brokers[broker].update_broker_info(info)
    if notice:
        await h.brokers[broker].propagate_log_dir_event(LogDirEvent(broker, partitions))


async def test_a_new_controller_never_elects_an_offline_replica(h: Harness) -> None:
    """The offline replica left the ISR; unclean elections are allowed, so a controller that
    did not know it is offline would elect it when the last in-sync replica dies (it is the only
    live replica). The controller that handled the notice is gone; the new one reads the
    registration and leaves the partition without a leader instead (Kafka's
    ``isReplicaOnline``: an offline replica is not a candidate, unclean or not)."""
    for b in (1, 2):
        await h.broker(b)
    first = await h.active()
    await h.topic("t", {0: [2, 1]}, {"unclean.leader.election.enable": "true"})
    await h.topic("also", {0: [1, 2]})
    await h.wait_state("t", leader=2, isr=[2, 1])
    await h.wait_state("also", leader=1, isr=[1, 2])
    await report_offline(h, 1, (TopicPartition("t", 0),))
    await h.wait_state("t", leader=2, isr=[2])
    await notices_consumed(h)
    await first.stop()
    second = await h.active(broker_id=101)
    await h.kill(2)
    state = await h.wait_state("t", leader=-1)
    assert state.isr == (2,)
    assert second.epoch is not None and state.controller_epoch == second.epoch.epoch
    # Its replicas whose logs are online are elected as ever.
    await h.wait_state("also", leader=1, isr=[1])


async def test_the_offline_last_isr_member_is_not_elected_by_a_new_controller(h: Harness) -> None:
    """Alone in the ISR when its log went offline, the replica stays in it (Kafka's rule: the
    ISR never empties) with no leader. A new controller, when another replica comes back,
    must not elect it (it is in the ISR and registered: only the registration says it is
    offline); the partition waits for it to restart with its log recovered."""
    for b in (1, 2):
        await h.broker(b)
    first = await h.active()
    await h.topic("t", {0: [1, 2]})
    await h.wait_state("t", leader=1, isr=[1, 2])
    await h.kill(2)
    await h.wait_state("t", leader=1, isr=[1])
    await report_offline(h, 1, (TopicPartition("t", 0),))
    await h.wait_state("t", leader=-1, isr=[1])
    await first.stop()
    await h.active(broker_id=101)
    await h.broker(2)
    await h.topic("marker", {0: [2]})  # its state is written after broker 2's change is handled
    await h.wait_state("marker", leader=2)
    state = await h.wait_state("t")
    assert (state.leader, state.isr) == (-1, (1,))
    # Broker 1 restarts (a new registration without offline logs): it leads again.
    await h.kill(1)
    await h.broker(1)
    await h.wait_state("t", leader=1, isr=[1])


async def test_a_new_controller_finishes_what_the_registration_says(h: Harness) -> None:
    """The broker stated its offline log in its registration, but no controller saw a notice
    (none was elected, or it died first): the next controller moves the leadership at
    failover, as Kafka's asks every broker then."""
    for b in (1, 2, 3):
        await h.broker(b)
    first = await h.active()
    await h.topic("t", {0: [1, 2, 3]})
    await h.wait_state("t", leader=1, isr=[1, 2, 3])
    await first.stop()
    await report_offline(h, 1, (TopicPartition("t", 0),), notice=False)
    await h.active(broker_id=101)
    state = await h.wait_state("t", leader=2, isr=[2, 3])
    assert state.leader_epoch == 1


async def test_a_broker_registered_again_on_a_new_session_keeps_its_offline_replicas(
    h: Harness,
) -> None:
    """Its process did not restart, so its logs are still offline: a new registration (a lost
    ZooKeeper session) that says so keeps them out of the elections."""
    for b in (1, 2):
        await h.broker(b)
    await h.active()
    await h.topic("t", {0: [2, 1]}, {"unclean.leader.election.enable": "true"})
    await h.wait_state("t", leader=2, isr=[2, 1])
    await report_offline(h, 1, (TopicPartition("t", 0),))
    await h.wait_state("t", leader=2, isr=[2])
    await notices_consumed(h)
    await h.kill(1)
    await h.broker(1, offline=(TopicPartition("t", 0),))
    await h.kill(2)
    state = await h.wait_state("t", leader=-1)
    assert state.isr == (2,)
