"""``sluice acls`` (kafka-acls' flags) and ``sluice configs --entity-type users`` (kafka-configs'
SCRAM syntax) against a broker with the authorizer on, through the admin APIs.

The broker's file store is seeded before it starts: ``User:ANONYMOUS`` (every PLAINTEXT client)
may Alter and Describe the cluster -- manage ACLs and credentials -- and nothing else, so what
the CLI adds is what decides whether ``sluice produce`` works.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from sluice.server.security import acl as sacl
from sluice.server.security.authorizer import FileAclStore
from sluice.testing.embedded import EmbeddedBroker
from tests.client.test_cli import sluice

AUTHORIZER = "kafka.security.authorizer.AclAuthorizer"


def seed_cluster_admin(data_dir: Path) -> None:
    data_dir.mkdir(parents=True, exist_ok=True)
    store = FileAclStore(data_dir / "sluice-acls.json")
    entries = frozenset(
        sacl.AccessControlEntry("User:ANONYMOUS", "*", op, sacl.AclPermissionType.ALLOW)
        for op in (sacl.AclOperation.ALTER, sacl.AclOperation.DESCRIBE)
    )
    pattern = sacl.ResourcePattern(sacl.ResourceType.CLUSTER, sacl.CLUSTER_NAME)
    asyncio.run(store.update(pattern, lambda current: current | entries))


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedBroker]:
    data_dir = tmp_path_factory.mktemp("acls-cli") / "data"
    seed_cluster_admin(data_dir)
    props = {"authorizer.class.name": AUTHORIZER, "num.partitions": "1"}
    with EmbeddedBroker(data_dir, properties=props) as b:
        yield b


def test_acls_add_list_remove_decide_what_a_producer_may_do(broker: EmbeddedBroker) -> None:
    topic = f"cli-acl-{uuid.uuid4().hex[:8]}"
    refused = sluice(broker, "produce", "--topic", topic, stdin="a\n", status=1)
    assert "TopicAuthorization" in refused.stderr or "TOPIC_AUTHORIZATION" in refused.stderr

    grant = ["--operation", "Write", "--operation", "Create", "--topic", topic]
    added = sluice(broker, "acls", "--add", "--allow-principal", "User:ANONYMOUS", *grant).stdout
    pattern = f"ResourcePattern(resourceType=TOPIC, name={topic}, patternType=LITERAL)"
    assert f"Adding ACLs for resource `{pattern}`: " in added
    assert "(principal=User:ANONYMOUS, host=*, operation=WRITE, permissionType=ALLOW)" in added
    sluice(broker, "produce", "--topic", topic, stdin="a\n")

    listed = sluice(broker, "acls", "--list", "--topic", topic).stdout
    assert listed.splitlines()[0] == f"Current ACLs for resource `{pattern}`: "
    assert sorted(line.strip() for line in listed.splitlines()[1:] if line.strip()) == [
        "(principal=User:ANONYMOUS, host=*, operation=CREATE, permissionType=ALLOW)",
        "(principal=User:ANONYMOUS, host=*, operation=WRITE, permissionType=ALLOW)",
    ]

    removed = sluice(broker, "acls", "--remove", "--force", "--allow-principal",
                     "User:ANONYMOUS", "--operation", "Write", "--topic", topic).stdout  # fmt: skip
    assert "operation=WRITE" in removed and "operation=CREATE" not in removed
    sluice(broker, "produce", "--topic", topic, stdin="b\n", status=1)


def test_prefixed_deny_listed_with_match(broker: EmbeddedBroker) -> None:
    prefix = f"cli-pfx-{uuid.uuid4().hex[:8]}-"
    sluice(broker, "acls", "--add", "--deny-principal", "User:ANONYMOUS", "--operation", "Read",
           "--topic", prefix, "--resource-pattern-type", "prefixed")  # fmt: skip
    listed = sluice(broker, "acls", "--list", "--topic", prefix + "orders",
                    "--resource-pattern-type", "match").stdout  # fmt: skip
    assert f"name={prefix}, patternType=PREFIXED" in listed
    assert "operation=READ, permissionType=DENY" in listed
    sluice(broker, "acls", "--remove", "--topic", prefix, "--resource-pattern-type", "prefixed")
    assert sluice(broker, "acls", "--list", "--topic", prefix).stdout == ""


def test_acls_usage_errors(broker: EmbeddedBroker) -> None:
    assert "exactly one action" in sluice(broker, "acls", "--topic", "t", status=2).stderr
    out = sluice(broker, "acls", "--add", "--topic", "t", status=2).stderr
    assert "--allow-principal" in out


def test_configs_users_scram_round_trip(broker: EmbeddedBroker) -> None:
    user = f"alice-{uuid.uuid4().hex[:6]}"
    scram = "SCRAM-SHA-512=[iterations=8192,password=al,ice]"
    done = sluice(broker, "configs", "--entity-type", "users", "--entity-name", user, "--alter",
                  "--add-config", scram).stdout  # fmt: skip
    assert done == f"Completed updating config for user {user}.\n"
    described = sluice(broker, "configs", "--entity-type", "users", "--entity-name", user,
                       "--describe").stdout  # fmt: skip
    line = f"SCRAM credential configs for user-principal '{user}' are "
    assert described == line + "SCRAM-SHA-512=iterations=8192\n"
    sluice(broker, "configs", "--entity-type", "users", "--entity-name", user, "--alter",
           "--delete-config", "SCRAM-SHA-512")  # fmt: skip
    gone = sluice(broker, "configs", "--entity-type", "users", "--entity-name", user,
                  "--describe", status=1).stderr  # fmt: skip
    assert "RESOURCE_NOT_FOUND" in gone
