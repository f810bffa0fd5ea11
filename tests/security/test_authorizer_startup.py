"""A standalone broker's authorizer at start-up: its ACL file store survives a restart, and a
file it cannot read stops the start (before the logs open) instead of running without ACLs."""

from __future__ import annotations

from pathlib import Path

import pytest

from sluice.client.admin import AclBinding, AclBindingFilter, Admin
from sluice.protocol.acl import AclOperation, AclPermissionType, PatternType, ResourceType
from sluice.server.config import Config
from sluice.server.security.errors import SecurityError
from sluice.server.server import ACL_FILE, Server

AUTHORIZER = "kafka.security.authorizer.AclAuthorizer"


def config(data_dir: Path, *extra: str) -> Config:
    return Config.load(None, ["listeners=PLAINTEXT://127.0.0.1:0", f"log.dirs={data_dir}",
                              f"authorizer.class.name={AUTHORIZER}", *extra])  # fmt: skip


async def test_acls_survive_a_restart(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    binding = AclBinding(ResourceType.GROUP, "billing", PatternType.PREFIXED, "User:alice", "*",
                         AclOperation.READ, AclPermissionType.ALLOW)  # fmt: skip
    server = Server(config(data_dir, "super.users=User:ANONYMOUS"))
    await server.start()
    try:
        async with Admin(f"127.0.0.1:{server.port}") as admin:
            assert await admin.create_acls([binding]) == [None]
    finally:
        await server.shutdown()
    assert (data_dir / ACL_FILE).exists()
    server = Server(config(data_dir, "super.users=User:ANONYMOUS"))
    await server.start()
    try:
        async with Admin(f"127.0.0.1:{server.port}") as admin:
            assert await admin.describe_acls(AclBindingFilter()) == [binding]
    finally:
        await server.shutdown()


async def test_an_unreadable_acl_file_stops_the_start(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    (data_dir / ACL_FILE).write_text("{not json")
    server = Server(config(data_dir))
    with pytest.raises(SecurityError, match="not an ACL file"):
        await server.start()
    assert server.log_manager is None  # nothing was opened
