"""Users before (or beside) a running broker: ``kafka-configs``' SCRAM syntax against the
credential stores directly, like ``kafka-configs --zookeeper`` bootstraps the first users of a
Kafka cluster::

    python -m sluice.server.security --credentials-file /var/lib/sluice/users.json \\
        --entity-type users --entity-name alice --alter \\
        --add-config 'SCRAM-SHA-512=[iterations=8192,password=alice-secret]'
    python -m sluice.server.security --zookeeper 127.0.0.1:2181/sluice \\
        --entity-type users --describe

``--add-config`` takes Kafka's ``key=value`` list, commas inside ``[...]`` kept
(``ConfigCommand.parseConfigsToBeAdded``); a SCRAM value is ``[iterations=N,]password=P``
(4096 iterations unless given); ``--delete-config SCRAM-SHA-256`` removes a mechanism.
``--describe`` prints ``kafka-configs``' lines (``SCRAM credential configs for user-principal
'alice' are SCRAM-SHA-512=iterations=8192``). Once a broker runs, the same changes go through
AlterUserScramCredentials (``kafka-configs --bootstrap-server``).

With ``--zookeeper`` the tool logs in to ZooKeeper as the brokers do, from the JAAS ``Client``
section named in ``KAFKA_OPTS`` (:mod:`sluice.server.zk.sasl`), and then, as
``kafka-configs --zookeeper`` does, creates its znodes with Kafka's secure ACLs (the
credentials readable and writable by that user only).
"""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

import click

from sluice.server.zk.errors import AuthFailedError

from .credentials import CredentialStore, FileCredentialStore, ZkCredentialStore
from .errors import InvalidCredential
from .scram import DEFAULT_ITERATIONS, SCRAM_MECHANISMS, ScramCredential, credential_from_password

if TYPE_CHECKING:
    from sluice.server.zk.sasl import ZkSasl

__all__ = ["describe_lines", "main", "parse_add_config", "scram_upserts"]

_OUTSIDE_BRACKETS = r"(?=[^\]]*(?:\[|$))"
_SCRAM_VALUE = re.compile(r"(?:iterations=(-?[0-9]*),)?password=(.*)", re.DOTALL)


def parse_add_config(text: str) -> dict[str, str]:
    """``a=1,b=[x=1,y=2]`` -> ``{"a": "1", "b": "x=1,y=2"}`` (Kafka's parsing)."""
    out: dict[str, str] = {}
    for item in re.split("," + _OUTSIDE_BRACKETS, text):
        pair = re.split(r"\s*=\s*" + _OUTSIDE_BRACKETS, item)
        if len(pair) != 2:
            raise InvalidCredential(
                'Invalid entity config: all configs to be added must be in the format "key=val".'
            )
        out[pair[0].strip()] = re.sub(r"\[?\]?", "", pair[1]).strip()
    return out


def scram_upserts(configs: dict[str, str]) -> dict[str, ScramCredential]:
    """New credentials for the SCRAM keys of ``--add-config`` (anything else is refused)."""
    unknown = [key for key in configs if key not in SCRAM_MECHANISMS]
    if unknown:
        raise InvalidCredential(
            f"Only SCRAM credential configs can be added for users here. Unexpected config "
            f"names: {','.join(unknown)}"
        )
    out = {}
    for mechanism, value in configs.items():
        match = _SCRAM_VALUE.fullmatch(value)
        if match is None:
            raise InvalidCredential(
                f"Invalid credential property {mechanism}={value}: expected "
                "[iterations=N,]password=P"
            )
        iterations = int(match.group(1)) if match.group(1) not in (None, "", "-1") else None
        out[mechanism] = credential_from_password(
            mechanism, match.group(2), iterations or DEFAULT_ITERATIONS
        )
    return out


def describe_lines(store: CredentialStore, users: Sequence[str] = ()) -> list[str]:
    everyone = store.users()
    lines = []
    for user in users or sorted(everyone):
        creds = everyone.get(user)
        if not creds:
            lines.append(
                f"Error retrieving SCRAM credential configs for user-principal '{user}': "
                "ResourceNotFoundException: Attempt to describe a user credential that does not "
                f"exist: {user}"
            )
            continue
        text = ", ".join(f"{m}=iterations={c.iterations}" for m, c in sorted(creds.items()))
        lines.append(f"SCRAM credential configs for user-principal '{user}' are {text}")
    return lines


async def _run(
    store_factory: str, location: str, name: str | None, alter: bool,
    add: dict[str, ScramCredential], delete: list[str], sasl: ZkSasl | None = None,
) -> list[str]:  # fmt: skip
    if store_factory == "file":
        store: CredentialStore = FileCredentialStore(location)
        zk = None
    else:
        from sluice.server.zk.client import ZkClient

        zk = ZkClient(location, sasl=sasl, secure_acls=sasl is not None)
        await zk.start()
        store = zk_store = ZkCredentialStore(zk)
        await zk_store.start()
    try:
        if alter:
            assert name is not None
            await store.alter(name, add, delete)
            return [f"Completed updating config for user {name}."]
        return describe_lines(store, [name] if name else [])
    finally:
        if zk is not None:
            await zk_store.close()
            await zk.close()


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--credentials-file",
    type=click.Path(dir_okay=False),
    help="A standalone broker's credentials file.",
)
@click.option("--zookeeper", help="zookeeper.connect of the cluster (host:port[/chroot]).")
@click.option("--entity-type", type=click.Choice(["users"]), required=True)
@click.option("--entity-name")
@click.option("--alter", is_flag=True)
@click.option("--describe", is_flag=True)
@click.option("--add-config", help="'SCRAM-SHA-512=[iterations=8192,password=...]'")
@click.option("--delete-config", multiple=True, help="A mechanism to remove, e.g. SCRAM-SHA-256.")
def main(
    credentials_file: str | None, zookeeper: str | None, entity_type: str, entity_name: str | None,
    alter: bool, describe: bool, add_config: str | None, delete_config: tuple[str, ...],
) -> None:  # fmt: skip
    """Add, change, remove and list SCRAM users (kafka-configs' flags)."""
    if (credentials_file is None) == (zookeeper is None):
        raise click.UsageError("give exactly one of --credentials-file and --zookeeper")
    if alter == describe:
        raise click.UsageError("give exactly one of --alter and --describe")
    if alter and not entity_name:
        raise click.UsageError("--alter needs --entity-name")
    if alter and not (add_config or delete_config):
        raise click.UsageError("--alter needs --add-config and/or --delete-config")
    deletions = [d.strip() for item in delete_config for d in item.split(",") if d.strip()]
    try:
        upserts = scram_upserts(parse_add_config(add_config)) if add_config else {}
        bad = [d for d in deletions if d not in SCRAM_MECHANISMS]
        if bad:
            raise InvalidCredential(f"unknown SCRAM mechanism(s) to delete: {', '.join(bad)}")
        kind, location = ("file", credentials_file) if credentials_file else ("zk", zookeeper)
        assert location is not None
        sasl = None
        if kind == "zk":
            from sluice.server.zk.sasl import zookeeper_sasl

            sasl = zookeeper_sasl(os.environ)  # KAFKA_OPTS' JAAS file, as Kafka's tools
        lines = asyncio.run(_run(kind, location, entity_name, alter, upserts, deletions, sasl))
    except (InvalidCredential, ValueError, AuthFailedError) as exc:
        raise click.ClickException(str(exc)) from exc
    for line in lines:
        click.echo(line)
