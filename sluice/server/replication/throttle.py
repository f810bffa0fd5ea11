"""Replication throttles: Kafka's ``ReplicationQuotaManager`` (KIP-73), and the sampled rate
both they and the client quotas (``sluice.server.network.quotas``) measure with.

What is throttled is named per topic, in two topic configs of ``partition:broker`` entries (or
``*``: every partition): ``leader.replication.throttled.replicas`` names the partitions whose
*leader* on that broker throttles what it sends to followers, ``follower.replication.throttled.
replicas`` the partitions whose *follower* on that broker throttles what it fetches. ``sluice
reassign-partitions --throttle`` (as Kafka's ``kafka-reassign-partitions``) names the moving
partitions' current replicas in the first and their new replicas in the second. How fast is a
dynamic broker config per broker: ``leader.replication.throttled.rate`` and
``follower.replication.throttled.rate`` in bytes/s (unset: Long.MAX_VALUE, no throttle). Each
broker has one :class:`ReplicationQuota` of each kind, shared by all its throttled partitions,
over ``replication.quota.window.num`` samples of ``replication.quota.window.size.seconds``.

Kafka's rules, kept exactly (``ReplicaManager.shouldLeaderThrottle``,
``ReplicaFetcherThread.shouldFollowerThrottle``):

* **Leader**: a follower's Fetch gets no records for a partition that is leader-throttled here,
  while its quota is exceeded, *unless that follower is in the ISR* (the partition is answered
  with its offsets and no records; the follower's fetch offset still counts for HW and ISR).
  The bytes sent for leader-throttled partitions are counted afterwards, to any follower, in
  the ISR or not (``KafkaApis.sizeOfThrottledPartitions``): an in-sync follower uses up the
  quota but is never held back by it.
* **Follower**: the fetcher leaves a follower-throttled partition out of its Fetch while its
  quota is exceeded, unless the replica is caught up (its LEO reached the leader's HW on the
  last fetch: Kafka's ``isReplicaInSync``, lag <= 0); the bytes it appends for throttled
  partitions are counted.

"Exceeded" is Kafka's sensor check: the sampled rate is above the bound *now*, before the next
read -- so a fetch may take one ``replica.fetch.max.bytes`` over, and a new quota's first
window allows a burst of ``samples - 1`` windows' bytes, as Kafka's ``Rate`` does.
"""

from __future__ import annotations

import functools

from sluice.server.storage.log_config import parse_throttled_replicas

__all__ = ["parse_throttled_replicas"]  # (declared with the topic keys; re-exported)

#: Kafka's "no throttle" (``QuotaConfig.QUOTA_BYTES_PER_SECOND_DEFAULT``, Long.MAX_VALUE).
UNTHROTTLED = 2**63 - 1
LEADER_REPLICAS = "leader.replication.throttled.replicas"
FOLLOWER_REPLICAS = "follower.replication.throttled.replicas"
LEADER_RATE = "leader.replication.throttled.rate"
FOLLOWER_RATE = "follower.replication.throttled.rate"


@functools.lru_cache(maxsize=1024)
def throttled_partitions(text: str, broker_id: int) -> frozenset[int] | None:
    """The partitions ``text`` (a throttled-replicas value) names on ``broker_id``; None for
    ``*`` (all of them). Kafka's ``TopicConfigHandler.parseThrottledPartitions``."""
    entries = [e.strip() for e in text.split(",") if e.strip()]
    if entries == ["*"]:
        return None
    out = set()
    for entry in entries:
        partition, _, broker = entry.partition(":")
        if int(broker) == broker_id:
            out.add(int(partition))
    return frozenset(out)


def is_throttled(text: str, partition: int, broker_id: int) -> bool:
    """Whether the throttled-replicas value ``text`` names ``partition`` on ``broker_id``."""
    if not text:
        return False
    named = throttled_partitions(text, broker_id)
    return named is None or partition in named


class SampledRate:
    """A total (requests, bytes, time) in ``samples`` windows of ``window_s`` (Kafka's
    ``SampledStat``/``Rate``: the current window, reused ring slots, obsolete ones reset)."""

    __slots__ = ("counts", "current", "starts")

    def __init__(self, samples: int, now: float) -> None:
        self.counts: list[float] = [0] * samples
        self.starts = [now] * samples
        self.current = 0

    def record(self, now: float, window_s: float, value: float = 1) -> None:
        i = self.current
        if now - self.starts[i] >= window_s:
            i = (i + 1) % len(self.counts)
            self.current = i
            self.counts[i] = 0
            self.starts[i] = now
        self.counts[i] += value

    def rate(self, now: float, window_s: float) -> tuple[float, float]:
        """``(value per second, the window's length in seconds)`` as Kafka's ``Rate``: over
        the samples not older than the whole window, the elapsed time since the oldest one's
        start, but never less than ``samples - 1`` full windows (so a new client's first burst
        is measured against the full window, not against a few milliseconds)."""
        samples = len(self.counts)
        horizon = samples * window_s
        total = 0.0
        oldest = now
        for count, start in zip(self.counts, self.starts, strict=True):
            if now - start >= horizon:
                continue  # obsolete
            total += count
            oldest = min(oldest, start)
        elapsed = max(now - oldest, (samples - 1) * window_s)
        return total / elapsed, elapsed

    def idle(self, now: float, horizon: float) -> bool:
        return now - self.starts[self.current] >= horizon


class ReplicationQuota:
    """One broker's leader or follower replication quota (module docstring): ``bound`` bytes
    per second over the sampled window; :meth:`exceeded` before a read, :meth:`record` after.
    Runs on the event loop only."""

    def __init__(self, samples: int = 11, window_s: float = 1.0) -> None:
        self.samples = samples
        self.window_s = window_s
        self.bound = UNTHROTTLED
        self._rate: SampledRate | None = None
        #: bytes counted in all (the ``byte-rate`` metric is the sampled rate; this, a total).
        self.total = 0

    def set_bound(self, bound: int) -> None:
        """A new rate (a dynamic broker config change); the measurements are kept."""
        self.bound = bound

    @property
    def throttling(self) -> bool:
        return self.bound < UNTHROTTLED

    def record(self, size: int, now: float) -> None:
        if size <= 0:
            return
        self.total += size
        if self._rate is None:
            self._rate = SampledRate(self.samples, now)
        self._rate.record(now, self.window_s, size)

    def byte_rate(self, now: float) -> float:
        """Bytes per second over the window (Kafka's ``byte-rate`` metric of the quota)."""
        return 0.0 if self._rate is None else self._rate.rate(now, self.window_s)[0]

    def exceeded(self, now: float) -> bool:
        """Kafka's ``isQuotaExceeded``: the measured rate is above the bound."""
        return self.throttling and self.byte_rate(now) > self.bound
