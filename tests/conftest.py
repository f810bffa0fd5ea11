"""Shared test fixtures. Keep this small.

``make_batch`` builds a valid RecordBatch v2 with ``sluice.protocol.records.RecordBatchBuilder``;
for batches the builder does not make (offset gaps inside a batch, as compaction leaves) it encodes
the records itself (uncompressed, CRC via ``sluice.protocol.records.compute_crc``).

Sockets: the session closes what kafka-python leaks (:func:`close_what_kafka_python_leaks`), and
``SLUICE_TEST_GC_EACH=1`` finds the test that leaked one (:func:`_collect_garbage_after_each_test`).
"""

from __future__ import annotations

import gc
import os
import shutil
import socket
import struct
import sys
import threading
import traceback
import warnings
import weakref
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest
from hypothesis import settings

from sluice.protocol.records import (
    ATTR_TIMESTAMP_TYPE_MASK,
    CRC_OFFSET,
    HEADER,
    RecordBatchBuilder,
    compute_crc,
)
from sluice.protocol.varint import encode_varint, encode_varlong

MakeBatch = Callable[..., bytes]

# In CI, property tests draw the same examples every run: a failure there reproduces, and main
# cannot turn red by luck. Locally they stay random, to keep finding new cases.
settings.register_profile("ci", derandomize=True, database=None, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")


def build_batch(
    base_offset: int,
    timestamps: Sequence[int],
    values: Sequence[bytes] | None = None,
    *,
    offset_deltas: Sequence[int] | None = None,
    log_append_time: bool = False,
    compression: int = 0,
    partition_leader_epoch: int = 0,
) -> bytes:
    """A v2 batch with one record per timestamp (null key, ``values[i]`` or b"v<i>")."""
    count = len(timestamps)
    if count == 0:
        raise ValueError("a batch needs at least one record")
    if offset_deltas is None:
        builder = RecordBatchBuilder(
            compression=compression,
            base_offset=base_offset,
            timestamp_type=1 if log_append_time else 0,
            partition_leader_epoch=partition_leader_epoch,
        )
        for i, ts in enumerate(timestamps):
            builder.append(ts, None, values[i] if values is not None else b"v%d" % i)
        return builder.build()
    if compression:
        raise ValueError("hand-encoded batches are uncompressed")
    deltas = list(offset_deltas)
    base_timestamp = timestamps[0]
    records = bytearray()
    for i, ts in enumerate(timestamps):
        value = values[i] if values is not None else b"v%d" % i
        body = (
            b"\x00"  # attributes
            + encode_varlong(ts - base_timestamp)
            + encode_varint(deltas[i])
            + encode_varint(-1)  # null key
            + encode_varint(len(value))
            + value
            + encode_varint(0)  # no headers
        )
        records += encode_varint(len(body)) + body
    attributes = ATTR_TIMESTAMP_TYPE_MASK if log_append_time else 0
    batch = bytearray(
        HEADER.pack(
            base_offset,
            HEADER.size - 12 + len(records),
            partition_leader_epoch,
            2,
            0,  # crc, filled below
            attributes,
            deltas[-1],
            base_timestamp,
            max(timestamps),
            -1,
            -1,
            -1,
            count,
        )
    )
    batch += records
    struct.pack_into(">I", batch, CRC_OFFSET, compute_crc(batch))
    return bytes(batch)


def close_what_kafka_python_leaks() -> None:
    """Close what kafka-python 3.0.12 leaves open, each a random failure of some later test.

    * The socket of a failed connect (refused, timed out): ``KafkaNetSocket.sock_connect``
      raises without closing it. The error's traceback, kept in a list of errors that the
      raising frame holds, is a reference cycle, and the I/O thread keeps it alive a while: the
      socket (``laddr=('0.0.0.0', port)``, no peer: Linux clears the address of a refused
      connect) is finalized by a garbage collection in some later test, whose ResourceWarning
      fails that test (``filterwarnings = error``). Any kafka-python client that tries a
      stopped broker (a cluster with one down) triggers it.
    * A client (``KafkaAdminClient``, ``KafkaProducer``, ``KafkaConsumer``) whose bootstrap
      fails (no broker reachable) raises from ``__init__`` with its network client made, its
      wakeup socket pair (AF_UNIX) open and, for the admin client and the consumer, its I/O
      thread running (which keeps them to the session's end, warned of then).
    """
    try:
        with warnings.catch_warnings():  # kafka-python's legacy importlib.resources use
            warnings.simplefilter("ignore", DeprecationWarning)
            from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer
            from kafka.net.compat import KafkaNetClient
            from kafka.net.inet import KafkaNetSocket
    except ImportError:
        return
    sock_connect = KafkaNetSocket.sock_connect
    if getattr(sock_connect, "closes_on_failure", False):
        return

    async def closing(self: Any, net: Any, sock: socket.socket, *args: Any, **kw: Any) -> Any:
        try:
            return await sock_connect(self, net, sock, *args, **kw)
        except BaseException:
            sock.close()
            raise

    closing.closes_on_failure = True  # type: ignore[attr-defined]
    KafkaNetSocket.sock_connect = closing

    constructing = threading.local()  # .clients: the network clients made by a constructor
    net_client_init = KafkaNetClient.__init__

    def recorded(self: Any, *args: Any, **kwargs: Any) -> None:
        net_client_init(self, *args, **kwargs)
        made = getattr(constructing, "clients", None)
        if made is not None:
            made.append(self)

    KafkaNetClient.__init__ = recorded

    def closing_on_failure(init: Callable[..., None]) -> Callable[..., None]:
        def constructor(self: Any, *args: Any, **kwargs: Any) -> None:
            outer = getattr(constructing, "clients", None)
            constructing.clients = made = []
            try:
                init(self, *args, **kwargs)
            except BaseException:
                for client in made:
                    client.close()  # stops its I/O thread, closes its sockets
                raise
            finally:
                constructing.clients = outer

        return constructor

    for cls in (KafkaAdminClient, KafkaProducer, KafkaConsumer):
        cls.__init__ = closing_on_failure(cls.__init__)


def pytest_configure(config: pytest.Config) -> None:
    close_what_kafka_python_leaks()


_GC_EACH = os.environ.get("SLUICE_TEST_GC_EACH") == "1"
#: With SLUICE_TEST_GC_EACH=1: where each socket was made, by socket (weakly: the ones still
#: alive at the end) and by fd (a finalizer runs after the collector cleared the weak references).
_SOCKET_ORIGINS: weakref.WeakKeyDictionary[socket.socket, str] = weakref.WeakKeyDictionary()
_FD_ORIGINS: dict[int, str] = {}


def _track_sockets() -> None:
    """Record the stack that made each ``socket.socket`` (``socketpair``, ``accept`` and
    ``create_connection`` build theirs through ``__init__`` too): far cheaper than
    ``PYTHONTRACEMALLOC``, whose 25 frames per allocation slow a cluster test past its
    deadlines."""
    init = socket.socket.__init__

    def tracked(self: socket.socket, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        origin = "".join(traceback.format_stack(limit=16)[:-1])
        _SOCKET_ORIGINS[self] = _FD_ORIGINS[self.fileno()] = origin

    socket.socket.__init__ = tracked  # type: ignore[method-assign]


if _GC_EACH:
    _track_sockets()


def _origin(obj: object) -> str:
    """Where ``obj``, a socket being finalized, was made (the last socket.socket made with its
    fd)."""
    origin = _FD_ORIGINS.get(obj.fileno()) if isinstance(obj, socket.socket) else None
    return origin or "(not a tracked socket)\n"


@pytest.fixture(autouse=_GC_EACH)
def _collect_garbage_after_each_test() -> Iterator[None]:
    """With ``SLUICE_TEST_GC_EACH=1``, a garbage collection after each test: an object the test
    leaked in a reference cycle (an unclosed socket, event loop, file) is finalized in the
    teardown of the test that leaked it, and fails that test with where the socket was made,
    instead of warning in whichever later test the collector happened to run (where
    ``filterwarnings = error`` fails an innocent test). Off by default: a collection per test
    costs time over ~4,300 tests."""
    yield
    caught: list[str] = []
    previous = sys.unraisablehook

    def hook(unraisable: Any) -> None:
        made = _origin(unraisable.object)
        caught.append(f"{unraisable.exc_value!r} ({unraisable.err_msg}):\n{made}")

    sys.unraisablehook = hook
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", ResourceWarning)  # finalizers report it unraisable
            gc.collect()
    finally:
        sys.unraisablehook = previous
    if caught:
        pytest.fail("leaked in this test:\n" + "\n".join(caught), pytrace=False)


def pytest_sessionfinish(session: pytest.Session) -> None:
    """With ``SLUICE_TEST_GC_EACH=1``: the sockets still open at the end (held by something
    that lives to the end, as a never-closed event loop's self-pipe), with where each was made."""
    if not _GC_EACH:
        return
    gc.collect()
    for sock, origin in list(_SOCKET_ORIGINS.items()):
        if sock.fileno() != -1:
            sys.stderr.write(f"\nstill open at session end: {sock!r}\n{origin}")


@pytest.fixture(scope="session")
def make_batch() -> MakeBatch:
    return build_batch


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """ONE local[2] SparkSession for the whole run (starting one costs ~5-10 s): UI off, two
    shuffle partitions, UTC, Sluice's data sources registered; stopped at session end.
    Skips when PySpark or Java is missing (``make`` installs PySpark; Java 17 is a system
    package)."""
    pytest.importorskip("pyspark")
    pytest.importorskip("pyarrow")
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.skip("the Spark tests need Java 17 (java not on PATH, JAVA_HOME unset)")
    from sluice import pipeline

    pipeline.python_worker_env()
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # driver and workers on loopback only
    from pyspark.sql import SparkSession

    with warnings.catch_warnings():
        # PySpark warns that it does not yet fully support pandas >= 3; nothing here uses pandas.
        warnings.simplefilter("ignore", FutureWarning)
        session = (
            SparkSession.builder.master("local[2]")
            .appName("sluice-tests")
            .config("spark.ui.enabled", "false")
            .config("spark.sql.shuffle.partitions", "2")
            .config("spark.default.parallelism", "2")
            .config("spark.sql.session.timeZone", "UTC")
            .config("spark.driver.bindAddress", "127.0.0.1")
            .config("spark.driver.host", "127.0.0.1")
            .config("spark.sql.streaming.stopTimeout", "30s")
            .getOrCreate()
        )
    session.sparkContext.setLogLevel("ERROR")
    pipeline.register(session)
    try:
        yield session
    finally:
        session.stop()
