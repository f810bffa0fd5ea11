"""Run a real Sluice broker as a subprocess (``python -m sluice.server``) for lifecycle and interop
tests.

Usage::

    with running_broker(tmp_path / "data") as broker:
        client = SomeKafkaClient(bootstrap_servers=broker.bootstrap)
        ...

or ``broker = start_broker(data_dir, overrides=[...])`` ... ``broker.stop()`` (SIGTERM, waits,
returns the exit code) / ``broker.kill()`` (SIGKILL). The broker listens on a free 127.0.0.1
port, stores in ``data_dir``, writes its JSON log lines to ``broker.log_path`` (shown in the
error when it fails to start). Every wait is bounded; the process is always stopped by its PID.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

REPO = Path(__file__).resolve().parent.parent
T = TypeVar("T")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class BrokerProcess:
    proc: subprocess.Popen[bytes]
    host: str
    port: int
    data_dir: Path
    log_path: Path

    @property
    def bootstrap(self) -> str:
        """``host:port`` for a client's bootstrap servers."""
        return f"{self.host}:{self.port}"

    @property
    def pid(self) -> int:
        return self.proc.pid

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 20.0) -> int:
        """Send ``sig`` (default SIGTERM: graceful) and wait; SIGKILL if it does not exit."""
        if self.proc.poll() is None:
            os.kill(self.proc.pid, sig)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
                raise AssertionError(
                    f"broker did not stop within {timeout}s after {sig}:\n{self.log_text()}"
                ) from None
        return int(self.proc.returncode)

    def kill(self) -> int:
        """SIGKILL (kill -9): no chance to flush or write the clean-shutdown marker."""
        return self.stop(signal.SIGKILL, timeout=10.0)


def start_broker(
    data_dir: Path,
    *,
    overrides: Sequence[str] = (),
    port: int | None = None,
    timeout: float = 30.0,
    log_path: Path | None = None,
    python_args: Sequence[str] = (),
    source_tree: Path | None = None,
    command_prefix: Sequence[str] = (),
    nofile: int | None = None,
    env: Mapping[str, str] | None = None,
) -> BrokerProcess:
    """Start ``python -m sluice.server`` on 127.0.0.1 and return once it accepts TCP connections.

    ``python_args`` go before ``-m sluice.server`` (e.g. ``-m cProfile -o FILE``); ``source_tree``
    runs
    the broker from another checkout (its working directory, so ``-m sluice.server`` imports it):
    the
    benchmarks use both to profile and to A/B against another commit. ``command_prefix`` runs
    the broker under another command (e.g. ``prlimit --nofile=N``); ``nofile`` sets its open-file
    limit (``RLIMIT_NOFILE``, soft and hard) in the child before it starts; ``env`` is added to
    its environment (e.g. ``SLUICE_CRASH_AT``)."""
    data_dir.mkdir(parents=True, exist_ok=True)
    last_error: Exception | None = None
    for _attempt in range(3):  # the free port may be taken between free_port() and bind
        chosen = port if port is not None else free_port()
        path = log_path or data_dir.parent / f"broker-{data_dir.name}-{chosen}-{time.time_ns()}.log"
        args = [
            *command_prefix,
            sys.executable,
            *python_args,
            "-m",
            "sluice.server",
            "--log-format",
            "json",
            "--override",
            f"listeners=PLAINTEXT://127.0.0.1:{chosen}",
            "--override",
            f"log.dirs={data_dir}",
            *(x for o in overrides for x in ("--override", o)),
        ]
        with open(path, "ab") as out:
            proc = subprocess.Popen(
                args,
                cwd=source_tree or REPO,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                preexec_fn=None if nofile is None else _limit_nofile(nofile),
                env=None if env is None else {**os.environ, **env},
            )
        broker = BrokerProcess(proc, "127.0.0.1", chosen, data_dir, path)
        try:
            _wait_accepting(broker, timeout)
            return broker
        except _PortTaken as exc:
            last_error = exc
            broker.stop(signal.SIGKILL)
            if port is not None:
                break
    raise AssertionError(f"could not start broker: {last_error}")


def _limit_nofile(limit: int) -> Callable[[], None]:
    def limit_in_child() -> None:
        import resource

        resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))

    return limit_in_child


def wait_for(condition: Callable[[], T | None], what: str, timeout: float = 30.0) -> T:
    """Poll ``condition`` (every 50 ms, bounded by ``timeout``) until it answers something
    true; that answer."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


class _PortTaken(Exception):
    pass


def _wait_accepting(broker: BrokerProcess, timeout: float) -> None:
    """Until the broker logged that it listens and a TCP connect succeeds (bounded)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = broker.log_text()
        if broker.proc.poll() is not None:
            if "address already in use" in text.lower():
                raise _PortTaken(text[-2000:])
            raise AssertionError(
                f"broker exited with {broker.proc.returncode} before accepting:\n{text}"
            )
        if '"event": "listening"' in text:
            with (
                contextlib.suppress(OSError),
                socket.create_connection((broker.host, broker.port), timeout=1.0),
            ):
                return
        time.sleep(0.05)
    broker.stop(signal.SIGKILL)
    raise AssertionError(f"broker not accepting after {timeout}s:\n{broker.log_text()}")


@contextlib.contextmanager
def running_broker(
    data_dir: Path, *, overrides: Sequence[str] = (), timeout: float = 30.0
) -> Iterator[BrokerProcess]:
    """Context manager: start a broker, yield it, always stop it (SIGTERM, then SIGKILL)."""
    broker = start_broker(data_dir, overrides=overrides, timeout=timeout)
    try:
        yield broker
    finally:
        if broker.proc.poll() is None:
            with contextlib.suppress(AssertionError):
                broker.stop()


class WireClient:
    """A minimal Kafka wire client over asyncio streams, built on our protocol codec.

    ``await client.request(api_key, version, body)`` sends one request and returns the decoded
    response body (checking the correlation id). ``expect_response=False`` is for Produce with
    acks=0. ``send_raw``/``read_frame`` let tests speak garbage. Every read is bounded.
    """

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self._correlation = 0

    @classmethod
    async def connect(cls, host: str, port: int, timeout: float = 10.0) -> WireClient:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
        return cls(reader, writer)

    async def send(self, api_key: int, version: int, body: Any, client_id: str = "test") -> int:
        from sluice.protocol.framing import encode_request

        self._correlation += 1
        self.writer.write(encode_request(api_key, version, self._correlation, client_id, body))
        await self.writer.drain()
        return self._correlation

    async def receive(
        self, api_key: int, version: int, correlation: int, timeout: float = 30.0
    ) -> Any:
        from sluice.protocol.framing import decode_response

        frame = await self.read_frame(timeout)
        if frame is None:
            raise ConnectionError("connection closed by the broker")
        got, body = decode_response(api_key, version, frame)
        if got != correlation:
            raise AssertionError(f"correlation id {got} != {correlation}")
        return body

    async def request(self, api_key: int, version: int, body: Any, *, timeout: float = 30.0) -> Any:
        correlation = await self.send(api_key, version, body)
        return await self.receive(api_key, version, correlation, timeout)

    async def send_raw(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    async def read_frame(self, timeout: float = 30.0) -> bytes | None:
        """One response frame (without its size prefix), or None at EOF / reset."""
        try:
            head = await asyncio.wait_for(self.reader.readexactly(4), timeout)
            (size,) = struct.unpack(">i", head)
            return await asyncio.wait_for(self.reader.readexactly(size), timeout)
        except (asyncio.IncompleteReadError, ConnectionResetError):
            return None

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(OSError):
            await self.writer.wait_closed()


def read_to_end(
    config: Mapping[str, Any],
    partitions: Sequence[tuple[str, int]],
    ends: Mapping[tuple[str, int], int] | None = None,
    timeout: float = 60.0,
) -> list[Any]:
    """Every record of each ``(topic, partition)`` from offset 0 to its end, read by a fresh
    confluent-kafka consumer assigned to them (``config``: the bootstrap servers, security,
    ``isolation.level``, ...): the confluent-kafka messages in the order read.

    A partition's end is ``ends[tp]``, or by default its high watermark when the read starts
    (asked first either way, which waits out a leader election just done). The end may fall in
    a gap -- a compacted log, or read_committed's markers and aborted records --: the
    partition EOF at or past it ends that partition too. Raises ``TimeoutError`` when the ends
    are not all reached within ``timeout`` (an acknowledged record gone missing looks so)."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    consumer = Consumer({
        "group.id": f"read-to-end-{time.monotonic_ns()}", "enable.auto.commit": False,
        "log_level": 3, **config, "enable.partition.eof": True,
    })  # fmt: skip
    try:
        highs = {tp: watermark_offsets(consumer, *tp)[1] for tp in partitions}
        end = dict(highs if ends is None else ends)
        consumer.assign([TopicPartition(t, p, 0) for t, p in partitions])
        position = dict.fromkeys(partitions, 0)
        messages: list[Any] = []
        deadline = time.monotonic() + timeout
        while any(position[tp] < end[tp] for tp in partitions):
            if time.monotonic() > deadline:
                raise TimeoutError(f"read {position} of {end} in {timeout}s")
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            tp = (msg.topic(), msg.partition())
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    position[tp] = max(position[tp], msg.offset())
                continue
            messages.append(msg)
            position[tp] = msg.offset() + 1
        return messages
    finally:
        consumer.close()


def watermark_offsets(
    consumer: Any, topic: str, partition: int, timeout: float = 30.0
) -> tuple[int, int]:
    """``consumer.get_watermark_offsets`` (confluent-kafka) retried on retriable errors, bounded.

    Right after a leader election the new leader answers ListOffsets with OFFSET_NOT_AVAILABLE
    ("Leader high watermark is not caught up") until its high watermark reaches the start of its
    epoch, as Kafka's does (``Partition.fetchOffsetForTimestamp``); librdkafka passes that
    retriable error straight to the caller, so a reader started just after a failover retries.
    """
    from confluent_kafka import KafkaError, KafkaException, TopicPartition

    deadline = time.monotonic() + timeout
    while True:
        try:
            low, high = consumer.get_watermark_offsets(
                TopicPartition(topic, partition), timeout=max(0.1, deadline - time.monotonic())
            )
            return int(low), int(high)
        except KafkaException as e:
            # librdkafka does not flag OFFSET_NOT_AVAILABLE retriable (KafkaError(78).retriable()
            # is False), though Kafka's protocol lists it so: retried by its code too.
            error = e.args[0]
            again = error.retriable() or error.code() == KafkaError.OFFSET_NOT_AVAILABLE
            if not again or time.monotonic() >= deadline:
                raise
            time.sleep(0.1)
