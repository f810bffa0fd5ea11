"""ACL hosts in Java's form (found by a security review): Kafka's authorizer compares an ACL's
host with ``InetAddress.getHostAddress`` of the client, which writes IPv6 uncompressed
(``0:0:0:0:0:0:0:1``), so that is the host an ACL for a client on ``::1`` names; Python's
``::1`` matched instead. A real broker on the IPv6 loopback checks it end to end."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from sluice.protocol import errors
from sluice.protocol import messages as m
from sluice.server.network.request import java_host_address
from sluice.server.security import acl
from sluice.server.security.authorizer import FileAclStore
from sluice.server.server import ACL_FILE
from tests.broker.test_server import start_server
from tests.broker_util import WireClient


@pytest.mark.parametrize(
    ("peer", "java"),
    [
        ("127.0.0.1", "127.0.0.1"),
        ("::1", "0:0:0:0:0:0:0:1"),
        ("2001:db8::a:0:1", "2001:db8:0:0:0:a:0:1"),
        ("2001:0DB8:0000::00FF", "2001:db8:0:0:0:0:0:ff"),
        ("::ffff:10.1.2.3", "10.1.2.3"),  # Java makes it an Inet4Address
        ("fe80::1%eth0", "fe80:0:0:0:0:0:0:1%eth0"),
        ("::", "0:0:0:0:0:0:0:0"),
        ("localhost", "localhost"),
    ],
)
def test_peer_addresses_are_written_as_java_writes_them(peer: str, java: str) -> None:
    assert java_host_address(peer) == java


def _ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


@pytest.mark.skipif(not _ipv6_loopback(), reason="no IPv6 loopback on this machine")
async def test_an_acl_for_an_ipv6_client_names_its_host_as_kafka_does(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    store = FileAclStore(data_dir / ACL_FILE)
    for group, host in (("java-form", "0:0:0:0:0:0:0:1"), ("python-form", "::1")):
        entry = acl.AccessControlEntry(
            "User:ANONYMOUS", host, acl.AclOperation.DESCRIBE, acl.AclPermissionType.ALLOW
        )
        pattern = acl.ResourcePattern(acl.ResourceType.GROUP, group)
        await store.update(pattern, lambda current, e=entry: current | {e})
    server = await start_server(
        tmp_path, "listeners=PLAINTEXT://[::1]:0",
        "authorizer.class.name=kafka.security.authorizer.AclAuthorizer",
    )  # fmt: skip
    try:
        client = await WireClient.connect("::1", server.port)
        try:
            groups = m.DescribeGroupsRequest(groups=["java-form", "python-form"])
            answer = await client.request(m.DescribeGroups.key, 0, groups)
        finally:
            await client.close()
    finally:
        await server.shutdown()
    codes = {g.group_id: g.error_code for g in answer.groups}
    assert codes == {"java-form": 0, "python-form": errors.GroupAuthorizationFailed.code}
