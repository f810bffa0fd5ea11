"""The checker finds each anomaly it names, and nothing in a clean history."""

from __future__ import annotations

import random

import pytest

from tests.jepsen.checker import Observation, Send, check


def clean_history(seed: int) -> tuple[list[Send], list[list[Observation]]]:
    rng = random.Random(seed)
    sends: list[Send] = []
    logs: dict[int, list[str]] = {0: [], 1: []}
    for i in range(200):
        partition = rng.randrange(2)
        outcome = rng.choice(["ok", "ok", "ok", "fail", "unknown"])
        value = f"v{i}"
        if outcome == "ok":
            sends.append(Send(value, "ok", partition, len(logs[partition])))
            logs[partition].append(value)
        elif outcome == "unknown":
            sends.append(Send(value, "unknown"))
            if rng.random() < 0.5:
                logs[partition].append(value)  # it did land
        else:
            sends.append(Send(value, "fail"))
    reader = [Observation(p, o, v) for p, values in logs.items() for o, v in enumerate(values)]
    return sends, [reader, list(reader)]


@pytest.mark.parametrize("seed", range(5))
def test_a_clean_history_is_valid(seed: int) -> None:
    sends, readers = clean_history(seed)
    report = check(sends, readers)
    assert report.valid, report.summary()
    summary = report.summary()
    assert summary["acknowledged"] + summary["failed"] + summary["unknown"] == 200
    assert summary["recovered"] + summary["unseen"] == summary["unknown"]


def test_each_anomaly_is_found() -> None:
    sends = [
        Send("a", "ok", 0, 0),
        Send("b", "ok", 0, 1),  # lost
        Send("c", "ok", 0, 2),  # duplicated (read at 2 and 3)
        Send("d", "fail"),  # G1a: failed, yet read
        Send("e", "unknown"),  # recovered
        Send("f", "unknown"),  # unseen
        Send("g", "ok", 1, 0),  # acknowledged at 1-0, read at 1-1
    ]
    reader1 = [
        Observation(0, 0, "a"),
        Observation(0, 2, "c"),
        Observation(0, 3, "c"),
        Observation(0, 4, "d"),
        Observation(0, 5, "e"),
        Observation(1, 1, "g"),
    ]
    reader2 = [Observation(0, 0, "x"), Observation(0, 2, "c"), Observation(0, 2, "c")]
    report = check(sends, [reader1, reader2])
    assert not report.valid
    assert report.lost == ["b"]
    assert report.duplicate == {"c": [(0, 2), (0, 3)]}
    assert report.g1a == ["d"]
    assert report.recovered == ["e"] and report.unseen == ["f"]
    assert report.inconsistent_offsets[(0, 0)] == ["a", "x"]
    assert "g acknowledged here" in report.inconsistent_offsets[(1, 0)][0]
    assert report.nonmonotonic == [(0, 2, 2, 9)]


def test_values_must_be_unique() -> None:
    with pytest.raises(ValueError, match="unique"):
        check([Send("a", "ok", 0, 0), Send("a", "fail")], [])
