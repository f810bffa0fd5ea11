"""A broker's authorizer at start-up: a standalone broker's ACL file store survives a restart,
and a file it cannot read stops the start (before the logs open) instead of running without
ACLs; a cluster member accepts no connection before its ACLs are loaded from ZooKeeper."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any

import pytest

from sluice.client.admin import AclBinding, AclBindingFilter, Admin
from sluice.protocol import errors
from sluice.protocol import messages as m
from sluice.protocol.acl import AclOperation, AclPermissionType, PatternType, ResourceType
from sluice.server.config import Config
from sluice.server.security import acl
from sluice.server.security.authorizer import AclAuthorizer, ZkAclStore
from sluice.server.security.errors import SecurityError
from sluice.server.server import ACL_FILE, Server
from sluice.server.zk.client import ZkClient
from tests.broker_util import WireClient

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


async def describe_group(client: WireClient, group: str) -> Any:
    answer = await client.request(m.DescribeGroups.key, 0, m.DescribeGroupsRequest(groups=[group]))
    return answer.groups[0]


async def test_a_cluster_broker_serves_nobody_before_its_acls_are_loaded(
    tmp_path: Path, sluice_zookeeper_connect: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found by a security review: a cluster member listened (and served, with an empty ACL
    cache) before it had read the ACLs from ZooKeeper; with ``allow.everyone.if.no.acl.found``
    everyone could do what an ACL denies meanwhile. Kafka enables request processing only once
    its authorizer is ready; so does Sluice: connections are refused until then."""
    zk = ZkClient(sluice_zookeeper_connect, session_timeout=5.0)
    await zk.start()
    try:
        store = ZkAclStore(zk)
        await store.start()
        deny = acl.AclBinding(
            acl.ResourcePattern(ResourceType.GROUP, "secret", PatternType.LITERAL),
            acl.AccessControlEntry(
                "User:ANONYMOUS", "*", AclOperation.DESCRIBE, AclPermissionType.DENY
            ),
        )
        assert await AclAuthorizer(store).create_acls([deny]) == [None]
        await store.close()
    finally:
        await zk.close()

    loading, release = asyncio.Event(), asyncio.Event()
    start = ZkAclStore.start

    async def gated(self: ZkAclStore) -> None:
        loading.set()
        await release.wait()
        await start(self)

    monkeypatch.setattr(ZkAclStore, "start", gated)
    server = Server(
        config(tmp_path / "data", "node.id=1", f"zookeeper.connect={sluice_zookeeper_connect}",
               "allow.everyone.if.no.acl.found=true", "controlled.shutdown.enable=false")
    )  # fmt: skip
    starting = asyncio.create_task(server.start())
    try:
        async with asyncio.timeout(20):
            await loading.wait()
        port = server.ports["PLAINTEXT"]  # bound already
        with pytest.raises(ConnectionRefusedError):
            client = await WireClient.connect("127.0.0.1", port)
            try:  # (what an accepted connection could do meanwhile)
                await describe_group(client, "secret")
            finally:
                await client.close()
        release.set()
        async with asyncio.timeout(30):
            await starting
        client = await WireClient.connect("127.0.0.1", port)
        try:
            described = await describe_group(client, "secret")
        finally:
            await client.close()
        assert described.error_code == errors.GroupAuthorizationFailed.code
    finally:
        release.set()
        if not starting.done():
            starting.cancel()
        with contextlib.suppress(BaseException):
            await starting
        await server.shutdown()
