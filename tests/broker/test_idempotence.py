"""Idempotent producers: retries after a dropped connection write each record exactly once.

A TCP proxy (:class:`DroppingProxy`, threads + blocking sockets) sits between the client and the
broker process, which advertises the proxy's address so every client connection goes through
it. The proxy forwards whole frames; for the first ``drops`` Produce requests it lets the
request reach the broker (the records are appended) and then cuts the client's connection
instead of returning the response. The client reconnects and resends the same batches (same
producer id, epoch and sequences); the broker must recognise them. Without the producer-state
checks these tests fail: the log would hold the records twice.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import time
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from sluice.protocol import messages as m
from sluice.protocol.records import iter_records
from tests.broker_util import BrokerProcess, free_port, start_broker
from tests.interop_helpers import DEADLINE_S

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    import kafka

pytestmark = pytest.mark.interop

PRODUCE = m.Produce.key


def _read_exact(sock: socket.socket, n: int) -> bytes | None:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)


def _read_frame(sock: socket.socket) -> bytes | None:
    head = _read_exact(sock, 4)
    if head is None:
        return None
    body = _read_exact(sock, struct.unpack(">i", head)[0])
    return None if body is None else head + body


class DroppingProxy:
    """Forward Kafka frames between clients and ``upstream``; drop the connection on the
    response to each of the first ``drops`` Produce requests (after the broker handled them)."""

    def __init__(self, upstream: tuple[str, int], port: int, drops: int) -> None:
        self.upstream = upstream
        self.drops_left = drops
        self.dropped = 0
        self.produce_requests = 0
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", port))
        self._listener.settimeout(0.2)
        self._stop = threading.Event()
        self._sockets: list[socket.socket] = []
        self._threads: list[threading.Thread] = []
        self._accept = threading.Thread(target=self._accept_loop, daemon=True)
        self._accept.start()

    def _accept_loop(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                continue
            upstream = socket.create_connection(self.upstream, timeout=DEADLINE_S)
            upstream.settimeout(None)
            client.settimeout(None)
            with self._lock:
                self._sockets += [client, upstream]
            pending: list[int] = []  # api keys of requests awaiting their response, in order
            cond = threading.Condition()
            for target in (self._c2s, self._s2c):
                t = threading.Thread(
                    target=target, args=(client, upstream, pending, cond), daemon=True
                )
                t.start()
                self._threads.append(t)

    def _c2s(self, client: socket.socket, upstream: socket.socket, pending: list[int],
             cond: threading.Condition) -> None:  # fmt: skip
        with contextlib.suppress(OSError):
            while True:
                frame = _read_frame(client)
                if frame is None:
                    break
                (api_key,) = struct.unpack_from(">h", frame, 4)
                # (every request here gets a response: idempotence needs acks=all)
                if api_key == PRODUCE:
                    with self._lock:
                        self.produce_requests += 1
                with cond:
                    pending.append(api_key)
                upstream.sendall(frame)
        self._close(client, upstream)

    def _s2c(self, client: socket.socket, upstream: socket.socket, pending: list[int],
             cond: threading.Condition) -> None:  # fmt: skip
        with contextlib.suppress(OSError):
            while True:
                frame = _read_frame(upstream)
                if frame is None:
                    break
                with cond:
                    api_key = pending.pop(0) if pending else -1
                if api_key == PRODUCE:
                    with self._lock:
                        drop = self.drops_left > 0
                        if drop:
                            self.drops_left -= 1
                            self.dropped += 1
                    if drop:
                        break  # the broker appended; the client never hears about it
                client.sendall(frame)
        self._close(client, upstream)

    @staticmethod
    def _close(*socks: socket.socket) -> None:
        for s in socks:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                s.close()

    def close(self) -> None:
        self._stop.set()
        self._accept.join(5)
        self._listener.close()
        with self._lock:
            self._close(*self._sockets)
        for t in self._threads:
            t.join(5)


@pytest.fixture
def proxied(tmp_path: Path) -> Iterator[tuple[BrokerProcess, DroppingProxy]]:
    proxy_port = free_port()
    broker = start_broker(
        tmp_path / "data",
        overrides=[f"advertised.listeners=PLAINTEXT://127.0.0.1:{proxy_port}"],
    )
    proxy = DroppingProxy((broker.host, broker.port), proxy_port, drops=0)
    try:
        yield broker, proxy
    finally:
        proxy.close()
        assert broker.stop() == 0


def create_topic(bootstrap: str, name: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, 1, 1)])[name].result(DEADLINE_S)


def log_values(broker: BrokerProcess, topic: str) -> list[bytes | None]:
    """Every record value in the partition's segment files, read straight from disk."""
    values: list[bytes | None] = []
    for path in sorted((broker.data_dir / f"{topic}-0").glob("*.log")):
        values += [r.value for _h, r in iter_records(path.read_bytes())]
    return values


def test_confluent_idempotent_retries_after_dropped_connections_write_once(
    proxied: tuple[BrokerProcess, DroppingProxy],
) -> None:
    broker, proxy = proxied
    bootstrap = f"127.0.0.1:{proxy._listener.getsockname()[1]}"
    create_topic(bootstrap, "idem")
    proxy.drops_left = 3
    errors: list[object] = []
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "linger.ms": 5,
            "batch.num.messages": 20,  # several batches (requests) in flight when one is cut
            "retry.backoff.ms": 50,
            "reconnect.backoff.ms": 20,
            "message.timeout.ms": 30000,
        }
    )
    expected = [b"rec-%04d" % i for i in range(300)]
    for i, value in enumerate(expected):
        producer.produce(
            "idem", value=value, on_delivery=lambda err, _m: errors.append(err) if err else None
        )
        if i % 50 == 49:
            producer.poll(0.05)
    assert producer.flush(DEADLINE_S * 2) == 0
    assert errors == []
    assert proxy.dropped == 3, "the proxy did not cut any in-flight produce"
    assert proxy.produce_requests > 3
    assert log_values(broker, "idem") == expected
    # ...and a consumer (direct to the log, through the proxy) reads each exactly once.
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "idem-check",
                         "enable.auto.commit": False})  # fmt: skip
    try:
        consumer.assign([TopicPartition("idem", 0, 0)])
        got: list[bytes | None] = []
        deadline = time.monotonic() + DEADLINE_S
        while len(got) < len(expected) and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None and not msg.error():
                got.append(msg.value())
        assert got == expected
    finally:
        consumer.close()


def test_kafka_python_idempotent_retries_after_dropped_connections_write_once(
    proxied: tuple[BrokerProcess, DroppingProxy],
) -> None:
    broker, proxy = proxied
    bootstrap = f"127.0.0.1:{proxy._listener.getsockname()[1]}"
    create_topic(bootstrap, "idem-kp")
    proxy.drops_left = 2
    producer = kafka.KafkaProducer(
        bootstrap_servers=bootstrap,
        enable_idempotence=True,
        linger_ms=5,
        retry_backoff_ms=50,
        reconnect_backoff_ms=20,
    )
    try:
        expected = [b"kp-%04d" % i for i in range(120)]
        futures = [producer.send("idem-kp", value=v, partition=0) for v in expected]
        producer.flush(timeout=DEADLINE_S * 2)
        offsets = [f.get(timeout=DEADLINE_S).offset for f in futures]
    finally:
        producer.close(timeout=DEADLINE_S)
    assert proxy.dropped == 2
    assert log_values(broker, "idem-kp") == expected
    assert offsets == list(range(len(expected)))  # duplicates answered with the original offsets


def test_gap_and_duplicate_errors_on_the_wire(tmp_path: Path) -> None:
    """Hand-built batches with a producer id: a gap is OUT_OF_ORDER_SEQUENCE_NUMBER and a resend
    returns the original offset; a restarted broker rebuilds the state from the log."""
    import asyncio

    from sluice.protocol import messages as m
    from sluice.protocol.records import RecordBatchBuilder
    from tests.broker_util import WireClient

    def batch(seq: int, n: int, pid: int, epoch: int = 0) -> bytes:
        # Timestamped now: the restart must not find the producer expired (a snapshot load
        # skips producers idle for producer.id.expiration.ms, by their batches' timestamps).
        now = time.time_ns() // 1_000_000
        b = RecordBatchBuilder(producer_id=pid, producer_epoch=epoch, base_sequence=seq)
        for i in range(n):
            b.append(now + i, None, b"s%d" % (seq + i))
        return b.build()

    async def produce(client: WireClient, records: bytes) -> tuple[int, int]:
        pd = m.ProduceRequest.PartitionProduceData(index=0, records=records)
        td = m.ProduceRequest.TopicProduceData(name="seq", partition_data=[pd])
        body = m.ProduceRequest(acks=-1, timeout_ms=5000, topic_data=[td])
        resp = await client.request(PRODUCE, 8, body, timeout=DEADLINE_S)
        p = resp.responses[0].partition_responses[0]
        return p.error_code, p.base_offset

    async def session(broker: BrokerProcess, pid: int | None) -> int:
        client = await WireClient.connect(broker.host, broker.port)
        try:
            if pid is None:
                body = m.InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=-1)
                pid = int((await client.request(22, 1, body)).producer_id)
                assert await produce(client, batch(0, 3, pid)) == (0, 0)
                assert await produce(client, batch(3, 2, pid)) == (0, 3)
                assert await produce(client, batch(3, 2, pid)) == (0, 3)  # resend
                assert (await produce(client, batch(7, 1, pid)))[0] == 45  # gap
                assert (await produce(client, batch(4, 2, pid)))[0] == 45  # overlap
                assert (await produce(client, batch(2, 1, pid)))[0] == 46  # old, not a batch
                assert await produce(client, batch(5, 1, pid)) == (0, 5)
                assert (await produce(client, batch(0, 1, pid + 1)))[0] == 0  # new producer
                # An unknown producer may start at any sequence (Kafka 3.x).
                assert await produce(client, batch(4, 1, pid + 2)) == (0, 7)
            else:
                # After a restart: the state came back from the log.
                assert await produce(client, batch(5, 1, pid)) == (0, 5)  # still a duplicate
                assert (await produce(client, batch(9, 1, pid)))[0] == 45
                assert await produce(client, batch(6, 1, pid)) == (0, 8)
                assert (await produce(client, batch(0, 1, pid, epoch=1)))[0] == 0  # new epoch
                assert (await produce(client, batch(7, 1, pid, epoch=0)))[0] == 47  # fenced
        finally:
            await client.close()
        return pid

    data = tmp_path / "data"
    broker = start_broker(data, overrides=["num.partitions=1"])
    try:
        create_topic(broker.bootstrap, "seq")
        pid = asyncio.run(session(broker, None))
    finally:
        assert broker.stop() == 0
    broker = start_broker(data)
    try:
        asyncio.run(session(broker, pid))
    finally:
        assert broker.stop() == 0
    assert log_values(broker, "seq") == [
        b"s0", b"s1", b"s2", b"s3", b"s4", b"s5", b"s0", b"s4", b"s6", b"s0"
    ]  # fmt: skip


def test_transactional_records_are_refused_and_read_committed_readers_keep_reading(
    tmp_path: Path,
) -> None:
    """Kafka refuses transactional records without a transactional id the client may Write
    (TRANSACTIONAL_ID_AUTHORIZATION_FAILED), and (KIP-890, Kafka 3.6+) records of a transaction
    the coordinator does not know to hold the partition (INVALID_PRODUCER_ID_MAPPING,
    INVALID_TXN_STATE). Written, such a
    batch would open a transaction nothing could end, and read_committed readers (librdkafka's
    default) would stop at it for good, across restarts."""
    import asyncio

    from sluice.protocol.records import build_batch, has_transactional_batch
    from tests.broker_util import WireClient

    plain = build_batch([(1000, b"k", b"plain")])
    txn = build_batch(
        [(1000, b"k", b"txn")],
        producer_id=4242,
        producer_epoch=0,
        base_sequence=0,
        is_transactional=True,
    )
    assert has_transactional_batch(plain + txn) and not has_transactional_batch(plain + plain)

    async def produce(client: WireClient, records: bytes, tid: str | None) -> tuple[int, int]:
        pd = m.ProduceRequest.PartitionProduceData(index=0, records=records)
        td = m.ProduceRequest.TopicProduceData(name="txn", partition_data=[pd])
        body = m.ProduceRequest(transactional_id=tid, acks=-1, timeout_ms=5000, topic_data=[td])
        resp = await client.request(PRODUCE, 8, body, timeout=DEADLINE_S)
        p = resp.responses[0].partition_responses[0]
        return p.error_code, p.base_offset

    async def session(broker: BrokerProcess) -> None:
        client = await WireClient.connect(broker.host, broker.port)
        try:
            assert await produce(client, txn, None) == (53, -1)  # TRANSACTIONAL_ID_AUTH...
            assert await produce(client, plain + txn, None) == (53, -1)  # any batch counts
            # a transactional id the coordinator never initialized (KIP-890's verification):
            # INVALID_PRODUCER_ID_MAPPING
            assert await produce(client, txn, "app") == (49, -1)
            assert await produce(client, plain, None) == (0, 0)  # nothing was written
        finally:
            await client.close()

    broker = start_broker(tmp_path / "data", overrides=["num.partitions=1"])
    try:
        create_topic(broker.bootstrap, "txn")
        asyncio.run(session(broker))
        consumer = Consumer(
            {
                "bootstrap.servers": broker.bootstrap,
                "group.id": "rc",
                "auto.offset.reset": "earliest",
                "isolation.level": "read_committed",
            }
        )
        try:
            consumer.assign([TopicPartition("txn", 0, 0)])
            got = None
            deadline = time.monotonic() + DEADLINE_S
            while got is None and time.monotonic() < deadline:
                msg = consumer.poll(0.5)
                if msg is not None and msg.error() is None:
                    got = msg.value()
            assert got == b"plain"
        finally:
            consumer.close()
    finally:
        assert broker.stop() == 0
    assert log_values(broker, "txn") == [b"plain"]


def test_sluice_client_idempotent_retries_after_dropped_connections_write_once(
    proxied: tuple[BrokerProcess, DroppingProxy],
) -> None:
    """Our client's Producer(enable_idempotence=True) through the same connection-cutting proxy."""
    import asyncio

    from sluice.client import Producer as SluiceProducer

    broker, proxy = proxied
    bootstrap = f"127.0.0.1:{proxy._listener.getsockname()[1]}"
    create_topic(bootstrap, "idem-ours")
    proxy.drops_left = 3
    expected = [b"ours-%04d" % i for i in range(200)]

    async def run() -> list[int]:
        async with SluiceProducer(
            bootstrap,
            enable_idempotence=True,
            batch_size=600,  # several batches, so retries meet later batches of the partition
            retry_backoff_ms=20,
            request_timeout_ms=5_000,
        ) as p:
            assert p.producer_id >= 0
            futs = [await p.send("idem-ours", v, partition=0) for v in expected]
            metas = await asyncio.wait_for(asyncio.gather(*futs), DEADLINE_S * 2)
        return [m.offset for m in metas]

    offsets = asyncio.run(run())
    assert proxy.dropped == 3
    assert log_values(broker, "idem-ours") == expected
    assert offsets == list(range(len(expected)))
