"""Fixtures for the ZooKeeper room's tests: started :class:`ZkClient` s on the test's chroot of the
session's ZooKeeper (``sluice_zookeeper_connect``), closed after the test.

Sessions are short (``SESSION`` seconds) so expiry tests are quick; the server's tickTime is
100 ms, so 1 s is well inside its [0.2 s, 60 s] bounds.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
import textwrap
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from sluice.server.zk.client import ZkClient

SESSION = 1.0

MakeClient = Callable[..., Awaitable[ZkClient]]


@pytest.fixture
async def make_client(sluice_zookeeper_connect: str) -> AsyncIterator[MakeClient]:
    """``await make_client(connect=None, **ZkClient kwargs)``: a started client (closed after)."""
    clients: list[ZkClient] = []

    async def make(connect: str | None = None, **kwargs: Any) -> ZkClient:
        kwargs.setdefault("session_timeout", SESSION)
        kwargs.setdefault("connect_timeout", 10.0)
        kwargs.setdefault("request_timeout", 10.0)
        client = ZkClient(connect or sluice_zookeeper_connect, **kwargs)
        clients.append(client)
        await client.start()
        return client

    try:
        yield make
    finally:
        for client in reversed(clients):
            await client.close()


@pytest.fixture
async def zk(make_client: MakeClient) -> ZkClient:
    return await make_client()


async def wait_for(condition: Callable[[], bool], timeout: float = 10.0, what: str = "") -> float:
    """Poll ``condition`` on the loop every 10 ms until true; return the seconds it took."""
    start = time.monotonic()
    while not condition():
        if time.monotonic() - start > timeout:
            raise AssertionError(f"not true within {timeout}s: {what or condition}")
        await asyncio.sleep(0.01)
    return time.monotonic() - start


OWNER_SCRIPT = textwrap.dedent(
    """
    import asyncio, sys
    from sluice.server.zk.client import ZkClient

    async def main():
        connect, session, path, data = sys.argv[1:5]
        client = ZkClient(connect, session_timeout=float(session))
        await client.start()
        await client.create(path, data.encode(), ephemeral=True, make_parents=True)
        print("SESSION", client.session_id, flush=True)
        await asyncio.sleep(60)  # killed long before

    asyncio.run(main())
    """
)


@contextlib.asynccontextmanager
async def ephemeral_owner(
    connect: str, path: str, data: bytes = b"", session: float = SESSION
) -> AsyncIterator[tuple[asyncio.subprocess.Process, int]]:
    """A separate process holding an ephemeral znode on a session of its own: kill -9 it to
    leave the node behind until the session times out. Yields ``(process, session id)``."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        OWNER_SCRIPT,
        connect,
        str(session),
        path,
        data.decode(),
        stdout=subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        async with asyncio.timeout(20):  # structlog's default output comes first
            while not (line := await proc.stdout.readline()).startswith(b"SESSION "):
                assert line, "the owner process exited before creating its node"
        yield proc, int(line.split()[1])
    finally:
        if proc.returncode is None:
            proc.kill()
        await proc.wait()
