"""The classic group coordinator's state machine, driven by random clients against Kafka's rules.

The real :class:`GroupCoordinator` over a real offsets store (a standalone replica manager on a
real log); the event loop's clock is virtual, so session timeouts, rebalance timeouts and the
initial rebalance delay fire exactly when the test moves time. Five clients -- three dynamic
(JoinGroup v4+: MEMBER_ID_REQUIRED first), two static (``group.instance.id``) -- join, sync,
heartbeat, commit and leave at random, in one group; a client behaves as Kafka's consumer does
with each answer (keeps the member id and generation it was given, forgets them on
UNKNOWN_MEMBER_ID / FENCED_INSTANCE_ID). Checked against Kafka's ``ClassicGroupState`` and
``ClassicGroup``:

* every state change is one Kafka allows (``validPreviousStates``): Empty <- PreparingRebalance;
  PreparingRebalance <- Empty, CompletingRebalance, Stable; CompletingRebalance <-
  PreparingRebalance; Stable <- CompletingRebalance;
* the generation moves only when the join phase completes (PreparingRebalance ->
  CompletingRebalance or Empty), by exactly one; the JoinGroup answers given when a join
  phase completes name one leader and protocol per generation;
* a member waiting in JoinGroup or SyncGroup is kept alive (Kafka's ``shouldKeepAlive``): only
  its own LeaveGroup removes it meanwhile;
* Empty has no members, CompletingRebalance and Stable have some and a leader among them;
* an OffsetCommit is accepted only from a current member of the current generation (or an
  anonymous one while the group is Empty), never while CompletingRebalance, with Kafka's error
  otherwise (``validateOffsetCommit``); Heartbeat and an immediate SyncGroup answer by Kafka's
  rules too; an accepted commit is what OffsetFetch returns;
* no request is lost: once the clients stop and time passes, every JoinGroup and SyncGroup
  waiting has been answered, exactly once.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from sluice.protocol import errors
from sluice.server.group.coordinator import (
    Group,
    GroupConfig,
    GroupCoordinator,
    GroupState,
    JoinResult,
)
from sluice.server.group.offsets_store import OffsetsStore
from sluice.server.replication.offsets_appender import ReplicaAppender
from sluice.server.replication.replica_manager import ReplicaManager
from sluice.server.storage.log_config import LogConfig
from sluice.server.storage.log_manager import LogManager
from tests.properties.support import SCRATCH, VirtualTimeLoop

GROUP = "g"
SESSION_MS = 100
REBALANCE_MS = 300
INITIAL_DELAY_MS = 50

NONE = 0
UNKNOWN_MEMBER_ID = errors.UnknownMemberId.code
ILLEGAL_GENERATION = errors.IllegalGeneration.code
REBALANCE_IN_PROGRESS = errors.RebalanceInProgress.code
FENCED_INSTANCE_ID = errors.FencedInstanceId.code
MEMBER_ID_REQUIRED = errors.MemberIdRequired.code

EMPTY = GroupState.EMPTY
PREPARING = GroupState.PREPARING_REBALANCE
COMPLETING = GroupState.COMPLETING_REBALANCE
STABLE = GroupState.STABLE
DEAD = GroupState.DEAD

#: Kafka's ``ClassicGroupState.validPreviousStates``.
VALID_PREVIOUS = {
    EMPTY: {PREPARING},
    PREPARING: {STABLE, COMPLETING, EMPTY},
    COMPLETING: {PREPARING},
    STABLE: {COMPLETING},
    DEAD: {STABLE, PREPARING, COMPLETING, EMPTY, DEAD},
}

CLIENTS = ("c0", "c1", "c2", "s0", "s1")  # s*: static members (group.instance.id = the name)


@dataclass
class Client:
    name: str
    member_id: str = ""
    generation: int = -1
    leader: bool = False
    members: list[str] = field(default_factory=list)  # the leader's member list
    join: asyncio.Task[JoinResult] | None = None
    active: bool = False  # it has joined (and not left): consumers_poll drives it
    synced: bool = False  # it has its assignment for its generation
    parked: bool = False  # its JoinGroup in flight was not answered at once
    left: bool = False  # it sent LeaveGroup after its JoinGroup / SyncGroup in flight
    #: (member id, generation) of its previous incarnation, after a restart
    old: tuple[str, int] | None = None
    sync: asyncio.Task[tuple[int, bytes]] | None = None

    @property
    def instance(self) -> str | None:
        return self.name if self.name.startswith("s") else None

    def forget(self) -> None:
        self.member_id, self.generation, self.leader, self.members = "", -1, False, []


def kafka_member_error(
    group: Group | None, member_id: str, instance: str | None, generation: int
) -> int:
    """``ClassicGroup.validateMember`` then the generation check (heartbeat, sync, commit)."""
    if group is None or group.state is DEAD:
        return UNKNOWN_MEMBER_ID
    if instance is not None:
        known = group.static_members.get(instance)
        if known is None:
            return UNKNOWN_MEMBER_ID
        if known != member_id:
            return FENCED_INSTANCE_ID
    elif member_id not in group.members:
        return UNKNOWN_MEMBER_ID
    if generation != group.generation:
        return ILLEGAL_GENERATION
    return NONE


def kafka_commit_error(
    group: Group | None, member_id: str, instance: str | None, generation: int
) -> int:
    """``ClassicGroup.validateOffsetCommit`` (for a group that exists; an anonymous commit to a
    group that does not creates it)."""
    anonymous = generation < 0 and not member_id and instance is None
    if group is None or group.state is DEAD:
        return NONE if anonymous else (ILLEGAL_GENERATION if generation >= 0 else UNKNOWN_MEMBER_ID)
    if anonymous:
        return NONE if group.state is EMPTY else UNKNOWN_MEMBER_ID
    code = kafka_member_error(group, member_id, instance, generation)
    if code == NONE and group.state is COMPLETING:
        return REBALANCE_IN_PROGRESS
    return code


class GroupMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.loop = VirtualTimeLoop()
        self.dir = Path(tempfile.mkdtemp(prefix="sluice-props-", dir=SCRATCH))
        self.logs = LogManager(self.dir, LogConfig.from_properties({}))
        self.logs.open()
        replicas = ReplicaManager(self.logs, 0)
        store = OffsetsStore(self.logs, 1, ReplicaAppender(replicas, 5000))
        config = GroupConfig.from_properties(
            {
                "group.initial.rebalance.delay.ms": str(INITIAL_DELAY_MS),
                "group.min.session.timeout.ms": "10",
            }
        )

        def start() -> GroupCoordinator:
            coordinator = GroupCoordinator(store, config, clock=lambda: int(self.loop.now * 1000))
            coordinator.load()
            return coordinator

        self.coordinator: GroupCoordinator = self.loop.run_step(start)  # type: ignore[assignment]
        self.clients = {name: Client(name) for name in CLIENTS}
        self.transitions: list[tuple[GroupState, GroupState, int]] = []
        self.generation = 0
        self.rounds: dict[int, tuple[str, str]] = {}  # generation -> (leader, protocol) answered
        self.committed: dict[tuple[str, int], int] = {}
        self.commits = 0
        real_set_state = self.coordinator._set_state

        def spy(group: Group, state: GroupState) -> None:
            self.transitions.append((group.state, state, group.generation))
            real_set_state(group, state)

        # A spy on the one place states change, so that every transition is seen, also several
        # in one step.
        self.coordinator._set_state = spy  # type: ignore[method-assign]

    def teardown(self) -> None:
        try:
            self.coordinator.shutdown()
            tasks = [t for c in self.clients.values() for t in (c.join, c.sync) if t is not None]
            for task in tasks:
                task.cancel()
            if tasks:
                self.loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
            self.logs.close()
        finally:
            self.loop.close()
            shutil.rmtree(self.dir, ignore_errors=True)

    @property
    def group(self) -> Group | None:
        return self.coordinator.groups.get(GROUP)

    def run(self, step: Any) -> Any:
        return self.loop.run_step(step)

    def collect(self, clients: Any = None) -> None:
        """Take the answers of JoinGroup / SyncGroup requests that finished, as a consumer would.
        Only when the test says: until then a consumer acts on what it knew (a response still
        on the wire), e.g. commits with the generation before the one it was just given."""
        for client in clients or self.clients.values():
            if client.join is not None and client.join.done():
                result = client.join.result()
                client.join = None
                if result.error_code == MEMBER_ID_REQUIRED:
                    client.member_id = result.member_id
                elif result.error_code == NONE:
                    if client.parked:
                        # Answered when a join phase completed: all of one generation's
                        # answers name one leader and protocol. (An answer given at once -- a
                        # static member's rejoin to a Stable group, a resent JoinGroup -- names
                        # the leader before that rejoin, as Kafka does.)
                        round_ = (result.leader, result.protocol_name)
                        seen = self.rounds.setdefault(result.generation_id, round_)
                        assert seen == round_, f"gen {result.generation_id}: {seen} vs {round_}"
                    client.member_id = result.member_id
                    client.generation = result.generation_id
                    client.synced = False
                    client.leader = result.leader == result.member_id
                    client.members = [m for m, _i, _md in result.members]
                    assert not client.leader or client.member_id in client.members
                elif result.error_code in (UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID):
                    # A member waiting in JoinGroup is alive (Kafka's shouldKeepAlive): only
                    # its own LeaveGroup removes it meanwhile.
                    assert (
                        result.error_code != UNKNOWN_MEMBER_ID or not client.parked or client.left
                    )
                    client.forget()
            if client.sync is not None and client.sync.done():
                code, _assignment = client.sync.result()
                client.sync = None
                client.synced = code == NONE
                if code in (UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID):
                    assert code != UNKNOWN_MEMBER_ID or client.left, "removed while in SyncGroup"
                    client.forget()

    # --- rules ------------------------------------------------------------------------------

    @rule(name=st.sampled_from(CLIENTS), protocol=st.sampled_from(["range", "range", "roundrobin"]))
    def join(self, name: str, protocol: str) -> None:
        self._join(self.clients[name], protocol)

    @rule()
    def everyone_rejoins(self) -> None:
        """Every consumer that knows its member id and is not waiting in JoinGroup sends one (a
        rebalance the consumers take part in, so groups do get to Stable)."""
        for client in self.clients.values():
            if client.member_id:
                self._join(client, "range")

    def _join(self, client: Client, protocol: str) -> None:
        name = client.name
        self.collect([client])
        if client.join is not None:
            return  # a consumer has one JoinGroup in flight

        def send() -> asyncio.Task[JoinResult]:
            return asyncio.get_running_loop().create_task(
                self.coordinator.join_group(
                    group_id=GROUP,
                    member_id=client.member_id,
                    group_instance_id=client.instance,
                    client_id=name,
                    client_host="127.0.0.1",
                    session_timeout_ms=SESSION_MS,
                    rebalance_timeout_ms=REBALANCE_MS,
                    protocol_type="consumer",
                    protocols=[(protocol, b""), ("range", b"")]
                    if protocol != "range"
                    else [("range", b"")],
                    require_known_member_id=True,
                )
            )

        client.join = self.run(send)
        client.active = True
        client.parked, client.left = not client.join.done(), False

    @precondition(
        lambda self: any(c.generation >= 0 and c.sync is None for c in self.clients.values())
    )
    @rule(data=st.data())
    def sync(self, data: st.DataObject) -> None:
        ready = [c for c in self.clients.values() if c.generation >= 0 and c.sync is None]
        self._sync(data.draw(st.sampled_from(ready)))

    def _sync(self, client: Client) -> int | None:
        """SyncGroup; its answer, or None while it waits."""
        group = self.group
        expected = kafka_member_error(group, client.member_id, client.instance, client.generation)
        state = None if group is None else group.state
        assignments = [(m, b"a-" + m.encode()) for m in client.members] if client.leader else []

        def send() -> asyncio.Task[tuple[int, bytes]]:
            return asyncio.get_running_loop().create_task(
                self.coordinator.sync_group(
                    group_id=GROUP,
                    generation_id=client.generation,
                    member_id=client.member_id,
                    group_instance_id=client.instance,
                    assignments=assignments,
                )
            )

        task = self.run(send)
        if expected != NONE or state in (EMPTY, PREPARING, STABLE):
            # Kafka answers these at once: the member's error, UNKNOWN_MEMBER_ID for Empty,
            # REBALANCE_IN_PROGRESS while preparing, the current assignment when Stable.
            assert task.done()
            code = task.result()[0]
            if expected == NONE:
                assert state is not None
                expected = {EMPTY: UNKNOWN_MEMBER_ID, PREPARING: REBALANCE_IN_PROGRESS}.get(
                    state, NONE
                )
            assert code == expected, (code, expected, state)
            client.synced = code == NONE
            if code in (UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID):
                client.forget()
            return code
        client.sync, client.left = task, False
        return None

    @precondition(lambda self: any(c.member_id for c in self.clients.values()))
    @rule(data=st.data())
    def heartbeat(self, data: st.DataObject) -> None:
        known = [c for c in self.clients.values() if c.member_id]
        client = data.draw(st.sampled_from(known))
        self._heartbeat(client, client.member_id, client.generation)

    def _heartbeat(
        self, client: Client, member_id: str, generation: int, forget: bool = True
    ) -> int:
        group = self.group
        expected = kafka_member_error(group, member_id, client.instance, generation)
        if expected == NONE:
            assert group is not None
            expected = {EMPTY: UNKNOWN_MEMBER_ID, PREPARING: REBALANCE_IN_PROGRESS}.get(
                group.state, NONE
            )
        code = self.run(
            lambda: self.coordinator.heartbeat(
                group_id=GROUP,
                generation_id=generation,
                member_id=member_id,
                group_instance_id=client.instance,
            )
        )
        assert code == expected, (code, expected)
        if forget and code in (UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID):
            client.forget()
        return int(code)

    @rule(data=st.data(), admin=st.sampled_from([False, False, False, False, False, True]))
    def commit(self, data: st.DataObject, admin: bool) -> None:
        """An OffsetCommit from a consumer that joined, with its member id and generation, or
        from a tool or an ``assign()`` consumer (generation -1, no member id)."""
        joined = [c for c in self.clients.values() if c.generation >= 0]
        if admin:
            self._commit(Client("admin"), "", -1)
            return
        if not joined:
            return
        client = data.draw(st.sampled_from(joined))
        self._commit(client, client.member_id, client.generation)

    @rule()
    def everyone_heartbeats_and_commits(self) -> None:
        """Every consumer that joined heartbeats and commits, with what it knows (whatever the
        group's state: the rules for Preparing- and CompletingRebalance are the subtle ones)."""
        for client in self.clients.values():
            if client.generation >= 0:
                self._heartbeat(client, client.member_id, client.generation)
            if client.generation >= 0:
                self._commit(client, client.member_id, client.generation)

    @rule()
    def consumers_poll(self) -> None:
        """Every active consumer does what Kafka's consumer does on a poll: takes the answers
        that arrived; (re)joins when it has no generation or was told to rejoin; sends SyncGroup
        (the leader with an assignment for every member it was given) after a JoinGroup; once
        it has its assignment, heartbeats and commits."""
        for client in self.clients.values():
            self.collect([client])
            if not client.active or client.join is not None or client.sync is not None:
                continue
            if client.generation < 0:
                self._join(client, "range")
            elif not client.synced:
                if self._sync(client) in (REBALANCE_IN_PROGRESS, ILLEGAL_GENERATION):
                    self._join(client, "range")
            elif self._heartbeat(client, client.member_id, client.generation) == NONE:
                self._commit(client, client.member_id, client.generation)
            elif client.member_id:
                self._join(client, "range")  # REBALANCE_IN_PROGRESS / ILLEGAL_GENERATION

    @rule()
    def slow_leader(self) -> None:
        """A rebalance whose leader is slow to assign: the consumers that know their member id
        rejoin (the leader first, so that the group rebalances), the join phase completes, the
        followers send SyncGroup, the leader does not; twice a session timeout passes while
        every consumer not waiting in JoinGroup or SyncGroup heartbeats every 40 ms (the
        heartbeat thread). The leader keeps its membership by heartbeating, and the members
        waiting for its assignment must keep theirs although they do not (Kafka's
        ``shouldKeepAlive``)."""
        self.collect()
        known = sorted(
            (c for c in self.clients.values() if c.member_id), key=lambda c: not c.leader
        )
        for client in known:
            self._join(client, "range")
        self.loop.now += INITIAL_DELAY_MS / 1000
        self.run(None)
        self.collect()
        for client in self.clients.values():
            if client.generation >= 0 and not client.leader and client.sync is None:
                self._sync(client)
        for _ in range(5):
            for client in self.clients.values():
                if client.member_id and client.join is None and client.sync is None:
                    self._heartbeat(client, client.member_id, client.generation)
            self.loop.now += 0.040
            self.run(None)

    @precondition(lambda self: any(c.instance and c.member_id for c in self.clients.values()))
    @rule(data=st.data())
    def static_member_bounces(self, data: st.DataObject) -> None:
        """A static consumer's process restarts and joins again with its instance id at once
        (no LeaveGroup): it takes its old member's place; the old incarnation is fenced."""
        known = [c for c in self.clients.values() if c.instance and c.member_id]
        client = data.draw(st.sampled_from(known))
        self.collect([client])
        if client.join is not None or not client.member_id:
            return
        client.old = (client.member_id, client.generation)
        client.forget()
        self._join(client, "range")

    @precondition(lambda self: any(c.old is not None for c in self.clients.values()))
    @rule(data=st.data(), what=st.sampled_from(["commit", "heartbeat"]))
    def zombie(self, data: st.DataObject, what: str) -> None:
        """The previous incarnation of a restarted consumer, still running somewhere, commits or
        heartbeats with its old member id and generation: fenced if static and replaced, else
        refused by its member id or generation unless it is still a current member."""
        restarted = [c for c in self.clients.values() if c.old is not None]
        client = data.draw(st.sampled_from(restarted))
        assert client.old is not None
        member_id, generation = client.old
        if what == "commit":
            self._commit(client, member_id, generation, forget=False)
        else:
            self._heartbeat(client, member_id, generation, forget=False)

    def _commit(self, client: Client, member_id: str, generation: int, forget: bool = True) -> None:
        group = self.group
        expected = kafka_commit_error(group, member_id, client.instance, generation)
        self.commits += 1
        offset = self.commits
        codes = self.run(
            lambda: self.coordinator.commit_offsets(
                group_id=GROUP,
                generation_id=generation,
                member_id=member_id,
                group_instance_id=client.instance,
                offsets=[("t", 0, offset, -1, None)],
            )
        )
        assert isinstance(codes, list), "a standalone write settles at once"
        assert codes == [expected], (codes, expected, group)
        if expected == NONE:
            self.committed[("t", 0)] = offset
        if forget and codes[0] in (UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID):
            client.forget()

    @precondition(lambda self: any(c.member_id for c in self.clients.values()))
    @rule(data=st.data())
    def restart(self, data: st.DataObject) -> None:
        """A consumer process restarts: it forgets its member id without leaving (a static
        one's next JoinGroup replaces its old member; a dynamic one's old member expires)."""
        known = [c for c in self.clients.values() if c.member_id]
        client = data.draw(st.sampled_from(known))
        client.old = (client.member_id, client.generation)
        client.forget()

    @precondition(lambda self: any(c.member_id for c in self.clients.values()))
    @rule(data=st.data())
    def leave(self, data: st.DataObject) -> None:
        known = [c for c in self.clients.values() if c.member_id]
        client = data.draw(st.sampled_from(known))
        self.run(lambda: self.coordinator.leave_group(GROUP, [(client.member_id, client.instance)]))
        client.forget()
        client.left, client.active = True, False

    @rule(name=st.sampled_from(CLIENTS))
    def response_arrives(self, name: str) -> None:
        self.collect([self.clients[name]])

    @rule()
    def responses_arrive(self) -> None:
        self.collect()

    @rule(ms=st.sampled_from([10, 40, 60, 120, 350, 0]))
    def time_passes(self, ms: int) -> None:
        """Time passes (``0``: the clients stop, and every timeout runs out)."""
        if ms:
            self.loop.now += ms / 1000
            self.run(None)
        else:
            self.clients_stop()

    def clients_stop(self) -> None:
        """No more requests; after every session and rebalance timeout has run out, nothing may
        still be waiting: every JoinGroup and SyncGroup was answered, and the group is Empty."""
        for _ in range(4):
            self.loop.now += (SESSION_MS + REBALANCE_MS + INITIAL_DELAY_MS) / 1000
            self.run(None)
        self.collect()
        for client in self.clients.values():
            assert client.join is None, f"{client.name}'s JoinGroup never answered"
            assert client.sync is None, f"{client.name}'s SyncGroup never answered"
        group = self.group
        assert group is None or group.state is EMPTY

    # --- checks -----------------------------------------------------------------------------

    @invariant()
    def transitions_are_kafkas(self) -> None:
        for old, new, generation in self.transitions:
            assert old in VALID_PREVIOUS[new], f"{old.value} -> {new.value}"
            if old is PREPARING:
                assert generation == self.generation + 1, "the join phase moves the generation by 1"
            else:
                assert generation == self.generation, (
                    f"generation moved on {old.value} -> {new.value}"
                )
            self.generation = generation
        self.transitions.clear()
        group = self.group
        if group is not None:
            assert group.generation == self.generation, "generation moved without a state change"

    @invariant()
    def members_match_the_state(self) -> None:
        group = self.group
        if group is None:
            return
        if group.state is EMPTY:
            assert not group.members
        if group.state in (COMPLETING, STABLE):
            assert group.members and group.leader_id in group.members
        for instance, member_id in group.static_members.items():
            assert group.members[member_id].group_instance_id == instance

    @invariant()
    def commits_are_what_offset_fetch_returns(self) -> None:
        if not self.committed:
            return
        fetched = {(t, p): o.offset for t, p, o in self.coordinator.fetch_offsets(GROUP, None) if o}
        assert fetched == self.committed


GroupMachine.TestCase.settings = settings(max_examples=100, stateful_step_count=50, deadline=None)
test_group_states = GroupMachine.TestCase
