"""``sluice``: command-line client, with the flags of Kafka's console tools.

::

    sluice produce  --bootstrap-server HOST:PORT --topic T [--key-separator :] [--header k=v]
    sluice consume  --bootstrap-server HOST:PORT --topic T [--from-beginning | --offset N
                    --partition P | --timestamp MS] [--max-messages N] [--format text|json]
                    [--isolation-level read_uncommitted|read_committed]
    sluice topics   list | create --topic T --partitions N --config k=v | describe | delete
                    | alter --topic T --partitions N       (describe: also each topic's Configs:)
    sluice configs  --entity-type topics|brokers [--entity-name N | --entity-default]
                    --describe [--all] | --alter [--add-config k1=v1,k2=[a,b]]
                    [--delete-config k1,k2]     (sources and synonyms as kafka-configs prints them)
    sluice configs  --entity-type users [--entity-name U] --describe | --alter
                    --add-config 'SCRAM-SHA-512=[iterations=8192,password=P]'
    sluice configs  --entity-type users|clients [--entity-name N | --entity-default]
                    [--entity-type clients --entity-name C] --describe | --alter
                    --add-config producer_byte_rate=1024,consumer_byte_rate=2048
    sluice acls     --add | --remove | --list [--allow-principal User:A] [--deny-principal ...]
                    [--operation Read] --topic T | --group G | --cluster | --transactional-id X
                    [--resource-pattern-type literal|prefixed|match|any] [--allow-host H]
    sluice offsets  --topic T [--partition P] [--time -1|-2|MS]     (topic:partition:offset)
    sluice groups   list | describe --group G [--members] | delete --group G   (lag per partition)
    sluice transactions list [--state S] [--producer-id P] | describe --transactional-id X
    sluice dump-log --files a.log[,b.index] [--print-data-log] | --verify DIR
                    (--files also takes a partition's leader-epoch-checkpoint)
    sluice reassign-partitions --reassignment-json-file F --execute | --verify | --cancel
                    | --list                         (kafka-reassign-partitions' JSON and output)
    sluice leader-election --election-type preferred|unclean --all-topic-partitions
                    | --topic T --partition P | --path-to-json-file F
    sluice perf produce --topic T --num-records N --record-size S [--throughput R]
    sluice perf consume --topic T --messages N

``--bootstrap-server`` defaults to ``$SLUICE_BOOTSTRAP_SERVER`` or 127.0.0.1:9092; beside it,
``--command-config FILE`` (kafka-topics' name; also ``--producer.config`` / ``--consumer.config``)
reads Kafka client properties for a secured cluster: ``security.protocol``, ``sasl.mechanism``,
``sasl.username`` / ``sasl.password`` or ``sasl.jaas.config``, ``ssl.ca.location`` /
``ssl.truststore.location`` (PEM), ``ssl.certificate.location`` + ``ssl.key.location``.

Records go to stdout (one value per line, or JSON lines); progress and summaries go to stderr
(rich), so output can be piped. Exit status: 0 ok, 1 a Kafka or connection error (message on
stderr), 2 bad usage.
"""

from __future__ import annotations

import asyncio
import base64
import json
import re
import sys
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from datetime import datetime
from functools import wraps
from typing import Any, BinaryIO, TypeVar

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from sluice.cli.reassign import leader_election, reassign_partitions
from sluice.client.admin import SCRAM_MECHANISMS, AclBinding, AclBindingFilter, Admin, ConfigEntry
from sluice.client.cluster import Cluster, TopicPartition
from sluice.client.consumer import EARLIEST, LATEST, Consumer, ConsumerRecord
from sluice.client.group import delete_groups, describe_group, list_groups
from sluice.client.producer import COMPRESSION_CODECS, Producer
from sluice.client.transactions import describe_transaction, list_transactions
from sluice.pipeline.cli import pipeline as pipeline_jobs
from sluice.protocol.acl import AclOperation, AclPermissionType, PatternType
from sluice.protocol.acl import ResourceType as AclResourceType
from sluice.protocol.config_resources import ConfigSource, ResourceType
from sluice.protocol.errors import (
    ClusterAuthorizationFailed,
    InvalidConfig,
    KafkaError,
    ResourceNotFound,
    SluiceError,
    error_name,
)

T = TypeVar("T")

stderr = Console(stderr=True)


def _run(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` on uvloop (asyncio when uvloop is missing); client errors exit 1."""
    try:
        import uvloop

        runner: Callable[[Coroutine[Any, Any, T]], T] = uvloop.run
    except ImportError:
        runner = asyncio.run
    try:
        return runner(coro)
    except SluiceError as exc:
        raise click.ClickException(str(exc)) from exc
    except KeyboardInterrupt:
        raise SystemExit(130) from None


_SECURITY = "sluice.client.security"


def _read_client_properties(ctx: click.Context, param: click.Parameter, path: str | None) -> None:
    """``--command-config``: ``key=value`` lines (``#`` / ``!`` comments), as Kafka's tools
    read them; kept in the click context for :func:`_security`."""
    if path is None:
        return
    props: dict[str, str] = {}
    try:
        with open(path, encoding="utf-8") as fh:
            for line in fh:
                line = line.strip()
                if line and line[0] not in "#!":
                    key, _, value = line.partition("=")
                    props[key.strip()] = value.strip()
    except OSError as exc:
        raise click.BadParameter(str(exc), ctx=ctx, param=param) from exc
    ctx.meta[_SECURITY] = props


def _security() -> dict[str, str] | None:
    """The client properties ``--command-config`` gave (None: PLAINTEXT)."""
    ctx = click.get_current_context(silent=True)
    return None if ctx is None else ctx.meta.get(_SECURITY)


def bootstrap_option(f: Callable[..., Any]) -> Callable[..., Any]:
    f = click.option(
        "--command-config",
        "--producer.config",
        "--consumer.config",
        type=click.Path(dir_okay=False),
        expose_value=False,
        callback=_read_client_properties,
        help="Kafka client properties (security.protocol, sasl.*, ssl.*) for a secured cluster.",
    )(f)
    return click.option(
        "--bootstrap-server",
        "bootstrap",
        envvar="SLUICE_BOOTSTRAP_SERVER",
        default="127.0.0.1:9092",
        show_default=True,
        help="host:port[,host:port] of the cluster.",
    )(f)


def async_command(f: Callable[..., Awaitable[Any]]) -> Callable[..., Any]:
    @wraps(f)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return _run(f(*args, **kwargs))  # type: ignore[arg-type]

    return wrapper


def _pairs(items: tuple[str, ...], what: str) -> list[tuple[str, str]]:
    out = []
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{item!r} is not key=value", param_hint=what)
        out.append((key, value))
    return out


class _Commands(click.Group):
    """The command group, with ``dump-log`` imported only when it is asked for: it reads the
    storage engine's files through the broker's storage modules (and their logging), ~50 ms of
    imports that every other command would pay at each start."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), "dump-log"})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name == "dump-log" and cmd_name not in self.commands:
            from sluice.server.storage.dump_log import main as dump_log

            self.add_command(dump_log, cmd_name)
        return super().get_command(ctx, cmd_name)


@click.group(cls=_Commands, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option("0.1.0", prog_name="sluice")
def cli() -> None:
    """Sluice command-line client (works with any Kafka-compatible broker)."""


# --- produce -------------------------------------------------------------------------------


@cli.command()
@bootstrap_option
@click.option("--topic", required=True)
@click.option("--file", "file_", type=click.File("rb"), help="Read lines from FILE, not stdin.")
@click.option("--key-separator", help="Split each line at the first SEP into key and value.")
@click.option("--header", "headers", multiple=True, metavar="KEY=VALUE", help="Repeatable.")
@click.option("--partition", type=int, help="Send every record to this partition.")
@click.option("--acks", type=click.Choice(["0", "1", "-1", "all"]), default="all")
@click.option("--compression", type=click.Choice([c for c in COMPRESSION_CODECS if c]))
@click.option("--linger-ms", type=float, default=5.0, show_default=True)
@async_command
async def produce(
    bootstrap: str,
    topic: str,
    file_: BinaryIO | None,
    key_separator: str | None,
    headers: tuple[str, ...],
    partition: int | None,
    acks: str,
    compression: str | None,
    linger_ms: float,
) -> None:
    """Send each input line as one record (like kafka-console-producer)."""
    hdrs = [(k, v.encode()) for k, v in _pairs(headers, "--header")]
    source = file_ if file_ is not None else sys.stdin.buffer
    sep = key_separator.encode() if key_separator is not None else None
    futures = []
    async with Producer(
        bootstrap,
        security=_security(),
        acks=acks,
        compression=compression,
        linger_ms=linger_ms,
        client_id="sluice-console-producer",
    ) as producer:
        for number, raw in enumerate(source, 1):
            line = raw.rstrip(b"\r\n")
            key = None
            if sep is not None:
                key, found, value = line.partition(sep)
                if not found:
                    raise click.ClickException(
                        f"line {number}: no key separator {key_separator!r} found"
                    )
            else:
                value = line
            futures.append(
                await producer.send(topic, value, key, partition=partition, headers=hdrs)
            )
        await producer.flush()
    failed = [f.exception() for f in futures if f.exception() is not None]
    if failed:
        raise click.ClickException(f"{len(failed)} of {len(futures)} records failed: {failed[0]}")
    stderr.print(f"Produced {len(futures)} record(s) to {topic}", highlight=False)


# --- consume -------------------------------------------------------------------------------


def _text(data: bytes | None) -> str:
    return "null" if data is None else data.decode("utf-8", errors="backslashreplace")


def _json_bytes(data: bytes | None) -> Any:
    if data is None:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(data).decode()}


def _format_record(r: ConsumerRecord, fmt: str, print_key: bool, key_sep: str) -> str:
    if fmt == "json":
        return json.dumps(
            {
                "topic": r.topic,
                "partition": r.partition,
                "offset": r.offset,
                "timestamp": r.timestamp,
                "timestamp_type": r.timestamp_type,
                "key": _json_bytes(r.key),
                "value": _json_bytes(r.value),
                "headers": [[k, _json_bytes(v)] for k, v in r.headers],
            }
        )
    if print_key:
        return f"{_text(r.key)}{key_sep}{_text(r.value)}"
    return _text(r.value)


def _parse_timestamp(text: str) -> int:
    """Milliseconds since the epoch, or an ISO-8601 date/time (UTC unless it has an offset)."""
    try:
        return int(text)
    except ValueError:
        pass
    try:
        dt = datetime.fromisoformat(text)
    except ValueError:
        raise click.BadParameter(f"{text!r}: give ms since the epoch or ISO-8601") from None
    if dt.tzinfo is None:
        from datetime import UTC

        dt = dt.replace(tzinfo=UTC)
    return int(dt.timestamp() * 1000)


@cli.command()
@bootstrap_option
@click.option("--topic", required=True)
@click.option("--partition", type=int, help="Only this partition (all when omitted).")
@click.option("--offset", help="earliest, latest or an offset (needs --partition).")
@click.option("--from-beginning", is_flag=True, help="Start at the earliest offset.")
@click.option("--timestamp", help="Start at the first record at/after this time (ms or ISO).")
@click.option("--max-messages", type=int, help="Exit after this many records.")
@click.option("--timeout-ms", type=int, help="Exit after this long without a record.")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text")
@click.option("--print-key", is_flag=True, help="text format: print key<SEP>value.")
@click.option("--key-separator", default="\t", show_default="TAB")
@click.option(
    "--isolation-level",
    type=click.Choice(["read_uncommitted", "read_committed"]),
    default="read_uncommitted",
    show_default=True,
    help="read_committed: stop at the last stable offset, skip aborted transactions.",
)
@async_command
async def consume(
    bootstrap: str,
    topic: str,
    partition: int | None,
    offset: str | None,
    from_beginning: bool,
    timestamp: str | None,
    max_messages: int | None,
    timeout_ms: int | None,
    fmt: str,
    print_key: bool,
    key_separator: str,
    isolation_level: str,
) -> None:
    """Print records, one value per line (like kafka-console-consumer)."""
    if offset is not None and partition is None:
        raise click.UsageError("--offset needs --partition")
    if sum(x is not None and x is not False for x in (offset, timestamp, from_beginning)) > 1:
        raise click.UsageError("give at most one of --offset, --timestamp, --from-beginning")
    out = sys.stdout
    async with Consumer(
        bootstrap,
        client_id="sluice-console-consumer",
        security=_security(),
        isolation_level=isolation_level,
    ) as consumer:
        parts = [partition] if partition is not None else await consumer.partitions_for_topic(topic)
        tps = [TopicPartition(topic, p) for p in parts]
        consumer.assign(tps)
        if from_beginning or offset == "earliest":
            await consumer.seek_to_beginning(*tps)
        elif timestamp is not None:
            await consumer.seek_to_timestamp(_parse_timestamp(timestamp), *tps)
        elif offset is None or offset == "latest":
            await consumer.seek_to_end(*tps)
        else:
            try:
                consumer.seek(tps[0], int(offset))
            except ValueError:
                raise click.BadParameter(f"{offset!r}", param_hint="--offset") from None
        count = 0
        idle_limit = timeout_ms / 1000 if timeout_ms is not None else None
        loop = asyncio.get_running_loop()
        last = loop.time()
        while max_messages is None or count < max_messages:
            want = None if max_messages is None else max_messages - count
            batch = await consumer.getmany(timeout_ms=200, max_records=want)
            if not batch:
                if idle_limit is not None and loop.time() - last >= idle_limit:
                    break
                continue
            last = loop.time()
            lines = [
                _format_record(r, fmt, print_key, key_separator)
                for records in batch.values()
                for r in records
            ]
            out.write("\n".join(lines) + "\n")
            out.flush()
            count += len(lines)
    stderr.print(f"Processed a total of {count} messages", highlight=False)


# --- topics --------------------------------------------------------------------------------


@cli.group()
def topics() -> None:
    """List, create, describe and delete topics (like kafka-topics)."""


@topics.command("list")
@bootstrap_option
@async_command
async def topics_list(bootstrap: str) -> None:
    """Print every topic name, one per line."""
    async with Admin(bootstrap, security=_security()) as admin:
        names = await admin.list_topics()
    for name in sorted(names):
        click.echo(name)


@topics.command("create")
@bootstrap_option
@click.option("--topic", required=True)
@click.option("--partitions", type=int, default=-1, help="Default: the broker's num.partitions.")
@click.option(
    "--replication-factor",
    type=int,
    default=-1,
    help="Replicas per partition (default: the broker's default.replication.factor).",
)
@click.option("--config", "configs", multiple=True, metavar="KEY=VALUE", help="Topic config.")
@click.option("--if-not-exists", is_flag=True)
@async_command
async def topics_create(
    bootstrap: str,
    topic: str,
    partitions: int,
    replication_factor: int,
    configs: tuple[str, ...],
    if_not_exists: bool,
) -> None:
    """Create a topic with configs (e.g. --config retention.ms=3600000)."""
    from sluice.protocol.errors import TopicAlreadyExists

    async with Admin(bootstrap, security=_security()) as admin:
        try:
            await admin.create_topic(
                topic, partitions, dict(_pairs(configs, "--config")), replication_factor
            )
        except TopicAlreadyExists:
            if not if_not_exists:
                raise
            return
    click.echo(f"Created topic {topic}.")


@topics.command("describe")
@bootstrap_option
@click.option("--topic", help="Only this topic (all when omitted).")
@click.option(
    "--under-replicated-partitions",
    "under_replicated",
    is_flag=True,
    help="Only partitions whose ISR is smaller than their replica set.",
)
@click.option(
    "--unavailable-partitions",
    "unavailable",
    is_flag=True,
    help="Only partitions without a leader.",
)
@async_command
async def topics_describe(
    bootstrap: str, topic: str | None, under_replicated: bool, unavailable: bool
) -> None:
    """Partitions, leaders, replicas, ISR and offline replicas of topics (kafka-topics'
    --describe, with its --under-replicated-partitions and --unavailable-partitions). Each
    topic's line gives its partition count, replication factor and the configs that are not at
    their defaults, as kafka-topics prints them (``Configs: retention.ms=3600000``); the
    partition filters print only the matching partitions."""
    summaries = not (under_replicated or unavailable)
    async with Admin(bootstrap, security=_security()) as admin:
        described = await admin.describe_topics([topic] if topic else None)
        for d in described:
            if d.error is not None:
                raise click.ClickException(f"{d.name}: {d.error}")
        configs: list[list[ConfigEntry]] = []
        if summaries:
            configs = list(await asyncio.gather(*(
                admin.describe_configs(ResourceType.TOPIC, d.name) for d in described
            )))  # fmt: skip
    console = Console(width=120)
    table = _partition_table()
    for i, d in enumerate(described):
        if summaries:
            rf = max((len(p.replicas) for p in d.partitions), default=0)
            set_here = ",".join(f"{e.name}={e.value}" for e in configs[i] if not e.is_default)
            click.echo(f"Topic: {d.name}\tPartitionCount: {len(d.partitions)}\t"
                       f"ReplicationFactor: {rf}\tConfigs: {set_here}")  # fmt: skip
        for p in d.partitions:
            if under_replicated and len(p.isr) >= len(p.replicas):
                continue
            if unavailable and p.leader >= 0:
                continue
            table.add_row(
                d.name,
                str(p.partition),
                str(p.leader) if p.leader >= 0 else "none",
                ",".join(map(str, p.replicas)),
                ",".join(map(str, p.isr)),
                ",".join(map(str, p.offline)),
            )
        if summaries:
            console.print(table)
            table = _partition_table()
    if not summaries:
        console.print(table)


def _partition_table() -> Table:
    return Table("Topic", "Partition", "Leader", "Replicas", "Isr", "Offline")


@topics.command("alter")
@bootstrap_option
@click.option("--topic", required=True)
@click.option("--partitions", type=int, required=True, help="The new (larger) partition count.")
@async_command
async def topics_alter(bootstrap: str, topic: str, partitions: int) -> None:
    """Add partitions to a topic (kafka-topics --alter --partitions); existing records stay
    where they are, so keys may map to other partitions from now on."""
    async with Admin(bootstrap, security=_security()) as admin:
        error = (await admin.create_partitions({topic: partitions}))[topic]
    if error is not None:
        raise error
    click.echo(f"Topic {topic} now has {partitions} partitions.")


@topics.command("delete")
@bootstrap_option
@click.option("--topic", required=True)
@async_command
async def topics_delete(bootstrap: str, topic: str) -> None:
    """Delete a topic and all its data."""
    async with Admin(bootstrap, security=_security()) as admin:
        await admin.delete_topic(topic)
    click.echo(f"Deleted topic {topic}.")


# --- configs -------------------------------------------------------------------------------

_ENTITY_TYPES = {"topics": ResourceType.TOPIC, "brokers": ResourceType.BROKER}
#: kafka-configs' entity types of client quotas, by the quota entity type each names.
_QUOTA_ENTITY_TYPES = {"users": "user", "clients": "client-id"}


def _parse_add_config(text: str) -> dict[str, str]:
    """kafka-configs' ``--add-config``: ``k1=v1,k2=[a,b],k3=v3`` (square brackets group a value
    that holds commas; they are not part of it)."""
    out: dict[str, str] = {}
    for item in re.split(r",(?=[^\]]*(?:\[|$))", text):
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(
                f"{item!r}: every config to add must be key=value", param_hint="--add-config"
            )
        value = value.strip()
        if value.startswith("[") and value.endswith("]"):
            value = value[1:-1]
        out[key.strip()] = value
    return out


def _config_line(e: ConfigEntry) -> str:
    def text(value: str | None) -> str:
        return "null" if value is None or e.sensitive else value

    synonyms = ", ".join(f"{s.source}:{s.name}={text(s.value)}" for s in e.synonyms)
    sensitive = str(e.sensitive).lower()
    return f"  {e.name}={text(e.value)} sensitive={sensitive} synonyms={{{synonyms}}}"


def _dynamic(resource_type: ResourceType, name: str) -> str:
    """The source kafka-configs' --describe lists without --all: what was altered at runtime."""
    if resource_type == ResourceType.TOPIC:
        return ConfigSource.DYNAMIC_TOPIC_CONFIG.name
    if name:
        return ConfigSource.DYNAMIC_BROKER_CONFIG.name
    return ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.name


def _kafka_error(exc: KafkaError) -> click.ClickException:
    """A broker's refusal as kafka-configs reports it: Kafka's error name, then the reason."""
    return click.ClickException(f"{error_name(exc.code)}: {exc.args[0]}")


@cli.command()
@bootstrap_option
@click.option(
    "--entity-type", "entity_types", multiple=True, required=True,
    type=click.Choice(sorted([*_ENTITY_TYPES, *_QUOTA_ENTITY_TYPES])),
    help="Repeat as users then clients for a user's client id's quotas.",
)  # fmt: skip
@click.option(
    "--entity-name", "entity_names", multiple=True,
    help="The topic, broker id, user or client id (all of them when omitted); one per type.",
)  # fmt: skip
@click.option(
    "--entity-default", is_flag=True,
    help="brokers: the cluster-wide default; users/clients: the default entity (of the last "
    "type without a name).",
)  # fmt: skip
@click.option("--describe", "describe_", is_flag=True, help="List the entity's configs.")
@click.option("--all", "all_", is_flag=True, help="--describe: every config, defaults too.")
@click.option("--alter", is_flag=True, help="Change configs (--add-config, --delete-config).")
@click.option("--add-config", metavar="K1=V1,K2=[A,B]", help="Configs to set.")
@click.option("--delete-config", metavar="K1,K2", help="Configs to remove (back to the default).")
@async_command
async def configs(
    bootstrap: str,
    entity_types: tuple[str, ...],
    entity_names: tuple[str, ...],
    entity_default: bool,
    describe_: bool,
    all_: bool,
    alter: bool,
    add_config: str | None,
    delete_config: str | None,
) -> None:
    """Describe and alter topic and broker configs (like kafka-configs).

    --describe prints the configs altered at runtime (--all: every config), each with its
    source and synonyms, most specific first (``DYNAMIC_TOPIC_CONFIG``,
    ``STATIC_BROKER_CONFIG``, ``DEFAULT_CONFIG``). --alter sends one IncrementalAlterConfigs:
    the broker validates every change before applying any.

    Users (``--entity-type users``): SCRAM credentials through the KIP-554 APIs,
    ``--add-config 'SCRAM-SHA-512=[iterations=8192,password=secret]'`` (4096 iterations when
    not given; the password is salted and hashed here), ``--delete-config SCRAM-SHA-256``.

    Client quotas (``--entity-type users`` and/or ``clients``): ``producer_byte_rate``,
    ``consumer_byte_rate``, ``request_percentage`` through AlterClientQuotas /
    DescribeClientQuotas; ``--entity-default`` is the default user or client id."""
    if describe_ == alter:
        raise click.UsageError("give exactly one action: --describe or --alter")
    if len(entity_names) > len(entity_types):
        raise click.UsageError("one --entity-name per --entity-type at most")
    if set(entity_types) & set(_QUOTA_ENTITY_TYPES):
        await _client_configs(bootstrap, entity_types, entity_names, entity_default, alter,
                              add_config, delete_config)  # fmt: skip
        return
    if len(entity_types) > 1:
        raise click.UsageError("only users and clients combine (a user's client id)")
    entity_type = entity_types[0]
    entity_name = entity_names[0] if entity_names else None
    resource_type = _ENTITY_TYPES[entity_type]
    if entity_default and entity_name is not None:
        raise click.UsageError("give --entity-name or --entity-default, not both")
    if entity_default and resource_type != ResourceType.BROKER:
        raise click.UsageError("--entity-default applies to --entity-type brokers")
    if describe_ and (add_config is not None or delete_config is not None):
        raise click.UsageError("--add-config and --delete-config go with --alter")
    if alter and all_:
        raise click.UsageError("--all goes with --describe")
    name = "" if entity_default else entity_name
    if alter:
        if name is None:
            brokers = resource_type == ResourceType.BROKER
            raise click.UsageError(
                f"--alter needs --entity-name{' or --entity-default' if brokers else ''}"
            )
        if add_config is None and delete_config is None:
            raise click.UsageError("--alter needs --add-config or --delete-config")
        to_set = _parse_add_config(add_config) if add_config is not None else {}
        to_delete = [k.strip() for k in (delete_config or "").split(",") if k.strip()]
        async with Admin(bootstrap, security=_security()) as admin:
            try:
                current = await admin.describe_configs(resource_type, name)
                dynamic = {e.name for e in current if e.source == _dynamic(resource_type, name)}
                if missing := [k for k in to_delete if k not in dynamic]:
                    raise _kafka_error(InvalidConfig(f"Invalid config(s): {','.join(missing)}"))
                await admin.incremental_alter_configs(
                    resource_type, name, set_values=to_set, delete=to_delete
                )
            except KafkaError as exc:
                raise _kafka_error(exc) from exc
        if resource_type == ResourceType.TOPIC:
            click.echo(f"Completed updating config for topic {name}.")
        elif name:
            click.echo(f"Completed updating config for broker {name}.")
        else:
            click.echo("Completed updating default config for brokers in the cluster.")
        return
    async with Admin(bootstrap, security=_security()) as admin:
        if name is not None:
            names = [name]
        elif resource_type == ResourceType.TOPIC:
            names = sorted(await admin.list_topics())
        else:
            names = [*map(str, await admin.brokers()), ""]
        for n in names:
            try:
                entries = await admin.describe_configs(resource_type, n)
            except KafkaError as exc:
                raise _kafka_error(exc) from exc
            if not n:
                click.echo("Default configs for brokers in the cluster are:")
            else:
                which = "All" if all_ else "Dynamic"
                click.echo(f"{which} configs for {entity_type[:-1]} {n} are:")
            for e in entries:
                if all_ or e.source == _dynamic(resource_type, n):
                    click.echo(_config_line(e))


def _quota_entity_text(entity: Mapping[str, str | None]) -> str:
    """kafka-configs' ``entityStr``: ``user-principal 'alice', client-id 'app'``."""
    parts = []
    for entity_type, label in (("user", "user-principal"), ("client-id", "client-id")):
        if entity_type in entity:
            name = entity[entity_type]
            parts.append(f"the default {label}" if name is None else f"{label} '{name}'")
    return ", ".join(parts)


async def _client_configs(
    bootstrap: str,
    types: tuple[str, ...],
    names: tuple[str, ...],
    default: bool,
    alter: bool,
    add: str | None,
    delete: str | None,
) -> None:
    """``configs --entity-type users|clients``: client quotas (and a user's SCRAM credentials,
    which share the user's entity), with kafka-configs' output."""
    if len(types) > 2 or len(set(types)) != len(types) or not set(types) <= {*_QUOTA_ENTITY_TYPES}:
        raise click.UsageError("client quotas: --entity-type users, clients, or users then clients")
    entity: dict[str, str | None] = {}
    unnamed = []
    for i, entity_type in enumerate(types):
        if i < len(names):
            entity[_QUOTA_ENTITY_TYPES[entity_type]] = names[i]
        else:
            unnamed.append(_QUOTA_ENTITY_TYPES[entity_type])
    if default:
        if not unnamed:
            raise click.UsageError("--entity-default goes with an --entity-type without a name")
        entity[unnamed.pop()] = None
    if not alter:
        if unnamed and entity:
            raise click.UsageError("describe: name every entity type, or none")
        users_only = types == ("users",)  # the user's entity also holds its SCRAM credentials
        async with Admin(bootstrap, security=_security()) as admin:
            found: list[tuple[dict[str, str | None], dict[str, float]]] = []
            try:
                components = list(entity.items())
                if not components:  # every entity of the types given
                    found = await admin.describe_client_quotas()
                    wanted = {_QUOTA_ENTITY_TYPES[t] for t in types}
                    found = [(e, v) for e, v in found if set(e) == wanted]
                else:
                    found = await admin.describe_client_quotas(components, strict=True)
            except ClusterAuthorizationFailed as exc:
                if not users_only:  # (a user's SCRAM credentials need Describe alone)
                    raise _kafka_error(exc) from exc
                click.echo(f"(quotas not shown: {error_name(exc.code)})", err=True)
            except KafkaError as exc:
                raise _kafka_error(exc) from exc
            for ent, values in found:
                listed = ", ".join(f"{k}={v}" for k, v in values.items())
                click.echo(f"Quota configs for {_quota_entity_text(ent)} are {listed}")
            if users_only:
                try:
                    _echo_scram(await admin.describe_user_scram_credentials(names[:1] or None))
                except KafkaError as exc:
                    if not (found and isinstance(exc, ResourceNotFound)):  # quotas alone: fine
                        raise _kafka_error(exc) from exc
        return
    if unnamed:
        raise click.UsageError("--alter needs --entity-name or --entity-default for each type")
    if add is None and delete is None:
        raise click.UsageError("--alter needs --add-config or --delete-config")
    to_set = _parse_add_config(add) if add is not None else {}
    to_delete = [k.strip() for k in (delete or "").split(",") if k.strip()]
    scram_set = {k: v for k, v in to_set.items() if k in SCRAM_MECHANISMS}
    scram_delete = [k for k in to_delete if k in SCRAM_MECHANISMS]
    if (scram_set or scram_delete) and (types != ("users",) or default):
        raise click.UsageError("SCRAM credentials belong to a named user alone")
    quotas: dict[str, float] = {}
    for key, value in to_set.items():
        if key in scram_set:
            continue
        try:
            quotas[key] = float(value)
        except ValueError:
            raise click.BadParameter(
                f"{key}={value}: a number", param_hint="--add-config"
            ) from None
    removed = [k for k in to_delete if k not in scram_delete]
    if quotas or removed:
        async with Admin(bootstrap, security=_security()) as admin:
            try:
                await admin.alter_client_quotas(entity, quotas, removed)
            except KafkaError as exc:
                raise _kafka_error(exc) from exc
    if scram_set or scram_delete:
        user = names[0]
        add_scram = ",".join(f"{k}=[{v}]" for k, v in scram_set.items()) or None
        await _user_configs(bootstrap, user, True, add_scram, ",".join(scram_delete) or None)
        return  # (it printed the completion)
    if len(types) == 2:
        click.echo(f"Completed updating config for entity: {_quota_entity_text(entity)}.")
    elif entity[_QUOTA_ENTITY_TYPES[types[0]]] is None:
        click.echo(f"Completed updating default config for {types[0]} in the cluster.")
    else:
        click.echo(f"Completed updating config for {types[0][:-1]} {names[0]}.")


_SCRAM_VALUE = re.compile(r"(?:iterations=([0-9]+),)?password=(.*)", re.DOTALL)
#: Kafka's ``ScramMechanism`` default iterations (kafka-configs without ``iterations=``).
DEFAULT_SCRAM_ITERATIONS = 4096


def _echo_scram(found: Mapping[str, Mapping[str, int]]) -> None:
    for name, mechanisms in found.items():
        listed = ",".join(f"{m}=iterations={i}" for m, i in sorted(mechanisms.items()))
        click.echo(f"SCRAM credential configs for user-principal '{name}' are {listed}")


async def _user_configs(
    bootstrap: str, user: str | None, alter: bool, add: str | None, delete: str | None
) -> None:
    """``configs --entity-type users``: SCRAM credentials, with kafka-configs' output."""
    async with Admin(bootstrap) as admin:
        if not alter:
            try:
                found = await admin.describe_user_scram_credentials(
                    None if user is None else [user]
                )
            except KafkaError as exc:
                raise _kafka_error(exc) from exc
            _echo_scram(found)
            return
        if user is None:
            raise click.UsageError("--alter needs --entity-name")
        if add is None and delete is None:
            raise click.UsageError("--alter needs --add-config or --delete-config")
        upserts = []
        for mechanism, value in (_parse_add_config(add) if add else {}).items():
            match = _SCRAM_VALUE.fullmatch(value)
            if mechanism not in SCRAM_MECHANISMS or match is None:
                raise click.BadParameter(
                    f"{mechanism}: expected SCRAM-SHA-256 or SCRAM-SHA-512 = "
                    "[iterations=N,]password=P",
                    param_hint="--add-config",
                )
            iterations = int(match.group(1) or DEFAULT_SCRAM_ITERATIONS)
            upserts.append((user, mechanism, match.group(2), iterations))
        deletions = [(user, k.strip()) for k in (delete or "").split(",") if k.strip()]
        try:
            results = await admin.alter_user_scram_credentials(upserts, deletions)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--delete-config") from exc
        error = results.get(user)
        if error is not None:
            raise _kafka_error(error)
    click.echo(f"Completed updating config for user {user}.")


# --- acls ----------------------------------------------------------------------------------

_PATTERN_TYPES = {"literal": PatternType.LITERAL, "prefixed": PatternType.PREFIXED,
                  "match": PatternType.MATCH, "any": PatternType.ANY}  # fmt: skip
_OPERATIONS = {
    "".join(w.capitalize() for w in op.name.split("_")): op
    for op in AclOperation
    if op not in (AclOperation.UNKNOWN, AclOperation.ANY)
}


def _acl_text(b: AclBinding) -> str:
    return (
        f"(principal={b.principal}, host={b.host}, operation={b.operation.name}, "
        f"permissionType={b.permission.name})"
    )


def _pattern_text(resource_type: AclResourceType, name: str, pattern: PatternType) -> str:
    return (
        f"ResourcePattern(resourceType={resource_type.name}, name={name}, "
        f"patternType={pattern.name})"
    )


@cli.command()
@bootstrap_option
@click.option("--add", is_flag=True, help="Add the ACLs described.")
@click.option("--remove", is_flag=True, help="Remove the ACLs described.")
@click.option("--list", "list_", is_flag=True, help="List ACLs (of the resources named, or all).")
@click.option("--allow-principal", multiple=True, metavar="User:NAME", help="Repeatable.")
@click.option("--deny-principal", multiple=True, metavar="User:NAME", help="Repeatable.")
@click.option("--allow-host", multiple=True, help="Repeatable (default: * with --allow-principal).")
@click.option("--deny-host", multiple=True, help="Repeatable (default: * with --deny-principal).")
@click.option("--principal", help="--list: only this principal's ACLs.")
@click.option(
    "--operation", "operations", multiple=True, type=click.Choice(sorted(_OPERATIONS)),
    help="Repeatable (default: All).",
)  # fmt: skip
@click.option("--topic", "topics", multiple=True, help="Repeatable; '*' is every topic.")
@click.option("--group", "groups", multiple=True, help="Repeatable; '*' is every group.")
@click.option("--cluster", is_flag=True, help="The cluster resource.")
@click.option("--transactional-id", "transactional_ids", multiple=True, help="Repeatable.")
@click.option(
    "--resource-pattern-type", type=click.Choice(sorted(_PATTERN_TYPES)),
    help="literal (default for --add/--remove), prefixed, match, any (default for --list).",
)  # fmt: skip
@click.option("--force", is_flag=True, help="Accepted for kafka-acls; removal never prompts.")
@async_command
async def acls(
    bootstrap: str, add: bool, remove: bool, list_: bool, allow_principal: tuple[str, ...],
    deny_principal: tuple[str, ...], allow_host: tuple[str, ...], deny_host: tuple[str, ...],
    principal: str | None, operations: tuple[str, ...], topics: tuple[str, ...],
    groups: tuple[str, ...], cluster: bool, transactional_ids: tuple[str, ...],
    resource_pattern_type: str | None, force: bool,
) -> None:  # fmt: skip
    """Add, remove and list ACLs (like kafka-acls --bootstrap-server), through CreateAcls,
    DeleteAcls and DescribeAcls: the broker needs ``authorizer.class.name``, and the caller
    Alter (add, remove) or Describe (list) on the cluster."""
    if add + remove + list_ != 1:
        raise click.UsageError("give exactly one action: --add, --remove or --list")
    resources = (
        [(AclResourceType.TOPIC, t) for t in topics]
        + [(AclResourceType.GROUP, g) for g in groups]
        + [(AclResourceType.TRANSACTIONAL_ID, t) for t in transactional_ids]
        + ([(AclResourceType.CLUSTER, "kafka-cluster")] if cluster else [])
    )
    pattern = _PATTERN_TYPES[resource_pattern_type or ("any" if list_ else "literal")]
    if list_:
        await _list_acls(bootstrap, resources, pattern, principal)
        return
    if not resources:
        raise click.UsageError("name a resource: --topic, --group, --cluster or --transactional-id")
    if pattern not in (PatternType.LITERAL, PatternType.PREFIXED) and add:
        raise click.UsageError("--add takes --resource-pattern-type literal or prefixed")
    if add and not (allow_principal or deny_principal):
        raise click.UsageError("--add needs --allow-principal or --deny-principal")
    entries = [
        (p, h, AclPermissionType.ALLOW) for p in allow_principal for h in (allow_host or ("*",))
    ] + [(p, h, AclPermissionType.DENY) for p in deny_principal for h in (deny_host or ("*",))]
    ops = [_OPERATIONS[o] for o in operations] or [AclOperation.ALL]
    async with Admin(bootstrap) as admin:
        try:
            if add:
                for rtype, name in resources:
                    bindings = [
                        AclBinding(rtype, name, pattern, p, h, op, perm)
                        for p, h, perm in entries
                        for op in ops
                    ]
                    click.echo(
                        f"Adding ACLs for resource `{_pattern_text(rtype, name, pattern)}`: "
                    )
                    for b in bindings:
                        click.echo(f" \t{_acl_text(b)} ")
                    errors = [e for e in await admin.create_acls(bindings) if e is not None]
                    if errors:
                        raise errors[0]
                    click.echo()
            else:
                who: list[tuple[str | None, str | None, AclPermissionType]] = [*entries]
                what: list[AclOperation] = [_OPERATIONS[o] for o in operations]
                filters = [
                    AclBindingFilter(rtype, name, pattern, p, h, op, perm)
                    for rtype, name in resources
                    for p, h, perm in (who or [(None, None, AclPermissionType.ANY)])
                    for op in (what or [AclOperation.ANY])
                ]
                deleted = await admin.delete_acls(filters)
                for b in (b for found in deleted for b in found):
                    click.echo(
                        f"Removed ACL {_acl_text(b)} for resource "
                        f"`{_pattern_text(b.resource_type, b.name, b.pattern_type)}`"
                    )
        except KafkaError as exc:
            raise _kafka_error(exc) from exc
    if add:
        await _list_acls(bootstrap, resources, pattern, None)


async def _list_acls(
    bootstrap: str,
    resources: list[tuple[AclResourceType, str]],
    pattern: PatternType,
    principal: str | None,
) -> None:
    filters = [AclBindingFilter(t, n, pattern, principal) for t, n in resources] or [
        AclBindingFilter(principal=principal)
    ]
    async with Admin(bootstrap) as admin:
        try:
            found = [b for f in filters for b in await admin.describe_acls(f)]
        except KafkaError as exc:
            raise _kafka_error(exc) from exc
    by_pattern: dict[tuple[AclResourceType, str, PatternType], list[AclBinding]] = {}
    for b in found:
        by_pattern.setdefault((b.resource_type, b.name, b.pattern_type), []).append(b)
    for key, bindings in by_pattern.items():
        click.echo(f"Current ACLs for resource `{_pattern_text(*key)}`: ")
        for b in dict.fromkeys(bindings):
            click.echo(f" \t{_acl_text(b)} ")
        click.echo()


# --- offsets -------------------------------------------------------------------------------


@cli.command()
@bootstrap_option
@click.option("--topic", required=True)
@click.option("--partition", "partitions", type=int, multiple=True, help="Repeatable; all.")
@click.option(
    "--time",
    "when",
    default="-1",
    show_default=True,
    help="-1 latest, -2 earliest, or a timestamp (ms or ISO): first offset at/after it.",
)
@async_command
async def offsets(bootstrap: str, topic: str, partitions: tuple[int, ...], when: str) -> None:
    """Print topic:partition:offset per partition (like kafka-get-offsets)."""
    ts = {"latest": LATEST, "earliest": EARLIEST}.get(when)
    if ts is None:
        ts = _parse_timestamp(when)
    async with Admin(bootstrap, security=_security()) as admin:
        parts = list(partitions) or await admin.partitions(topic)
        found = await admin.list_offsets({TopicPartition(topic, p): ts for p in parts})
    for tp in sorted(found):
        hit = found[tp]
        click.echo(f"{tp.topic}:{tp.partition}:{hit.offset if hit is not None else ''}")


# --- transactions --------------------------------------------------------------------------


@cli.group()
def transactions() -> None:
    """List and describe transactions (like kafka-transactions)."""


@transactions.command("list")
@bootstrap_option
@click.option("--state", "states", multiple=True, help="Only in this state (repeatable).")
@click.option("--producer-id", "producer_ids", type=int, multiple=True, help="Repeatable.")
@async_command
async def transactions_list(
    bootstrap: str, states: tuple[str, ...], producer_ids: tuple[int, ...]
) -> None:
    """Every transactional id: its coordinator, producer id and state."""
    cluster = Cluster(bootstrap, client_id="sluice-cli", security=_security())
    try:
        await cluster.start()
        found = await list_transactions(cluster, list(states), list(producer_ids))
    finally:
        await cluster.close()
    table = Table("TransactionalId", "Coordinator", "ProducerId", "TransactionState")
    for t in found:
        table.add_row(t.transactional_id, str(t.coordinator_id), str(t.producer_id), t.state)
    Console(width=200).print(table)


@transactions.command("describe")
@bootstrap_option
@click.option("--transactional-id", required=True)
@async_command
async def transactions_describe(bootstrap: str, transactional_id: str) -> None:
    """The transaction's coordinator, producer, state, timeout, start and partitions."""
    cluster = Cluster(bootstrap, client_id="sluice-cli", security=_security())
    try:
        await cluster.start()
        d = await describe_transaction(cluster, transactional_id)
    finally:
        await cluster.close()
    table = Table(
        "CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch", "TransactionState",
        "TransactionTimeoutMs", "CurrentTransactionStartTimeMs", "TransactionDurationMs",
        "TopicPartitions",
    )  # fmt: skip
    started = d.start_time_ms if d.start_time_ms >= 0 else None
    now_ms = int(datetime.now().timestamp() * 1000)
    table.add_row(
        str(d.coordinator_id), d.transactional_id, str(d.producer_id), str(d.producer_epoch),
        d.state, str(d.timeout_ms), "None" if started is None else str(started),
        "None" if started is None else str(now_ms - started),
        ",".join(f"{t}-{p}" for t, p in d.partitions),
    )  # fmt: skip
    Console(width=250).print(table)


# --- groups --------------------------------------------------------------------------------


@cli.group()
def groups() -> None:
    """List, describe (members, lag) and delete consumer groups (like kafka-consumer-groups)."""


@groups.command("list")
@bootstrap_option
@async_command
async def groups_list(bootstrap: str) -> None:
    """Print every group id, one per line."""
    cluster = Cluster(bootstrap, client_id="sluice-cli", security=_security())
    try:
        await cluster.start()
        found = await list_groups(cluster)
    finally:
        await cluster.close()
    for group_id, _protocol_type in found:
        click.echo(group_id)


@groups.command("describe")
@bootstrap_option
@click.option("--group", required=True)
@click.option("--members", "show_members", is_flag=True, help="One row per member instead.")
@async_command
async def groups_describe(bootstrap: str, group: str, show_members: bool) -> None:
    """Per partition: committed offset, log end offset, lag and the consuming member."""
    cluster = Cluster(bootstrap, client_id="sluice-cli", security=_security())
    ends = Consumer(bootstrap, client_id="sluice-cli", security=_security())
    try:
        await cluster.start()
        await ends.start()
        d = await describe_group(cluster, group, ends.end_offsets)
    finally:
        await ends.stop()
        await cluster.close()
    stderr.print(f"Consumer group '{d.group_id}' is {d.state} ({len(d.members)} members)")
    members = {m.member_id: m for m in d.members}
    if show_members:
        table = Table("GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "ASSIGNMENT")
        for m in d.members:
            parts = ",".join(f"{tp.topic}-{tp.partition}" for tp in sorted(m.assignment))
            table.add_row(d.group_id, m.member_id, m.client_host or "-", m.client_id,
                          str(len(m.assignment)), parts or "-")  # fmt: skip
        Console(width=200).print(table)
        return
    table = Table(
        "GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID",
        "HOST", "CLIENT-ID",
    )  # fmt: skip
    for r in d.partitions:
        owner = members.get(r.member_id or "")
        table.add_row(
            d.group_id,
            r.tp.topic,
            str(r.tp.partition),
            "-" if r.committed is None else str(r.committed),
            str(r.log_end_offset),
            "-" if r.lag is None else str(r.lag),
            r.member_id or "-",
            (owner.client_host or "-") if owner else "-",
            owner.client_id if owner else "-",
        )
    Console(width=200).print(table)


@groups.command("delete")
@bootstrap_option
@click.option("--group", "group_ids", required=True, multiple=True, help="Repeatable.")
@async_command
async def groups_delete(bootstrap: str, group_ids: tuple[str, ...]) -> None:
    """Delete empty groups and their committed offsets."""
    cluster = Cluster(bootstrap, client_id="sluice-cli", security=_security())
    try:
        await cluster.start()
        results = await delete_groups(cluster, list(group_ids))
    finally:
        await cluster.close()
    failed = {g: e for g, e in results.items() if e is not None}
    for g in results:
        if g not in failed:
            click.echo(f"Deleted group {g}.")
    if failed:
        raise click.ClickException("; ".join(f"{g}: {type(e).__name__}" for g, e in failed.items()))


# --- dump-log ------------------------------------------------------------------------------


# ``sluice.server.storage.dump_log.main``, imported when asked for (:class:`_Commands`).


# --- perf ----------------------------------------------------------------------------------


@cli.group()
def perf() -> None:
    """Throughput and latency tests (like kafka-producer-perf-test)."""


def _progress(label: str) -> Progress:
    return Progress(
        TextColumn(label),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=stderr,
        transient=True,
    )


@perf.command("produce")
@bootstrap_option
@click.option("--topic", required=True)
@click.option("--num-records", type=int, required=True)
@click.option("--record-size", type=int, default=100, show_default=True)
@click.option("--throughput", type=float, default=-1, help="Records/s cap; -1: no limit.")
@click.option("--acks", type=click.Choice(["0", "1", "-1", "all"]), default="all")
@click.option("--batch-size", type=int, default=16_384, show_default=True)
@click.option("--linger-ms", type=float, default=5.0, show_default=True)
@click.option("--compression", type=click.Choice([c for c in COMPRESSION_CODECS if c]))
@async_command
async def perf_produce(
    bootstrap: str,
    topic: str,
    num_records: int,
    record_size: int,
    throughput: float,
    acks: str,
    batch_size: int,
    linger_ms: float,
    compression: str | None,
) -> None:
    """Send NUM-RECORDS records of RECORD-SIZE bytes; print records/s, MB/s and latencies."""
    from sluice.client.perf import run_produce

    async with Producer(
        bootstrap,
        security=_security(),
        acks=acks,
        batch_size=batch_size,
        linger_ms=linger_ms,
        compression=compression,
        client_id="sluice-perf",
    ) as producer:
        with _progress("producing") as bar:
            task = bar.add_task("produce", total=num_records)
            result = await run_produce(
                producer,
                topic,
                num_records,
                record_size,
                throughput=throughput,
                progress=lambda n: bar.advance(task, n),
            )
    click.echo(result.summary())
    if result.errors:
        raise click.ClickException(f"{result.errors} records failed")


@perf.command("consume")
@bootstrap_option
@click.option("--topic", required=True)
@click.option("--messages", type=int, required=True, help="Records to read.")
@click.option("--timeout-ms", type=int, default=10_000, show_default=True)
@async_command
async def perf_consume(bootstrap: str, topic: str, messages: int, timeout_ms: int) -> None:
    """Read MESSAGES records from the beginning of TOPIC; print records/s and MB/s."""
    from sluice.client.perf import run_consume

    async with Consumer(bootstrap, client_id="sluice-perf", security=_security()) as consumer:
        with _progress("consuming") as bar:
            task = bar.add_task("consume", total=messages)
            result = await run_consume(
                consumer,
                topic,
                messages,
                timeout_s=timeout_ms / 1000,
                progress=lambda n: bar.advance(task, n),
            )
    click.echo(result.summary())
    if result.records < messages:
        raise click.ClickException(f"only {result.records} of {messages} records arrived")


cli.add_command(pipeline_jobs)  # the Spark jobs
for _admin_command in (reassign_partitions, leader_election):  # (sluice/cli/reassign.py)
    bootstrap_option(_admin_command)  # click adds the options to the command object
    cli.add_command(_admin_command)


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point (``sluice``)."""
    cli.main(args=argv if argv is not None else sys.argv[1:], prog_name="sluice")


if __name__ == "__main__":
    main()
