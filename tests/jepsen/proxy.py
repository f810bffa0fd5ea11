"""A TCP proxy on loopback that can pass, black-hole or reset one link (fault injection).

Each :class:`FaultProxy` listens on ``127.0.0.1:<port>`` and forwards to one upstream
(a broker's listener or ZooKeeper). Put one in front of each link to cut independently:

* ``PASS`` -- bytes flow both ways;
* ``BLACKHOLE`` -- connections stay open but bytes are dropped in both directions and new
  connections are accepted and then starve (what a network partition looks like to TCP: the
  peer only notices through its own timeouts);
* ``RESET`` -- every open connection is aborted with an RST and new ones are reset at once
  (a crashed peer, or a firewall that rejects).

Runs in its own thread with its own event loop, so tests and the fault scheduler drive it with
plain calls from any thread or process-level code; :meth:`close` stops it.
"""

from __future__ import annotations

import asyncio
import enum
import socket
import struct
import threading
from collections.abc import Coroutine
from contextlib import suppress

_CHUNK = 64 * 1024


class Mode(enum.Enum):
    PASS = "pass"
    BLACKHOLE = "blackhole"
    RESET = "reset"


def _abort(writer: asyncio.StreamWriter) -> None:
    """Close with an RST, not a FIN (SO_LINGER 0)."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


class FaultProxy:
    """Forwards ``127.0.0.1:port`` to ``upstream``; :meth:`set_mode` cuts or heals the link."""

    def __init__(self, upstream_host: str, upstream_port: int, port: int = 0) -> None:
        self.upstream = (upstream_host, upstream_port)
        self._mode = Mode.PASS
        self._loop = asyncio.new_event_loop()
        self._pairs: set[tuple[asyncio.StreamWriter, asyncio.StreamWriter]] = set()
        #: Connections (by their client-side writer) that had bytes black-holed.
        self._starved: set[int] = set()
        self._server: asyncio.Server | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        try:
            self.port = self._call(self._start(port), timeout=10)
        except BaseException:  # e.g. the port taken: no loop, thread or socket left behind
            self._end_loop()
            raise

    # --- control (any thread) -----------------------------------------------------------------

    @property
    def mode(self) -> Mode:
        return self._mode

    def set_mode(self, mode: Mode) -> None:
        self._call(self._set_mode(mode), timeout=10)

    def connections(self) -> int:
        return len(self._pairs)

    def starved(self) -> int:
        """How many connections had bytes dropped (BLACKHOLE), either way, since the last
        :meth:`set_mode`: requests or answers that will never arrive."""
        return len(self._starved)

    def close(self) -> None:
        if self._loop.is_closed():
            return
        self._call(self._stop(), timeout=10)
        self._end_loop()

    def _end_loop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()

    def __enter__(self) -> FaultProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(self, coro: Coroutine[object, object, int], timeout: float) -> int:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    # --- the proxy (its own loop) -------------------------------------------------------------

    async def _start(self, port: int) -> int:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", port)
        return int(self._server.sockets[0].getsockname()[1])

    async def _stop(self) -> int:
        if self._server is not None:
            self._server.close()
        for client, upstream in list(self._pairs):
            client.transport.abort()
            upstream.transport.abort()
        self._pairs.clear()
        # The proxy's own loop: every other task is one of its connections.
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        return 0

    async def _set_mode(self, mode: Mode) -> int:
        self._mode = mode
        self._starved.clear()
        if mode is Mode.RESET:
            for client, upstream in list(self._pairs):
                _abort(client)
                _abort(upstream)
            self._pairs.clear()
        return 0

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """One client connection, piped to the upstream until either side ends.

        Cancelled by :meth:`_stop`, it ends quietly: Python 3.11's stream server calls
        ``task.exception()`` on it, which raises for a cancelled task and logs a traceback
        ("Exception in callback ... CancelledError") -- once seen when a Ctrl-C stopped the
        proxy while it was connecting upstream."""
        try:
            await self._serve(reader, writer)
        except asyncio.CancelledError:
            _abort(writer)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._mode is Mode.RESET:
            _abort(writer)
            return
        try:
            up_reader, up_writer = await asyncio.wait_for(
                asyncio.open_connection(*self.upstream), timeout=10
            )
        except (OSError, TimeoutError):
            _abort(writer)
            return
        pair = (writer, up_writer)
        self._pairs.add(pair)
        await asyncio.gather(
            self._pump(reader, up_writer, pair), self._pump(up_reader, writer, pair)
        )

    async def _pump(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        pair: tuple[asyncio.StreamWriter, asyncio.StreamWriter],
    ) -> None:
        try:
            while True:
                data = await reader.read(_CHUNK)
                if not data:
                    break
                if self._mode is Mode.PASS:
                    writer.write(data)
                    await writer.drain()
                else:
                    self._starved.add(id(pair[0]))
                # BLACKHOLE: read and drop, so neither side's buffers fill up and tell it.
        except (ConnectionError, OSError):
            pass
        finally:
            if pair in self._pairs:
                self._pairs.discard(pair)
                for w in pair:
                    w.transport.abort() if self._mode is Mode.RESET else w.close()
