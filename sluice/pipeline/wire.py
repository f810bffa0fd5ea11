"""A small synchronous Kafka-protocol client for Spark tasks and the driver.

Kept on purpose, although ``client/`` exists: Spark calls ``read(partition)``/``write(rows)``
synchronously in its Python workers, so this module speaks the few requests the pipeline needs
over one blocking socket, with the project's one codec (``sluice.protocol.framing`` for
requests/responses, ``sluice.protocol.records`` for batches) — no second codec, but a second
connection next to ``sluice.net.connection``.

The asyncio client was measured as a replacement and was slower, and a Spark task would need an
event loop per call (``bench/NOTES.md``).

Scope: one broker (Sluice is single-node): every request goes to the first reachable bootstrap
server. Every socket operation is bounded by ``timeout``; a Kafka error code becomes the
``sluice.protocol.errors`` class for it (raised by the callers that cannot handle it).

Security: ``security`` holds Kafka client properties (``security.protocol``, ``sasl.*``,
``ssl.*``, read by ``ClientSecurity.from_properties``): the socket is wrapped in TLS and a SASL
login (``ClientSecurity.login``: SaslHandshake v1, then SaslAuthenticate requests) precedes
the first request. There is no KIP-368 re-authentication: on a broker with
``connections.max.reauth.ms`` a connection older than the session is closed by the broker, and
the request fails with :class:`WireError`.
"""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Protocol, TypeVar, cast, overload

from sluice.protocol import messages
from sluice.protocol.errors import (
    KafkaError,
    LeaderNotAvailable,
    ProtocolError,
    UnknownTopicOrPartition,
    for_code,
)
from sluice.protocol.framing import decode_response, encode_request
from sluice.protocol.schema import RequestMessage, ResponseMessage
from sluice.protocol.structs import TopicPartition
from sluice.protocol.varint import Buffer

if TYPE_CHECKING:
    from sluice.client import ClientSecurity

API_PRODUCE, API_FETCH = messages.Produce.key, messages.Fetch.key
API_LIST_OFFSETS, API_METADATA = messages.ListOffsets.key, messages.Metadata.key
API_CREATE_TOPICS, API_DELETE_RECORDS = messages.CreateTopics.key, messages.DeleteRecords.key
# Versions this client speaks (all within sluice.protocol.framing.SUPPORTED_VERSIONS).
PRODUCE_V, FETCH_V, LIST_OFFSETS_V, METADATA_V = 8, 11, 5, 8
CREATE_TOPICS_V, DELETE_RECORDS_V = 4, 1
SASL_V = 1  # SaslHandshake and SaslAuthenticate, the versions of Kafka's Java client
_SIZE = struct.Struct(">i")
_R = TypeVar("_R", bound=ResponseMessage)


class ClientOptions(Protocol):
    """What :meth:`SyncClient.of` reads (``SourceOptions``, ``SinkOptions``)."""

    @property
    def bootstrap(self) -> str: ...
    @property
    def timeout_s(self) -> float: ...
    @property
    def security(self) -> tuple[tuple[str, str], ...]: ...


def client_security(properties: Sequence[tuple[str, str]]) -> ClientSecurity | None:
    """The TLS/SASL settings of Kafka client ``properties`` (None: PLAINTEXT); ValueError or
    OSError (a file that does not load) for ones that cannot work."""
    if not properties:
        return None
    from sluice.client import ClientSecurity

    return ClientSecurity.from_properties(dict(properties))


class WireError(ConnectionError):
    """The broker could not be reached, or closed the connection mid-request."""


@dataclass(frozen=True, slots=True)
class FetchResult:
    error_code: int
    high_watermark: int
    log_start_offset: int
    records: Buffer | None
    #: read_committed: the answer's aborted transactions, (producer id, first offset)
    aborted: tuple[tuple[int, int], ...] = ()


def check(code: int, what: str) -> None:
    """Raise the ``sluice.protocol.errors`` class of a non-zero Kafka error code."""
    if code:
        raise for_code(code)(f"{what}: {for_code(code).description} (error {code})")


class SyncClient:
    """One blocking connection to a Sluice broker. Not thread-safe; one per Spark task."""

    def __init__(
        self,
        bootstrap: str,
        *,
        timeout: float = 30.0,
        client_id: str = "sluice-spark",
        security: Sequence[tuple[str, str]] = (),
        isolation_level: int = 0,
    ) -> None:
        """``isolation_level`` 1 (read_committed): ListOffsets latest is the last stable
        offset and Fetch stops there and lists the aborted transactions."""
        self.timeout = timeout
        self.isolation_level = isolation_level
        self.client_id = client_id
        self._correlation = 0
        login = client_security(security)
        self._sock = self._connect(bootstrap, login)
        if login is not None and login.sasl_mechanism is not None:
            try:
                self._login(login)
            except BaseException:
                self._sock.close()
                raise

    @classmethod
    def of(cls, options: ClientOptions, isolation_level: int = 0) -> SyncClient:
        """A connection as the source's or sink's parsed options say."""
        return cls(
            options.bootstrap,
            timeout=options.timeout_s,
            security=options.security,
            isolation_level=isolation_level,
        )

    def _connect(self, bootstrap: str, security: ClientSecurity | None) -> socket.socket:
        errors = []
        for server in (s.strip() for s in bootstrap.split(",") if s.strip()):
            host, _, port = server.rpartition(":")
            try:
                sock = socket.create_connection((host or "127.0.0.1", int(port)), self.timeout)
            except (OSError, ValueError) as exc:
                errors.append(f"{server}: {exc}")
                continue
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.settimeout(self.timeout)
            if security is not None and security.ssl_context is not None:
                name = security.server_hostname or host.strip("[]") or "127.0.0.1"
                try:
                    sock = security.ssl_context.wrap_socket(sock, server_hostname=name)
                except OSError as exc:  # ssl.SSLError included: a certificate not trusted
                    sock.close()
                    raise WireError(f"TLS handshake with {server} failed: {exc}") from exc
            return sock
        raise WireError(f"no bootstrap server reachable ({'; '.join(errors) or bootstrap!r})")

    def _login(self, security: ClientSecurity) -> None:
        """SASL login (:meth:`ClientSecurity.login`); raises the Kafka error the broker
        answered (``SaslAuthenticationFailed`` with its message)."""
        steps = security.login()
        api_key, body = next(steps)
        while True:
            response = self.request(api_key, SASL_V, body)
            try:
                api_key, body = steps.send(response)
            except StopIteration:
                return

    def close(self) -> None:
        self._sock.close()

    def __enter__(self) -> SyncClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- framing --------------------------------------------------------------------------

    @overload
    def request(
        self,
        api_key: int,
        version: int,
        body: RequestMessage[_R],
        *,
        expect_response: Literal[True] = True,
    ) -> _R: ...

    @overload
    def request(
        self, api_key: int, version: int, body: RequestMessage[_R], *, expect_response: bool
    ) -> _R | None: ...

    def request(
        self, api_key: int, version: int, body: RequestMessage[_R], *, expect_response: bool = True
    ) -> _R | None:
        """Send ``body`` and return the response, typed by the request's class (a
        ``FetchRequest`` gives a ``FetchResponse``); None when no response is expected."""
        self._correlation += 1
        frame = encode_request(api_key, version, self._correlation, self.client_id, body)
        try:
            self._sock.sendall(frame)
            if not expect_response:
                return None
            (size,) = _SIZE.unpack(self._recv_exactly(4))
            payload = self._recv_exactly(size)
        except OSError as exc:
            raise WireError(f"request {api_key} v{version} failed: {exc}") from exc
        correlation, response = decode_response(api_key, version, payload)
        if correlation != self._correlation:
            raise ProtocolError(f"correlation id {correlation} != {self._correlation}")
        # encode_request checked that ``body`` is the request of ``api_key``: the response is
        # that API's response class, ``_R``.
        return cast("_R", response)

    def _recv_exactly(self, n: int) -> memoryview:
        buf = bytearray(n)
        view = memoryview(buf)
        got = 0
        while got < n:
            k = self._sock.recv_into(view[got:], n - got)
            if k == 0:
                raise WireError("connection closed by the broker")
            got += k
        return view

    # --- requests -------------------------------------------------------------------------

    def partition_counts(self, topics: Iterable[str] | None = None) -> dict[str, int]:
        """``{topic: partitions}`` for ``topics`` (None: all). Unknown topics are left out;
        never auto-creates (a reader must not create what it reads)."""
        req = messages.MetadataRequest(
            topics=None
            if topics is None
            else [messages.MetadataRequest.MetadataRequestTopic(name=t) for t in topics],
            allow_auto_topic_creation=False,
        )
        resp = self.request(API_METADATA, METADATA_V, req)
        out = {}
        for t in resp.topics:
            if t.error_code == 0 and t.name is not None:
                out[t.name] = len(t.partitions)
        return out

    def partitions_for_produce(self, topic: str) -> int:
        """The partition count of ``topic`` for a producer, which may create it: Metadata with
        ``allow_auto_topic_creation`` (the Kafka producer's request), so a broker with
        ``auto.create.topics.enable=true`` creates a missing topic with its defaults. While the
        new topic has no leader yet (a cluster answers LEADER_NOT_AVAILABLE until the controller
        elected one) it asks again, for at most ``timeout`` (the producer's ``max.block.ms``).
        A broker that does not auto-create answers UNKNOWN_TOPIC_OR_PARTITION: raised with a
        message saying so; any other topic error (an invalid name, ...) is raised as is."""
        deadline = time.monotonic() + self.timeout
        backoff = 0.01
        while True:
            req = messages.MetadataRequest(
                topics=[messages.MetadataRequest.MetadataRequestTopic(name=topic)],
                allow_auto_topic_creation=True,
            )
            resp = self.request(API_METADATA, METADATA_V, req)
            found = [t for t in resp.topics if t.name == topic]
            if not found:
                raise ProtocolError(f"Metadata response without topic {topic!r}")
            meta = found[0]
            if meta.error_code == UnknownTopicOrPartition.code:
                raise UnknownTopicOrPartition(
                    f"topic {topic!r} does not exist and the broker does not create topics on "
                    "first use (auto.create.topics.enable=false): create it first, e.g. "
                    f"sluice topics create --topic {topic}"
                )
            ready = meta.error_code == 0 and bool(meta.partitions)
            ready = ready and all(p.leader_id >= 0 for p in meta.partitions)
            if ready:
                return len(meta.partitions)
            if meta.error_code not in (0, LeaderNotAvailable.code):
                check(meta.error_code, f"Metadata {topic}")
            if time.monotonic() + backoff > deadline:
                raise LeaderNotAvailable(
                    f"topic {topic!r}: no leader for every partition after {self.timeout:g} s"
                )
            time.sleep(backoff)  # bounded retry on a condition, as the producer's metadata wait
            backoff = min(backoff * 2, 0.5)

    def list_offsets(self, targets: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
        """ListOffsets: ``{tp: timestamp}`` (-2 earliest, -1 latest = HW, or ms) to offsets.
        For a timestamp past the last record the broker answers -1: mapped to the HW here,
        as the Kafka source does (nothing to read yet)."""
        if not targets:
            return {}
        by_topic: dict[str, list[messages.ListOffsetsRequest.ListOffsetsPartition]] = {}
        for tp, ts in targets.items():
            by_topic.setdefault(tp.topic, []).append(
                messages.ListOffsetsRequest.ListOffsetsPartition(
                    partition_index=tp.partition, timestamp=ts
                )
            )
        req = messages.ListOffsetsRequest(
            replica_id=-1,
            isolation_level=self.isolation_level,
            topics=[
                messages.ListOffsetsRequest.ListOffsetsTopic(name=t, partitions=ps)
                for t, ps in by_topic.items()
            ],
        )
        resp = self.request(API_LIST_OFFSETS, LIST_OFFSETS_V, req)
        out: dict[TopicPartition, int] = {}
        missing_latest = []
        for t in resp.topics:
            for p in t.partitions:
                tp = TopicPartition(t.name, p.partition_index)
                check(p.error_code, f"ListOffsets {tp.topic}-{tp.partition}")
                if p.offset < 0:
                    missing_latest.append(tp)
                else:
                    out[tp] = p.offset
        if missing_latest:
            out.update(self.list_offsets({tp: -1 for tp in missing_latest}))
        return out

    def fetch(
        self, tp: TopicPartition, offset: int, *, max_bytes: int, max_wait_ms: int = 0
    ) -> FetchResult:
        """One Fetch of one partition (read_uncommitted; the broker caps reads at the HW)."""
        req = messages.FetchRequest(
            replica_id=-1,
            max_wait_ms=max_wait_ms,
            min_bytes=1,
            max_bytes=max_bytes,
            isolation_level=self.isolation_level,
            session_id=0,
            session_epoch=-1,
            topics=[
                messages.FetchRequest.FetchTopic(
                    topic=tp.topic,
                    partitions=[
                        messages.FetchRequest.FetchPartition(
                            partition=tp.partition,
                            fetch_offset=offset,
                            log_start_offset=-1,
                            partition_max_bytes=max_bytes,
                        )
                    ],
                )
            ],
            forgotten_topics_data=[],
            rack_id="",
        )
        resp = self.request(API_FETCH, FETCH_V, req)
        check(resp.error_code, "Fetch")
        for t in resp.responses:
            for p in t.partitions:
                if t.topic == tp.topic and p.partition_index == tp.partition:
                    # Decoded records are a slice of the frame (a RecordsPart is only ever set
                    # by a broker building a response), or None.
                    records = p.records if isinstance(p.records, Buffer) else None
                    aborted = tuple(
                        (a.producer_id, a.first_offset) for a in p.aborted_transactions or ()
                    )
                    return FetchResult(
                        p.error_code, p.high_watermark, p.log_start_offset, records, aborted
                    )
        raise ProtocolError(f"Fetch response without {tp.topic}-{tp.partition}")

    def produce(
        self, batches: Mapping[TopicPartition, bytes], *, acks: int, timeout_ms: int = 30000
    ) -> dict[TopicPartition, int]:
        """Produce one batch per partition; returns base offsets (-1 with acks=0). Raises the
        first partition error (the caller fails the Spark task)."""
        by_topic: dict[str, list[messages.ProduceRequest.PartitionProduceData]] = {}
        for tp, batch in batches.items():
            by_topic.setdefault(tp.topic, []).append(
                messages.ProduceRequest.PartitionProduceData(index=tp.partition, records=batch)
            )
        req = messages.ProduceRequest(
            transactional_id=None,
            acks=acks,
            timeout_ms=timeout_ms,
            topic_data=[
                messages.ProduceRequest.TopicProduceData(name=t, partition_data=ps)
                for t, ps in by_topic.items()
            ],
        )
        if acks == 0:
            self.request(API_PRODUCE, PRODUCE_V, req, expect_response=False)
            return {tp: -1 for tp in batches}
        resp = self.request(API_PRODUCE, PRODUCE_V, req)
        out: dict[TopicPartition, int] = {}
        for t in resp.responses:
            for p in t.partition_responses:
                tp = TopicPartition(t.name, p.index)
                detail = f" ({p.error_message})" if p.error_message else ""
                check(p.error_code, f"Produce {tp.topic}-{tp.partition}{detail}")
                out[tp] = p.base_offset
        return out

    def create_topic(self, name: str, partitions: int, configs: Mapping[str, str] = {}) -> None:
        """CreateTopics (TopicAlreadyExists is not an error here: the topic is there)."""
        cls = messages.CreateTopicsRequest
        req = cls(
            topics=[
                cls.CreatableTopic(
                    name=name,
                    num_partitions=partitions,
                    replication_factor=1,
                    assignments=[],
                    configs=[cls.CreatableTopicConfig(name=k, value=v) for k, v in configs.items()],
                )
            ],
            timeout_ms=30000,
            validate_only=False,
        )
        resp = self.request(API_CREATE_TOPICS, CREATE_TOPICS_V, req)
        for t in resp.topics:
            if t.error_code not in (0, 36):
                check(t.error_code, f"CreateTopics {t.name}: {t.error_message or ''}")

    def delete_records(self, tp: TopicPartition, before: int) -> int:
        """DeleteRecords: advance the log start offset to ``before``; returns the new one."""
        cls = messages.DeleteRecordsRequest
        req = cls(
            topics=[
                cls.DeleteRecordsTopic(
                    name=tp.topic,
                    partitions=[
                        cls.DeleteRecordsPartition(partition_index=tp.partition, offset=before)
                    ],
                )
            ],
            timeout_ms=30000,
        )
        resp = self.request(API_DELETE_RECORDS, DELETE_RECORDS_V, req)
        for t in resp.topics:
            for p in t.partitions:
                check(p.error_code, f"DeleteRecords {tp.topic}-{tp.partition}")
                return int(p.low_watermark)
        raise ProtocolError("DeleteRecords response without the partition")


__all__ = ["FetchResult", "KafkaError", "SyncClient", "WireError", "check"]
