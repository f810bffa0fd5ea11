"""Broker counters: plain integers, one registry per Server, cheap enough for the hot path.

Names are dotted (``requests.produce``, ``connections.closed.bad_frame``). Only the event loop
thread increments them. ``snapshot()`` copies them for tests, logs and a future metrics endpoint.
"""

from __future__ import annotations

from collections import Counter


class Metrics:
    """A bag of named monotonically increasing counters (and a few gauges set by the server)."""

    def __init__(self) -> None:
        self._counters: Counter[str] = Counter()

    def inc(self, name: str, amount: int = 1) -> None:
        self._counters[name] += amount

    def set(self, name: str, value: int) -> None:
        self._counters[name] = value

    def get(self, name: str) -> int:
        return self._counters.get(name, 0)

    def snapshot(self) -> dict[str, int]:
        return dict(self._counters)
