"""A real Sluice broker for tests: in-process or as a subprocess, on a free port, in a temp dir.

Usage::

    from sluice.testing import EmbeddedBroker

    async with EmbeddedBroker() as broker:          # on the running event loop
        producer = Producer(broker.bootstrap_servers)

    with EmbeddedBroker() as broker:                # synchronous tests: a thread runs the loop
        KafkaProducer(bootstrap_servers=broker.bootstrap_servers)

    with EmbeddedBroker(mode="subprocess") as broker:   # a separate ``python -m sluice.server``
        ...

Three ways to run it, all the same :class:`sluice.server.server.Server` on a ``listeners``
port 0 (the
OS picks a free port, nothing to race for) and a fresh data directory (removed afterwards
unless ``data_dir`` was given):

* ``async with`` / :meth:`EmbeddedBroker.start`: the server runs on the caller's event loop --
  the cheapest form, but the broker only makes progress while the test awaits something, so use
  it with asyncio clients only;
* ``with`` / :meth:`EmbeddedBroker.start_sync` in-process: a daemon thread runs its own event loop
  (uvloop when installed) with the server; usable from synchronous tests, from blocking clients
  (kafka-python, confluent-kafka) and from async tests alike;
* ``mode="subprocess"``: ``python -m sluice.server`` in its own process (its own GIL; what
benchmarks and
  crash tests want). Its JSON log goes to :attr:`log_path`; the port is read from the
  "listening" log line.

``properties`` are broker config keys (``{"num.partitions": "3"}``), as in server.properties.
Two defaults differ from a production broker's, both for tests' sake, and an explicit property
overrides either: ``group.initial.rebalance.delay.ms=0`` (Kafka's 3 s wait for more members
before a new group's first rebalance would cost every consumer-group test 3 s; testcontainers'
Kafka modules set it to 0 too) and ``sluice.shutdown.timeout.ms=2000``.

A secured broker is properties too: ``listeners`` naming several listeners
(``"PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0"``) with the ``ssl.*`` / ``sasl.*`` keys and
``sluice.security.credentials.file`` (README, *Security*); :attr:`ports` has each listener's
bound port, :meth:`bootstrap` its ``host:port``, and :attr:`bootstrap_servers` is the first one.
Logging is the application's (STYLE item 9). In-process, the server's structlog events go
wherever the application configured structlog; an application that did not (structlog's
defaults print every event, debug included, to stdout) gets them through the standard library's
``logging`` instead, on loggers under ``sluice``: its logging configuration applies, and with
none only warnings and errors reach stderr (:func:`log_through_the_application`). A subprocess
broker's JSON log goes to :attr:`log_path`.

Every wait is bounded by ``startup_timeout`` / ``shutdown_timeout`` seconds.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, MutableMapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar

if TYPE_CHECKING:
    from sluice.server.server import Server

__all__ = ["EmbeddedBroker"]

Mode = Literal["inprocess", "subprocess"]

#: Broker properties an embedded broker starts with unless ``properties`` sets them.
TEST_DEFAULTS: Mapping[str, str] = {
    # A new group's first rebalance waits this long for more members (Kafka: 3 s).
    "group.initial.rebalance.delay.ms": "0",
    # A quick shutdown: a test's idle connections should not hold it up for 10 s.
    "sluice.shutdown.timeout.ms": "2000",
}
T = TypeVar("T")


class EmbeddedBroker:
    """One broker for a test; see the module docstring. Not reusable after :meth:`stop`."""

    def __init__(
        self,
        data_dir: str | Path | None = None,
        *,
        mode: Mode = "inprocess",
        host: str = "127.0.0.1",
        port: int = 0,
        properties: Mapping[str, str] | None = None,
        startup_timeout: float = 30.0,
        shutdown_timeout: float = 30.0,
        env: Mapping[str, str] | None = None,
    ) -> None:
        if mode not in ("inprocess", "subprocess"):
            raise ValueError(f"mode must be 'inprocess' or 'subprocess', not {mode!r}")
        self.mode: Mode = mode
        self.host = host
        self.port = port
        self.properties = dict(properties or {})
        #: Extra environment of a subprocess broker (its ``PYTHONPATH`` goes after this
        #: checkout's); an in-process broker refuses it.
        self.env = dict(env or {})
        if self.env and mode != "subprocess":
            raise ValueError("env is for mode='subprocess'")
        self.startup_timeout = startup_timeout
        self.shutdown_timeout = shutdown_timeout
        self._data_dir = Path(data_dir) if data_dir is not None else None
        self._scratch: Path | None = None  # temp dir holding our data dir and the process log
        self.server: Server | None = None  # in-process only
        self.process: subprocess.Popen[bytes] | None = None  # subprocess only
        self.log_path: Path | None = None  # subprocess only
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop_event: asyncio.Event | None = None
        self._state = "new"  # new -> running -> stopped
        #: The bound port of each listener, by name (once started).
        self.ports: dict[str, int] = {}

    # --- what tests use ----------------------------------------------------------------------

    @property
    def bootstrap_servers(self) -> str:
        """``host:port`` for a Kafka client (valid once started)."""
        if self._state != "running":
            raise RuntimeError("the embedded broker is not running")
        return f"{self.host}:{self.port}"

    def bootstrap(self, listener: str) -> str:
        """``host:port`` of the listener named ``listener`` (``properties["listeners"]``)."""
        if self._state != "running":
            raise RuntimeError("the embedded broker is not running")
        return f"{self.host}:{self.ports[listener.upper()]}"

    @property
    def data_dir(self) -> Path:
        """The broker's ``log.dirs`` (valid once started)."""
        if self._data_dir is None:
            raise RuntimeError("the embedded broker has not been started")
        return self._data_dir

    @property
    def running(self) -> bool:
        return self._state == "running"

    def set_leader_epoch(self, topic: str, partition: int = 0, epoch: int | None = None) -> int:
        """Make the broker leader of ``topic-partition`` again at ``epoch`` (default: its
        current epoch + 1), as a controller's leader election would; returns the new epoch.

        Goes through ``ReplicaManager.make_leader``, the path the cluster mode's ZooKeeper
        watcher takes, on the broker's event loop: the epoch cache gets ``(epoch, LEO)``,
        Metadata reports the new epoch, requests carrying the old one are fenced
        (FENCED_LEADER_EPOCH) and parked fetches on the partition complete. Clients that track
        epochs (librdkafka, kafka-python) then validate their positions with
        OffsetForLeaderEpoch. In-process only. Raises ``ValueError`` for an epoch not newer
        than the current one and ``UnknownTopicOrPartition`` for a partition not hosted.
        """

        def bump(server: Server) -> int:
            replicas = server.replica_manager
            assert replicas is not None
            new = replicas.leader_epoch(topic, partition) + 1 if epoch is None else epoch
            if not replicas.make_leader(topic, partition, new):
                held = replicas.leader_epoch(topic, partition)
                raise ValueError(f"{topic}-{partition}: epoch {new} is not newer than {held}")
            return new

        return self.call(bump)

    def metrics(self) -> dict[str, int]:
        """A snapshot of the broker's counters (``requests.<API name>``, e.g.
        ``requests.Produce``, counts the requests of each API), taken on its event loop.
        In-process only. The Prometheus endpoint (``sluice.metrics.listener``) exports more."""
        return self.call(lambda server: server.metrics.snapshot())

    def call(self, fn: Callable[[Server], T]) -> T:
        """``fn(server)`` on the broker's event loop, returning its result (or raising its
        exception), within ``shutdown_timeout``. From the loop's own thread (``async with``
        form) it runs at once; from any other thread (``with`` form) it is scheduled on the
        broker thread's loop and waited for. Not available for a subprocess broker.
        """
        if self._state != "running" or self.server is None:
            raise RuntimeError("call() needs a running in-process broker")
        server, loop = self.server, self._loop
        if self._thread is None or loop is None:
            return fn(server)  # async form: we are on the broker's loop
        if self._thread is threading.current_thread():
            return fn(server)
        done: concurrent.futures.Future[T] = concurrent.futures.Future()

        def run() -> None:
            try:
                done.set_result(fn(server))
            except BaseException as exc:
                done.set_exception(exc)

        loop.call_soon_threadsafe(run)
        return done.result(self.shutdown_timeout)

    def _prepare(self) -> dict[str, str]:
        if self._state != "new":
            raise RuntimeError(f"an EmbeddedBroker cannot be started twice (it is {self._state})")
        self._scratch = Path(tempfile.mkdtemp(prefix="sluice-embedded-"))
        if self._data_dir is None:
            self._data_dir = self._scratch / "data"
        props = {
            **TEST_DEFAULTS,
            **self.properties,
            # properties may name several listeners (a secured broker): the first is
            # bootstrap_servers, each is bootstrap(name)
            "listeners": self.properties.get("listeners", f"PLAINTEXT://{self.host}:{self.port}"),
            "log.dirs": str(self._data_dir),
        }
        return props

    def _cleanup_dirs(self) -> None:
        # The scratch dir holds our data dir (when we made it) and the subprocess log; a data
        # dir the caller gave lives elsewhere and is left alone.
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)
            self._scratch = None

    # --- async form: the caller's event loop -------------------------------------------------

    async def start(self) -> EmbeddedBroker:
        """Start on the running loop (in-process) or spawn the subprocess; return when ready."""
        props = self._prepare()
        if self.mode == "subprocess":
            await asyncio.to_thread(self._spawn, props)
            self._state = "running"
            return self
        try:
            async with asyncio.timeout(self.startup_timeout):
                await self._start_server(props)
        except BaseException:
            self._state = "stopped"
            self._cleanup_dirs()
            raise
        self._state = "running"
        return self

    async def stop(self) -> None:
        """Graceful shutdown (flush, clean-shutdown marker), then remove the temp data dir."""
        if self._state != "running":
            return
        self._state = "stopped"
        try:
            if self.mode == "subprocess":
                await asyncio.to_thread(self._terminate)
            elif self._thread is not None:
                await asyncio.to_thread(self._stop_thread)
            elif self.server is not None:
                async with asyncio.timeout(self.shutdown_timeout):
                    await self.server.shutdown()
        finally:
            self._cleanup_dirs()

    async def __aenter__(self) -> EmbeddedBroker:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def _start_server(self, props: dict[str, str]) -> None:
        log_through_the_application()
        from sluice.server.config import Config
        from sluice.server.server import Server

        server = Server(Config.from_properties(props))
        await server.start()
        self.server = server
        self.port = server.port
        self.ports = dict(server.ports)

    # --- sync form: a thread with its own loop, or a subprocess ------------------------------

    def start_sync(self) -> EmbeddedBroker:
        """Start without an event loop of the caller's; return when ready."""
        props = self._prepare()
        if self.mode == "subprocess":
            self._spawn(props)
            self._state = "running"
            return self
        started = threading.Event()
        failure: list[BaseException] = []
        thread = threading.Thread(
            target=self._thread_main,
            args=(props, started, failure),
            name="sluice-embedded",
            daemon=True,
        )
        thread.start()
        if not started.wait(self.startup_timeout):
            self._state = "stopped"
            self._cleanup_dirs()
            raise TimeoutError(f"embedded broker not ready after {self.startup_timeout}s")
        if failure:
            thread.join(self.shutdown_timeout)
            self._state = "stopped"
            self._cleanup_dirs()
            raise failure[0]
        self._thread = thread
        self._state = "running"
        return self

    def stop_sync(self) -> None:
        if self._state != "running":
            return
        self._state = "stopped"
        try:
            if self.mode == "subprocess":
                self._terminate()
            elif self._thread is not None:
                self._stop_thread()
            else:
                raise RuntimeError("started with `async with`: stop it with `await stop()`")
        finally:
            self._cleanup_dirs()

    def __enter__(self) -> EmbeddedBroker:
        return self.start_sync()

    def __exit__(self, *exc: object) -> None:
        self.stop_sync()

    def _thread_main(
        self, props: dict[str, str], started: threading.Event, failure: list[BaseException]
    ) -> None:
        try:
            import uvloop

            loop: asyncio.AbstractEventLoop = uvloop.new_event_loop()
        except ImportError:
            loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        try:
            self._stop_event = asyncio.Event()
            try:
                loop.run_until_complete(self._start_server(props))
            except BaseException as exc:
                failure.append(exc)
                return
            finally:
                self._loop = loop
                started.set()
            loop.run_until_complete(self._stop_event.wait())
            assert self.server is not None
            loop.run_until_complete(self.server.shutdown())
        finally:
            with contextlib.suppress(Exception):
                _cancel_remaining(loop)
                loop.run_until_complete(loop.shutdown_asyncgens())
            asyncio.set_event_loop(None)
            loop.close()

    def _stop_thread(self) -> None:
        loop, event, thread = self._loop, self._stop_event, self._thread
        if loop is not None and event is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # loop already closed
                loop.call_soon_threadsafe(event.set)
        if thread is not None:
            thread.join(self.shutdown_timeout)
            if thread.is_alive():
                raise TimeoutError(f"embedded broker did not stop in {self.shutdown_timeout}s")

    def _spawn(self, props: dict[str, str]) -> None:
        assert self._scratch is not None
        self.log_path = self._scratch / "broker.log"
        args = [sys.executable, "-m", "sluice.server", "--log-format", "json"]
        for key, value in props.items():
            args += ["--override", f"{key}={value}"]
        repo = Path(__file__).resolve().parents[2]
        env = {**os.environ, **self.env}
        # Run the same checkout as the caller even when Sluice is not installed.
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(repo), env.get("PYTHONPATH")]))
        with open(self.log_path, "ab") as out:
            # Its own session: a terminal's Ctrl-C reaches only our process, which stops the
            # broker itself (in order, bounded) instead of every process at once.
            self.process = subprocess.Popen(
                args,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                start_new_session=True,
            )
        try:
            self._wait_listening()
        except BaseException:  # also Ctrl-C: its own session, the broker would outlive us
            self._kill()
            self._cleanup_dirs()
            raise

    def _wait_listening(self) -> None:
        assert self.process is not None and self.log_path is not None
        deadline = time.monotonic() + self.startup_timeout
        while True:
            port = self._listening_port()
            if port is not None:
                self.port = port[0]
                self.ports = port[1]
                return
            if self.process.poll() is not None:
                log = self.log_path.read_text(errors="replace")
                raise RuntimeError(f"broker exited with {self.process.returncode}:\n{log}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"broker not ready after {self.startup_timeout}s")
            time.sleep(0.01)

    def _listening_port(self) -> tuple[int, dict[str, int]] | None:
        assert self.log_path is not None
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return None
        for line in text.splitlines():
            if '"listening"' not in line:
                continue
            with contextlib.suppress(ValueError):
                event: dict[str, Any] = json.loads(line)
                if event.get("event") == "listening":
                    ports = {str(k): int(v) for k, v in event.get("ports", {}).items()}
                    return int(event["port"]), ports
        return None

    def _terminate(self) -> None:
        proc = self.process
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(self.shutdown_timeout)
        except subprocess.TimeoutExpired:
            self._kill()
            raise TimeoutError(f"broker did not stop within {self.shutdown_timeout}s") from None

    def _kill(self) -> None:
        proc = self.process
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait(10)


def log_through_the_application() -> None:
    """Send structlog's events to the standard library's ``logging`` unless the application
    configured structlog (then its configuration stays as it is).

    Unconfigured, structlog prints every event to stdout, debug included: an embedded broker
    wrote its whole log into the application's output (and a test's captured stdout). Routed
    to ``logging`` (loggers named by module, ``sluice.server.server`` ...), the events
    obey the application's handlers and levels; below a logger's level an event is dropped
    before it is rendered (``filter_by_level``, first). Idempotent; an application that
    configures structlog later replaces this."""
    import structlog

    if structlog.is_configured():
        return
    structlog.configure(
        processors=[
            structlog.stdlib.filter_by_level,
            structlog.contextvars.merge_contextvars,
            _message_with_fields,
        ],
        wrapper_class=structlog.stdlib.BoundLogger,
        logger_factory=structlog.stdlib.LoggerFactory(),
        cache_logger_on_first_use=False,
    )


def _message_with_fields(_: Any, __: str, event_dict: MutableMapping[str, Any]) -> dict[str, Any]:
    """``event key=value ...`` as the record's message (the fields would be invisible as
    ``extra``); ``exc_info`` is passed on for ``logging`` to format."""
    event_dict.pop("logger_name", None)  # the stdlib logger's own name says it
    exc_info = event_dict.pop("exc_info", None)
    event = event_dict.pop("event", "")
    fields = " ".join(f"{key}={value!r}" for key, value in event_dict.items())
    return {"msg": f"{event} {fields}" if fields else str(event), "exc_info": exc_info}


def _cancel_remaining(loop: asyncio.AbstractEventLoop) -> None:
    tasks = [t for t in asyncio.all_tasks(loop) if not t.done()]
    for task in tasks:
        task.cancel()
    if tasks:
        loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
