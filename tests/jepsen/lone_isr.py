"""A targeted nemesis: the sole in-sync replica loses power (``--faults lone_isr_power_loss``).

KIP-966's window, which random schedules hit about once in fifteen trials: a partition's ISR has
shrunk to its leader alone, the leader loses power and comes back with less than it had, while
the replicas that left the ISR hold every acknowledged record. With unclean election off, a
controller that only trusts the ISR lets the emptied leader lead again and the others truncate
to it: acknowledged records gone. This nemesis drives every trial into that window on purpose.

**The configuration of the window.** RF 3, ``min.insync.replicas`` 2, acks=all, unclean election
off (the suite's promise, :data:`tests.jepsen.harness.SAFE_TOPIC_CONFIG`). The high watermark
only moves while the ISR has at least two members, so every acknowledged record is on a replica
besides the leader; once the ISR is the leader alone, acks=all writes are refused
(NOT_ENOUGH_REPLICAS) and the high watermark stops, so the replicas that left hold everything
acknowledged. That is the window in which a loss is *preventable* and a bug. (With
``min.insync.replicas`` 1 the lone leader acknowledges writes only it holds; a power loss before
they are fsynced loses them whatever is elected -- Kafka's documented trade for that setting,
and outside the promise checked here.)

**One trial** (:class:`Plan`, a pure function of the seed; :func:`run_trial`):

1. the topic's partitions are placed so that broker ``leader`` leads one partition or all of
   them (``several``), optionally with ``flush.messages`` so that part of the log was fsynced;
2. the workload (the runner's: acks=all, idempotent, round robin over the partitions) runs;
3. at ``at`` the ISR of the leader's partitions is shrunk to the leader alone, by one of
   ``shrink``: ``isolate`` (the leader's listener black-holed until it dropped both followers
   from the ISR, then open again: their fetches in flight are lost, and they ask again only
   after ``replica.socket.timeout.ms``, so the ISR stays the leader alone meanwhile); ``pause``
   (both followers SIGSTOPped: their sessions expire, the controller drops them); ``kill`` (both
   followers kill -9: the page cache keeps their logs);
4. the lone ISR holds for ``hold`` seconds, then the leader loses power (``lose_unflushed``: kill
   -9 and every segment cut to what it had fsynced); with ``move_controller`` the controller
   (when it is a follower) is killed in the same instant;
5. the followers come back (resumed, restarted, the leader's listener opened) ``back``: before
   the power loss (with the leader's listener black-holed so they cannot catch up and rejoin:
   they registered again while the ISR is the leader alone), before the leader's restart, or
   after it, ``gap`` seconds apart;
6. the runner's ending: everything healed, every send resolved, the full ISR waited for, every
   partition read, replicas compared byte for byte, the checker.

A trial *hits the window* when the leader, after the cut, held less of a lone partition than was
acknowledged there (``kip966_partitions`` lists those partitions). Nothing acknowledged may be
lost: being unavailable until a replica that holds the committed log is back is allowed (the
runner's unavailability windows show how long), electing one that misses acknowledged records
is not.
"""

from __future__ import annotations

import random
import time
from dataclasses import asdict, dataclass
from typing import Any

from sluice.testing.zookeeper import ZooKeeperServer
from tests.jepsen.checker import Send, check
from tests.jepsen.harness import SAFE_TOPIC_CONFIG, FaultCluster
from tests.jepsen.proxy import Mode
from tests.jepsen.runner import (
    PARTITIONS,
    TrialConfig,
    TrialResult,
    _batches,
    _classify_duplicates,
    _compare_replicas,
    _Nemesis,
    _produce_and_heal,
    _read,
    _windows,
    recorded,
    with_nemesis,
)

FAULT = "lone_isr_power_loss"
SHRINKS = ("isolate", "pause", "kill")
BACKS = ("before_loss", "before_restart", "after_restart")

#: The followers notice a lost fetch only after ``replica.socket.timeout.ms``: long, so that the
#: ISR shrinks (``replica.lag.time.max.ms``) and stays shrunk while the nemesis acts.
PROPERTIES = {"replica.lag.time.max.ms": "1500", "replica.socket.timeout.ms": "30000"}

#: Bound on every wait of the nemesis (seconds).
WAIT = 30.0


@dataclass(frozen=True)
class Plan:
    """What one trial does (module docstring); a pure function of the seed (:func:`make_plan`)."""

    leader: int
    several: bool
    shrink: str
    back: str
    at: float
    hold: float
    gap: float
    flush_messages: int | None
    move_controller: bool


def make_plan(seed: int, size: int = 3) -> Plan:
    rng = random.Random(seed)
    shrink = rng.choice(SHRINKS)
    return Plan(
        leader=rng.randint(1, size),
        several=rng.random() < 0.5,
        shrink=shrink,
        # An isolated leader's followers never stopped: there is nothing to bring back.
        back="before_restart" if shrink == "isolate" else rng.choice(BACKS),
        at=round(rng.uniform(1.0, 3.0), 3),
        hold=round(rng.uniform(0.0, 2.0), 3),
        gap=round(rng.uniform(0.0, 3.0), 3),
        flush_messages=rng.choice([None, None, 50, 400]),
        move_controller=rng.random() < 0.3,
    )


def assignment(plan: Plan, size: int = 3) -> list[list[int]]:
    """Replica lists (preferred leader first): the plan's leader first in every partition
    (``several``) or in partition 0 only, the others rotated as Kafka would."""
    ids = list(range(1, size + 1))
    out = []
    for p in range(PARTITIONS):
        first = plan.leader if plan.several or p == 0 else ids[(plan.leader - 1 + p) % size]
        out.append([first, *[b for b in ids if b != first]])
    return out


class LoneIsrNemesis(_Nemesis):
    """Plays a :class:`Plan`; ``played`` records each step with its time and, at the power loss,
    the lone partitions and what the cut left of the leader's log there."""

    def __init__(self, cluster: FaultCluster, topic: str, plan: Plan, t0: float) -> None:
        super().__init__(cluster, topic, [], t0)
        self.plan = plan
        self.leads = [
            p for p, r in enumerate(assignment(plan, cluster.size)) if r[0] == plan.leader
        ]
        self.followers = [b for b in cluster.ids if b != plan.leader]
        #: Partition -> the leader's log end after the cut (records it kept).
        self.kept: dict[int, int] = {}

    def note(self, what: str, **extra: Any) -> None:
        at = round(time.monotonic() - self.t0, 3)
        self.played.append({"fault": what, "broker": self.plan.leader, "from": at, **extra})

    def run(self) -> None:
        try:
            self._play()
        except BaseException as exc:  # reported by the trial
            self.error = exc

    def _wait(self, condition: Any, what: str) -> None:
        self.cluster.cluster.wait_for(lambda: self.halted.is_set() or condition(), what, WAIT)

    def _lone(self) -> list[int]:
        states = self.cluster.partitions(self.topic)
        leader = self.plan.leader
        return [
            p
            for p in self.leads
            if states[p].leader_id == leader and list(states[p].isr_nodes) == [leader]
        ]

    def _play(self) -> None:
        plan, cluster, leader = self.plan, self.cluster, self.plan.leader
        if self.halted.wait(plan.at):  # the schedule's own clock
            return
        self.note(f"shrink:{plan.shrink}")
        if plan.shrink == "isolate":
            cluster.apply("isolate", leader)
        else:
            for f in self.followers:
                cluster.apply("kill" if plan.shrink == "kill" else "pause", f)
        nudged = [0.0]

        def shrunk() -> bool:
            if plan.shrink == "isolate" and time.monotonic() - nudged[0] > 2.0:
                nudged[0] = time.monotonic()
                self._nudge()
            return len(self._lone()) == len(self.leads)

        self._wait(shrunk, "the ISR shrunk to the leader")
        if plan.shrink == "isolate":
            # The followers' fetches in flight are lost: they ask again only after
            # replica.socket.timeout.ms, so the ISR stays the leader alone meanwhile.
            cluster.undo("isolate", leader)
        self.note("lone_isr", partitions=self._lone())
        if plan.back == "before_loss":
            # They register again while the ISR is the leader alone, and cannot catch up.
            cluster.listener[leader].set_mode(Mode.BLACKHOLE)
            self._bring_back_followers()
            self._wait(self._followers_registered, "the followers registered again")
        if self.halted.wait(plan.hold):
            return
        lone = self._lone()
        controller = int(cluster.cluster.metadata(via=cluster._observer()).controller_id)
        cluster.apply("lose_unflushed", leader)
        for p in lone:
            self.kept[p] = _log_end(cluster.log_bytes(leader, self.topic, p))
        moved = -1
        if (
            plan.move_controller
            and controller in self.followers
            and cluster.cluster.running(controller)
            and controller not in cluster.paused | cluster.killed
        ):
            cluster.apply("kill", controller)
            moved = controller
        self.note("lose_unflushed", sole_isr=lone, kept=self.kept, controller=controller,
                  controller_killed=moved)  # fmt: skip
        if plan.back == "before_restart":
            self._bring_back_followers()
            self.halted.wait(plan.gap)
        if moved > 0 and moved in cluster.killed:
            cluster.undo("kill", moved)
        cluster.undo("lose_unflushed", leader)
        cluster.listener[leader].set_mode(Mode.PASS)
        self.note("restarted")
        if plan.back == "after_restart":
            self.halted.wait(plan.gap)
            self._bring_back_followers()

    def _nudge(self) -> None:
        """One acks=1 record to each of the leader's partitions, straight to its own port (its
        proxy black-holes, the producer's writes too): its log end moves past the followers',
        who cannot fetch, so it drops them after ``replica.lag.time.max.ms`` (a follower at the
        leader's log end is in sync however long it is silent). The checker ignores values it
        did not send."""
        from sluice.protocol import messages as m
        from sluice.protocol.records import build_batch
        from sluice.testing.cluster import _request, _run

        batch = build_batch([(int(time.time() * 1000), None, b"nudge")])
        body = m.ProduceRequest(
            acks=1,
            timeout_ms=3000,
            topic_data=[
                m.ProduceRequest.TopicProduceData(
                    name=self.topic,
                    partition_data=[
                        m.ProduceRequest.PartitionProduceData(index=p, records=batch)
                        for p in self.leads
                    ],
                )
            ],
        )
        port = self.cluster.cluster._ports[self.plan.leader]
        _run(lambda: _request(port, m.Produce.key, body), 15.0)

    def _bring_back_followers(self) -> None:
        for f in self.followers:
            if f in self.cluster.paused:
                self.cluster.undo("pause", f)
            elif f in self.cluster.killed:
                self.cluster.undo("kill", f)
        self.note("followers_back")

    def _followers_registered(self) -> bool:
        meta = self.cluster.cluster.metadata(via=self.followers[0])
        return {int(b.node_id) for b in meta.brokers} >= set(self.cluster.ids)


def _log_end(data: bytes) -> int:
    headers = _batches(data)
    return headers[-1].base_offset + headers[-1].last_offset_delta + 1 if headers else 0


def window_hits(kept: dict[int, int], history: list[Send]) -> list[int]:
    """The lone partitions where the leader kept less than was acknowledged: the window."""
    top: dict[int, int] = {}
    for s in history:
        if s.outcome == "ok" and s.partition is not None and s.offset is not None:
            top[s.partition] = max(top.get(s.partition, -1), s.offset)
    return sorted(p for p, end in kept.items() if top.get(p, -1) >= end)


def unavailable(played: list[dict[str, Any]], acked_at: dict[int, list[float]]) -> dict[str, Any]:
    """Per lone partition, seconds from the shrink's start and from the power loss to its next
    acknowledgement (what the window cost; None: none came)."""
    at = {e["fault"].split(":")[0]: e["from"] for e in played}
    lone = next((e["sole_isr"] for e in played if e["fault"] == "lose_unflushed"), [])
    out: dict[str, Any] = {"since_shrink_s": {}, "since_loss_s": {}}
    for p in lone:
        after = [t for t in acked_at.get(p, []) if t > at["lose_unflushed"]]
        first = min(after) if after else None
        for key, start in (
            ("since_shrink_s", at["shrink"]),
            ("since_loss_s", at["lose_unflushed"]),
        ):
            out[key][p] = None if first is None else round(first - start, 3)
    return out


def run_trial(zookeeper: ZooKeeperServer, config: TrialConfig) -> TrialResult:
    """One trial of the plan of ``config.seed`` (module docstring); records, never raises for
    what it finds."""
    plan = make_plan(config.seed)
    result = TrialResult(config, [])
    result.played = [{"fault": "plan", "broker": plan.leader, **asdict(plan)}]
    topic = f"lone-{config.seed}"
    history: list[Send] = []
    with recorded(result):
        with FaultCluster(zookeeper, properties=PROPERTIES) as cluster:
            _create_topic(cluster, topic, plan)
            t0 = time.monotonic()
            nemesis = LoneIsrNemesis(cluster, topic, plan, t0)
            history, acked_at = with_nemesis(nemesis, result, lambda: _produce_and_heal(
                config, cluster, topic, t0, nemesis, result
            ), join_s=WAIT * 3)  # fmt: skip
            cluster.wait_fully_replicated(topic)
            observations = _read(cluster, topic)
            _compare_replicas(cluster, topic, result)
            headers = {p: _batches(cluster.log_bytes(1, topic, p)) for p in range(PARTITIONS)}
        result.report = check(history, [observations])
        result.summary = result.report.summary()
        _classify_duplicates(result.report, headers, result)
        result.kip966_partitions = window_hits(nemesis.kept, history)
        acked_in = {s.value: s.partition for s in history if s.outcome == "ok"}
        result.lost_in_kip966_window = [
            v for v in result.report.lost if acked_in.get(v) in result.kip966_partitions
        ]
        result.windows = _windows(acked_at, config.duration)
        result.played.append({"fault": "available_again", "broker": plan.leader,
                              **unavailable(nemesis.played, acked_at)})  # fmt: skip
    return result


def _create_topic(cluster: FaultCluster, topic: str, plan: Plan) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    config = dict(SAFE_TOPIC_CONFIG)
    if plan.flush_messages is not None:
        config["flush.messages"] = str(plan.flush_messages)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    replicas = assignment(plan, cluster.size)
    new = NewTopic(topic, len(replicas), replica_assignment=replicas, config=config)
    admin.create_topics([new])[topic].result(WAIT)
    cluster.wait_fully_replicated(topic)


__all__ = ["FAULT", "Plan", "make_plan", "run_trial"]
