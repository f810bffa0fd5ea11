"""Broker benchmark: produce and fetch throughput of a ``python -m sluice.server`` subprocess, next
to raw
loopback figures measured in the same run on the same bytes.

``python -m bench broker [--quick] [--records N] [--connections C] [--fetch-batches N]
[--rounds N] [--profile FILE] [--profile-fetch FILE] [--compare-tree DIR]``

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
  read ``--fetch-passes`` times per timed round (default 10: rounds of a second or more).
  One broker per ``sluice.fetch.zero.copy`` setting (true: the broker ``os.sendfile``s the log
  slices; false: it copies them through Python), plus one run from ``--compare-tree DIR`` (a
  checkout to A/B against), each on its own copy of the data dir, all running at once. Compared
  with **raw sendfile**: a process ``os.sendfile``-ing a file as large as what the broker sent
  to the same receiver over the same connections, like-for-like with the broker: one call per
  response-sized piece (as many bytes per call as the broker's), TCP_NODELAY (uvloop sets it)
  and the broker's ``socket.send.buffer.bytes`` (default: autotuned on both), from one thread
  taking the connections in turn (the broker makes every sendfile call from its one event-loop
  thread), and from one thread per connection (the kernel copies in parallel). Target: fetch
  >= 0.8 x raw sendfile (the one-thread figure; the ratio to the threaded one is printed too).
* **interleaved rounds**: each round measures every broker and both raw figures back to back,
  so the neighbours' load spreads over all of them; the best round of each is reported, plus
  the range of the per-round ratios. Each round also records CPU seconds per GiB sent: the
  sender's (the broker's threads from ``/proc/PID/task/*/schedstat``, the raw sender's
  ``getrusage``) and the receiving client's. CPU per byte is much steadier than wall time on a
  shared machine, and says which side is the bottleneck.

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
import statistics
import struct
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sluice.protocol.framing import decode_response, encode_request
from sluice.protocol.messages import FetchRequest, ProduceRequest
from sluice.protocol.records import RecordBatchBuilder
from tests.broker_util import BrokerProcess, WireClient, free_port, start_broker

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
    port: int,
    path: str,
    plan: list[list[int]],
    threaded: bool,
    sndbuf: int,
    ready: Any,
    go: Any,
    cpu: Any,
) -> None:
    """Accept ``len(plan)`` connections; on ``go``, send ``path`` over them with one
    ``os.sendfile`` call per entry of ``plan[i]`` (the sizes of the broker's responses, so every
    call moves as many bytes as one of the broker's), then close them.

    Like-for-like with the broker: TCP_NODELAY (uvloop sets it on every TCP transport), the
    broker's SO_SNDBUF (``sndbuf`` > 0) or the kernel's autotuning, and blocking sockets (the
    cheapest way to wait for buffer space: no epoll). ``threaded``: one thread per connection
    (the kernel copies run in parallel); otherwise one thread taking the connections in turn,
    one response-sized call each (the broker also makes every sendfile call from its one
    event-loop thread and answers its connections interleaved). ``cpu.value``: the CPU seconds
    (user + system, all threads) the sending took."""
    import resource
    import threading

    def cpu_seconds() -> float:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return usage.ru_utime + usage.ru_stime

    with socket.create_server(("127.0.0.1", port)) as server:
        ready.set()
        conns = [server.accept()[0] for _ in plan]
        for conn in conns:
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if sndbuf > 0:
                conn.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, sndbuf)
        fd = os.open(path, os.O_RDONLY)
        starts = [sum(sum(sizes) for sizes in plan[:i]) for i in range(len(plan))]
        go.wait(60)
        cpu_before = cpu_seconds()

        def send_one(conn: socket.socket, offset: int, size: int) -> None:
            end = offset + size
            while offset < end:
                offset += os.sendfile(conn.fileno(), fd, offset, end - offset)

        def send_all(conn: socket.socket, offset: int, sizes: list[int]) -> None:
            for size in sizes:
                send_one(conn, offset, size)
                offset += size
            conn.close()

        if threaded:
            threads = [
                threading.Thread(target=send_all, args=(c, o, s))
                for c, o, s in zip(conns, starts, plan, strict=True)
            ]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        else:
            offsets = list(starts)
            for turn in range(max(len(sizes) for sizes in plan)):
                for i, sizes in enumerate(plan):
                    if turn < len(sizes):
                        send_one(conns[i], offsets[i], sizes[turn])
                        offsets[i] += sizes[turn]
            for conn in conns:
                conn.close()
        cpu.value = cpu_seconds() - cpu_before
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


async def raw_sendfile(
    path: Path, plan: list[list[int]], threaded: bool, sndbuf: int
) -> tuple[float, int, float, float]:
    """(seconds, bytes, sender CPU seconds, receiver CPU seconds) for ``len(plan)`` connections
    to receive
    ``sum(plan[i])`` bytes each, sent with one sendfile call per ``plan[i]`` entry (see
    :func:`_sendfile_process`)."""
    ctx = multiprocessing.get_context("spawn")
    ready, go = ctx.Event(), ctx.Event()
    cpu = ctx.Value("d", 0.0)
    port = free_port()
    proc = ctx.Process(
        target=_sendfile_process,
        args=(port, str(path), plan, threaded, sndbuf, ready, go, cpu),
        daemon=True,
    )
    proc.start()
    try:
        if not ready.wait(30):
            raise RuntimeError("sendfile process did not start")
        loop = asyncio.get_running_loop()
        counters = []
        for _ in plan:
            done: asyncio.Future[None] = loop.create_future()
            _, counter = await loop.create_connection(
                functools.partial(_Counter, done), "127.0.0.1", port
            )
            counters.append(counter)
        await asyncio.sleep(0.05)  # let the sender accept every connection
        started, receiver_cpu = time.perf_counter(), time.process_time()
        go.set()
        await asyncio.wait_for(asyncio.gather(*(c.done for c in counters)), 300)
        elapsed = time.perf_counter() - started
        receiver_cpu = time.process_time() - receiver_cpu
        proc.join(10)
        return elapsed, sum(c.received for c in counters), float(cpu.value), receiver_cpu
    finally:
        proc.join(10)
        if proc.is_alive():
            proc.kill()


def process_cpu_seconds(pid: int) -> float:
    """On-CPU time of every live thread of ``pid`` (``/proc/PID/task/*/schedstat``, ns
    precision; user + system, including the loopback softirq work done in its context)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):
            total += int((task / "schedstat").read_text().split()[0])
    return total / 1e9


# --- the broker ---------------------------------------------------------------------------------


def start_bench_broker(
    data_dir: Path,
    overrides: Sequence[str],
    profile: Path | None = None,
    tree: Path | None = None,
) -> BrokerProcess:
    """tests.broker_util.start_broker, optionally under ``python -m cProfile -o profile`` and/or
    from another source tree (``tree``: e.g. a checkout of the commit to compare with)."""
    return start_broker(
        data_dir,
        overrides=overrides,
        python_args=("-m", "cProfile", "-o", str(profile)) if profile else (),
        source_tree=tree,
    )


async def create_topic(broker: BrokerProcess) -> None:
    from sluice.protocol.messages import CreateTopicsRequest

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


BATCH_WRITE = 110_000  # bytes per write() when copying logs: one default bench batch


def copy_in_batch_writes(src: str, dst: str) -> str:
    """``shutil.copytree``'s copy function: plain batch-sized writes (not copy_file_range or
    sendfile), so the copy's page cache looks like a log the broker appended to."""
    with open(src, "rb") as fin, open(dst, "wb") as fout:
        shutil.copyfileobj(fin, fout, BATCH_WRITE)
    shutil.copystat(src, dst)
    return dst


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
    broker = start_bench_broker(data_dir, overrides, args.profile)
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
    # One broker per variant, each on its own copy of the data (one broker per log dir), all
    # running at once so that every round measures each variant and the raw baselines back to
    # back: the machine is shared, and interleaving spreads its noise over all of them.
    variants = [("true", None), ("false", None)]
    if args.compare_tree is not None:
        variants.append(("true", args.compare_tree))
    brokers: list[tuple[str, BrokerProcess]] = []
    sndbuf = next(
        (int(o.split("=", 1)[1]) for o in overrides if o.startswith("socket.send.buffer.bytes=")),
        -1,
    )
    frames = split(fetches * args.fetch_passes, conns)
    try:
        for i, (zero_copy, tree) in enumerate(variants):
            # Every broker reads its own copy, written in batch-sized writes like the log and
            # the raw blob: the page cache's folio sizes follow the write sizes, sendfile costs
            # less from larger folios, and a fixed advantage of one copy (~10% CPU in an A/A
            # run of two identical brokers) would pass for a difference between variants.
            vdir = workdir / f"data-{i}"
            shutil.copytree(data_dir, vdir, copy_function=copy_in_batch_writes)
            profile = args.profile_fetch if i == 0 else None
            name = f"broker fetch (zero.copy={zero_copy}{', ' + tree.name if tree else ''})"
            fetch_overrides = [*overrides, f"sluice.fetch.zero.copy={zero_copy}"]
            brokers.append((name, start_bench_broker(vdir, fetch_overrides, profile, tree)))
        # Untimed warm-up of every broker; gives the bytes on the wire (records + headers).
        received = 0
        for _, broker in brokers:
            _, received = await run_pipelines(broker.host, broker.port, frames, args.window)
            if received < log_bytes * args.fetch_passes:
                raise RuntimeError(f"fetch received {received} B < log size {log_bytes} B")
        # Raw sendfile: a file as large as what the broker sent (the log once per pass, plus the
        # response headers' bytes), sent in calls as large as the broker's responses; written
        # in batch-sized writes like the brokers' copies of the log.
        padding = max(0, received // args.fetch_passes - log_bytes)
        blob = workdir / "blob"
        with open(blob, "wb") as f:
            for _ in range(args.fetch_passes):
                for seg in log_files:
                    with open(seg, "rb") as src:
                        shutil.copyfileobj(src, f, BATCH_WRITE)
                f.write(b"\0" * padding)
        total = blob.stat().st_size
        response_size = total // (len(fetches) * args.fetch_passes)
        plan = []
        for c in range(conns):
            share = total // conns + (1 if c < total % conns else 0)
            sizes = [response_size] * (share // response_size)
            plan.append(sizes + ([share % response_size] if share % response_size else []))
        names = [name for name, _ in brokers] + [
            "raw sendfile (1 thread)",
            f"raw sendfile ({conns} threads)",
        ]
        timings: dict[str, list[float]] = {name: [] for name in names}
        cpu: dict[str, list[float]] = {name: [] for name in names}
        rcpu: dict[str, list[float]] = {name: [] for name in names}  # the receiving client's
        nbytes: dict[str, int] = {}
        by_name = dict(brokers)
        for round_no in range(args.rounds):
            # Each round starts one step further down the list: a fixed order put the same
            # figure right after the raw sender's process start every time (two identical
            # brokers differed by ~15% in client CPU that way).
            order = names[round_no % len(names) :] + names[: round_no % len(names)]
            for name in order:
                if name in by_name:
                    broker = by_name[name]
                    cpu_before = process_cpu_seconds(broker.proc.pid)
                    rcpu_before = time.process_time()
                    s, nbytes[name] = await run_pipelines(
                        broker.host, broker.port, frames, args.window
                    )
                    rcpu[name].append(time.process_time() - rcpu_before)
                    cpu[name].append(process_cpu_seconds(broker.proc.pid) - cpu_before)
                else:
                    threaded = name == names[-1]
                    s, nbytes[name], used, received_cpu = await raw_sendfile(
                        blob, plan, threaded, sndbuf
                    )
                    cpu[name].append(used)
                    rcpu[name].append(received_cpu)
                timings[name].append(s)
    finally:
        for _, broker in brokers:
            broker.stop()
    figs = {n: Figure(n, min(timings[n]), nbytes[n], records * args.fetch_passes) for n in names}
    raw_fetch, raw_threaded = figs[names[-2]], figs[names[-1]]
    lines.append(
        f"  best of {args.rounds} interleaved rounds; raw: one sendfile call per "
        f"{response_size:,} B (the broker's response size), sndbuf "
        f"{'autotuned' if sndbuf <= 0 else sndbuf}"
    )
    lines.extend(figs[n].line() for n in names[-2:])
    for name, _ in brokers:
        fig = figs[name]
        per_round = [r / b for b, r in zip(timings[name], timings[names[-2]], strict=True)]
        lines.append(
            fig.line(raw_fetch)
            + f", {fig.mb_s / raw_threaded.mb_s:.2f} x threaded;"
            + f" per round {min(per_round):.2f}-{max(per_round):.2f}"
        )
    # CPU per byte is much steadier than wall time on a shared machine: the sender's CPU is
    # what a busy broker runs out of (its one thread makes every sendfile call).
    lines.append(
        "  CPU per GiB, median of rounds: sender (raw / broker = its CPU-efficiency ratio);"
        " receiving client"
    )
    raw_cpu = statistics.median(cpu[names[-2]]) / (nbytes[names[-2]] / (1 << 30))
    for name in names:
        gib = nbytes[name] / (1 << 30)
        per_gib = statistics.median(cpu[name]) / gib
        recv = statistics.median(rcpu[name]) / gib
        ratio = f" = {raw_cpu / per_gib:.2f} x raw" if name in dict(brokers) else " " * 11
        lines.append(
            f"    {name:<40}{per_gib * 1000:5.0f} ms/GiB{ratio};  client {recv * 1000:4.0f} ms/GiB"
        )
    best = max((figs[name] for name, _ in brokers), key=lambda r: r.mb_s)
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
        "--compare-tree",
        type=Path,
        default=None,
        help="also measure a zero-copy broker run from this source tree (A/B against a checkout)",
    )
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
        # Rounds of a second or more (a few tenths with --quick): shorter ones measured mostly
        # start-up and the neighbours' noise.
        args.fetch_passes = 10
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
