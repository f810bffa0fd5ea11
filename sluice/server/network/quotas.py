"""Bounds on what one client may take: connections (per IP and in all) and the request rate.

Topic and partition counts are bounded where topics are created (:mod:`handlers`,
``sluice.max.topics`` / ``sluice.max.partitions`` / ``sluice.max.partitions.per.topic``); the two
bounds enforced per connection and per request live here, one object each, created once by the
``Server`` and shared by every :class:`~sluice.server.network.connection.Connection`. Both run on
the event loop thread only. With the defaults (2147483647, Kafka's "no bound") neither refuses or
delays anything, so a broker configured as before behaves as before.

**Connections** (:class:`ConnectionQuotas`, Kafka's ``SocketServer.ConnectionQuotas``): at most
``max.connections.per.ip`` open connections from one address (``max.connections.per.ip.overrides``
= ``host:count,...`` changes it for the addresses named: IP literals, or host names resolved when
the broker starts, as Kafka resolves them with ``InetAddress.getByName``), and at most
``max.connections`` in all. A connection over either bound is closed as soon as it is accepted,
before any byte is read, as Kafka closes a connection over the per-IP bound
(``TooManyConnectionsException``); a client sees the close and reconnects after its backoff.
Kafka's broker-wide bound instead stops accepting until a connection closes (KIP-402), leaving
new ones in the listen backlog; an asyncio server cannot pause its accept loop without closing
its listening socket, so Sluice closes those too. The log gets one line per address when it
first hits its bound and one (with the count refused) when it is below it again, not a line per
refused connection: a client in a reconnect loop would flood it otherwise. In a cluster the
other brokers' replica fetchers connect to the same listener and count too (Kafka exempts its
inter-broker listener; Sluice serves one listener): size the bounds for them.

**Request rate** (:class:`RequestQuota`): Kafka bounds a client's share of request-handler time
(the ``request_percentage`` client quota, set dynamically with AlterClientQuotas). Sluice bounds
a count instead: ``sluice.quota.requests.per.second`` requests per second per client id, over
Kafka's sampled window (``quota.window.num`` samples of ``quota.window.size.seconds``). A count is
what an operator can reason about ("a client may send 1,000 requests a second"), and a Python
broker's per-request time is dominated by the interpreter, not by what the request asks, so a
time share would bound much the same thing less predictably. The entity is Kafka's: the client
id, shared by all its connections (so opening more connections buys nothing; how many is bounded
above). What happens over the bound is Kafka's too (``ClientQuotaManager``, KIP-219): the request
is served, its response carries ``throttle_time_ms``, and the connection is muted for that long
after the response is sent (its next request is not read; the client, seeing the throttle time,
also waits). The throttle time is Kafka's ``QuotaUtils.throttleTime``: (rate - bound) / bound x
the window's length, i.e. how long the excess takes to drain at the bound, capped at one sample
window as ``ClientRequestQuotaManager`` caps it. Follower fetches (``replica_id`` >= 0) and
ControlledShutdown are broker-to-broker and never throttled, as Kafka exempts cluster actions.
The per-client state is dropped once idle for the whole window, so random client ids cannot
grow it without bound.
"""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass

from sluice.server.config_def import NO_BOUND
from sluice.server.logging import get_logger

log = get_logger("sluice.quotas")


def _resolve(host: str) -> list[str]:
    """The addresses ``host`` stands for: itself if an IP literal, else what the resolver says."""
    try:
        return [str(ipaddress.ip_address(host))]
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except OSError as exc:
        log.warning("connection limit override: host not resolved", host=host, error=str(exc))
        return []
    return sorted({str(info[4][0]) for info in infos})


class ConnectionQuotas:
    """Open connections per client address and in all (module docstring)."""

    def __init__(
        self,
        max_per_ip: int = NO_BOUND,
        overrides: tuple[tuple[str, int], ...] = (),
        max_connections: int = NO_BOUND,
    ) -> None:
        self.max_per_ip = max_per_ip
        self.max_connections = max_connections
        self._overrides: dict[str, int] = {}
        for host, count in overrides:
            for address in _resolve(host):
                self._overrides[address] = count
        self._per_ip: dict[str, int] = {}
        self.total = 0
        #: addresses refused since they last had room: how many times (one log line each way).
        self._refusing: dict[str, int] = {}

    def limit_for(self, ip: str) -> int:
        return self._overrides.get(ip, self.max_per_ip)

    def acquire(self, ip: str) -> str | None:
        """Count a new connection from ``ip``; None if it may stay, else the reason to close it
        (``"per_ip"`` or ``"total"``: the ``connections.refused.<reason>`` counter's suffix)."""
        count = self._per_ip.get(ip, 0)
        limit = self.limit_for(ip)
        if count >= limit:
            self._refuse(ip, "per_ip", limit, count)
            return "per_ip"
        if self.total >= self.max_connections:
            self._refuse(ip, "total", self.max_connections, self.total)
            return "total"
        self._per_ip[ip] = count + 1
        self.total += 1
        return None

    def release(self, ip: str) -> None:
        """A connection :meth:`acquire` let in has closed."""
        self.total -= 1
        count = self._per_ip[ip] - 1
        if count:
            self._per_ip[ip] = count
        else:
            del self._per_ip[ip]
        refused = self._refusing.pop(ip, None)
        if refused is not None:
            log.info("connections from this address accepted again", ip=ip, refused=refused)

    def _refuse(self, ip: str, reason: str, limit: int, count: int) -> None:
        refused = self._refusing.get(ip)
        if refused is None:
            key = "max.connections.per.ip" if reason == "per_ip" else "max.connections"
            log.warning(
                "refusing connections: limit reached",
                ip=ip,
                limit=limit,
                open=count,
                key=key,
            )
            refused = 0
        self._refusing[ip] = refused + 1


class _Rate:
    """One client id's request count in ``samples`` windows of ``window_s`` (Kafka's
    ``SampledStat``/``Rate``: the current window, reused ring slots, obsolete ones reset)."""

    __slots__ = ("counts", "current", "starts")

    def __init__(self, samples: int, now: float) -> None:
        self.counts = [0] * samples
        self.starts = [now] * samples
        self.current = 0

    def record(self, now: float, window_s: float) -> None:
        i = self.current
        if now - self.starts[i] >= window_s:
            i = (i + 1) % len(self.counts)
            self.current = i
            self.counts[i] = 0
            self.starts[i] = now
        self.counts[i] += 1

    def rate(self, now: float, window_s: float) -> tuple[float, float]:
        """``(requests per second, the window's length in seconds)`` as Kafka's ``Rate``: over
        the samples not older than the whole window, the elapsed time since the oldest one's
        start, but never less than ``samples - 1`` full windows (so a new client's first burst
        is measured against the full window, not against a few milliseconds)."""
        samples = len(self.counts)
        horizon = samples * window_s
        total = 0
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


@dataclass
class RequestQuota:
    """Requests per second per client id (module docstring). ``record`` returns the throttle
    time in ms of the request just counted (0 when under the bound)."""

    requests_per_second: int
    samples: int = 11
    window_s: float = 1.0

    def __post_init__(self) -> None:
        self._rates: dict[str, _Rate] = {}
        self._next_prune = 0.0

    def record(self, client_id: str, now: float) -> int:
        rate = self._rates.get(client_id)
        if rate is None:
            if now >= self._next_prune:
                self._prune(now)
            rate = self._rates[client_id] = _Rate(self.samples, now)
        rate.record(now, self.window_s)
        value, elapsed = rate.rate(now, self.window_s)
        bound = self.requests_per_second
        if value <= bound:
            return 0
        throttle_s = (value - bound) / bound * elapsed
        return round(min(throttle_s, self.window_s) * 1000)

    def _prune(self, now: float) -> None:
        """Forget the clients idle for the whole window (at most once a window)."""
        horizon = self.samples * self.window_s
        for client_id in [c for c, r in self._rates.items() if r.idle(now, horizon)]:
            del self._rates[client_id]
        self._next_prune = now + self.window_s

    @property
    def clients(self) -> int:
        """Client ids with state (tests: pruning keeps this bounded)."""
        return len(self._rates)
