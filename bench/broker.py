"""Broker benchmark: produce and fetch throughput of a ``python -m server`` subprocess, next to raw
loopback figures measured in the same run on the same bytes.

``python -m bench broker [--quick] [--records N] [--connections C] [--profile FILE]``

* **produce**: one RecordBatch of ``--batch-records`` 100-byte records (null keys, uncompressed)
  and one Produce v8 request carrying it (acks=1, 1 partition) are encoded ONCE with protocol/'s
  ``RecordBatchBuilder`` + ``encode_request``; the load generator then writes that same frame
  over ``C`` connections with up to ``--window`` requests in flight on each (the broker answers
  in order per connection), so the figure is the broker's, not a client's. Every response is
  decoded and must say error 0. Compared with **raw loopback**: the same frames, the same
  connections and window, written to a sink process that reads and discards them.
* **fetch**: the data just produced is read back with Fetch v11 requests, all encoded before the
  clock starts (``partition_max_bytes`` = a whole number of batches, so every response carries
  exactly ``--fetch-batches`` whole batches and the next request's offset is known in advance),
  pipelined the same way; the client only splits response frames and counts bytes; the log is
  read ``--fetch-passes`` times per timed round (longer, steadier windows). Measured once
  per ``sluice.fetch.zero.copy`` setting (true: the broker ``os.sendfile``s the log slices;
  false: it copies them through Python), restarting the broker on the same data dir between
  them. Compared with **raw sendfile**: a process ``os.sendfile``-ing a file of the same size to
  the same receiver over the same number of connections, from one thread (connections one
  after the other: the broker also makes every sendfile call from its one event-loop thread)
  and from one thread per connection (the kernel copies in parallel). Target: fetch >= 0.8 x
  raw sendfile (the one-thread figure; the ratio to the threaded one is printed too).

The client uses uvloop (if installed) and ``asyncio.Protocol`` callbacks (no stream copies). The
broker's own log lines go to a file; data lives in a temp dir that is removed at the end. This
is a 2-core machine shared with other work: figures vary run to run; the ratios are the point.
Produce runs once (it appends); fetch and the raw figures are the best of ``--rounds``. With
``--profile FILE`` / ``--profile-fetch FILE`` the broker runs under cProfile during the produce
phase / the zero-copy fetch phase, and the top functions by internal and cumulative time are
printed (cProfile slows the broker: the figures of a profiled phase are not representative).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import multiprocessing
import os
import pstats
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from protocol.framing import decode_response, encode_request
from protocol.messages import FetchRequest, ProduceRequest
from protocol.records import RecordBatchBuilder
from tests.broker_util import BrokerProcess, WireClient, _wait_accepting, free_port, start_broker

MiB = 1 << 20
RECORD_VALUE_SIZE = 100
PRODUCE_TARGET_RPS = 1_000_000
FETCH_TARGET_RATIO = 0.8
TOPIC = "bench"
PRODUCE_VERSION = 8
FETCH_VERSION = 11
_SIZE = struct.Struct(">i")


# --- pre-encoded requests ---------------------------------------------------------------------


def build_batch(records: int) -> bytes:
    """One uncompressed batch of ``records`` records: null key, 100-byte value, no headers."""
    builder = RecordBatchBuilder()
    ts = int(time.time() * 1000)
    value = bytes(range(RECORD_VALUE_SIZE))
    for _ in range(records):
        builder.append(ts, None, value)
    return builder.build()


def produce_frame(batch: bytes) -> bytes:
    body = ProduceRequest(
        transactional_id=None,
        acks=1,
        timeout_ms=30_000,
        topic_data=[
            ProduceRequest.TopicProduceData(
                name=TOPIC,
                partition_data=[ProduceRequest.PartitionProduceData(index=0, records=batch)],
            )
        ],
    )
    return encode_request(0, PRODUCE_VERSION, 1, "bench", body)


def fetch_frame(offset: int, max_bytes: int) -> bytes:
    body = FetchRequest(
        replica_id=-1,
        max_wait_ms=0,
        min_bytes=1,
        max_bytes=max_bytes,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=[
            FetchRequest.FetchTopic(
                topic=TOPIC,
                partitions=[
                    FetchRequest.FetchPartition(
                        partition=0,
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
    return encode_request(1, FETCH_VERSION, 2, "bench", body)


# --- the load generator: pipelined frames, responses split by their size prefix ---------------


class _Pipeline(asyncio.BufferedProtocol):
    """Writes ``frames`` keeping at most ``window`` unanswered; splits and counts responses.

    Reads with ``recv_into`` a preallocated buffer (BufferedProtocol: no bytes object per read),
    so the client costs little per byte. ``check`` (optional) sees each complete response frame
    (without its size prefix); only Produce uses it (small responses). Fetch responses are only
    counted.
    """

    def __init__(
        self,
        frames: Sequence[bytes],
        window: int,
        done: asyncio.Future[None],
        check: Callable[[bytes], None] | None,
    ) -> None:
        self.frames = frames
        self.window = window
        self.done = done
        self.check = check
        self.sent = 0
        self.answered = 0
        self.received_bytes = 0
        self._buf = bytearray(4 * MiB)
        self._view = memoryview(self._buf)
        self._need = 4  # bytes still missing of the current size prefix or frame
        self._in_size = True
        self._head = bytearray()
        self._body = bytearray()
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def start(self) -> None:
        while self.sent < len(self.frames) and self.sent - self.answered < self.window:
            assert self.transport is not None
            self.transport.write(self.frames[self.sent])
            self.sent += 1
        if not self.frames and not self.done.done():
            self.done.set_result(None)

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._view

    def buffer_updated(self, nbytes: int) -> None:
        self.received_bytes += nbytes
        view = self._view[:nbytes]
        while view:
            take = view[: self._need]
            view = view[len(take) :]
            self._need -= len(take)
            if self._in_size:
                self._head += take
                if self._need == 0:
                    (self._need,) = _SIZE.unpack(self._head)
                    self._head.clear()
                    self._in_size = False
            elif self.check is not None:
                self._body += take
            if not self._in_size and self._need == 0:
                if self.check is not None:
                    self.check(bytes(self._body))
                    self._body.clear()
                self._in_size, self._need = True, 4
                self.answered += 1
                if self.answered == len(self.frames):
                    if not self.done.done():
                        self.done.set_result(None)
                else:
                    self.start()

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.done.done():
            self.done.set_exception(
                ConnectionError(f"closed after {self.answered}/{len(self.frames)} responses: {exc}")
            )


async def run_pipelines(
    host: str,
    port: int,
    per_connection: Sequence[Sequence[bytes]],
    window: int,
    check: Callable[[bytes], None] | None = None,
    timeout: float = 600.0,
) -> tuple[float, int]:
    """Connect all, then start the clock and run every pipeline; (seconds, bytes received)."""
    loop = asyncio.get_running_loop()
    pipes: list[_Pipeline] = []
    transports = []
    for frames in per_connection:
        done: asyncio.Future[None] = loop.create_future()
        transport, pipe = await loop.create_connection(
            functools.partial(_Pipeline, frames, window, done, check), host, port
        )
        transports.append(transport)
        pipes.append(pipe)
    started = time.perf_counter()
    for pipe in pipes:
        pipe.start()
    try:
        await asyncio.wait_for(asyncio.gather(*(p.done for p in pipes)), timeout)
        elapsed = time.perf_counter() - started
    finally:
        for t in transports:
            t.close()
    return elapsed, sum(p.received_bytes for p in pipes)


def _check_produce(frame: bytes) -> None:
    _, body = decode_response(0, PRODUCE_VERSION, frame)
    for topic in body.responses:
        for part in topic.partition_responses:
            if part.error_code != 0:
                raise RuntimeError(f"produce error {part.error_code}")


# --- raw baselines, in helper processes ------------------------------------------------------


def _sink_process(port: int, connections: int, ready: Any, finished: Any) -> None:
    """Accept ``connections`` connections; read everything; answer nothing; set ``finished``
    when every connection reached EOF."""
    with socket.create_server(("127.0.0.1", port)) as server:
        ready.set()
        conns = [server.accept()[0] for _ in range(connections)]
        buf = bytearray(4 * MiB)
        import selectors

        sel = selectors.DefaultSelector()
        for c in conns:
            sel.register(c, selectors.EVENT_READ)
        open_count = len(conns)
        while open_count:
            for key, _ in sel.select():
                sock = key.fileobj
                assert isinstance(sock, socket.socket)
                if sock.recv_into(buf) == 0:
                    sel.unregister(sock)
                    sock.close()
                    open_count -= 1
        finished.set()


async def raw_loopback_produce(frames: Sequence[Sequence[bytes]], window: int) -> float:
    """Seconds to push the same frames through ``len(frames)`` connections to a discard sink.

    The sink sends no responses, so this pipeline is driven by write flow control alone;
    the clock stops when the sink process has read every connection to EOF.
    """
    ctx = multiprocessing.get_context("spawn")
    ready, finished = ctx.Event(), ctx.Event()
    port = free_port()
    proc = ctx.Process(target=_sink_process, args=(port, len(frames), ready, finished), daemon=True)
    proc.start()
    try:
        if not ready.wait(30):
            raise RuntimeError("sink did not start")
        loop = asyncio.get_running_loop()
        writers = []
        for _ in frames:
            _, w = await asyncio.open_connection("127.0.0.1", port)
            writers.append(w)
        started = time.perf_counter()

        async def blast(w: asyncio.StreamWriter, fs: Sequence[bytes]) -> None:
            for f in fs:
                w.write(f)
                if w.transport.get_write_buffer_size() > window * len(f):
                    await w.drain()
            await w.drain()
            w.close()
            with contextlib.suppress(OSError):
                await w.wait_closed()

        await asyncio.gather(*(blast(w, fs) for w, fs in zip(writers, frames, strict=True)))
        if not await loop.run_in_executor(None, finished.wait, 120):
            raise RuntimeError("sink did not receive everything")
        return time.perf_counter() - started
    finally:
        proc.join(10)
        if proc.is_alive():
            proc.kill()
            proc.join(5)


def _sendfile_process(
    port: int, path: str, sizes: list[int], threaded: bool, ready: Any, go: Any
) -> None:
    """Accept ``len(sizes)`` connections; on ``go``, os.sendfile ``sizes[i]`` bytes of ``path``
    on connection i, then close it: one thread per connection (``threaded``: the kernel copies
    run in parallel), or one thread doing the connections one after the other (like the
    broker, whose single event-loop thread makes every sendfile call)."""
    import threading

    with socket.create_server(("127.0.0.1", port)) as server:
        ready.set()
        conns = [server.accept()[0] for _ in sizes]
        fd = os.open(path, os.O_RDONLY)
        go.wait(60)

        def send(conn: socket.socket, size: int) -> None:
            offset = 0
            while offset < size:
                offset += os.sendfile(conn.fileno(), fd, offset, size - offset)
            conn.close()

        if threaded:
            threads = [
                threading.Thread(target=send, args=(c, s))
                for c, s in zip(conns, sizes, strict=True)
            ]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        else:
            for c, size in zip(conns, sizes, strict=True):
                send(c, size)
        os.close(fd)


class _Counter(asyncio.BufferedProtocol):
    """Counts bytes until EOF, reading into one preallocated buffer (as _Pipeline does)."""

    def __init__(self, done: asyncio.Future[None]) -> None:
        self.done = done
        self.received = 0
        self._view = memoryview(bytearray(4 * MiB))

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._view

    def buffer_updated(self, nbytes: int) -> None:
        self.received += nbytes

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.done.done():
            self.done.set_result(None)


async def raw_sendfile(path: Path, sizes: list[int], threaded: bool) -> tuple[float, int]:
    """Seconds for ``len(sizes)`` connections to receive ``sizes`` bytes sent with sendfile."""
    ctx = multiprocessing.get_context("spawn")
    ready, go = ctx.Event(), ctx.Event()
    port = free_port()
    proc = ctx.Process(
        target=_sendfile_process, args=(port, str(path), sizes, threaded, ready, go), daemon=True
    )
    proc.start()
    try:
        if not ready.wait(30):
            raise RuntimeError("sendfile process did not start")
        loop = asyncio.get_running_loop()
        counters = []
        for _ in sizes:
            done: asyncio.Future[None] = loop.create_future()
            _, counter = await loop.create_connection(
                functools.partial(_Counter, done), "127.0.0.1", port
            )
            counters.append(counter)
        await asyncio.sleep(0.05)  # let the sender accept every connection
        started = time.perf_counter()
        go.set()
        await asyncio.wait_for(asyncio.gather(*(c.done for c in counters)), 300)
        elapsed = time.perf_counter() - started
        return elapsed, sum(c.received for c in counters)
    finally:
        proc.join(10)
        if proc.is_alive():
            proc.kill()


# --- the broker ---------------------------------------------------------------------------------


def start_profiled_broker(data_dir: Path, profile: Path, overrides: Sequence[str]) -> BrokerProcess:
    """Like tests.broker_util.start_broker, under ``python -m cProfile -o profile``."""
    data_dir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    log_path = data_dir.parent / f"broker-profiled-{port}.log"
    args = [
        sys.executable, "-m", "cProfile", "-o", str(profile), "-m", "server",
        "--log-format", "json",
        "--override", f"listeners=PLAINTEXT://127.0.0.1:{port}",
        "--override", f"log.dirs={data_dir}",
        *(x for o in overrides for x in ("--override", o)),
    ]  # fmt: skip
    with open(log_path, "ab") as out:
        proc = subprocess.Popen(
            args,
            cwd=Path(__file__).resolve().parent.parent,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    broker = BrokerProcess(proc, "127.0.0.1", port, data_dir, log_path)
    _wait_accepting(broker, 30.0)
    return broker


async def create_topic(broker: BrokerProcess) -> None:
    from protocol.messages import CreateTopicsRequest

    client = await WireClient.connect(broker.host, broker.port)
    try:
        body = CreateTopicsRequest(
            topics=[
                CreateTopicsRequest.CreatableTopic(
                    name=TOPIC, num_partitions=1, replication_factor=1, assignments=[], configs=[]
                )
            ],
            timeout_ms=10_000,
            validate_only=False,
        )
        response = await client.request(19, 4, body)
        codes = [t.error_code for t in response.topics]
        if codes != [0]:
            raise RuntimeError(f"CreateTopics failed: {codes}")
    finally:
        await client.close()


# --- figures --------------------------------------------------------------------------------


@dataclass
class Figure:
    name: str
    seconds: float
    nbytes: int
    records: int | None = None

    @property
    def mb_s(self) -> float:
        return self.nbytes / MiB / self.seconds

    def line(self, reference: Figure | None = None) -> str:
        rps = f"{self.records / self.seconds:>12,.0f} rec/s" if self.records else " " * 18
        text = f"  {self.name:<34}{rps}  {self.mb_s:>9,.1f} MiB/s  ({self.seconds:.2f} s)"
        if reference is not None:
            text += f"  = {self.mb_s / reference.mb_s:.2f} x {reference.name}"
        return text


def split(items: Sequence[bytes], parts: int) -> list[list[bytes]]:
    """Round-robin ``items`` over ``parts`` lists (order within each list preserved)."""
    return [list(items[i::parts]) for i in range(parts)]


async def bench(args: argparse.Namespace, workdir: Path) -> list[str]:
    lines: list[str] = []
    batch = build_batch(args.batch_records)
    produce = produce_frame(batch)
    requests = max(1, args.records // args.batch_records)
    records = requests * args.batch_records
    conns = args.connections
    produce_frames = split([produce] * requests, conns)
    lines.append(
        f"{records:,} records of {RECORD_VALUE_SIZE} B in {requests:,} Produce v{PRODUCE_VERSION} "
        f"requests of {len(produce):,} B ({args.batch_records} records/batch), "
        f"{conns} connections x window {args.window}"
    )

    data_dir = workdir / "data"
    overrides = ["log.flush.interval.messages=9223372036854775807", *args.broker_override]
    if args.profile:
        broker = start_profiled_broker(data_dir, args.profile, overrides)
    else:
        broker = start_broker(data_dir, overrides=overrides)
    try:
        await create_topic(broker)
        seconds, _ = await run_pipelines(
            broker.host, broker.port, produce_frames, args.window, _check_produce
        )
    finally:
        broker.stop()
    wire_bytes = len(produce) * requests
    produced = Figure("broker produce (acks=1)", seconds, wire_bytes, records)
    raw_s = min(
        [await raw_loopback_produce(produce_frames, args.window) for _ in range(args.rounds)]
    )
    raw = Figure("raw loopback (same frames)", raw_s, wire_bytes, records)
    lines.append("produce:")
    lines.append(raw.line())
    lines.append(produced.line(raw))
    verdict = "meets" if records / seconds >= PRODUCE_TARGET_RPS else "BELOW"
    lines.append(f"  target >= {PRODUCE_TARGET_RPS:,} rec/s: {verdict}")
    if args.profile:
        lines.append(f"broker profile under produce load ({args.profile}):")
        lines.extend(profile_top(args.profile, 18))

    # Fetch: exactly fetch_batches whole batches per response, offsets known in advance.
    per_fetch = args.fetch_batches
    max_bytes = per_fetch * len(batch)
    fetches = [
        fetch_frame(offset, max_bytes)
        for offset in range(0, records, per_fetch * args.batch_records)
    ]
    log_files = sorted((data_dir / f"{TOPIC}-0").glob("*.log"))
    log_bytes = sum(f.stat().st_size for f in log_files)
    lines.append(
        f"fetch: {len(fetches):,} Fetch v{FETCH_VERSION} requests of {per_fetch} batches "
        f"({max_bytes:,} B) x {args.fetch_passes} passes over the log, "
        f"log {log_bytes:,} B in {len(log_files)} segment(s)"
    )
    results: list[Figure] = []
    for zero_copy in ("true", "false"):
        fetch_overrides = [*overrides, f"sluice.fetch.zero.copy={zero_copy}"]
        profile = args.profile_fetch if zero_copy == "true" else None
        if profile:
            broker = start_profiled_broker(data_dir, profile, fetch_overrides)
        else:
            broker = start_broker(data_dir, overrides=fetch_overrides)
        try:
            best_s, received = float("inf"), 0
            for _ in range(args.rounds):  # read-only: repeat, keep the best
                seconds, received = await run_pipelines(
                    broker.host, broker.port, split(fetches * args.fetch_passes, conns), args.window
                )
                best_s = min(best_s, seconds)
        finally:
            broker.stop()
        if received < log_bytes * args.fetch_passes:
            raise RuntimeError(f"fetch received {received} B < log size {log_bytes} B")
        results.append(
            Figure(
                f"broker fetch (zero.copy={zero_copy})",
                best_s,
                received,
                records * args.fetch_passes,
            )
        )
    # Raw sendfile: a file as large as what the broker sent (the log once per pass, plus the
    # bytes of the response headers), split over the same connections.
    total = results[0].nbytes
    padding = max(0, total // args.fetch_passes - log_bytes)
    blob = workdir / "blob"
    with open(blob, "wb") as f:
        for _ in range(args.fetch_passes):
            for seg in log_files:
                with open(seg, "rb") as src:
                    shutil.copyfileobj(src, f, 4 * MiB)
            f.write(b"\0" * padding)
    total = blob.stat().st_size
    sizes = [total // conns + (1 if i < total % conns else 0) for i in range(conns)]
    raws = []
    for threaded in (False, True):
        raw_seconds, raw_bytes = float("inf"), 0
        for _ in range(args.rounds):
            seconds, raw_bytes = await raw_sendfile(blob, sizes, threaded)
            raw_seconds = min(raw_seconds, seconds)
        name = f"raw sendfile ({conns} threads)" if threaded else "raw sendfile (1 thread)"
        raws.append(Figure(name, raw_seconds, raw_bytes, records * args.fetch_passes))
    raw_fetch, raw_threaded = raws
    lines.extend(r.line() for r in raws)
    for fig in results:
        lines.append(fig.line(raw_fetch) + f", {fig.mb_s / raw_threaded.mb_s:.2f} x threaded")
    best = max(results, key=lambda r: r.mb_s)
    verdict = "meets" if best.mb_s >= FETCH_TARGET_RATIO * raw_fetch.mb_s else "BELOW"
    lines.append(f"  target >= {FETCH_TARGET_RATIO} x raw sendfile: {verdict} (best: {best.name})")
    if args.profile_fetch:
        lines.append(f"broker profile under fetch load, zero.copy=true ({args.profile_fetch}):")
        lines.extend(profile_top(args.profile_fetch, 18))
    return lines


def profile_top(path: Path, count: int) -> list[str]:
    import io

    out = []
    for key in ("tottime", "cumulative"):
        buf = io.StringIO()
        stats = pstats.Stats(str(path), stream=buf)
        stats.strip_dirs().sort_stats(key).print_stats(count)
        text = buf.getvalue().splitlines()
        start = next((i for i, line in enumerate(text) if "ncalls" in line), 0)
        out.append(f"  -- by {key}:")
        out.extend("  " + line for line in text[start:] if line.strip())
    return out


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench broker", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--quick", action="store_true", help="fewer records (a few seconds)")
    parser.add_argument("--records", type=int, default=None, help="records to produce")
    parser.add_argument("--batch-records", type=int, default=1000, help="records per batch")
    parser.add_argument("--connections", type=int, default=3, help="client connections")
    parser.add_argument("--window", type=int, default=8, help="requests in flight per connection")
    parser.add_argument("--fetch-batches", type=int, default=8, help="batches per Fetch response")
    parser.add_argument(
        "--fetch-passes", type=int, default=None, help="times the log is read per round"
    )
    parser.add_argument("--dir", type=Path, default=None, help="work directory (default: temp)")
    parser.add_argument(
        "--profile", type=Path, default=None, help="cProfile the broker during produce"
    )
    parser.add_argument(
        "--profile-fetch", type=Path, default=None, help="cProfile the zero-copy fetch broker"
    )
    parser.add_argument("--rounds", type=int, default=3, help="fetch/raw rounds (best is kept)")
    parser.add_argument(
        "--broker-override",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra broker --override (repeatable), e.g. socket.send.buffer.bytes=4194304",
    )
    args = parser.parse_args(argv)
    if args.records is None:
        args.records = 500_000 if args.quick else 3_000_000
    if args.fetch_passes is None:
        args.fetch_passes = 1 if args.quick else 3
    with contextlib.suppress(ImportError):
        import uvloop

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    if args.dir is not None:
        args.dir.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix="sluice-bench-broker-", dir=args.dir))
    started = time.perf_counter()
    print(f"broker benchmark in {workdir} (page cache, no fsync)", flush=True)
    try:
        for line in asyncio.run(bench(args, workdir)):
            print(line, flush=True)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print(f"total {time.perf_counter() - started:.1f} s")
    return 0


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.default_int_handler)
    sys.exit(main(sys.argv[1:]))
