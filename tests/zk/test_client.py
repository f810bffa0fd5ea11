"""ZkClient against a real ZooKeeper: requests, errors, multi, watches on the loop, sessions.

The fault tests (pause, restart) use a private ZooKeeper (``sluice_zookeeper_factory``) so the
shared one is never disturbed.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import threading
import time
from collections.abc import Callable

import pytest

from sluice.server.zk.client import (
    CheckOp,
    CreateOp,
    DeleteOp,
    EventType,
    SessionEvent,
    SessionState,
    SetDataOp,
    WatchEvent,
    ZkClient,
    ZnodeStat,
    split_connect_string,
)
from sluice.server.zk.errors import (
    BadVersionError,
    ClientClosedError,
    ConnectionLossError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    SessionExpiredError,
    ZkConnectionError,
    ZkError,
)
from sluice.testing.zookeeper import ZooKeeperServer

from .conftest import SESSION, MakeClient, ephemeral_owner, wait_for


def test_split_connect_string() -> None:
    assert split_connect_string("127.0.0.1:2181") == ("127.0.0.1:2181", "")
    assert split_connect_string("a:1,b:2/kafka/x") == ("a:1,b:2", "/kafka/x")
    assert split_connect_string("a:1/kafka/") == ("a:1", "/kafka")
    with pytest.raises(ValueError, match="no host"):
        split_connect_string("/kafka")
    with pytest.raises(ValueError, match="empty chroot"):
        split_connect_string("a:1/x//y")


async def test_crud_and_stat(zk: ZkClient) -> None:
    path, stat = await zk.create("/a", b"one")
    assert path == "/a"
    assert (stat.version, stat.ephemeral_owner, stat.data_length) == (0, 0, 3)
    data, got = await zk.get("/a")
    assert (data, got.czxid, got.version) == (b"one", stat.czxid, 0)
    new = await zk.set("/a", b"two", version=0)
    assert new.version == 1 and new.czxid == stat.czxid and new.mzxid > stat.mzxid
    assert (await zk.get("/a"))[0] == b"two"
    await zk.create("/a/b/c", make_parents=True)
    assert sorted(await zk.get_children("/a")) == ["b"]
    exists = await zk.exists("/a")
    assert isinstance(exists, ZnodeStat) and exists.num_children == 1
    await zk.delete("/a/b/c")
    await zk.delete("/a/b")
    await zk.delete("/a", version=1)
    assert await zk.exists("/a") is None


async def test_errors_are_translated_with_the_path(zk: ZkClient) -> None:
    with pytest.raises(NoNodeError) as no_node:
        await zk.get("/missing")
    assert no_node.value.path == "/missing" and no_node.value.code == -101
    assert isinstance(no_node.value.__cause__, Exception)  # kazoo's, kept as the cause
    await zk.create("/x", b"1")
    with pytest.raises(NodeExistsError):
        await zk.create("/x")
    with pytest.raises(BadVersionError):
        await zk.set("/x", b"2", version=5)
    with pytest.raises(BadVersionError):
        await zk.delete("/x", version=3)
    await zk.create("/x/child")
    with pytest.raises(NotEmptyError):
        await zk.delete("/x")
    with pytest.raises(NoNodeError):
        await zk.create("/no/parent")
    await zk.delete_recursive("/x")
    await zk.delete_recursive("/x")  # absent: fine
    assert await zk.exists("/x") is None


async def test_sequential_and_ephemeral_create(zk: ZkClient) -> None:
    await zk.create("/seq")
    first, _ = await zk.create("/seq/n-", sequence=True)
    second, _ = await zk.create("/seq/n-", sequence=True)
    assert first == "/seq/n-0000000000" and second == "/seq/n-0000000001"
    _, stat = await zk.create("/eph", ephemeral=True)
    assert stat.ephemeral_owner == zk.session_id != 0


async def test_chroot_is_created_and_applied(
    make_client: MakeClient, sluice_zookeeper: ZooKeeperServer, sluice_zookeeper_connect: str
) -> None:
    hosts, chroot = split_connect_string(sluice_zookeeper_connect)
    inner = await make_client(f"{sluice_zookeeper_connect}/deeper/still")
    await inner.create("/node", b"in the chroot")
    outer = await make_client(hosts)
    data, _ = await outer.get(f"{chroot}/deeper/still/node")
    assert data == b"in the chroot"
    assert await outer.exists("/node") is None

    # Watch events and created paths come back chroot-relative.
    events: list[WatchEvent] = []
    await inner.exists("/other", watch=events.append)
    created, _ = await inner.create("/other")
    assert created == "/other"
    await wait_for(lambda: bool(events), what="the exists watch")
    assert events == [WatchEvent(EventType.CREATED, "/other")]


async def test_multi_is_all_or_nothing(zk: ZkClient) -> None:
    await zk.create("/m", b"0")
    results = await zk.multi(
        [
            CheckOp("/m", 0),
            CreateOp("/m/a", b"a"),
            SetDataOp("/m", b"1", version=0),
            CreateOp("/m/s-", sequence=True),
        ]
    )
    assert results[0] is None and results[1] == "/m/a"
    assert isinstance(results[2], ZnodeStat) and results[2].version == 1
    assert results[3] == "/m/s-0000000001"  # the parent's cversion counts /m/a

    with pytest.raises(BadVersionError) as failed:
        await zk.multi(
            [CreateOp("/m/b"), CheckOp("/m", 0), SetDataOp("/m", b"2"), DeleteOp("/m/a")]
        )
    assert (failed.value.op_index, failed.value.path) == (1, "/m")
    # Nothing was applied: /m/b absent, /m unchanged, /m/a still there.
    assert await zk.exists("/m/b") is None
    assert (await zk.get("/m"))[0] == b"1"
    assert await zk.exists("/m/a") is not None
    with pytest.raises(NodeExistsError) as exists:
        await zk.multi([DeleteOp("/m/a"), CreateOp("/m/s-0000000001")])
    assert exists.value.op_index == 1
    assert await zk.multi([]) == []


async def test_watches_fire_once_on_the_loop_thread(zk: ZkClient) -> None:
    loop_thread = threading.get_ident()
    seen: list[tuple[WatchEvent, int]] = []

    def record(event: WatchEvent) -> None:
        seen.append((event, threading.get_ident()))

    await zk.create("/w", b"0")
    await zk.get("/w", watch=record)
    await zk.get_children("/w", watch=record)
    await zk.exists("/w/new", watch=record)
    await zk.set("/w", b"1")
    await zk.set("/w", b"2")  # the data watch already fired: one-shot
    await zk.create("/w/new")
    # A sentinel event last: ZooKeeper sends watch events in zxid order, so any (wrong) event
    # for the second set would arrive before it.
    sentinel = asyncio.Event()
    await zk.exists("/sentinel", watch=lambda e: sentinel.set())
    await zk.create("/sentinel")
    async with asyncio.timeout(10):
        await sentinel.wait()
    events = sorted((e.type.value, e.path) for e, _ in seen)
    assert events == [("CHANGED", "/w"), ("CHILD", "/w"), ("CREATED", "/w/new")]
    assert {thread for _, thread in seen} == {loop_thread}


async def test_async_watch_callbacks_run_as_tasks(zk: ZkClient) -> None:
    done = asyncio.Event()
    got: list[bytes] = []

    async def reread(event: WatchEvent) -> None:
        assert event.path is not None
        data, _ = await zk.get(event.path)  # a request from inside a watch callback
        got.append(data)
        done.set()

    await zk.create("/aw", b"old")
    await zk.get("/aw", watch=reread)
    await zk.set("/aw", b"new")
    async with asyncio.timeout(10):
        await done.wait()
    assert got == [b"new"]


async def test_close_removes_ephemerals_at_once_and_refuses_requests(
    make_client: MakeClient,
) -> None:
    owner = await make_client(session_timeout=10.0)
    watcher = await make_client()
    await owner.create("/e", ephemeral=True)
    gone = asyncio.Event()
    await watcher.exists("/e", watch=lambda e: gone.set())
    start = time.monotonic()
    await owner.close()
    async with asyncio.timeout(5):
        await gone.wait()
    assert time.monotonic() - start < 5.0  # not the 10 s session timeout
    assert await watcher.exists("/e") is None
    with pytest.raises(ClientClosedError):
        await owner.get("/")
    assert isinstance(ClientClosedError(), SessionExpiredError)


async def test_connect_timeout_is_bounded() -> None:
    # A port nobody listens on (bound and closed): connecting fails fast and keeps retrying.
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    client = ZkClient(f"127.0.0.1:{port}", session_timeout=1.0, connect_timeout=0.5)
    start = time.monotonic()
    with pytest.raises(ConnectionLossError, match="not connected"):
        await client.start()
    assert time.monotonic() - start < 3.0
    await client.close()


async def test_ephemeral_of_a_killed_client_goes_after_the_session_timeout(
    zk: ZkClient, sluice_zookeeper_connect: str
) -> None:
    async with ephemeral_owner(sluice_zookeeper_connect, "/doomed") as (proc, session_id):
        _, stat = await zk.get("/doomed")
        assert stat.ephemeral_owner == session_id
        deleted = asyncio.Event()
        await zk.exists("/doomed", watch=lambda e: deleted.set())
        os.kill(proc.pid, signal.SIGKILL)
        killed_at = time.monotonic()
        async with asyncio.timeout(10):
            await deleted.wait()
        elapsed = time.monotonic() - killed_at
    # Gone once the server's session timeout ran out: not before (a live session keeps it)...
    assert elapsed > SESSION * 0.5
    # ...and soon after (the server's session tracker works in ticks of 100 ms).
    assert elapsed < SESSION + 2.0
    assert await zk.exists("/doomed") is None


async def test_session_expiry_is_reported_and_a_new_session_follows(
    make_client: MakeClient, sluice_zookeeper: ZooKeeperServer
) -> None:
    client = await make_client()
    events: list[SessionEvent] = []
    client.add_session_listener(events.append)
    await client.create("/mine", ephemeral=True)
    old_session = client.session_id
    client_id = client.client_id
    assert client_id is not None and client_id[0] == old_session

    await asyncio.to_thread(sluice_zookeeper.expire_session, *client_id)

    def reconnected() -> bool:
        return bool(events) and events[-1].state is SessionState.CONNECTED

    await wait_for(reconnected, what="CONNECTED on a new session")
    states = [e.state for e in events]
    assert SessionState.LOST in states
    assert states.index(SessionState.LOST) < len(states) - 1
    assert events[-1].new_session and events[-1].session_id == client.session_id != old_session
    assert client.state is SessionState.CONNECTED
    # The old session's ephemeral went with it; the new session can create it again.
    assert await client.exists("/mine") is None
    _, stat = await client.create("/mine", ephemeral=True)
    assert stat.ephemeral_owner == client.session_id


async def test_a_paused_zookeeper_never_blocks_the_loop(
    sluice_zookeeper_factory: Callable[..., ZooKeeperServer],
) -> None:
    server = sluice_zookeeper_factory()
    client = ZkClient(server.hosts, session_timeout=1.0, request_timeout=30.0)
    await client.start()
    try:
        events: list[SessionEvent] = []
        client.add_session_listener(events.append)
        await client.create("/p", b"before")

        # A heartbeat on the loop: every gap between its ticks is measured.
        gaps: list[float] = []
        stop = asyncio.Event()

        async def heartbeat() -> None:
            last = time.monotonic()
            while not stop.is_set():
                await asyncio.sleep(0.01)
                now = time.monotonic()
                gaps.append(now - last)
                last = now

        beat = asyncio.create_task(heartbeat())
        server.pause()
        pending = asyncio.create_task(client.get("/p"))
        # The connection thread notices the silent server (pings unanswered): SUSPENDED.
        await wait_for(lambda: client.state is SessionState.SUSPENDED, timeout=10, what="SUSPENDED")
        ticks_when_suspended = len(gaps)
        paused_for = time.monotonic()
        while time.monotonic() - paused_for < 0.3:
            await asyncio.sleep(0.01)
        # The heartbeat kept ticking through the silence.
        ticks_in_silence = len(gaps) - ticks_when_suspended
        server.resume()
        await wait_for(lambda: client.state is SessionState.CONNECTED, what="CONNECTED again")
        stop.set()
        await beat

        # The request issued into the silence either failed as a connection loss or was
        # answered after the reconnect; it never hung the loop.
        try:
            data, _ = await pending
            assert data == b"before"
        except ZkConnectionError:
            pass
        assert ticks_in_silence > 0
        # A blocking call would stall the loop until the connection timed out (2/3 of the
        # session: ~0.67 s); scheduling noise on a busy machine stays well below that.
        assert max(gaps) < 0.5, f"the loop stalled for {max(gaps):.3f}s"
        assert SessionState.SUSPENDED in [e.state for e in events]
        assert (await client.get("/p"))[0] == b"before"
    finally:
        await client.close()


async def test_request_timeout_while_paused_is_a_connection_loss(
    sluice_zookeeper_factory: Callable[..., ZooKeeperServer],
) -> None:
    server = sluice_zookeeper_factory()
    client = ZkClient(server.hosts, session_timeout=5.0, request_timeout=0.3)
    await client.start()
    try:
        server.pause()
        start = time.monotonic()
        with pytest.raises(ConnectionLossError, match="no reply"):
            await client.get("/")
        assert 0.25 < time.monotonic() - start < 2.0
        server.resume()
        await client.wait_connected(10)
        assert await client.exists("/") is not None
    finally:
        server.resume()
        await client.close()


# kazoo's connection thread dying of the exception is the point (pytest reports such deaths).
@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
async def test_a_connection_thread_that_gave_up_is_started_again(make_client: MakeClient) -> None:
    """kazoo's connection thread ends for good on an exception it does not retry -- seen in the
    fault suite: ``RuntimeError('xids do not match')`` after replies went missing from a
    black-holed ZooKeeper link that then carried on -- reporting LOST and never connecting
    again: the broker stayed out of the cluster. The client starts it again."""
    client = await make_client()
    events: list[SessionEvent] = []
    client.add_session_listener(events.append)
    await client.create("/mine", ephemeral=True)
    old_session = client.session_id
    connection = client._kz._connection
    real = connection._read_response

    def out_of_step(*args: object) -> object:
        connection._read_response = real
        raise RuntimeError("xids do not match, expected 250 received 254")

    connection._read_response = out_of_step
    with contextlib.suppress(ZkError):  # the request whose reply broke it fails
        await client.exists("/mine")

    def back() -> bool:
        states = [e.state for e in events]
        return SessionState.LOST in states and states[-1] is SessionState.CONNECTED

    await wait_for(back, what="CONNECTED again after kazoo's connection thread ended")
    assert client.state is SessionState.CONNECTED
    assert events[-1].new_session and client.session_id != old_session  # as after an expiry
    await client.create("/after", b"x")
    assert (await client.get("/after"))[0] == b"x"

    async def gone() -> bool:
        return await client.exists("/mine") is None

    deadline = time.monotonic() + 10 * SESSION
    while not await gone():  # the old session expires on the server, its ephemeral with it
        assert time.monotonic() < deadline, "the old session's ephemeral stayed"
        await asyncio.sleep(0.05)


async def test_session_survives_a_zookeeper_restart(
    sluice_zookeeper_factory: Callable[..., ZooKeeperServer],
) -> None:
    server = sluice_zookeeper_factory()
    # A session long enough to outlast the restart on a loaded machine (at 6 s it expired
    # during a full run: the restarted server needed longer), and ``copies`` for a connect
    # request the starting JVM leaves unanswered.
    client = ZkClient(server.connect_string("/app", copies=4), session_timeout=20.0)
    await client.start()
    try:
        events: list[SessionEvent] = []
        client.add_session_listener(events.append)
        await client.create("/eph", b"e", ephemeral=True)
        await client.create("/per", b"p")
        session = client.session_id
        await asyncio.to_thread(server.restart)
        await wait_for(
            lambda: (
                any(e.state is SessionState.SUSPENDED for e in events)
                and client.state is SessionState.CONNECTED
            ),
            timeout=30,
            what="SUSPENDED then CONNECTED",
        )
        # ZooKeeper recovers sessions from its log: same session, ephemeral node still ours.
        assert client.session_id == session
        assert not events[-1].new_session
        _, stat = await client.get("/eph")
        assert stat.ephemeral_owner == session
        assert (await client.get("/per"))[0] == b"p"
    finally:
        await client.close()


async def test_watch_data_follows_a_znode_across_a_session_expiry(
    make_client: MakeClient, sluice_zookeeper: ZooKeeperServer
) -> None:
    follower = await make_client()
    writer = await make_client()
    seen: list[bytes | None] = []
    watcher = follower.watch_data("/cfg", lambda v: seen.append(None if v is None else v[0]))
    await wait_for(lambda: seen == [None], what="absent at first")
    await writer.create("/cfg", b"1")
    await wait_for(lambda: seen[-1] == b"1", what="created")
    await writer.set("/cfg", b"2")
    await wait_for(lambda: seen[-1] == b"2", what="changed")

    # The follower's session expires (its watches go with it); a change made meanwhile is seen
    # once it is back on a new session.
    client_id = follower.client_id
    assert client_id is not None
    await asyncio.to_thread(sluice_zookeeper.expire_session, *client_id)
    await writer.set("/cfg", b"3")
    await wait_for(lambda: seen[-1] == b"3", what="the change made while away")
    await writer.delete("/cfg")
    await wait_for(lambda: seen[-1] is None, what="deleted")
    assert seen == [None, b"1", b"2", b"3", None]  # each value once, in order
    assert watcher.deliveries == 5

    watcher.cancel()
    await wait_for(lambda: watcher.done, what="the watcher stopped")
    await writer.create("/cfg", b"4")
    assert watcher.deliveries == 5


async def test_watch_children_with_an_async_callback(make_client: MakeClient) -> None:
    follower = await make_client()
    writer = await make_client()
    seen: list[list[str] | None] = []

    async def record(children: list[str] | None) -> None:
        await asyncio.sleep(0)  # a coroutine callback is awaited before the next delivery
        seen.append(children)

    follower.watch_children("/ids", record)
    await wait_for(lambda: seen == [None], what="no parent yet")
    await writer.create("/ids")
    await wait_for(lambda: seen[-1] == [], what="the parent")
    await writer.create("/ids/2", ephemeral=True)
    await writer.create("/ids/1")
    await wait_for(lambda: seen[-1] == ["1", "2"], what="two children")
    await writer.close()  # its ephemeral child goes
    await wait_for(lambda: seen[-1] == ["1"], what="the ephemeral child gone")
    await follower.close()  # closing the client stops its watchers


async def test_a_close_that_outlasts_its_bound_still_frees_kazoos_socket_pair(
    sluice_zookeeper_factory: Callable[..., ZooKeeperServer],
) -> None:
    """``close()`` waits ``close_timeout`` for kazoo's stop, which a silent server holds longer.
    kazoo's own ``close()`` (it closes the socket pair its connection thread polls) refuses to
    run before that thread ended: it runs after the stop completes, not at once when the wait
    gives up (where it failed and the pair stayed open until a garbage collection warned of an
    unclosed AF_UNIX socket, at the end of a test session)."""
    server = sluice_zookeeper_factory()
    client = ZkClient(server.hosts, session_timeout=10.0, close_timeout=0.2)
    await client.start()
    connection = client._kz._connection
    pair = [connection._read_sock, connection._write_sock]
    server.pause()
    try:
        await client.close()  # gives up after 0.2 s: the paused server answers no close
    finally:
        server.resume()
    await wait_for(
        lambda: all(s.fileno() == -1 for s in pair), timeout=30, what="kazoo's socket pair closed"
    )
