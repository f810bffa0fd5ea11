"""The controller's failure paths, each driven for real: an event handler raising (a bug, a lost
connection once, a lost connection every time, a stale fence, an expired session). Whatever
happens, every log call on the way is made (and recorded) and the event task keeps running: a
controller whose task died would never elect a leader again.

A ``TypeError`` from a log call itself once killed the task on the "connection trouble; retrying
the event" path (structlog's first parameter is ``event``, and the call passed ``event=`` too).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from structlog.testing import capture_logs

from sluice.protocol import errors
from sluice.server.controller import controller as controller_module
from sluice.server.controller.controller import MAX_EVENT_ATTEMPTS, Controller
from sluice.server.zk.errors import ConnectionLossError, ControllerMovedError, SessionExpiredError
from sluice.testing.zookeeper import ZooKeeperServer
from tests.controller.test_controller import Harness, until


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


def fail_preferred_elections(
    monkeypatch: pytest.MonkeyPatch,
    controller: Controller,
    exc: Callable[[], Exception],
    times: int,
) -> list[int]:
    """Make the next ``times`` attempts at a preferred-leader election event raise ``exc()``
    inside the handler, where ZooKeeper's errors come from. Returns the attempt counter."""
    handle = controller._handle
    attempts = [0]

    async def failing(event: Any) -> Any:
        if isinstance(event, controller_module._PreferredElection) and attempts[0] < times:
            attempts[0] += 1
            raise exc()
        return await handle(event)

    monkeypatch.setattr(controller, "_handle", failing)
    return attempts


def messages(logs: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(entry["log_level"], entry["event"]) for entry in logs]


async def still_running(h: Harness, controller: Controller) -> None:
    """The event task is alive and acts: it elects the first state of a new topic."""
    assert controller._task is not None and not controller._task.done()
    await until(h._is(controller), "the controller is active again")
    assert controller.epoch is not None
    name = f"after-{controller.epoch.epoch}"
    await h.topic(name, {0: [1]})
    await h.wait_state(name, leader=1)
    assert controller._task is not None and not controller._task.done()


async def test_a_failing_handler_fails_its_caller_and_the_controller_goes_on(
    h: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    await h.broker(1)
    controller = await h.active()
    fail_preferred_elections(monkeypatch, controller, lambda: RuntimeError("a bug"), times=1)
    with capture_logs() as logs, pytest.raises(RuntimeError, match="a bug"):
        await controller.elect_preferred_leaders()
    assert ("error", "controller event failed") in messages(logs)
    (entry,) = [e for e in logs if e["event"] == "controller event failed"]
    assert entry["controller_event"] == "_PreferredElection" and entry["exc_info"]
    assert await controller.elect_preferred_leaders() == []
    await still_running(h, controller)


async def test_connection_trouble_retries_the_event(
    h: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    await h.broker(1)
    controller = await h.active()
    epoch = controller.epoch
    attempts = fail_preferred_elections(
        monkeypatch, controller, lambda: ConnectionLossError("blip"), times=2
    )
    with capture_logs() as logs:
        assert await controller.elect_preferred_leaders() == []
    assert attempts == [2]
    retries = [e for e in logs if e["event"] == "connection trouble; retrying the event"]
    assert [(e["log_level"], e["controller_event"]) for e in retries] == [
        ("info", "_PreferredElection")
    ] * 2
    assert controller.epoch == epoch  # retried in the same term, no resignation
    await still_running(h, controller)


async def test_an_event_failing_every_attempt_is_abandoned_and_the_controller_starts_over(
    h: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    await h.broker(1)
    controller = await h.active()
    epoch = controller.epoch
    assert epoch is not None
    fail_preferred_elections(
        monkeypatch, controller, lambda: ConnectionLossError("down"), times=MAX_EVENT_ATTEMPTS
    )
    with capture_logs() as logs:
        with pytest.raises(errors.RequestTimedOut):
            await controller.elect_preferred_leaders()
        await until(h._is(controller), "elected again after resigning")
    retry = "connection trouble; retrying the event"
    abandon = "controller event abandoned after connection failures"
    assert [m for m in messages(logs) if m[1] in (retry, abandon)] == [("info", retry)] * (
        MAX_EVENT_ATTEMPTS - 1
    ) + [("error", abandon)]
    assert ("info", "resigned as controller") in messages(logs)
    assert controller.epoch is not None and controller.epoch.epoch == epoch.epoch + 1
    await still_running(h, controller)


async def test_a_stale_fence_resigns_and_campaigns_again(
    h: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    await h.broker(1)
    controller = await h.active()
    epoch = controller.epoch
    assert epoch is not None
    fail_preferred_elections(
        monkeypatch, controller, lambda: ControllerMovedError("newer epoch"), times=1
    )
    with capture_logs() as logs, pytest.raises(errors.NotController):
        await controller.elect_preferred_leaders()
    assert ("warning", "fenced: another controller was elected") in messages(logs)
    assert not controller.is_active
    # (No other controller really exists: /controller is still ours, so the re-election finds
    # it taken. Freeing it, as the newer controller's end would, lets the task campaign.)
    assert controller._task is not None and not controller._task.done()
    await h.observer.zk.delete("/controller")
    await still_running(h, controller)


async def test_an_expired_session_resigns_and_the_task_goes_on(
    h: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    await h.broker(1)
    controller = await h.active()
    fail_preferred_elections(monkeypatch, controller, lambda: SessionExpiredError("gone"), times=1)
    with capture_logs() as logs, pytest.raises(errors.NotController):
        await controller.elect_preferred_leaders()
    assert ("info", "resigned as controller") in messages(logs)
    assert not controller.is_active
    # (The session did not really expire, so nothing campaigns: the real expiry's new session
    # does. Here /controller is still ours; freeing it lets the task campaign again.)
    assert controller._task is not None and not controller._task.done()
    await h.observer.zk.delete("/controller")
    await still_running(h, controller)
