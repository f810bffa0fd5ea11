"""Bounds on what one client may take: connections (per IP and in all), the request rate, and
Kafka's client quotas (:class:`ClientQuotas`: ``producer_byte_rate``, ``consumer_byte_rate``,
``request_percentage`` per user and client id, set with AlterClientQuotas).

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

**Request rate** (:class:`RequestQuota`): besides Kafka's ``request_percentage`` client quota
(a share of the event loop's time, :class:`ClientQuotas`), Sluice can bound a count:
``sluice.quota.requests.per.second`` requests per second per client id, over
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
from collections.abc import Mapping
from dataclasses import dataclass

from sluice.server.config_def import NO_BOUND
from sluice.server.logging import get_logger
from sluice.server.replication.throttle import SampledRate

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
        self._overrides: dict[str, int] = {}
        self.reconfigure(max_per_ip, overrides, max_connections)
        self._per_ip: dict[str, int] = {}
        self.total = 0
        #: addresses refused since they last had room: how many times (one log line each way).
        self._refusing: dict[str, int] = {}

    def reconfigure(
        self, max_per_ip: int, overrides: tuple[tuple[str, int], ...], max_connections: int
    ) -> None:
        """New bounds (a dynamic broker config change): they apply to the next connection
        accepted; connections already open over a lowered bound stay (Kafka does not close
        them either)."""
        self.max_per_ip = max_per_ip
        self.max_connections = max_connections
        resolved: dict[str, int] = {}
        for host, count in overrides:
            for address in _resolve(host):
                resolved[address] = count
        self._overrides = resolved

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


@dataclass
class RequestQuota:
    """Requests per second per client id (module docstring). ``record`` returns the throttle
    time in ms of the request just counted (0 when under the bound)."""

    requests_per_second: int
    samples: int = 11
    window_s: float = 1.0

    def __post_init__(self) -> None:
        self._rates: dict[str, SampledRate] = {}
        self._next_prune = 0.0

    def record(self, client_id: str, now: float) -> int:
        rate = self._rates.get(client_id)
        if rate is None:
            if now >= self._next_prune:
                self._prune(now)
            rate = self._rates[client_id] = SampledRate(self.samples, now)
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


# --- Client quotas (KIP-13, KIP-55, KIP-124: Kafka's ClientQuotaManager) ----------------------

#: The client quota keys, by what each bounds.
PRODUCE, FETCH, REQUEST = "producer_byte_rate", "consumer_byte_rate", "request_percentage"
QUOTA_KEYS = (PRODUCE, FETCH, REQUEST)
_DEFAULT = "<default>"  # Kafka's ConfigEntityName.DEFAULT (entity_configs.DEFAULT_ENTITY)
#: Clients whose precedence walk is remembered (cleared when full).
_MAX_RESOLVED = 10_000
#: Kafka's ClientRequestQuotaManager.NanosToPercentagePerSecond, for seconds.
_SECONDS_TO_PERCENTAGE = 100.0

#: (user, client id) of a quota entity, each a sanitized name, ``<default>``, or None (not
#: part of the entity): ``users/alice/clients/app`` is ``("alice", "app")``.
QuotaEntity = tuple[str | None, str | None]


def quota_entity(entity_path: str) -> QuotaEntity | None:
    """The quota entity of an entity path (``users/<u>``, ``clients/<c>``,
    ``users/<u>/clients/<c>``); None for any other path (brokers...)."""
    parts = entity_path.split("/")
    if len(parts) == 2 and parts[0] == "users":
        return parts[1], None
    if len(parts) == 2 and parts[0] == "clients":
        return None, parts[1]
    if len(parts) == 4 and parts[0] == "users" and parts[2] == "clients":
        return parts[1], parts[3]
    return None


class _QuotaType:
    """One quota key's overrides and sensors (one of Kafka's three ClientQuotaManagers)."""

    __slots__ = ("cap_s", "overrides", "rates", "resolved")

    def __init__(self, cap_s: float | None) -> None:
        self.cap_s = cap_s
        self.overrides: dict[QuotaEntity, float] = {}
        #: sensors by metric tags (user, client id): entities that share a quota share one.
        self.rates: dict[tuple[str, str], SampledRate] = {}
        #: (user, client id) -> (tags, bound): the precedence walk, done once per client.
        self.resolved: dict[tuple[str, str], tuple[tuple[str, str], float] | None] = {}

    def resolve(self, user: str, client: str) -> tuple[tuple[str, str], float] | None:
        """Kafka's ``DefaultQuotaCallback.quotaMetricTags`` then ``quotaLimit``: the most
        specific entity that has this quota decides both the bound and who shares it."""
        o = self.overrides
        d = _DEFAULT
        for entity, tags in (
            ((user, client), (user, client)),  # /config/users/<user>/clients/<client-id>
            ((user, d), (user, client)),  # /config/users/<user>/clients/<default>
            ((user, None), (user, "")),  # /config/users/<user>
            ((d, client), (user, client)),  # /config/users/<default>/clients/<client-id>
            ((d, d), (user, client)),  # /config/users/<default>/clients/<default>
            ((d, None), (user, "")),  # /config/users/<default>
            ((None, client), ("", client)),  # /config/clients/<client-id>
            ((None, d), ("", client)),  # /config/clients/<default>
        ):
            bound = o.get(entity)
            if bound is not None:
                return tags, bound
        return None


class ClientQuotas:
    """``producer_byte_rate``, ``consumer_byte_rate`` and ``request_percentage`` per user and
    client id, as Kafka's ClientQuotaManager enforces them.

    **Which quota applies** is Kafka's precedence (:meth:`_QuotaType.resolve`), per key: the
    quota of ``users/<user>/clients/<client-id>``, else ``users/<user>/clients/<default>``,
    ``users/<user>``, ``users/<default>/clients/<client-id>``, ``users/<default>/clients/
    <default>``, ``users/<default>``, ``clients/<client-id>``, ``clients/<default>``. The
    entity that decides also decides who shares one measured rate: a quota set on a user is
    shared by all that user's client ids; one set on a client id by every user using it. The
    user is the connection's principal name (``ANONYMOUS`` on PLAINTEXT), sanitized as in the
    entity path.

    **Measuring** is the sampled rate of :class:`RequestQuota` (``quota.window.num`` windows of
    ``quota.window.size.seconds``): bytes per second of Produce requests (the request's size)
    and of consumers' Fetch responses (the response's size), and for ``request_percentage``
    the event loop's time spent on the client's requests as a percentage of one second.

    **request_percentage, honestly**: Kafka measures a client's time on its request handler and
    network threads, as a percentage of one thread (``num.io.threads`` x 100 would be all of
    them). Sluice serves every request on one event loop, so ``request_percentage=X`` is X % of
    that loop's time: what the request's handler ran on it before answering or parking.
    A request's time parked in a purgatory (a long-poll Fetch, acks=all) is not counted, as
    Kafka does not count it. 100 therefore means "the whole broker", not one of several
    threads: set it as a share of the whole.

    **Over the bound** (KIP-219): the response carries ``throttle_time_ms`` = (rate - bound) /
    bound x the measured window (Kafka's ``QuotaUtils.throttleTime``; capped at one window for
    ``request_percentage`` as ``ClientRequestQuotaManager`` caps it, uncapped for byte rates),
    and the connection reads no further request for that long.

    **A consumer Fetch over its quota is sent with its records** (counted, then the connection
    muted: how Kafka throttles a Produce), where Kafka answers it empty and takes its bytes back
    (``getThrottledResponse``, ``unrecordQuotaSensor``). Kafka's way does not hold a consumer to
    its quota when one fetch is a sizeable share of it (1 MiB fetches, 1 MB/s): the measured
    window is never shorter than ``samples - 1`` windows, so a new client's first ~10 s of
    allowance goes in one burst into one sample; nothing fits again until that sample ages out
    (the throttle times meanwhile say "come back" too early: the fetch is refused again and
    again), and then the whole allowance returns at once -- a burst-and-starve cycle of one
    window's length that holds such a consumer well under its quota. Sent and counted, each
    response earns the throttle that brings the rate back to the bound, the client gets a
    response per throttle, and the rate stays at the bound (``python -m bench quota`` measures
    both ways). What a client may take stays bounded: never more than the window allows plus
    one response.

    With no quota set anywhere (:attr:`active` False), nothing is measured.
    """

    def __init__(self, samples: int = 11, window_s: float = 1.0) -> None:
        self.samples = samples
        self.window_s = window_s
        self._types = {PRODUCE: _QuotaType(None), FETCH: _QuotaType(None),
                       REQUEST: _QuotaType(window_s)}  # fmt: skip
        self.active = False
        self._next_prune = 0.0

    def update(self, entity_path: str, config: Mapping[str, str]) -> None:
        """An entity's config changed (an ``EntityConfigs`` listener): take its quota keys."""
        entity = quota_entity(entity_path)
        if entity is None:
            return
        for key, qtype in self._types.items():
            text = config.get(key)
            bound: float | None = None
            if text is not None:
                try:
                    bound = float(text)
                except ValueError:
                    log.error("invalid client quota ignored", entity=entity_path, key=key,
                              value=text)  # fmt: skip
            if bound is None:
                changed = qtype.overrides.pop(entity, None) is not None
            else:
                changed = qtype.overrides.get(entity) != bound
                qtype.overrides[entity] = bound
            if changed:
                qtype.resolved.clear()
                log.info("client quota changed", entity=entity_path, key=key, value=bound)
        self.active = any(q.overrides for q in self._types.values())

    def bound(self, key: str, user: str, client_id: str) -> float | None:
        """The quota of ``key`` that applies to ``user`` (sanitized) and ``client_id``."""
        found = self._types[key].resolve(user, client_id)
        return None if found is None else found[1]

    def record(self, key: str, user: str, client_id: str, value: float, now: float) -> int:
        """Count ``value`` (bytes, or seconds for ``request_percentage``) for the client; the
        throttle time in ms it earned (0 under its quota or with none)."""
        qtype = self._types[key]
        if not qtype.overrides:
            return 0
        who = (user, client_id)
        if who in qtype.resolved:
            found = qtype.resolved[who]
        else:
            if len(qtype.resolved) >= _MAX_RESOLVED:  # random client ids: bounded memory
                qtype.resolved.clear()
            found = qtype.resolved[who] = qtype.resolve(user, client_id)
        if found is None:
            return 0
        tags, bound = found
        rate = qtype.rates.get(tags)
        if rate is None:
            if now >= self._next_prune:
                self._prune(now)
            rate = qtype.rates[tags] = SampledRate(self.samples, now)
        if key == REQUEST:
            value *= _SECONDS_TO_PERCENTAGE
        rate.record(now, self.window_s, value)
        measured, elapsed = rate.rate(now, self.window_s)
        if measured <= bound:
            return 0
        # (a quota of 0 blocks for a window: Kafka's formula would divide by it)
        throttle_s = elapsed if bound <= 0 else (measured - bound) / bound * elapsed
        if qtype.cap_s is not None:
            throttle_s = min(throttle_s, qtype.cap_s)
        return round(throttle_s * 1000)

    def _prune(self, now: float) -> None:
        """Forget the sensors idle for the whole window (at most once a window)."""
        horizon = self.samples * self.window_s
        for qtype in self._types.values():
            for tags in [t for t, r in qtype.rates.items() if r.idle(now, horizon)]:
                del qtype.rates[tags]
        self._next_prune = now + self.window_s
