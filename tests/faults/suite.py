"""Faults and hostile input on one broker process, with figures (issue 13).

Four parts, each against a real ``python -m sluice.server`` subprocess (:mod:`tests.broker_util`)
on 127.0.0.1, every wait bounded, every process stopped by its PID:

* **kill -9** (:func:`kill_trial`): a confluent-kafka producer (``acks=all``,
  ``enable.idempotence=false`` and ``retries=0``, so the client never sends a record twice: any
  duplicate is the broker's) writes unique values to 3 partitions as fast as it can; after a
  random 0.3-1.5 s the broker is killed with SIGKILL -- or later, once what the scenario is about
  is under way on disk (:data:`UNDER_WAY`; a loaded machine writes less in 1.5 s, and a kill
  before the first roll or deletion tested nothing of them). Three scenarios rotate: ``produce``
  (default segments), ``roll`` (32 KiB segments: a roll every few hundred records) and
  ``retention`` (16 KiB segments, ``log.retention.bytes`` of two, checked every 100 ms and
  deleted at once, so segments are being deleted when the kill lands). The broker is
  restarted on the same data dir (retention off: :data:`RESTART_OVERRIDES`) and every
  partition is read from its log start to its high watermark with a confluent-kafka consumer;
  :func:`tests.jepsen.checker.check` judges the history (acknowledged records below the log
  start, in the retention scenario, were deleted by retention, and are counted apart). Then
  SIGTERM (exit status 0 expected) and ``sluice dump-log --verify``'s checks
  (:func:`sluice.server.storage.dump_log.verify_partition`) on every partition: CRCs, offsets,
  indexes, leader epochs.
* **disk full** (:func:`disk_full`): the broker's data dir on an 8 MiB tmpfs (root only; skipped
  with the reason otherwise) filled to 1 MiB; the producer runs into ``KAFKA_STORAGE_ERROR``,
  the ballast goes, appends resume, the disk is filled again and the broker gets SIGTERM on the
  full disk; the restart must be clean and hold everything acknowledged.
* **fuzz** (:func:`fuzz`): the protocol fuzzer's frames (``tests/protocol/test_protocol_fuzz.py``:
  one valid random request per API and version, then bit flips, byte changes, truncations, wrong
  size prefixes and random bytes) sent over many connections; the broker must stay up, log no
  traceback and still answer.
* **connections** (:func:`connections`): N connections each make an ApiVersions request and stay
  open; the broker's RSS before, with them open, and after they close.

:func:`kill_figures` aggregates the trials; ``python -m tests.faults`` prints the table.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import resource
import shutil
import signal
import struct
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.broker_util import BrokerProcess, WireClient, start_broker, watermark_offsets
from tests.jepsen.checker import Observation, Send, check

PARTITIONS = 3
TOPIC = "faults"
SCENARIOS: dict[str, tuple[str, ...]] = {
    "produce": (),
    "roll": ("log.segment.bytes=32768",),
    "retention": (
        "log.segment.bytes=16384",
        "log.retention.bytes=32768",
        "log.retention.check.interval.ms=100",
        "log.segment.delete.delay.ms=0",
    ),
}


def _written(data: Path) -> bool:
    return any(os.path.getsize(p) > 0 for p in data.glob(f"{TOPIC}-*/*.log") if p.exists())


def _rolled(data: Path) -> bool:
    return any(len(list(d.glob("*.log"))) > 1 for d in data.glob(f"{TOPIC}-*"))


def _deleted_by_retention(data: Path) -> bool:
    """A partition's first segment is gone (``log.segment.delete.delay.ms=0``: at once)."""
    first = "00000000000000000000.log"
    return any(d.is_dir() and not (d / first).exists() for d in data.glob(f"{TOPIC}-*"))


#: Per scenario, what must have happened on disk before the kill (the data dir's files, read
#: while the broker runs): records written, a segment rolled, a segment deleted by retention.
UNDER_WAY: dict[str, Callable[[Path], bool]] = {
    "produce": _written,
    "roll": _rolled,
    "retention": _deleted_by_retention,
}
#: How long the producer may take to bring that about (a loaded machine is slow, not stuck).
UNDER_WAY_TIMEOUT = 60.0

#: The restart reads back with retention off: what it would delete now is not what the kill
#: did, and a segment deleted under the reader would only make the read race retention.
RESTART_OVERRIDES = ("log.retention.bytes=-1",)
VALUE_PAD = 100  # bytes of padding per value: a 32 KiB segment holds ~250 records


def rss_kb(pid: int) -> int:
    """Resident set size of ``pid`` in KiB (0 if it is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def tracebacks(broker: BrokerProcess) -> int:
    """Tracebacks and worker failures in the broker's log (JSON lines carry an ``exception``)."""
    text = broker.log_text()
    return text.count("Traceback") + text.count('"exception"')


def corrupt(data_dir: Path) -> list[str]:
    """What ``sluice dump-log --verify DATA_DIR`` reports (its checks, called in-process)."""
    from sluice.server.storage.dump_log import partition_dirs, verify_partition

    problems: list[str] = []
    for directory in partition_dirs(data_dir):
        problems += verify_partition(directory)
    return problems


def producer_config(bootstrap: str) -> dict[str, Any]:
    return {
        "bootstrap.servers": bootstrap,
        "acks": "all",
        "enable.idempotence": False,
        "retries": 0,  # never sent twice by the client: a duplicate would be the broker's
        "linger.ms": 5,
        # A short local queue: what the kill catches in flight is what is worth counting.
        "queue.buffering.max.messages": 20_000,
        "message.timeout.ms": 3_000,
        "request.timeout.ms": 2_500,
        "socket.connection.setup.timeout.ms": 2_000,
        "reconnect.backoff.max.ms": 200,
        "log_level": 0,  # the faults make librdkafka complain; the figures say what happened
    }


def create_topic(bootstrap: str, name: str = TOPIC, partitions: int = PARTITIONS) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(30)


def read_all(
    bootstrap: str, topic: str = TOPIC, timeout: float = 60.0
) -> tuple[list[Observation], dict[int, int]]:
    """Every record of every partition from its log start to its high watermark, and the log
    start offsets."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "faults-reader",
            "enable.auto.commit": False,
            "auto.offset.reset": "error",  # a reset would skip records silently
            "log_level": 0,
        }
    )
    try:
        marks = {p: watermark_offsets(consumer, topic, p) for p in range(PARTITIONS)}
        low = {p: lo for p, (lo, _) in marks.items()}
        consumer.assign([TopicPartition(topic, p, low[p]) for p in range(PARTITIONS)])
        position = dict(low)
        observations: list[Observation] = []
        deadline = time.monotonic() + timeout
        while any(position[p] < marks[p][1] for p in position):
            if time.monotonic() > deadline:
                raise TimeoutError(f"read {position} of {marks} in {timeout}s")
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                raise RuntimeError(f"reading partition {msg.partition()}: {msg.error()}")
            observations.append(Observation(msg.partition(), msg.offset(), msg.value().decode()))
            position[msg.partition()] = msg.offset() + 1
        return observations, low
    finally:
        consumer.close()


# ------------------------------------------------------------------------------------- kill -9


@dataclass
class KillTrial:
    trial: int
    scenario: str
    killed_after_s: float = 0.0
    acknowledged: int = 0
    deleted_by_retention: int = 0
    unknown: int = 0
    recovered: int = 0  # of the unknown: in the log after all (written, the ack lost in the kill)
    read: int = 0
    lost: int = 0
    duplicated: int = 0
    inconsistent: int = 0
    corrupt: list[str] = field(default_factory=list)
    start_failure: str = ""
    read_error: str = ""
    stop_status: int | None = None
    tracebacks: int = 0
    rss_kb: int = 0
    segments: int = 0

    @property
    def valid(self) -> bool:
        return not (
            self.lost or self.duplicated or self.inconsistent or self.corrupt
            or self.start_failure or self.read_error or self.stop_status or self.tracebacks
        )  # fmt: skip


def _produce_until_killed(
    broker: BrokerProcess, trial: int, kill_after: float, under_way: Callable[[], bool]
) -> tuple[list[Send], float]:
    """Produce unique values until the broker is SIGKILLed ``kill_after`` s in, or later once
    ``under_way()`` holds (bounded by :data:`UNDER_WAY_TIMEOUT`), by a thread of its own so
    the kill lands wherever the broker is; then collect every outcome. Returns the outcomes
    and the seconds from the first send to the kill."""
    from confluent_kafka import KafkaError, Producer

    outcomes: dict[str, Send] = {}

    def delivered(err: KafkaError | None, msg: Any) -> None:
        value = msg.value().decode()
        if err is None:
            outcomes[value] = Send(value, "ok", msg.partition(), msg.offset())
        else:  # a transport error or timeout: written or not, nobody knows
            outcomes[value] = Send(value, "unknown")

    producer = Producer(producer_config(broker.bootstrap))
    killed = threading.Event()
    started = time.monotonic()
    cancelled = threading.Event()
    killed_at: list[float] = []

    def kill() -> None:
        # Polls the data dir: the condition is the broker's files, not a message to wait on.
        if cancelled.wait(kill_after):
            return
        deadline = time.monotonic() + UNDER_WAY_TIMEOUT
        while not under_way() and time.monotonic() < deadline:
            if cancelled.wait(0.02):
                return
        with contextlib.suppress(ProcessLookupError):
            os.kill(broker.pid, signal.SIGKILL)
        killed_at.append(time.monotonic() - started)
        killed.set()

    timer = threading.Thread(target=kill, name="killer", daemon=True)
    timer.start()
    sent: list[str] = []
    pad = "x" * VALUE_PAD
    try:
        i = 0
        while not killed.is_set():
            value = f"{trial}-{i}-{pad}"
            try:
                producer.produce(TOPIC, value.encode(), partition=i % PARTITIONS,
                                 on_delivery=delivered)  # fmt: skip
            except BufferError:
                producer.poll(0.01)
                continue
            sent.append(value)
            i += 1
            if i % 100 == 0:
                producer.poll(0)
        producer.flush(15)  # message.timeout.ms bounds each send
    finally:
        cancelled.set()
        timer.join(10)
        broker.proc.wait(10)
    return [outcomes.get(v, Send(v, "unknown")) for v in sent], killed_at[0] if killed_at else 0.0


def kill_trial(work: Path, trial: int, scenario: str, rnd: random.Random) -> KillTrial:
    """One kill -9 trial (module docstring) in a fresh data dir under ``work``."""
    result = KillTrial(trial, scenario)
    data = work / f"kill-{trial}"
    overrides = SCENARIOS[scenario]
    broker = start_broker(data, overrides=overrides)
    try:
        create_topic(broker.bootstrap)
        result.killed_after_s = round(rnd.uniform(0.3, 1.5), 2)
        under_way = UNDER_WAY[scenario]
        history, killed_after = _produce_until_killed(
            broker, trial, result.killed_after_s, lambda: under_way(data)
        )
        result.killed_after_s = round(killed_after, 2)
    finally:
        if broker.proc.poll() is None:
            broker.kill()
    try:
        broker = start_broker(data, overrides=(*overrides, *RESTART_OVERRIDES))
    except AssertionError as exc:
        result.start_failure = str(exc)[-2000:]
        return result
    try:
        observations, low = read_all(broker.bootstrap)
        result.rss_kb = rss_kb(broker.pid)
    except Exception as exc:  # the read failed: the trial's evidence, not the suite's end
        result.read_error = f"{type(exc).__name__}: {exc}"
        return result
    finally:
        result.stop_status = broker.stop()
    result.tracebacks = tracebacks(broker)
    kept = [
        s for s in history
        if not (s.outcome == "ok" and s.offset is not None and s.offset < low[s.partition or 0])
    ]  # fmt: skip
    result.deleted_by_retention = len(history) - len(kept)
    report = check(kept, [observations])
    result.acknowledged = report.acknowledged + result.deleted_by_retention
    result.unknown = report.unknown
    result.recovered = len(report.recovered)
    result.read = report.read
    result.lost = len(report.lost)
    result.duplicated = len(report.duplicate)
    result.inconsistent = len(report.inconsistent_offsets) + len(report.nonmonotonic)
    result.corrupt = corrupt(data)
    result.segments = sum(1 for _ in data.glob(f"{TOPIC}-*/*.log"))
    shutil.rmtree(data, ignore_errors=True)
    return result


def kill_figures(results: list[KillTrial]) -> dict[str, Any]:
    return {
        "trials": len(results),
        "acknowledged": sum(r.acknowledged for r in results),
        "deleted_by_retention": sum(r.deleted_by_retention for r in results),
        "unknown_outcome": sum(r.unknown for r in results),
        "unknown_but_written": sum(r.recovered for r in results),
        "lost": sum(r.lost for r in results),
        "duplicated": sum(r.duplicated for r in results),
        "inconsistent": sum(r.inconsistent for r in results),
        "corrupt": sum(len(r.corrupt) for r in results),
        "start_failures": sum(1 for r in results if r.start_failure),
        "read_failures": sum(1 for r in results if r.read_error),
        "unclean_stops": sum(1 for r in results if r.stop_status),
        "tracebacks": sum(r.tracebacks for r in results),
        "max_rss_mb": round(max((r.rss_kb for r in results), default=0) / 1024, 1),
    }


# ----------------------------------------------------------------------------------- disk full

TMPFS_SIZE = 8 << 20
TMPFS_LEFT = 1 << 20


@contextlib.contextmanager
def small_tmpfs(work: Path) -> Iterator[Path | str]:
    """A mounted 8 MiB tmpfs, or the reason there is none (not root, mount refused)."""
    if os.geteuid() != 0:
        yield "mounting a small tmpfs needs root"
        return
    mount = work / "tmpfs"
    mount.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={TMPFS_SIZE}", "tmpfs", str(mount)],
        capture_output=True,
        check=False,
    )
    if done.returncode != 0:
        yield f"cannot mount a tmpfs here: {done.stderr.decode().strip()}"
        return
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def fill(mount: Path, leave: int) -> Path:
    """A ballast file leaving about ``leave`` bytes free on ``mount``."""
    ballast = mount / "ballast"
    st = os.statvfs(mount)
    with open(ballast, "ab") as f:
        f.write(b"\0" * max(st.f_bavail * st.f_frsize - leave, 0))
    return ballast


def _produce_batch(bootstrap: str, values: list[str], errors: dict[str, int]) -> list[Send]:
    from confluent_kafka import KafkaError, Producer

    outcomes: dict[str, Send] = {}

    def delivered(err: KafkaError | None, msg: Any) -> None:
        value = msg.value().decode()
        if err is None:
            outcomes[value] = Send(value, "ok", msg.partition(), msg.offset())
        else:
            errors[err.name()] = errors.get(err.name(), 0) + 1
            outcomes[value] = Send(value, "unknown")

    producer = Producer(producer_config(bootstrap))
    for i, value in enumerate(values):
        producer.produce(TOPIC, value.encode(), partition=i % PARTITIONS, on_delivery=delivered)
        producer.poll(0)
    producer.flush(30)
    return [outcomes.get(v, Send(v, "unknown")) for v in values]


def disk_full(work: Path) -> dict[str, Any]:
    """The disk-full run (module docstring); ``{"skipped": reason}`` without a tmpfs."""
    with small_tmpfs(work) as mount:
        if isinstance(mount, str):
            return {"skipped": mount}
        data = mount / "data"
        overrides = ("log.segment.bytes=262144", "log.segment.delete.delay.ms=0")
        broker = start_broker(data, overrides=overrides, log_path=work / "disk-full.log")
        figures: dict[str, Any] = {}
        errors: dict[str, int] = {}
        history: list[Send] = []
        pad = "y" * 1000
        try:
            create_topic(broker.bootstrap)
            ballast = fill(mount, TMPFS_LEFT)
            batch = 0
            while errors.get("KAFKA_STORAGE_ERROR", 0) < 50 and batch < 40:
                values = [f"full-{batch}-{i}-{pad}" for i in range(200)]
                history += _produce_batch(broker.bootstrap, values, errors)
                batch += 1
            figures["storage_errors"] = dict(errors)
            ballast.unlink()
            resumed = _produce_batch(
                broker.bootstrap, [f"again-{i}-{pad}" for i in range(300)], errors
            )
            figures["acknowledged_after_space_returned"] = sum(
                1 for s in resumed if s.outcome == "ok"
            )
            history += resumed
            fill(mount, 64 << 10)
            history += _produce_batch(
                broker.bootstrap, [f"refull-{i}-{pad}" for i in range(200)], errors
            )
        finally:
            figures["sigterm_on_full_disk_status"] = broker.stop()
        figures["tracebacks"] = tracebacks(broker)
        with contextlib.suppress(FileNotFoundError):
            (mount / "ballast").unlink()
        try:
            broker = start_broker(data, overrides=overrides)
        except AssertionError as exc:
            figures["start_failure"] = str(exc)[-2000:]
            return figures
        try:
            observations, _ = read_all(broker.bootstrap)
            figures["rss_mb"] = round(rss_kb(broker.pid) / 1024, 1)
        finally:
            figures["restart_stop_status"] = broker.stop()
        report = check(history, [observations])
        figures |= {
            "acknowledged": report.acknowledged,
            "lost": len(report.lost),
            "duplicated": len(report.duplicate),
            "inconsistent": len(report.inconsistent_offsets) + len(report.nonmonotonic),
            "corrupt": len(corrupt(data)),
            "log_lines_storage_failing": broker.log_text().count("appends failing")
            + _log_count(work / "disk-full.log", "appends failing"),
        }
        return figures


def _log_count(path: Path, needle: str) -> int:
    try:
        return path.read_text(errors="replace").count(needle)
    except OSError:
        return 0


# ---------------------------------------------------------------------------------------- fuzz


def fuzz_frames(count: int, seed: int) -> Iterator[bytes]:
    """``count`` hostile frames (size prefix included), from the protocol fuzzer's valid
    requests: bit flips and byte changes, truncations, a wrong size prefix, random bytes."""
    from tests.protocol.test_protocol_fuzz import _valid_request_frames

    rnd = random.Random(seed)
    valid = _valid_request_frames(seed)
    for _ in range(count):
        frame = bytearray(rnd.choice(valid))
        kind = rnd.random()
        if kind < 0.6:
            for _ in range(rnd.randint(1, 4)):
                pos = rnd.randrange(len(frame))
                if rnd.random() < 0.5:
                    frame[pos] ^= 1 << rnd.randrange(8)
                else:
                    frame[pos] = rnd.choice([0x00, 0x7F, 0x80, 0xFF, rnd.randrange(256)])
            yield struct.pack(">i", len(frame)) + bytes(frame)
        elif kind < 0.8:
            cut = rnd.randrange(len(frame))
            yield struct.pack(">i", cut) + bytes(frame[:cut])
        elif kind < 0.9:
            size = rnd.choice([-1, 0, 1, len(frame) + rnd.randint(1, 64), 2**31 - 1])
            yield struct.pack(">i", size) + bytes(frame)
        else:
            yield rnd.randbytes(rnd.randint(1, 64))


#: Frames sent on one connection before reading its answers: the first frame the broker cannot
#: parse closes the connection, so the later ones are not read; few per connection keeps most
#: frames read.
FRAMES_PER_CONNECTION = 4


async def _fuzz_connections(port: int, frames: Iterator[bytes], workers: int) -> dict[str, int]:
    stats = {"frames": 0, "connections": 0, "closed_by_broker": 0, "idle_timeouts": 0}

    async def worker() -> None:
        while True:
            batch = [f for _, f in zip(range(FRAMES_PER_CONNECTION), frames, strict=False)]
            if not batch:
                return
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            stats["connections"] += 1
            try:
                for frame in batch:
                    writer.write(frame)
                    stats["frames"] += 1
                with contextlib.suppress(OSError):
                    await writer.drain()
                while True:  # drain answers until the broker closes or goes quiet
                    try:
                        chunk = await asyncio.wait_for(reader.read(65536), 0.3)
                    except TimeoutError:
                        stats["idle_timeouts"] += 1
                        break
                    except OSError:
                        chunk = b""
                    if not chunk:
                        stats["closed_by_broker"] += 1
                        break
            finally:
                writer.transport.abort()

    await asyncio.gather(*(worker() for _ in range(workers)))
    return stats


def fuzz(work: Path, count: int, seed: int = 1, workers: int = 16) -> dict[str, Any]:
    """The fuzz run (module docstring). ``sluice.max.topics`` bounds what fuzzed Metadata
    requests would otherwise auto-create by the thousand."""
    broker = start_broker(work / "fuzz", overrides=("sluice.max.topics=200",))
    stats: dict[str, Any] = {}
    try:
        before = rss_kb(broker.pid)
        started = time.monotonic()
        stats |= asyncio.run(_fuzz_connections(broker.port, fuzz_frames(count, seed), workers))
        stats["seconds"] = round(time.monotonic() - started, 1)
        stats["alive"] = broker.proc.poll() is None

        async def still_serving() -> bool:
            from sluice.protocol import messages as m

            c = await WireClient.connect(broker.host, broker.port)
            try:
                body = await c.request(m.ApiVersions.key, 0, m.ApiVersionsRequest(), timeout=10)
                return bool(body.error_code == 0)
            finally:
                await c.close()

        stats["serving_after"] = stats["alive"] and asyncio.run(still_serving())
        stats["rss_mb_before"] = round(before / 1024, 1)
        stats["rss_mb_after"] = round(rss_kb(broker.pid) / 1024, 1)
        stats["topics_created"] = sum(1 for d in (work / "fuzz").iterdir() if d.is_dir())
    finally:
        stats["stop_status"] = broker.stop()
    stats["tracebacks"] = tracebacks(broker)
    stats["corrupt"] = len(corrupt(work / "fuzz"))
    return stats


# --------------------------------------------------------------------------------- connections


def raise_nofile(wanted: int) -> None:
    """This process may open ``wanted`` sockets (up to the hard limit)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if soft != resource.RLIM_INFINITY and soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))


def connections(work: Path, count: int) -> dict[str, Any]:
    """The connections run (module docstring)."""
    from sluice.protocol import messages as m

    raise_nofile(count + 256)
    broker = start_broker(work / "connections")
    figures: dict[str, Any] = {"connections": count}

    async def run() -> None:
        clients: list[WireClient] = []
        try:
            figures["rss_mb_before"] = round(rss_kb(broker.pid) / 1024, 1)
            for _ in range(count):
                c = await WireClient.connect(broker.host, broker.port)
                clients.append(c)
                body = await c.request(m.ApiVersions.key, 0, m.ApiVersionsRequest(), timeout=10)
                assert body.error_code == 0
            open_kb = rss_kb(broker.pid)
            figures["rss_mb_open"] = round(open_kb / 1024, 1)
            figures["kb_per_connection"] = round(
                (open_kb - figures["rss_mb_before"] * 1024) / count, 1
            )
        finally:
            for c in clients:
                c.writer.transport.abort()
        c = await WireClient.connect(broker.host, broker.port)
        try:
            body = await c.request(m.ApiVersions.key, 0, m.ApiVersionsRequest(), timeout=10)
            figures["serving_after"] = body.error_code == 0
        finally:
            await c.close()

    try:
        asyncio.run(run())
        figures["rss_mb_after_close"] = round(rss_kb(broker.pid) / 1024, 1)
    finally:
        figures["stop_status"] = broker.stop()
    figures["tracebacks"] = tracebacks(broker)
    return figures
