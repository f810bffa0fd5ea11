"""The targeted nemesis of :mod:`tests.jepsen.lone_isr`: its plans, and one real trial (the
>= 50 trials are run by hand: ``python -m tests.jepsen --faults lone_isr_power_loss``)."""

from __future__ import annotations

import json

import pytest

from sluice.testing.zookeeper import ZooKeeperServer
from tests.jepsen.checker import Send
from tests.jepsen.lone_isr import BACKS, SHRINKS, assignment, make_plan, run_trial, window_hits
from tests.jepsen.runner import TrialConfig, format_line


def test_a_plan_is_a_pure_function_of_its_seed_and_fifty_seeds_cover_every_variant() -> None:
    assert make_plan(27000) == make_plan(27000)
    plans = [make_plan(seed) for seed in range(27000, 27050)]
    assert len(set(plans)) == 50
    assert {(p.shrink, p.back) for p in plans} == {("isolate", "before_restart")} | {
        (s, b) for s in SHRINKS[1:] for b in BACKS
    }
    assert {p.several for p in plans} == {True, False}
    assert {p.move_controller for p in plans} == {True, False}
    assert {p.flush_messages for p in plans} == {None, 50, 400}
    assert {p.leader for p in plans} == {1, 2, 3}


def test_the_planned_leader_is_preferred_for_one_partition_or_all() -> None:
    several = make_plan(27001)
    assert several.several and several.leader == 3
    assert assignment(several) == [[3, 1, 2]] * 3
    one = make_plan(27000)
    assert not one.several and one.leader == 2
    assert assignment(one) == [[2, 1, 3], [3, 1, 2], [1, 2, 3]]


def test_the_window_is_hit_where_the_leader_kept_less_than_was_acknowledged() -> None:
    history = [Send("a", "ok", 0, 9), Send("b", "ok", 1, 3), Send("c", "unknown")]
    # Partition 0: 10 acknowledged, 4 kept (hit); partition 1: 4 acknowledged, all kept.
    assert window_hits({0: 4, 1: 4}, history) == [0]
    assert window_hits({0: 10}, history) == []


@pytest.mark.slow
def test_the_sole_isr_member_losing_power_loses_nothing_acknowledged(
    sluice_zookeeper: ZooKeeperServer,
) -> None:
    """Seed 27001: both followers killed -9 until the ISR is the leader alone (they are
    eligible), restarted while the leader is cut off from them (they registered again: kept
    everything, still eligible), then the leader loses power with nothing fsynced. It must not
    lead with its empty logs: a follower does, nothing acknowledged is lost. (Before, every
    acknowledged record of the three partitions was lost: the re-registered followers were no
    longer eligible, and the emptied leader led again.)"""
    result = run_trial(sluice_zookeeper, TrialConfig(seed=27001, duration=6.0))
    print(format_line(result))
    assert not result.error, result.error
    assert result.kip966_partitions == [0, 1, 2]  # the window was hit in every partition
    assert result.summary["acknowledged"] > 500
    assert result.valid, json.dumps(result.record(), indent=1)
