"""The broker room's shared fixtures: a started in-process broker on a temp data dir (``server``,
default settings) and a wire client connected to it (``client``). A module that needs other
settings defines its own ``server``; ``client`` then connects to that one."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from sluice.server.server import Server
from tests.broker.test_server import start_server
from tests.broker_util import WireClient


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[Server]:
    srv = await start_server(tmp_path)
    try:
        yield srv
    finally:
        await srv.shutdown()


@pytest.fixture
async def client(server: Server) -> AsyncIterator[WireClient]:
    c = await WireClient.connect("127.0.0.1", server.port)
    try:
        yield c
    finally:
        await c.close()
