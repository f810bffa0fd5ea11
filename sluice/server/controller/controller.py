"""The controller: Kafka's ``KafkaController`` (ZooKeeper mode, 2.6) as a pure ZooKeeper actor.

One broker at a time is the controller (elected through ``/controller``, fenced by
``/controller_epoch``). It decides every partition's leader, leader epoch and ISR and writes them
to the state znodes; brokers watch those znodes (there are no LeaderAndIsr requests in Sluice) and
apply a state only if it is newer than the one they hold. The controller reads and writes znodes,
nothing else.

**One event queue, one task.** Everything the controller does is an event processed in order by
one task (Kafka's ``ControllerEventManager``): becoming controller or re-checking the election
(``Reelect``), the session's loss (``Expire``), a change of the live brokers (``BrokerChange``),
of the topic list (``TopicChange``), of a topic's partitions (``PartitionModifications``), a
deletion request (``TopicDeletion``), a controlled shutdown, a preferred-leader election. ZooKeeper
watches are one-shot and only enqueue an event; the event's handler re-reads what it needs and
re-arms the watch. So two decisions never interleave, and a burst of watch events is just a burst
of idempotent re-reads.

**No cached partition state.** What the controller keeps across events is membership: the live
brokers with their broker epochs (to tell a bounced broker, KIP-380), the brokers shutting down,
the known topics. Partition states are read from ZooKeeper in every event, with their zkVersion;
the new state is computed by the pure functions of :mod:`.election`; the write is conditional on
that zkVersion and fenced by the controller epoch (:meth:`KafkaZkClient.set_partition_states`).
A BADVERSION means the leader changed its ISR meanwhile: re-read and decide again, at most
:data:`MAX_WRITE_ATTEMPTS` times (Kafka's ``partitionsToRetry``). A stale fence
(:class:`ControllerMovedError`: another controller was elected) resigns at once and campaigns
again; so does the session's loss, which also drops ``/controller``.

Who is alive, in the elections (Kafka's ``isReplicaOnline``): a broker is *registered* while its
``/brokers/ids/<id>`` exists; a registered broker that asked for a controlled shutdown stays
registered (it may keep leading what cannot move) but is never *chosen* as a leader or added,
until it leaves. A partition needs a new leader when its leader is not registered.

What each event does:

* **Becoming controller** (``onControllerFailover``): read the live brokers, process pending
  deletions, then reconcile every partition: a partition without a state znode gets its first
  state (leader = first live replica in assignment order, ISR = the live replicas in assignment
  order, leader epoch 0; none live: no state yet, as Kafka's ``NewPartition`` that fails to go
  online, retried at the next broker change); a partition whose leader is not registered gets the
  offline election; unregistered replicas leave the ISRs of the others (Kafka's replica state
  machine start-up moves them to ``OfflineReplica``).
* **Broker change**: dead brokers -> the same reconcile (offline election with
  ``unclean.leader.election.enable`` per topic, falling back to the broker default; dead followers
  leave the ISR, never the last member). A bounced broker (same id, larger broker epoch) is
  treated as dead, then alive: its partitions first move away (or go offline), then it may lead
  again at a new epoch -- its new incarnation must not inherit the old one's leadership. New
  brokers -> offline partitions they are a replica of get elected again.
* **Topic change / partition modifications**: first states for new partitions.
* **Topic deletion**: the topic's znodes and the request go in one fenced multi; brokers see the
  topic gone and delete their logs. Not while a broker holding a replica is down: the request
  waits for it (a broker change retries).
* **Preferred-leader election**: every ``leader.imbalance.check.interval.seconds`` when
  ``auto.leader.rebalance.enable``, per broker: if more than
  ``leader.imbalance.per.broker.percentage`` % of the partitions whose preferred (first) replica
  it is are led by another broker, give those back where it is live and in the ISR. Also on
  demand: :meth:`Controller.elect_preferred_leaders`.
* **Controlled shutdown** (``doControlledShutdown``): see :meth:`Controller.controlled_shutdown`.
* **ElectLeaders** (an admin client, or ``/admin/preferred_replica_election``): the preferred
  election, or the offline election with unclean allowed (Kafka allows it only when an admin
  asks): :meth:`Controller.elect_leaders`.
* **Log dir event** (a broker's log went offline: it stated so in its registration, then wrote
  a notice under ``/log_dir_event_notification``): its offline replicas lose their leadership
  to an in-sync follower and leave the ISR, and are never elected while the registration says
  so (:meth:`Controller._on_log_dir_event`). The registrations are read with the live brokers,
  so a new controller knows every offline replica from its failover on, as Kafka's learns
  them from the brokers' LeaderAndIsr answers.
* **Partition reassignment** (AlterPartitionReassignments, or ``/admin/reassign_partitions``):
  Kafka's ``onPartitionReassignment`` (:meth:`Controller._on_partition_reassignment`). The
  only partition state kept between events is in ZooKeeper here too: a partition is being
  reassigned while its topic znode lists ``adding_replicas`` / ``removing_replicas``, and a
  new controller resumes every such partition at failover. A watch on the state znode of each
  partition being moved brings the controller back when its ISR grows.

Every decision is logged (logger ``sluice.controller``): partition, old and new leader, leader
epoch and ISR, and why.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import defaultdict
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, cast

from sluice.protocol import errors
from sluice.protocol.structs import TopicPartition
from sluice.protocol.types import random_uuid, uuid_to_str
from sluice.server.config_def import boolean
from sluice.server.controller.config import CONTROLLER_CONFIG
from sluice.server.logging import get_logger
from sluice.server.zk.client import SessionEvent, SessionState, WatchCallback, WatchEvent
from sluice.server.zk.data import (
    BrokerInfo,
    PartitionState,
    ReplicaAssignment,
    TopicAssignment,
)
from sluice.server.zk.errors import (
    BadVersionError,
    ClientClosedError,
    ControllerMovedError,
    NodeExistsError,
    SessionExpiredError,
    ZkConnectionError,
    ZkError,
)
from sluice.server.zk.kafka_zk import ControllerEpoch, KafkaZkClient

from .election import (
    NO_LEADER,
    LeaderAndIsr,
    elect_controlled_shutdown,
    elect_offline,
    elect_preferred,
    elect_reassigned,
    fits_assignment,
    next_elr,
    remove_replica,
    remove_replicas,
)

__all__ = [
    "MAX_WRITE_ATTEMPTS",
    "BrokerConfigLike",
    "Controller",
    "ControllerSettings",
    "imbalanced_partitions",
    "validate_reassignment",
]

log = get_logger("sluice.controller")

#: Read-decide-write rounds for partitions whose conditional write met a BADVERSION.
MAX_WRITE_ATTEMPTS = 10
#: Attempts at one event when the ZooKeeper connection fails under it (each after reconnecting).
MAX_EVENT_ATTEMPTS = 5
#: The topic-level key overriding the broker's default for unclean elections.
UNCLEAN_KEY = "unclean.leader.election.enable"
MIN_ISR_KEY = "min.insync.replicas"


class _LogConfigLike(Protocol):
    @property
    def unclean_leader_election_enable(self) -> bool: ...

    @property
    def min_insync_replicas(self) -> int: ...


class BrokerConfigLike(Protocol):
    """What :meth:`ControllerSettings.from_config` reads of the broker's ``Config`` (the
    controller room does not import the core)."""

    @property
    def auto_leader_rebalance_enable(self) -> bool: ...
    @property
    def leader_imbalance_check_interval_seconds(self) -> int: ...
    @property
    def leader_imbalance_per_broker_percentage(self) -> int: ...
    def log_config(self) -> _LogConfigLike: ...


_setting = CONTROLLER_CONFIG.setting


@dataclass(frozen=True)
class ControllerSettings:
    """The broker keys the controller acts on: fields of
    :data:`sluice.server.controller.config.CONTROLLER_CONFIG`'s keys."""

    #: ``unclean.leader.election.enable``: the broker default; ``/config/topics/<t>`` overrides.
    #: A topic key, declared by storage, which this room does not import: Kafka's default here,
    #: kept equal by ``from_config(Config()) == ControllerSettings()`` (test_controller).
    unclean_leader_election_enable: bool = False
    #: ``min.insync.replicas`` (the same kind of key): below it, replicas leaving the ISR stay
    #: eligible leaders (KIP-966).
    min_insync_replicas: int = 1
    auto_leader_rebalance_enable: bool = _setting("auto.leader.rebalance.enable")
    leader_imbalance_check_interval_s: float = _setting(
        "leader.imbalance.check.interval.seconds", scale=1.0
    )
    leader_imbalance_per_broker_percentage: int = _setting("leader.imbalance.per.broker.percentage")

    @classmethod
    def from_config(cls, config: BrokerConfigLike) -> ControllerSettings:
        return cls(
            unclean_leader_election_enable=config.log_config().unclean_leader_election_enable,
            min_insync_replicas=config.log_config().min_insync_replicas,
            auto_leader_rebalance_enable=config.auto_leader_rebalance_enable,
            leader_imbalance_check_interval_s=float(config.leader_imbalance_check_interval_seconds),
            leader_imbalance_per_broker_percentage=config.leader_imbalance_per_broker_percentage,
        )


# --- events -------------------------------------------------------------------------------------


@dataclass
class _Event:
    #: Set for events a caller awaits (controlled shutdown, preferred election).
    result: asyncio.Future[Any] | None = field(default=None, kw_only=True)

    def fail(self, exc: BaseException) -> None:
        if self.result is not None and not self.result.done():
            self.result.set_exception(exc)

    def succeed(self, value: Any) -> None:
        if self.result is not None and not self.result.done():
            self.result.set_result(value)


@dataclass
class _Reelect(_Event):
    """Check ``/controller``: resign if it is no longer ours, campaign if it is empty."""


@dataclass
class _Expire(_Event):
    """The session is gone (and ``/controller`` with it): resign."""


@dataclass
class _BrokerChange(_Event):
    pass


@dataclass
class _TopicChange(_Event):
    pass


@dataclass
class _PartitionModifications(_Event):
    topic: str


@dataclass
class _TopicDeletion(_Event):
    pass


@dataclass
class _ControlledShutdown(_Event):
    broker_id: int
    broker_epoch: int


@dataclass
class _PreferredElection(_Event):
    partitions: frozenset[TopicPartition] | None
    auto: bool


@dataclass
class _ElectLeaders(_Event):
    """ElectLeaders (43): preferred or unclean, for ``partitions`` (None: all)."""

    partitions: frozenset[TopicPartition] | None
    unclean: bool


@dataclass
class _ZkPreferredElection(_Event):
    """``/admin/preferred_replica_election`` appeared or changed."""


@dataclass
class _AlterReassignments(_Event):
    """AlterPartitionReassignments (45): target replicas per partition, None cancels."""

    reassignments: dict[TopicPartition, tuple[int, ...] | None]


@dataclass
class _ListReassignments(_Event):
    partitions: frozenset[TopicPartition] | None


@dataclass
class _LogDirEventNotification(_Event):
    """A child of ``/log_dir_event_notification`` appeared: a broker's storage failed."""


@dataclass
class _ZkReassignment(_Event):
    """``/admin/reassign_partitions`` appeared or changed."""


@dataclass
class _ReassignmentIsrChange(_Event):
    """The state of a partition being reassigned changed: its new replicas may be in sync."""

    partition: TopicPartition


class _Inactive(Exception):
    """Raised inside a handler that finds the controller no longer active: the event ends."""


Decide = Callable[[TopicPartition, PartitionState], Awaitable[LeaderAndIsr | None]]


def _leader_and_isr(state: PartitionState) -> LeaderAndIsr:
    return LeaderAndIsr(
        state.leader, state.leader_epoch, tuple(state.isr), tuple(state.eligible_leader_replicas)
    )


class Controller:
    """The controller of one broker: campaigns while started, acts while elected.

    Call every method from the event loop. Only the controller writes partition states other than
    the leader's own ISR changes; only while :attr:`is_active`, and every write is fenced by
    :attr:`epoch`.
    """

    def __init__(self, zk: KafkaZkClient, broker_id: int, settings: ControllerSettings) -> None:
        self.kzk = zk
        self.broker_id = broker_id
        self.settings = settings
        self._fence: ControllerEpoch | None = None
        self._queue: asyncio.Queue[_Event] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None
        self._rebalance_task: asyncio.Task[None] | None = None
        self._stopped = False
        #: live brokers as of the last broker change handled: id -> broker epoch (czxid)
        self._live: dict[int, int] = {}
        #: those of them whose registration says they may have lost unflushed writes
        #: (``BrokerInfo.may_have_lost_unflushed``: an unclean stop in another boot)
        self._lost_unflushed: set[int] = set()
        self._shutting_down: set[int] = set()
        self._topics: set[str] = set()
        #: one-shot watches set and not yet fired (so a re-read does not stack another)
        self._armed: set[str] = set()
        #: Replicas whose log went offline, by broker, as the live brokers' registrations say
        #: (``BrokerInfo.offline_partitions``; Kafka's ``replicasOnOfflineDirs``, which its
        #: controller learns from the brokers' answers): re-read with the live brokers and for
        #: each log dir event notification, so a new controller knows them from the start.
        self._registered_offline: dict[int, frozenset[TopicPartition]] = {}
        #: Those named only by log dir event notifications (None: all of the broker's
        #: replicas; a notice in Kafka's form, or from a broker that does not register them);
        #: dropped when the broker dies or registers again (its next start recovers the logs).
        self._offline_replicas: dict[int, set[TopicPartition] | None] = {}

    # --- public API ---------------------------------------------------------------------------

    @property
    def is_active(self) -> bool:
        """True while this broker is the controller (elected, not resigned)."""
        return self._fence is not None

    @property
    def epoch(self) -> ControllerEpoch | None:
        """The controller epoch (and ``/controller_epoch`` zkVersion) fencing our writes."""
        return self._fence

    @property
    def shutting_down(self) -> frozenset[int]:
        """Brokers that asked for a controlled shutdown and are still registered."""
        return frozenset(self._shutting_down)

    async def start(self) -> None:
        """Start the event task and campaign (now, and whenever ``/controller`` disappears)."""
        if self._task is not None:
            raise RuntimeError("a Controller is started once")
        self.kzk.zk.add_session_listener(self._on_session)
        self._task = asyncio.get_running_loop().create_task(
            self._run(), name=f"controller-{self.broker_id}"
        )
        self._enqueue(_Reelect())

    async def stop(self) -> None:
        """Stop campaigning; if active, resign (delete ``/controller`` so another broker takes
        over at once instead of after our session timeout). Queued requests fail with
        NOT_CONTROLLER."""
        if self._stopped:
            return
        self._stopped = True
        self.kzk.zk.remove_session_listener(self._on_session)
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        fence = self._fence
        self._deactivate("stopped")
        if fence is not None and not self.kzk.zk.closed:
            with contextlib.suppress(ZkError):
                await self.kzk.resign_controller(fence)
        while not self._queue.empty():
            event = self._queue.get_nowait()
            event.fail(errors.NotController("the controller stopped"))
            self._queue.task_done()

    async def wait_idle(self, timeout: float = 10.0) -> None:
        """Return once every event queued so far is processed (tests); TimeoutError after
        ``timeout`` seconds. Watch events still on their way from ZooKeeper are not waited for."""
        async with asyncio.timeout(timeout):
            await self._queue.join()

    async def controlled_shutdown(self, broker_id: int, broker_epoch: int) -> list[TopicPartition]:
        """Move leadership off ``broker_id`` before it stops (Kafka's ``doControlledShutdown``).

        Raises ``NotController`` if this broker is not the controller, ``BrokerNotAvailable`` if
        ``broker_id`` is not registered, ``StaleBrokerEpoch`` if ``broker_epoch`` is older than
        the registered one (a request from a previous incarnation; -1 = unknown, not checked, as
        for ControlledShutdown v0-1). Otherwise the broker is remembered as shutting down (no
        election picks it until it leaves); every replicated partition it leads gets the
        controlled-shutdown election (first live ISR member in assignment order that is not
        shutting down), and it leaves the ISR of the replicated partitions it follows (never
        as the last member).

        Returns the replicated partitions it still leads (no other live ISR member), sorted; the
        broker may retry later. Partitions with one replica are not in it: nothing can ever
        move them (Kafka's ``replicatedPartitionsBrokerLeads``).
        """
        return cast(
            list[TopicPartition], await self._call(_ControlledShutdown(broker_id, broker_epoch))
        )

    async def elect_preferred_leaders(
        self, partitions: Iterable[TopicPartition] | None = None
    ) -> list[TopicPartition]:
        """Give leadership back to the preferred (first assigned) replica of ``partitions`` (all
        when None) where it is live, not shutting down and in the ISR. Returns the partitions
        whose leader changed, sorted. ``NotController`` if not active."""
        wanted = None if partitions is None else frozenset(partitions)
        return cast(list[TopicPartition], await self._call(_PreferredElection(wanted, auto=False)))

    async def elect_leaders(
        self, partitions: Iterable[TopicPartition] | None, *, unclean: bool = False
    ) -> dict[TopicPartition, errors.KafkaError | None]:
        """ElectLeaders (Kafka's ``processReplicaLeaderElection``, triggered by an admin
        client): per partition None (a new leader was elected) or the error -- ELECTION_NOT_NEEDED
        (preferred: the preferred replica leads; unclean: a live leader leads),
        PREFERRED_LEADER_NOT_AVAILABLE / ELIGIBLE_LEADERS_NOT_AVAILABLE (no replica may lead),
        UNKNOWN_TOPIC_OR_PARTITION, INVALID_TOPIC_EXCEPTION (the topic is being deleted).
        ``partitions`` None: every partition. ``unclean`` picks any live replica when no
        in-sync one is live (it may lack acknowledged records: the operator's choice)."""
        wanted = None if partitions is None else frozenset(partitions)
        return cast(
            dict[TopicPartition, errors.KafkaError | None],
            await self._call(_ElectLeaders(wanted, unclean)),
        )

    async def alter_partition_reassignments(
        self, reassignments: Mapping[TopicPartition, Sequence[int] | None]
    ) -> dict[TopicPartition, errors.KafkaError | None]:
        """AlterPartitionReassignments (Kafka's ``processApiPartitionReassignment``): start
        moving each partition to its target replicas, or cancel (None) a reassignment in
        progress. Per partition None (accepted: the move goes on in the background, see
        :meth:`_on_partition_reassignment`) or the error."""
        wanted = {tp: None if r is None else tuple(r) for tp, r in reassignments.items()}
        return cast(
            dict[TopicPartition, errors.KafkaError | None],
            await self._call(_AlterReassignments(wanted)),
        )

    async def list_partition_reassignments(
        self, partitions: Iterable[TopicPartition] | None = None
    ) -> dict[TopicPartition, ReplicaAssignment]:
        """The reassignments in progress (of ``partitions``, or all), as ZooKeeper holds them."""
        wanted = None if partitions is None else frozenset(partitions)
        return cast(
            dict[TopicPartition, ReplicaAssignment],
            await self._call(_ListReassignments(wanted)),
        )

    # --- the event task -----------------------------------------------------------------------

    def _enqueue(self, event: _Event) -> None:
        if self._stopped:
            event.fail(errors.NotController("the controller stopped"))
            return
        self._queue.put_nowait(event)

    async def _call(self, event: _Event) -> Any:
        if not self.is_active:
            raise errors.NotController(f"broker {self.broker_id} is not the controller")
        event.result = asyncio.get_running_loop().create_future()
        self._enqueue(event)
        return await event.result

    async def _run(self) -> None:
        while True:
            event = await self._queue.get()
            try:
                await self._process(event)
            except Exception as exc:  # a bug: log it, fail the caller, keep the controller alive
                log.exception("controller event failed", controller_event=type(event).__name__)
                event.fail(exc)
            finally:
                event.fail(errors.NotController("the event was not completed"))
                self._queue.task_done()

    async def _process(self, event: _Event) -> None:
        """Handle one event; connection trouble retries it after reconnecting (handlers re-read
        everything, so a retry is safe), a stale fence or a lost session resigns."""
        for attempt in range(1, MAX_EVENT_ATTEMPTS + 1):
            try:
                event.succeed(await self._handle(event))
                return
            except _Inactive:
                event.fail(errors.NotController(f"broker {self.broker_id} is not the controller"))
                return
            except errors.KafkaError as exc:  # a refusal with a Kafka error code: the caller's
                event.fail(exc)
                return
            except ControllerMovedError as exc:
                log.warning("fenced: another controller was elected", error=str(exc))
                await self._resign("fenced by a newer controller epoch", delete=False)
                event.fail(errors.NotController("the controller moved"))
                self._enqueue(_Reelect())
                return
            except ClientClosedError:
                event.fail(errors.NotController("the ZooKeeper client is closed"))
                return
            except SessionExpiredError:
                await self._resign("ZooKeeper session expired", delete=False)
                event.fail(errors.NotController("the ZooKeeper session expired"))
                return  # the new session's CONNECTED enqueues a Reelect
            except ZkConnectionError as exc:
                if attempt == MAX_EVENT_ATTEMPTS:
                    log.error(
                        "controller event abandoned after connection failures",
                        controller_event=type(event).__name__,
                        error=str(exc),
                    )
                    event.fail(errors.RequestTimedOut(str(exc)))
                    if self.is_active:
                        # What it left undone (and the watches it did not re-arm) is redone by a
                        # fresh failover, here or on another broker.
                        await self._resign("an event could not be completed", delete=True)
                        self._enqueue(_Reelect())
                    return
                log.info(
                    "connection trouble; retrying the event", controller_event=type(event).__name__
                )
                await self.kzk.zk.wait_connected()

    async def _handle(self, event: _Event) -> Any:
        if isinstance(event, _Reelect):
            return await self._on_reelect()
        if isinstance(event, _Expire):
            return await self._resign("ZooKeeper session lost", delete=False)
        if not self.is_active:  # watch events after a resignation: nothing to do
            raise _Inactive
        if isinstance(event, _BrokerChange):
            return await self._on_broker_change()
        if isinstance(event, _TopicChange):
            return await self._on_topic_change()
        if isinstance(event, _PartitionModifications):
            return await self._on_partition_modifications(event.topic)
        if isinstance(event, _TopicDeletion):
            return await self._on_topic_deletion()
        if isinstance(event, _ControlledShutdown):
            return await self._on_controlled_shutdown(event.broker_id, event.broker_epoch)
        if isinstance(event, _PreferredElection):
            return await self._on_preferred_election(event.partitions, event.auto)
        if isinstance(event, _ElectLeaders):
            return await self._on_elect_leaders(event.partitions, event.unclean)
        if isinstance(event, _ZkPreferredElection):
            return await self._on_zk_preferred_election()
        if isinstance(event, _AlterReassignments):
            return await self._on_alter_reassignments(event.reassignments)
        if isinstance(event, _ListReassignments):
            return await self._on_list_reassignments(event.partitions)
        if isinstance(event, _ZkReassignment):
            return await self._on_zk_reassignment()
        if isinstance(event, _ReassignmentIsrChange):
            return await self._on_reassignment_isr_change(event.partition)
        if isinstance(event, _LogDirEventNotification):
            return await self._on_log_dir_event()
        raise TypeError(f"unknown controller event {event!r}")

    # --- watches and session ------------------------------------------------------------------

    def _arm(self, key: str, make_event: Callable[[], _Event]) -> WatchCallback | None:
        """A one-shot watch that enqueues ``make_event()`` when it fires (any event, including
        the connection drop, after which the handler re-reads and re-arms); None if the watch
        ``key`` is already set."""
        if key in self._armed:
            return None
        self._armed.add(key)

        def fired(_: WatchEvent) -> None:
            self._armed.discard(key)
            self._enqueue(make_event())

        return fired

    async def _read_armed(
        self,
        key: str,
        make_event: Callable[[], _Event],
        read: Callable[[WatchCallback | None], Any],
    ) -> Any:
        watch = self._arm(key, make_event)
        try:
            return await read(watch)
        except BaseException:
            if watch is not None:
                self._armed.discard(key)
            raise

    def _on_session(self, event: SessionEvent) -> None:
        if event.state is SessionState.LOST:
            # Give up at once (ephemeral /controller is gone); the queued event cleans up.
            if self.is_active:
                self._deactivate("ZooKeeper session lost")
            self._enqueue(_Expire())
        elif event.state is SessionState.CONNECTED:
            self._enqueue(_Reelect())  # re-arms the /controller watch dropped with the connection

    # --- election -----------------------------------------------------------------------------

    async def _on_reelect(self) -> None:
        """Kafka's ``Reelect``/``elect``: stay, resign or campaign after reading ``/controller``."""
        if self._stopped:
            return
        info = await self._read_armed("controller", _Reelect, self.kzk.get_controller)
        if self._fence is not None:
            current = await self.kzk.get_controller_epoch()
            if info is not None and info.broker_id == self.broker_id and current == self._fence:
                return
            await self._resign("another broker is controller", delete=False)
        if info is not None:
            return
        fence = await self.kzk.elect_controller(self.broker_id)
        if fence is None:
            return  # lost the race; the armed watch reports the winner's node going away
        try:
            await self._on_failover(fence)
        except BaseException:
            # A half-done failover must not stay in charge: resign so a retry (or another
            # broker) starts over from ZooKeeper.
            await self._resign("failover did not complete", delete=True, fence=fence)
            raise

    async def _on_failover(self, fence: ControllerEpoch) -> None:
        """Kafka's ``onControllerFailover``."""
        self._fence = fence
        self._armed.clear()  # watches of an earlier term may be gone with an old session
        self._shutting_down.clear()
        log.info("became controller", broker_id=self.broker_id, controller_epoch=fence.epoch)
        await self.kzk.create_top_level_paths()
        brokers = await self._read_brokers()
        self._live = brokers
        await self._on_topic_deletion()
        topics = await self._read_armed("topics", _TopicChange, self.kzk.get_topics)
        self._topics = set(topics)
        await self._reconcile(topics, set(brokers), "controller failover")
        if self._registered_offline:  # what an earlier controller may not have finished
            await self._on_replicas_offline(set(self._registered_offline))
        await self._resume_reassignments(topics)
        await self._on_zk_reassignment()
        await self._on_zk_preferred_election()
        await self._on_log_dir_event()
        if self.settings.auto_leader_rebalance_enable:
            self._rebalance_task = asyncio.get_running_loop().create_task(
                self._rebalance_timer(), name=f"controller-{self.broker_id}-rebalance"
            )
        log.info(
            "controller failover done",
            controller_epoch=fence.epoch,
            live_brokers=sorted(brokers),
            topics=len(topics),
        )

    def _deactivate(self, reason: str) -> None:
        if self._fence is not None:
            log.info("resigned as controller", controller_epoch=self._fence.epoch, reason=reason)
        self._fence = None
        self._shutting_down.clear()
        self._live = {}
        self._lost_unflushed = set()
        self._topics = set()
        self._registered_offline = {}
        self._offline_replicas = {}
        if self._rebalance_task is not None:
            self._rebalance_task.cancel()
            self._rebalance_task = None

    async def _resign(
        self, reason: str, *, delete: bool, fence: ControllerEpoch | None = None
    ) -> None:
        """Kafka's ``onControllerResignation`` (+ deleting ``/controller`` when we still own it,
        so the next controller need not wait for our session to expire)."""
        fence = fence or self._fence
        self._deactivate(reason)
        if delete and fence is not None:
            with contextlib.suppress(ZkError):
                await self.kzk.resign_controller(fence)

    def _active_fence(self) -> ControllerEpoch:
        if self._fence is None:
            raise _Inactive
        return self._fence

    async def _rebalance_timer(self) -> None:
        while True:
            await asyncio.sleep(self.settings.leader_imbalance_check_interval_s)
            self._enqueue(_PreferredElection(None, auto=True))

    # --- reading ------------------------------------------------------------------------------

    async def _read_brokers(self) -> dict[int, int]:
        """The registered brokers and their broker epochs; arms the broker-change watch."""
        infos = await self._read_armed("brokers", _BrokerChange, self.kzk.get_all_brokers)
        self._lost_unflushed = {b for b, info in infos.items() if info.may_have_lost_unflushed}
        self._registered_offline = {}
        for info in infos.values():
            self._learn_offline(info)
        return {broker_id: info.epoch for broker_id, info in infos.items()}

    def _learn_offline(self, info: BrokerInfo) -> None:
        """Hold the offline partitions ``info`` (a registration just read) states."""
        held = self._registered_offline.pop(info.broker_id, frozenset())
        offline = frozenset(info.offline_partitions)
        if offline:
            self._registered_offline[info.broker_id] = offline
        if offline - held:
            log.warning("replicas offline after a storage failure", broker_id=info.broker_id,
                        partitions=sorted(f"{t.topic}-{t.partition}" for t in offline),
                        source="registration", broker_epoch=info.epoch)  # fmt: skip

    async def _assignments(self, topics: Iterable[str]) -> dict[str, TopicAssignment]:
        """Assignments of ``topics`` (those that exist), arming each topic's modification watch."""

        async def one(topic: str) -> TopicAssignment | None:
            key = f"topic:{topic}"
            found: TopicAssignment | None = await self._read_armed(
                key,
                lambda: _PartitionModifications(topic),
                lambda watch: self.kzk.get_topic_assignment(topic, watch),
            )
            if found is None:
                self._armed.discard(key)  # no node, no watch set
            return found

        names = sorted(set(topics))
        found = await asyncio.gather(*(one(t) for t in names))
        return {t: a for t, a in zip(names, found, strict=True) if a is not None}

    async def _assign_topic_ids(
        self, assignments: dict[str, TopicAssignment], fence: ControllerEpoch
    ) -> dict[str, TopicAssignment]:
        """Give a topic without an id (one an older Sluice created) a new one, written to its
        znode (fenced, conditional on the version read), as Kafka's controller does for
        ZooKeeper topics without one (``KafkaController.processTopicIds``); the assignments
        with their ids. A topic changed meanwhile keeps none for now: its watch brings it
        back here."""
        out = dict(assignments)
        for topic, assignment in sorted(assignments.items()):
            if assignment.topic_id is not None:
                continue
            topic_id = random_uuid()
            try:
                out[topic] = await self.kzk.set_topic_assignment(
                    replace(assignment, topic_id=topic_id), fence
                )
            except BadVersionError:
                continue
            log.info("topic id assigned", topic=topic, topic_id=uuid_to_str(topic_id))
        return out

    async def _min_insync_replicas(self, topic: str) -> int:
        """``min.insync.replicas`` of ``topic``: its override, else the broker's."""
        raw = (await self.kzk.get_topic_config(topic)).config.get(MIN_ISR_KEY)
        try:
            return int(raw) if raw is not None else self.settings.min_insync_replicas
        except ValueError:
            log.warning("unreadable topic config; using the broker default", topic=topic, value=raw)
            return self.settings.min_insync_replicas

    async def _unclean_allowed(self, topic: str) -> bool:
        """``unclean.leader.election.enable`` of ``topic``: its override, else the broker's."""
        config = (await self.kzk.get_topic_config(topic)).config
        raw = config.get(UNCLEAN_KEY)
        if raw is None:
            return self.settings.unclean_leader_election_enable
        try:
            return boolean(raw)
        except ValueError:
            log.warning("unreadable topic config; using the broker default", topic=topic, value=raw)
            return self.settings.unclean_leader_election_enable

    # --- writing ------------------------------------------------------------------------------

    async def _transition(
        self, partitions: Collection[TopicPartition], decide: Decide, reason: str
    ) -> dict[TopicPartition, tuple[PartitionState, PartitionState]]:
        """Read each partition's state, ``decide`` its next leader/ISR (None: leave it), write
        conditionally on the zkVersion read and fenced; partitions whose write met a BADVERSION
        go round again (at most :data:`MAX_WRITE_ATTEMPTS` rounds). Returns ``{tp: (old, new)}``
        of the states written."""
        written: dict[TopicPartition, tuple[PartitionState, PartitionState]] = {}
        pending = sorted(set(partitions))
        for _ in range(MAX_WRITE_ATTEMPTS):
            if not pending:
                break
            fence = self._active_fence()
            states = await self.kzk.get_partition_states(pending)
            proposals: dict[str, dict[int, PartitionState]] = defaultdict(dict)
            before: dict[TopicPartition, PartitionState] = {}
            for tp in pending:
                state = states.get(tp)
                if state is None:
                    continue  # deleted meanwhile (or never created: not ours to elect)
                if state.controller_epoch > fence.epoch:
                    log.warning(
                        "state written by a newer controller; not touching it",
                        topic=tp.topic,
                        partition=tp.partition,
                        state_controller_epoch=state.controller_epoch,
                        controller_epoch=fence.epoch,
                    )
                    continue
                new = await decide(tp, state)
                if new is None:
                    continue
                before[tp] = state
                proposals[tp.topic][tp.partition] = PartitionState(
                    leader=new.leader,
                    leader_epoch=new.leader_epoch,
                    isr=tuple(new.isr),
                    controller_epoch=fence.epoch,
                    zk_version=state.zk_version,
                    eligible_leader_replicas=tuple(new.elr),
                )
            pending = []
            for topic, states_of_topic in sorted(proposals.items()):
                results = await self.kzk.set_partition_states(
                    topic, states_of_topic, self._active_fence()
                )
                for partition, result in results.items():
                    tp = TopicPartition(topic, partition)
                    old = before[tp]
                    if isinstance(result, PartitionState):
                        written[tp] = (old, result)
                        _log_change(tp, old, result, reason)
                    elif isinstance(result, BadVersionError):
                        log.info(
                            "partition state changed under us; deciding again",
                            topic=topic,
                            partition=partition,
                            read_zk_version=old.zk_version,
                            reason=reason,
                        )
                        pending.append(tp)
                    else:
                        log.info("partition state gone", topic=topic, partition=partition)
        if pending:
            log.error(
                "gave up on partition state writes after repeated version conflicts",
                partitions=[f"{tp.topic}-{tp.partition}" for tp in pending],
                attempts=MAX_WRITE_ATTEMPTS,
                reason=reason,
            )
        return written

    async def _create_initial_states(
        self,
        assignment: TopicAssignment,
        partitions: Iterable[int],
        candidates: Collection[int],
    ) -> None:
        """First states of new partitions (Kafka's ``initializeLeaderAndIsrForPartitions``)."""
        fence = self._active_fence()
        topic = assignment.topic
        states: dict[int, PartitionState] = {}
        for partition in sorted(partitions):
            replicas = assignment.replicas(partition)
            live = [r for r in replicas if r in candidates]
            if not live:
                log.warning(
                    "new partition has no live replica; it stays without a leader",
                    topic=topic,
                    partition=partition,
                    replicas=list(replicas),
                    live_brokers=sorted(candidates),
                )
                continue
            states[partition] = PartitionState(live[0], 0, tuple(live), fence.epoch)
        if not states:
            return
        results = await self.kzk.create_partition_states(topic, states, fence)
        for partition, result in sorted(results.items()):
            if isinstance(result, PartitionState):
                log.info(
                    "partition state created",
                    topic=topic,
                    partition=partition,
                    leader=result.leader,
                    leader_epoch=result.leader_epoch,
                    isr=list(result.isr),
                    controller_epoch=fence.epoch,
                    reason="new partition",
                )
            elif isinstance(result, NodeExistsError):
                log.info("partition state already exists", topic=topic, partition=partition)

    async def _reconcile(self, topics: Iterable[str], registered: set[int], reason: str) -> None:
        """Bring every partition of ``topics`` in line with the brokers ``registered``: first
        states for partitions without one, the offline election where the leader is not
        registered, unregistered replicas out of the ISRs. Idempotent."""
        fence = self._active_fence()
        candidates = every_candidate = registered - self._shutting_down
        assignments = await self._assign_topic_ids(await self._assignments(topics), fence)
        tps = [TopicPartition(t, p) for t, a in assignments.items() for p in a.partitions]
        states = await self.kzk.get_partition_states(tps)
        for topic, assignment in sorted(assignments.items()):
            missing = [p for p in assignment.partitions if TopicPartition(topic, p) not in states]
            if missing:
                await self._create_initial_states(assignment, missing, candidates)
        self._active_fence()
        unclean: dict[str, bool] = {}
        min_isr: dict[str, int] = {}

        async def decide(tp: TopicPartition, state: PartitionState) -> LeaderAndIsr | None:
            """:func:`choose`, with the eligible replicas the change implies (KIP-966, as the
            leader's own ISR writes do): replicas that leave the ISR while it is below
            ``min.insync.replicas`` hold every record below the high watermark, which stops
            then -- unless they lost unflushed writes, or an unclean election moved it back."""
            new = await choose(tp, state)
            old = _leader_and_isr(state)
            lost = self._lost_unflushed_since(state)
            if new is None:
                return None
            if new.leader != NO_LEADER and (
                new.leader in lost or new.leader not in (*old.isr, *old.elr)
            ):
                return new._replace(elr=())  # it leads on what it has: nobody is eligible
            if tp.topic not in min_isr:
                min_isr[tp.topic] = await self._min_insync_replicas(tp.topic)
            replicas = assignments[tp.topic].replicas(tp.partition)
            bound = min(min_isr[tp.topic], len(replicas))
            elr = next_elr(old.isr, new.elr, new.isr, bound)
            return new._replace(elr=tuple(r for r in elr if r in replicas and r not in lost))

        async def choose(tp: TopicPartition, state: PartitionState) -> LeaderAndIsr | None:
            replicas = assignments[tp.topic].replicas(tp.partition)
            current = _leader_and_isr(state)
            candidates = every_candidate - self._offline_on(tp)
            # Members that came back from a power loss since this state was written hold less
            # than it says: they lead only if nobody else may hold what they lost (election).
            lost = self._lost_unflushed_since(state)

            async def unclean_allowed() -> bool:
                """Unclean election, only when no trusted ISR member or eligible replica is
                live: a replica back from a power loss is then a live out-of-sync one."""
                members = (*state.isr, *current.elr)
                if any(r in candidates and r not in lost for r in members):
                    return False
                if tp.topic not in unclean:
                    unclean[tp.topic] = await self._unclean_allowed(tp.topic)
                return unclean[tp.topic]

            if self._leader_registered_since(state):
                # Its leader bounced after this state was written (KIP-380, also when this
                # controller took over after the bounce and never saw the old epoch): treat it
                # as gone -- another in-sync replica leads, and it leaves the ISR; none, an
                # eligible replica (KIP-966); alone in it and none eligible, it leads again at
                # a new epoch (what it kept is all there is) -- unless it lost unflushed writes
                # and an ISR member or eligible replica is down: the partition waits for it.
                others = candidates - {state.leader}
                elected = elect_offline(current, replicas, others, distrusted=lost)
                if elected is not None and elected.leader != NO_LEADER:
                    return elected
                allow = await unclean_allowed()
                return elect_offline(current, replicas, candidates, unclean=allow, distrusted=lost)
            if not fits_assignment(current, replicas):
                # A reassignment shrank the assignment and its controller stopped before
                # fitting the state to it (see _complete_reassignment).
                return elect_reassigned(current, replicas, candidates)
            if state.leader not in registered:
                allow = await unclean_allowed()
                return elect_offline(current, replicas, candidates, unclean=allow, distrusted=lost)
            gone = [r for r in current.isr if r not in registered or r in lost]
            removed = remove_replicas(current, gone)
            elr = tuple(r for r in current.elr if r not in lost)
            if elr != current.elr:  # an eligible replica lost what made it eligible
                return (removed or current)._replace(elr=elr)
            return removed

        needs = [
            tp
            for tp, s in states.items()
            if s.controller_epoch <= fence.epoch
            and (
                not fits_assignment(
                    _leader_and_isr(s), assignments[tp.topic].replicas(tp.partition)
                )
                or s.leader not in registered
                or any(r not in registered for r in s.isr)
                or self._leader_registered_since(s)
                or self._lost_unflushed_since(s)
            )
        ]
        if needs:
            await self._transition(needs, decide, reason)

    def _leader_registered_since(self, state: PartitionState) -> bool:
        """The state's leader registered (its broker epoch, a czxid) after the state was
        written (its mzxid): the leadership was given to an earlier incarnation."""
        return bool(self._registered_since(state, (state.leader,)))

    def _registered_since(self, state: PartitionState, brokers: Iterable[int]) -> set[int]:
        """Those of ``brokers`` registered after ``state`` was written (see above)."""
        live = self._live
        return {b for b in brokers if 0 <= state.mzxid < live.get(b, -1)}

    def _lost_unflushed_since(self, state: PartitionState) -> set[int]:
        """The state's ISR members and eligible replicas that registered after it was written
        saying they may have lost unflushed writes (a power loss): they may lack records the
        state counts them as holding. (Registered again after a pause, a kill -9 in the same
        boot or a clean stop, a replica kept everything and stays eligible.)"""
        members = (*state.isr, *state.eligible_leader_replicas)
        return self._registered_since(state, members) & self._lost_unflushed

    # --- handlers -----------------------------------------------------------------------------

    async def _on_broker_change(self) -> None:
        """Kafka's ``processBrokerChange``: dead, new and bounced brokers (KIP-380)."""
        current = await self._read_brokers()
        previous = self._live
        dead = sorted(previous.keys() - current.keys())
        new = sorted(current.keys() - previous.keys())
        bounced = sorted(b for b in current.keys() & previous.keys() if current[b] != previous[b])
        if not (dead or new or bounced):
            return
        log.info(
            "live brokers changed",
            live=sorted(current),
            dead=dead,
            new=new,
            bounced=bounced,
        )
        self._shutting_down -= set(dead) | set(bounced)
        for broker in (*dead, *bounced):
            self._offline_replicas.pop(broker, None)
        self._live = current
        topics = await self.kzk.get_topics()
        if bounced:
            # A bounced broker is first dead: what it led moves (or goes offline), it leaves
            # the ISRs -- its new incarnation must not inherit the old one's leadership.
            registered = set(current) - set(bounced)
            await self._reconcile(topics, registered, f"brokers gone: {sorted(dead + bounced)}")
        why = f"brokers gone: {dead}" if dead and not new else f"live brokers: {sorted(current)}"
        await self._reconcile(topics, set(current), why)
        if new or bounced:  # Kafka's onBrokerStartup: resume deletions that waited for them
            await self._on_topic_deletion()

    async def _on_topic_change(self) -> None:
        topics = set(await self._read_armed("topics", _TopicChange, self.kzk.get_topics))
        added = topics - self._topics
        removed = self._topics - topics
        self._topics = topics
        if removed:
            log.info("topics gone", topics=sorted(removed))
        if added:
            log.info("new topics", topics=sorted(added))
            await self._reconcile(added, set(self._live), "new topic")

    async def _on_partition_modifications(self, topic: str) -> None:
        if topic in self._topics:
            await self._reconcile([topic], set(self._live), "partitions added")

    async def _on_topic_deletion(self) -> None:
        """Kafka's ``TopicDeletion``, reduced to ZooKeeper: the topic's znodes and its request
        go in one fenced multi; brokers notice the topic gone and delete their logs.

        Only while every broker holding one of its replicas is registered (Kafka's
        ``TopicDeletionManager``: a topic with a replica on a dead broker is ineligible for
        deletion until that broker starts again; the request stays, the topic stays visible,
        DeleteTopics times out). Otherwise the dead broker's replica would outlive the topic: the
        broker, back, would find logs ZooKeeper has no record of, which it keeps as stray logs
        (it cannot tell a deleted topic from a ZooKeeper that was reset, and deleting a whole
        cluster's data on the second guess is not a risk to take). The broker change that
        registers it retries the deletion."""
        topics = await self._read_armed("deletions", _TopicDeletion, self.kzk.get_topic_deletions)
        for topic in topics:
            assignment = await self.kzk.get_topic_assignment(topic)
            if assignment is not None:
                if any(a.is_being_reassigned for a in assignment.partitions.values()):
                    # Kafka's markTopicIneligibleForDeletion: the reassignment's completion
                    # retries the deletion.
                    log.info("topic deletion waits: reassignment in progress", topic=topic)
                    continue
                replicas = {r for a in assignment.partitions.values() for r in a.replicas}
                if down := sorted(replicas - set(self._live)):
                    log.info(
                        "topic deletion waits: replicas on brokers that are down",
                        topic=topic,
                        brokers=down,
                    )
                    continue
            await self.kzk.delete_topic(topic, self._active_fence())
            self._topics.discard(topic)
            log.info("topic deleted", topic=topic, controller_epoch=self._active_fence().epoch)

    async def _on_controlled_shutdown(
        self, broker_id: int, broker_epoch: int
    ) -> list[TopicPartition]:
        info = await self.kzk.get_broker(broker_id)
        if info is None:
            raise errors.BrokerNotAvailable(f"broker {broker_id} is not registered")
        if broker_epoch != -1 and broker_epoch < info.epoch:
            log.info(
                "controlled shutdown refused: stale broker epoch",
                broker_id=broker_id,
                broker_epoch=broker_epoch,
                registered_epoch=info.epoch,
            )
            raise errors.StaleBrokerEpoch(
                f"broker {broker_id} epoch {broker_epoch} < registered {info.epoch}"
            )
        self._shutting_down.add(broker_id)
        registered = set(self._live) | {broker_id}
        log.info("controlled shutdown", broker_id=broker_id, broker_epoch=info.epoch)
        topics = await self.kzk.get_topics()
        assignments = await self._assignments(topics)
        replicated = [
            TopicPartition(t, p)
            for t, a in assignments.items()
            for p, r in a.partitions.items()
            if broker_id in r.replicas and len(r.replicas) > 1
        ]

        async def move_leader(tp: TopicPartition, state: PartitionState) -> LeaderAndIsr | None:
            if state.leader != broker_id:
                return None
            replicas = assignments[tp.topic].replicas(tp.partition)
            return elect_controlled_shutdown(
                _leader_and_isr(state), replicas, registered, self._shutting_down
            )

        async def leave_isr(tp: TopicPartition, state: PartitionState) -> LeaderAndIsr | None:
            if state.leader == broker_id or broker_id not in state.isr:
                return None
            return remove_replica(_leader_and_isr(state), broker_id)

        reason = f"controlled shutdown of broker {broker_id}"
        await self._transition(replicated, move_leader, reason)
        await self._transition(replicated, leave_isr, reason)
        final = await self.kzk.get_partition_states(replicated)
        remaining = sorted(tp for tp, s in final.items() if s.leader == broker_id)
        log.info(
            "controlled shutdown done",
            broker_id=broker_id,
            still_leads=[f"{tp.topic}-{tp.partition}" for tp in remaining],
        )
        return remaining

    async def _on_preferred_election(
        self, partitions: frozenset[TopicPartition] | None, auto: bool
    ) -> list[TopicPartition]:
        topics = await self.kzk.get_topics()
        if partitions is not None:
            topics = [t for t in topics if t in {tp.topic for tp in partitions}]
        assignments = await self._assignments(topics)
        candidates = set(self._live) - self._shutting_down
        tps = [
            TopicPartition(t, p)
            for t, a in assignments.items()
            for p in a.partitions
            if partitions is None or TopicPartition(t, p) in partitions
        ]
        if auto:
            states = await self.kzk.get_partition_states(tps)
            tps = imbalanced_partitions(
                assignments,
                states,
                candidates,
                self.settings.leader_imbalance_per_broker_percentage,
            )
            if not tps:
                return []

        async def decide(tp: TopicPartition, state: PartitionState) -> LeaderAndIsr | None:
            replicas = assignments[tp.topic].replicas(tp.partition)
            live = candidates - self._offline_on(tp)
            return elect_preferred(_leader_and_isr(state), replicas, live)

        reason = "preferred leader (auto rebalance)" if auto else "preferred leader election"
        return sorted(await self._transition(tps, decide, reason))

    # --- log dir failures ------------------------------------------------------------------------

    def _offline_on(self, tp: TopicPartition) -> set[int]:
        """The brokers whose replica of ``tp`` is offline (never elected, never kept in its
        ISR; see :meth:`_on_log_dir_event`): Kafka's ``!isReplicaOnline`` of a live broker."""
        named = {b for b, tps in self._offline_replicas.items() if tps is None or tp in tps}
        return named | {b for b, tps in self._registered_offline.items() if tp in tps}

    async def _on_log_dir_event(self) -> None:
        """Kafka's ``processLogDirEventNotification`` and ``onReplicasBecomeOffline``.

        A broker whose log went offline (an I/O error it could not recover from in place:
        :meth:`sluice.server.storage.log.Log._go_offline`) states its offline partitions in its
        registration (:attr:`~sluice.server.zk.data.BrokerInfo.offline_partitions`), then
        writes a notice under ``/log_dir_event_notification``
        (:class:`~sluice.server.zk.data.LogDirEvent`, naming them too). The controller reads
        the registration of each broker with a fresh notice -- Kafka's controller sends it
        LeaderAndIsr and takes the partitions answered KAFKA_STORAGE_ERROR -- and adds what
        the notice names (a notice in Kafka's form, without them: every replica of the
        broker). For each such replica, as Kafka's
        controller once the broker answered KAFKA_STORAGE_ERROR: where it leads, the offline
        election runs without it (another ISR member leads; none: the ELR, else the
        partition has no leader until the broker restarts, as Kafka's OfflinePartition), and it
        leaves the ISR (the last member stays, Kafka's rule). It is kept out of every later
        election until the broker registers again (its restart recovers the log), and the
        notices are deleted once handled.

        A new controller reads every live broker's registration at failover (Kafka's asks
        every broker with LeaderAndIsr) and applies the same to what they state
        (:meth:`_on_failover`), then handles the notices still pending. A notice created
        before its broker last registered is stale (that start recovered the logs, and the
        registration says what is offline now): deleted, ignored."""
        notices = await self._read_armed(
            "log_dir_events", _LogDirEventNotification, self.kzk.get_log_dir_events
        )
        if not notices:
            return
        fresh: dict[int, set[TopicPartition] | None] = {}
        for name, czxid, notice in notices:
            if notice is None:
                continue
            epoch = self._live.get(notice.broker)
            if epoch is None or czxid < epoch:
                log.info("stale log dir event notification ignored", notification=name,
                         broker_id=notice.broker)  # fmt: skip
                continue
            known = fresh.get(notice.broker, set())
            if known is None or notice.partitions is None:
                fresh[notice.broker] = None
            else:
                fresh[notice.broker] = known | set(notice.partitions)
        for broker, tps in sorted(fresh.items()):
            info = await self.kzk.get_broker(broker)
            if info is not None and info.epoch == self._live.get(broker):
                self._learn_offline(info)
            if tps is not None and tps <= self._registered_offline.get(broker, frozenset()):
                continue  # its registration says it all
            held = self._offline_replicas.get(broker, set())
            self._offline_replicas[broker] = None if held is None or tps is None else held | tps
            names = "all" if tps is None else sorted(f"{t.topic}-{t.partition}" for t in tps)
            log.warning("replicas offline after a storage failure", broker_id=broker,
                        partitions=names, source="notification")  # fmt: skip
        if fresh:
            await self._on_replicas_offline(set(fresh))
        await self.kzk.delete_log_dir_events([n for n, _, _ in notices], self._active_fence())

    async def _on_replicas_offline(self, brokers: set[int]) -> None:
        """Move leadership off, and take out of the ISRs, the offline replicas of ``brokers``."""
        topics = await self.kzk.get_topics()
        assignments = await self._assignments(topics)
        affected = [
            TopicPartition(t, p)
            for t, a in assignments.items()
            for p in a.partitions
            if any(b in a.replicas(p) for b in brokers & self._offline_on(TopicPartition(t, p)))
        ]
        candidates = set(self._live) - self._shutting_down

        async def decide(tp: TopicPartition, state: PartitionState) -> LeaderAndIsr | None:
            offline = self._offline_on(tp)
            current = _leader_and_isr(state)
            current = current._replace(elr=tuple(r for r in current.elr if r not in offline))
            if state.leader in offline:
                replicas = assignments[tp.topic].replicas(tp.partition)
                return elect_offline(current, replicas, candidates - offline)
            removed = remove_replicas(current, [r for r in current.isr if r in offline])
            if removed is None and current.elr != tuple(state.eligible_leader_replicas):
                return current  # only the eligible replicas changed
            return removed

        if affected:
            await self._transition(affected, decide, f"log offline on brokers {sorted(brokers)}")

    # --- ElectLeaders ---------------------------------------------------------------------------

    async def _on_elect_leaders(
        self, partitions: frozenset[TopicPartition] | None, unclean: bool
    ) -> dict[TopicPartition, errors.KafkaError | None]:
        topics = await self.kzk.get_topics()
        if partitions is not None:
            topics = [t for t in topics if t in {tp.topic for tp in partitions}]
        assignments = await self._assignments(topics)
        known = {
            TopicPartition(t, p): a.replicas(p)
            for t, a in assignments.items()
            for p in a.partitions
        }
        wanted = set(known) if partitions is None else set(partitions)
        deleting = set(await self.kzk.get_topic_deletions())
        states = await self.kzk.get_partition_states([tp for tp in wanted if tp in known])
        candidates = set(self._live) - self._shutting_down
        results: dict[TopicPartition, errors.KafkaError | None] = {}
        electable: list[TopicPartition] = []
        for tp in sorted(wanted):
            state = states.get(tp)
            if tp not in known:
                results[tp] = errors.UnknownTopicOrPartition("The partition does not exist.")
            elif tp.topic in deleting:
                results[tp] = errors.InvalidTopic("The topic is being deleted")
            elif state is not None and (
                (state.leader != NO_LEADER and state.leader in self._live)
                if unclean
                else state.leader == known[tp][0]
            ):
                results[tp] = errors.ElectionNotNeeded()
            else:
                electable.append(tp)

        async def decide(tp: TopicPartition, state: PartitionState) -> LeaderAndIsr | None:
            current = _leader_and_isr(state)
            live = candidates - self._offline_on(tp)
            if unclean:
                new = elect_offline(current, known[tp], live, unclean=True)
                return None if new is None or new.leader == NO_LEADER else new
            return elect_preferred(current, known[tp], live)

        kind = "unclean" if unclean else "preferred"
        written = await self._transition(electable, decide, f"{kind} leader election (admin)")
        for tp in electable:
            if tp in written:
                results[tp] = None
                continue
            failure = (
                errors.EligibleLeadersNotAvailable
                if unclean
                else errors.PreferredLeaderNotAvailable
            )
            results[tp] = failure(
                f"Failed to elect leader for partition {tp.topic}-{tp.partition} under strategy "
                f"{'OfflinePartitionLeaderElectionStrategy(true)' if unclean else 'PreferredReplicaPartitionLeaderElectionStrategy'}"  # noqa: E501
            )
        return results

    async def _on_zk_preferred_election(self) -> None:
        """``/admin/preferred_replica_election`` (an older tool's request): elect the preferred
        leaders it names, then delete it (Kafka's ZkTriggered election)."""
        wanted = await self._read_armed(
            "preferred_replica_election",
            _ZkPreferredElection,
            self.kzk.get_preferred_replica_election,
        )
        if wanted is None:
            return
        results = await self._on_elect_leaders(frozenset(wanted), unclean=False)
        log.info(
            "preferred replica election (ZooKeeper request) done",
            elected=sorted(f"{tp.topic}-{tp.partition}" for tp, e in results.items() if e is None),
        )
        await self.kzk.delete_preferred_replica_election(self._active_fence())

    # --- partition reassignment ------------------------------------------------------------------

    async def _on_alter_reassignments(
        self, reassignments: Mapping[TopicPartition, tuple[int, ...] | None]
    ) -> dict[TopicPartition, errors.KafkaError | None]:
        """Kafka's ``processApiPartitionReassignment``: validate, build each new assignment,
        drop these partitions from a ZooKeeper request (the latest request wins), start."""
        results: dict[TopicPartition, errors.KafkaError | None] = {}
        planned = await self._plan_reassignments(reassignments, results, validate=True)
        await self._remove_from_zk_reassignment(lambda tp, _: tp in planned)
        for tp, assignment in sorted(planned.items()):
            results[tp] = await self._trigger_reassignment(tp, assignment)
        return results

    async def _plan_reassignments(
        self,
        reassignments: Mapping[TopicPartition, Sequence[int] | None],
        results: dict[TopicPartition, errors.KafkaError | None],
        *,
        validate: bool,
    ) -> dict[TopicPartition, ReplicaAssignment]:
        assignments = await self._assignments({tp.topic for tp in reassignments})
        deleting = set(await self.kzk.get_topic_deletions())
        planned: dict[TopicPartition, ReplicaAssignment] = {}
        for tp, target in sorted(reassignments.items()):
            topic = assignments.get(tp.topic)
            current = None if topic is None else topic.partitions.get(tp.partition)
            if current is None or tp.topic in deleting:
                results[tp] = errors.UnknownTopicOrPartition("The partition does not exist.")
                continue
            if target is not None and validate:
                error = validate_reassignment(current, target, self._live)
                if error is not None:
                    results[tp] = error
                    continue
            if target is not None:
                planned[tp] = current.reassign_to(target)
            elif current.is_being_reassigned:
                planned[tp] = current.reassign_to(current.origin_replicas)
            else:
                results[tp] = errors.NoReassignmentInProgress()
        return planned

    async def _trigger_reassignment(
        self, tp: TopicPartition, assignment: ReplicaAssignment
    ) -> errors.KafkaError | None:
        """Kafka's ``maybeTriggerPartitionReassignment`` for one partition."""
        try:
            await self._on_partition_reassignment(tp, assignment)
        except errors.KafkaError as exc:
            return exc
        except (_Inactive, ControllerMovedError, ZkConnectionError, SessionExpiredError):
            raise
        except Exception:
            log.exception("reassignment failed", topic=tp.topic, partition=tp.partition)
            return errors.UnknownServerError()
        return None

    async def _on_partition_reassignment(
        self, tp: TopicPartition, reassignment: ReplicaAssignment
    ) -> None:
        """Kafka's ``onPartitionReassignment`` (RS = current replicas, ORS = original, TRS =
        target, AR = TRS - ORS being added, RR = ORS - TRS being removed).

        U. ZooKeeper first (so that a new controller resumes from it): the topic znode gets
           RS = TRS + ORS with ``adding_replicas`` / ``removing_replicas``. Replicas of an
           earlier reassignment that are in neither set leave the ISR at once (a
           cancellation); their brokers, no longer in the assignment, delete their logs.
        A. TRS not all in the ISR yet: bump the leader epoch. Every broker watches the
           topic and state znodes (Sluice's LeaderAndIsr): the replicas in AR create the
           partition and follow the leader, which adds each to the ISR once it has caught up
           (HW and the epoch's start). A watch on the state znode brings the controller back
           (:meth:`_on_reassignment_isr_change`).
        B. TRS all in the ISR: :meth:`_complete_reassignment`.
        """
        current = await self._partition_assignment(tp)
        if current != reassignment:
            await self._write_partition_assignment(tp, reassignment)
            log.info(
                "reassignment started",
                topic=tp.topic,
                partition=tp.partition,
                replicas=list(reassignment.replicas),
                adding=list(reassignment.adding),
                removing=list(reassignment.removing),
            )
            unneeded = [r for r in current.replicas if r not in reassignment.replicas]
            if unneeded and reassignment.is_being_reassigned:  # else the completion fits it
                await self._fit_state(tp, reassignment.replicas, f"replicas {unneeded} unassigned")
        if not reassignment.is_being_reassigned or await self._target_in_sync(tp, reassignment):
            await self._complete_reassignment(tp, reassignment)
            return

        async def bump(_: TopicPartition, state: PartitionState) -> LeaderAndIsr | None:
            current = _leader_and_isr(state)
            return current.next(current.leader, current.isr)

        await self._transition([tp], bump, "reassignment: new replicas join")

    async def _on_reassignment_isr_change(self, tp: TopicPartition) -> None:
        """Kafka's ``processPartitionReassignmentIsrChange``: complete once TRS is in the ISR,
        else watch again."""
        topic = await self.kzk.get_topic_assignment(tp.topic)
        current = None if topic is None else topic.partitions.get(tp.partition)
        if current is None or not current.is_being_reassigned:
            return
        if await self._target_in_sync(tp, current):
            await self._complete_reassignment(tp, current)

    async def _target_in_sync(self, tp: TopicPartition, reassignment: ReplicaAssignment) -> bool:
        """Whether TRS is in the ISR (Kafka's ``isReassignmentComplete``); the state is read
        with a watch that brings :meth:`_on_reassignment_isr_change` back when it changes."""
        state = await self._read_armed(
            f"reassign:{tp.topic}:{tp.partition}",
            lambda: _ReassignmentIsrChange(tp),
            lambda watch: self.kzk.get_partition_state(tp, watch),
        )
        if state is None or not all(r in state.isr for r in reassignment.target_replicas):
            return False
        log.info(
            "reassignment: target replicas in sync",
            topic=tp.topic,
            partition=tp.partition,
            target=list(reassignment.target_replicas),
            isr=list(state.isr),
        )
        return True

    async def _complete_reassignment(
        self, tp: TopicPartition, reassignment: ReplicaAssignment
    ) -> None:
        """Phase B: TRS is in the ISR.

        1. If the leader is not in TRS (or not live), one of TRS that is live and in sync
           takes over (ISR unchanged: the old leader follows the new one meanwhile, and was
           in sync with every acknowledged record).
        2. ZooKeeper: RS = TRS, no AR / RR. The brokers of RR see they are no longer replicas
           and delete their logs (Kafka's StopReplica with delete).
        3. Leader and ISR fit TRS (RR leave the ISR) at a new epoch, so the leader stops
           waiting for the removed followers.
        4. The partition leaves ``/admin/reassign_partitions`` if it was requested there.

        Kafka writes step 2 last (the topic znode is where ORS is kept); here the brokers read
        the replica set from that znode, so it goes before the ISR shrink, or the leader could
        take a removed follower back into the ISR. A controller failing after step 2 leaves a
        state that does not fit the assignment; the next one fits it (:meth:`_reconcile`)."""
        target = reassignment.target_replicas
        candidates = set(self._live) - self._shutting_down

        async def move(_: TopicPartition, state: PartitionState) -> LeaderAndIsr | None:
            return elect_reassigned(_leader_and_isr(state), target, candidates, move_only=True)

        await self._transition([tp], move, "reassignment: leader not in the target replicas")
        final = ReplicaAssignment(target)
        await self._write_partition_assignment(tp, final)
        await self._fit_state(tp, target, "reassignment completed")
        await self._remove_from_zk_reassignment(
            lambda t, replicas: t == tp and tuple(replicas) == target
        )
        log.info(
            "reassignment completed", topic=tp.topic, partition=tp.partition, replicas=list(target)
        )
        await self._on_topic_deletion()  # one may have waited for this reassignment

    async def _fit_state(self, tp: TopicPartition, replicas: Sequence[int], reason: str) -> None:
        candidates = set(self._live) - self._shutting_down

        async def fit(_: TopicPartition, state: PartitionState) -> LeaderAndIsr | None:
            return elect_reassigned(_leader_and_isr(state), replicas, candidates)

        await self._transition([tp], fit, reason)

    async def _partition_assignment(self, tp: TopicPartition) -> ReplicaAssignment:
        topic = await self.kzk.get_topic_assignment(tp.topic)
        current = None if topic is None else topic.partitions.get(tp.partition)
        if current is None:
            raise errors.UnknownTopicOrPartition("The partition does not exist.")
        return current

    async def _write_partition_assignment(
        self, tp: TopicPartition, assignment: ReplicaAssignment
    ) -> None:
        """Set one partition's assignment in its topic znode, conditional on the version read
        (a CreatePartitions meanwhile: read again) and fenced."""
        for _ in range(MAX_WRITE_ATTEMPTS):
            topic = await self.kzk.get_topic_assignment(tp.topic)
            if topic is None or tp.partition not in topic.partitions:
                raise errors.UnknownTopicOrPartition("The partition does not exist.")
            if topic.partitions[tp.partition] == assignment:
                return
            partitions = dict(topic.partitions)
            partitions[tp.partition] = assignment
            try:
                await self.kzk.set_topic_assignment(
                    replace(topic, partitions=partitions), self._active_fence()
                )
                return
            except BadVersionError:
                continue
        raise errors.RequestTimedOut(f"the assignment of {tp.topic} kept changing")

    async def _resume_reassignments(self, topics: Iterable[str]) -> None:
        """After a failover: every reassignment ZooKeeper holds goes on where it was (Kafka's
        ``initializePartitionReassignments``)."""
        for topic, assignment in sorted((await self._assignments(topics)).items()):
            for partition, replicas in sorted(assignment.partitions.items()):
                if replicas.is_being_reassigned:
                    tp = TopicPartition(topic, partition)
                    log.info("resuming reassignment", topic=topic, partition=partition)
                    error = await self._trigger_reassignment(tp, replicas)
                    if error is not None:
                        log.error("reassignment not resumed", topic=topic, error=str(error))

    async def _on_list_reassignments(
        self, partitions: frozenset[TopicPartition] | None
    ) -> dict[TopicPartition, ReplicaAssignment]:
        topics: Iterable[str] = (
            await self.kzk.get_topics() if partitions is None else {tp.topic for tp in partitions}
        )
        found = await self.kzk.get_topic_assignments(topics)
        return {
            TopicPartition(t, p): r
            for t, a in sorted(found.items())
            for p, r in sorted(a.partitions.items())
            if r.is_being_reassigned and (partitions is None or TopicPartition(t, p) in partitions)
        }

    async def _on_zk_reassignment(self) -> None:
        """``/admin/reassign_partitions`` (Kafka's ``processZkPartitionReassignment``): start
        each partition it names; those that cannot start leave it at once, the others when
        they complete (the znode goes with the last)."""
        requested = await self._read_armed(
            "reassign_partitions", _ZkReassignment, self.kzk.get_partition_reassignment
        )
        if not requested:
            return
        results: dict[TopicPartition, errors.KafkaError | None] = {}
        planned = await self._plan_reassignments(requested, results, validate=False)
        for tp, assignment in sorted(planned.items()):
            results[tp] = await self._trigger_reassignment(tp, assignment)
        failed = {tp for tp, e in results.items() if e is not None}
        if failed:
            log.warning(
                "reassignment requests in ZooKeeper failed",
                errors={f"{tp.topic}-{tp.partition}": str(results[tp]) for tp in sorted(failed)},
            )
            await self._remove_from_zk_reassignment(lambda tp, _: tp in failed)

    async def _remove_from_zk_reassignment(
        self, remove: Callable[[TopicPartition, tuple[int, ...]], bool]
    ) -> None:
        """Kafka's ``maybeRemoveFromZkReassignment``."""
        requested = await self.kzk.get_partition_reassignment()
        if requested is None:
            return
        keep = {tp: r for tp, r in requested.items() if not remove(tp, r)}
        if len(keep) != len(requested):
            await self.kzk.set_partition_reassignment(keep, self._active_fence())
            if not keep:
                self._enqueue(_ZkReassignment())  # re-arm the watch for the next request


def imbalanced_partitions(
    assignments: Mapping[str, TopicAssignment],
    states: Mapping[TopicPartition, PartitionState],
    candidates: Collection[int],
    percentage: int,
) -> list[TopicPartition]:
    """Kafka's ``checkAndTriggerAutoLeaderRebalance``: for each broker, the share of the
    partitions whose preferred (first) replica it is that another broker leads; above
    ``percentage`` % (``leader.imbalance.per.broker.percentage``), the partitions it can take
    back now (it is a candidate -- live, not shutting down -- and in their ISR). Partitions
    without a state are not counted."""
    by_preferred: dict[int, list[TopicPartition]] = defaultdict(list)
    for topic, assignment in sorted(assignments.items()):
        for partition, replicas in sorted(assignment.partitions.items()):
            tp = TopicPartition(topic, partition)
            if replicas.replicas and tp in states:
                by_preferred[replicas.replicas[0]].append(tp)
    targets: list[TopicPartition] = []
    for broker, tps in sorted(by_preferred.items()):
        not_led = [tp for tp in tps if states[tp].leader != broker]
        ratio = len(not_led) / len(tps)
        if ratio * 100 <= percentage:
            continue
        movable = [tp for tp in not_led if broker in candidates and broker in states[tp].isr]
        log.info(
            "leader imbalance",
            broker_id=broker,
            imbalance_percentage=round(ratio * 100, 1),
            threshold=percentage,
            movable=len(movable),
        )
        targets += movable
    return targets


def validate_reassignment(
    current: ReplicaAssignment, target: Sequence[int], live: Collection[int]
) -> errors.KafkaError | None:
    """Kafka's ``validateReplicas``: a non-empty list of distinct broker ids, every replica
    being added registered."""
    if not target:
        return errors.InvalidReplicaAssignment(
            "Empty replica list specified in partition reassignment."
        )
    if len(set(target)) != len(target):
        return errors.InvalidReplicaAssignment(
            f"Duplicate replica ids in partition reassignment replica list: {list(target)}"
        )
    if any(r < 0 for r in target):
        return errors.InvalidReplicaAssignment(f"Invalid broker id in replica list: {list(target)}")
    adding = current.reassign_to(target).adding
    if not set(adding) <= set(live):
        return errors.InvalidReplicaAssignment(
            "Replica assignment has brokers that are not alive. Replica list: "
            f"{list(adding)}, live broker list: {sorted(live)}"
        )
    return None


def _log_change(tp: TopicPartition, old: PartitionState, new: PartitionState, reason: str) -> None:
    log.info(
        "partition leader and ISR changed"
        if new.leader != NO_LEADER
        else "partition offline: no eligible leader",
        topic=tp.topic,
        partition=tp.partition,
        old_leader=old.leader,
        new_leader=new.leader,
        old_leader_epoch=old.leader_epoch,
        new_leader_epoch=new.leader_epoch,
        old_isr=list(old.isr),
        new_isr=list(new.isr),
        zk_version=new.zk_version,
        controller_epoch=new.controller_epoch,
        reason=reason,
    )
