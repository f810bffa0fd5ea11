"""``sluice reassign-partitions`` and ``sluice leader-election``: Kafka's
``kafka-reassign-partitions`` and ``kafka-leader-election``, with their flags, JSON files and
messages (``ReassignPartitionsCommand`` / ``LeaderElectionCommand`` of Kafka 3.9)::

    sluice reassign-partitions --bootstrap-server H:P --reassignment-json-file F
                               --execute | --verify | --cancel
    sluice reassign-partitions --bootstrap-server H:P --list
    sluice leader-election --bootstrap-server H:P --election-type preferred|unclean
                           --all-topic-partitions | --topic T --partition P
                           | --path-to-json-file F

The reassignment file is Kafka's: ``{"version":1,"partitions":[{"topic":"t","partition":0,
"replicas":[2,3]}]}`` (``log_dirs`` accepted, only ``"any"``). ``sluice.cli.main`` adds the
``--bootstrap-server`` / ``--command-config`` options every command has.

**Throttles** as Kafka's tool sets them (``ReassignPartitionsCommand.modifyReassignmentThrottle``):
``--execute --throttle N`` sets, per topic, ``leader.replication.throttled.replicas`` to the
moving partitions' current replicas and ``follower.replication.throttled.replicas`` to their new
ones (``partition:broker``, sorted as text, as Kafka's TreeSet), and on every broker taking part
(current and new replicas) ``leader.replication.throttled.rate`` and ``follower.replication.
throttled.rate`` = N bytes/s (how brokers apply them: ``sluice.server.replication.throttle``).
``--verify``, once no partition of the file is moving any more, removes them: the two rates on
every broker of the cluster and the two lists on the file's topics (``clearAllThrottles``),
unless ``--preserve-throttles``. ``--replica-alter-log-dirs-throttle`` is refused: a Sluice broker
has one log directory, so no replica moves between directories.
"""

from __future__ import annotations

import json
from typing import Any

import click

from sluice.client.admin import Admin, ResourceType
from sluice.client.cluster import TopicPartition
from sluice.protocol.errors import KafkaError, error_name

__all__ = ["leader_election", "reassign_partitions"]


def _name(tp: TopicPartition) -> str:
    return f"{tp.topic}-{tp.partition}"


def _error_text(error: KafkaError) -> str:
    return f"{error_name(error.code)}: {error.args[0]}"


def _read_json(path: str) -> Any:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except OSError as exc:
        raise click.BadParameter(str(exc), param_hint="file") from exc
    except ValueError as exc:
        raise click.ClickException(f"{path}: not JSON: {exc}") from exc


def parse_reassignment(document: Any) -> dict[TopicPartition, list[int]]:
    """Kafka's ``parsePartitionReassignmentData``: version 1, a list of partitions with
    replicas, no partition twice, no broker twice in one list, log dirs ``any`` only."""
    if not isinstance(document, dict) or document.get("version", 1) != 1:
        raise click.ClickException("The reassignment JSON must be an object with version 1.")
    entries = document.get("partitions")
    if not isinstance(entries, list) or not entries:
        raise click.ClickException("Partition reassignment list cannot be empty")
    out: dict[TopicPartition, list[int]] = {}
    for entry in entries:
        try:
            tp = TopicPartition(str(entry["topic"]), int(entry["partition"]))
            replicas = [int(r) for r in entry["replicas"]]
        except (KeyError, TypeError, ValueError) as exc:
            raise click.ClickException(f"Invalid partition entry {entry!r}: {exc}") from exc
        if tp in out:
            raise click.ClickException(f"Duplicate reassignment for partition {_name(tp)}")
        if len(set(replicas)) != len(replicas):
            raise click.ClickException(
                f"Partition replica lists may not contain duplicate entries: {_name(tp)}"
            )
        dirs = entry.get("log_dirs")
        if dirs is not None and any(d != "any" for d in dirs):
            raise click.ClickException('log_dirs other than "any" are not supported')
        out[tp] = replicas
    return out


def _reassignment_json(assignment: dict[TopicPartition, list[int]]) -> str:
    return json.dumps(
        {
            "version": 1,
            "partitions": [
                {
                    "topic": tp.topic,
                    "partition": tp.partition,
                    "replicas": replicas,
                    "log_dirs": ["any"] * len(replicas),
                }
                for tp, replicas in sorted(assignment.items())
            ],
        },
        separators=(",", ":"),
    )


async def _current_replicas(
    admin: Admin, partitions: list[TopicPartition]
) -> dict[TopicPartition, list[int]]:
    described = await admin.describe_topics(sorted({tp.topic for tp in partitions}))
    found = {
        TopicPartition(d.name, p.partition): list(p.replicas)
        for d in described
        for p in d.partitions
    }
    missing = [tp for tp in partitions if tp not in found]
    if missing:
        raise click.ClickException(
            f"Topic or partition not found: {', '.join(_name(tp) for tp in missing)}"
        )
    return {tp: found[tp] for tp in partitions}


@click.command("reassign-partitions")
@click.option(
    "--reassignment-json-file",
    "json_file",
    type=click.Path(dir_okay=False),
    help="The partitions' target replicas (Kafka's reassignment JSON).",
)
@click.option("--execute", is_flag=True, help="Start the reassignment in the file.")
@click.option("--verify", is_flag=True, help="Whether the file's reassignments completed.")
@click.option("--cancel", is_flag=True, help="Cancel the file's reassignments in progress.")
@click.option("--list", "list_", is_flag=True, help="The reassignments in progress.")
@click.option(
    "--throttle",
    type=int,
    default=-1,
    help="With --execute: the replication between brokers for the moves is throttled to this "
    "many bytes/s (run --verify until it completes: that removes the throttle).",
)
@click.option(
    "--replica-alter-log-dirs-throttle",
    "log_dirs_throttle",
    type=int,
    default=-1,
    help="Refused: a Sluice broker has one log directory.",
)
@click.option(
    "--preserve-throttles",
    is_flag=True,
    help="With --verify: keep the throttles even when the moves are done.",
)
@click.option(
    "--timeout",
    type=int,
    default=10_000,
    show_default=True,
    help="ms to wait for the reassignment to start (ignored: it starts at once).",
)
def reassign_partitions(
    bootstrap: str,
    json_file: str | None,
    execute: bool,
    verify: bool,
    cancel: bool,
    list_: bool,
    throttle: int,
    log_dirs_throttle: int,
    preserve_throttles: bool,
    timeout: int,
) -> None:
    """Move partition replicas between brokers (like kafka-reassign-partitions).

    --execute prints the current assignment (save it to roll back) and starts the moves: the
    new replicas catch up from the leader and join the ISR, then the replicas not in the
    target leave and their brokers delete the data. --verify says, per partition, whether
    its move completed; --cancel stops moves in progress (the original replicas stay);
    --list shows every move in progress."""
    from sluice.cli.main import _run

    actions = [execute, verify, cancel, list_]
    if sum(actions) != 1:
        raise click.UsageError(
            "Command must include exactly one action: --execute, --verify, --cancel, --list"
        )
    if log_dirs_throttle >= 0:
        raise click.UsageError(
            "--replica-alter-log-dirs-throttle: a Sluice broker has one log directory "
            "(log.dirs), so no replica moves between directories to throttle"
        )
    if throttle >= 0 and not execute:
        raise click.UsageError("--throttle is only valid with --execute")
    if not list_ and json_file is None:
        raise click.UsageError("--reassignment-json-file is required with this action")
    wanted = parse_reassignment(_read_json(json_file)) if json_file is not None else {}
    _run(_reassign(bootstrap, wanted, execute=execute, verify=verify, cancel=cancel,
                   throttle=throttle, preserve_throttles=preserve_throttles))  # fmt: skip


async def _reassign(
    bootstrap: str,
    wanted: dict[TopicPartition, list[int]],
    *,
    execute: bool,
    verify: bool,
    cancel: bool,
    throttle: int = -1,
    preserve_throttles: bool = False,
) -> None:
    from sluice.cli.main import _security

    async with Admin(bootstrap, security=_security()) as admin:
        if execute:
            current = await _current_replicas(admin, list(wanted))
            click.echo("Current partition replica assignment\n")
            click.echo(_reassignment_json(current))
            click.echo("\nSave this to use as the --reassignment-json-file option during rollback")
            if throttle >= 0:
                click.echo(
                    "Warning: You must run --verify periodically, until the reassignment "
                    "completes, to ensure the throttle is removed."
                )
                await _set_throttles(admin, await _moves(admin, current, wanted), throttle)
            results = await admin.alter_partition_reassignments(wanted)
            _report(results, "start", "Successfully started partition reassignment")
        elif verify:
            await _verify(admin, wanted, preserve_throttles)
        elif cancel:
            active = await admin.list_partition_reassignments(list(wanted))
            if not active:
                click.echo("None of the specified partition reassignments are active.")
                return
            results = await admin.alter_partition_reassignments(dict.fromkeys(active))
            _report(results, "cancel", "Successfully cancelled partition reassignment")
        else:
            active = await admin.list_partition_reassignments()
            if not active:
                click.echo("No partition reassignments found.")
                return
            click.echo("Current partition reassignments:")
            for tp, r in sorted(active.items()):
                click.echo(
                    f"{_name(tp)}: replicas: {_ids(r.replicas)}. adding: {_ids(r.adding)}. "
                    f"removing: {_ids(r.removing)}."
                )


def _ids(ids: tuple[int, ...]) -> str:
    return ",".join(map(str, ids))


def _report(results: dict[TopicPartition, KafkaError | None], verb: str, done: str) -> None:
    ok = sorted(tp for tp, e in results.items() if e is None)
    failed = {tp: e for tp, e in sorted(results.items()) if e is not None}
    if ok:
        click.echo(f"{done}s for {','.join(_name(tp) for tp in ok)}")
    if failed:
        lines = "\n".join(f"{_name(tp)}: {_error_text(e)}" for tp, e in failed.items())
        raise click.ClickException(f"Error on {verb} of partition reassignments:\n{lines}")


async def _verify(
    admin: Admin, wanted: dict[TopicPartition, list[int]], preserve_throttles: bool = False
) -> None:
    """Kafka's ``verifyPartitionAssignments``; exit status 1 while any is in progress or
    ended elsewhere. Once none is in progress the throttles are removed (Kafka's rule: a
    move that ended elsewhere counts as not in progress)."""
    active = await admin.list_partition_reassignments(list(wanted))
    current = await _current_replicas(admin, list(wanted))
    click.echo("Status of partition reassignment:")
    unfinished = 0
    for tp, target in sorted(wanted.items()):
        if tp in active:
            unfinished += 1
            click.echo(f"Reassignment of partition {_name(tp)} is still in progress.")
        elif current[tp] == target:
            click.echo(f"Reassignment of partition {_name(tp)} is completed.")
        else:
            unfinished += 1
            click.echo(
                f"There is no active reassignment of partition {_name(tp)}, but replica set is "
                f"{current[tp]} rather than {target}."
            )
    if not preserve_throttles and not any(tp in active for tp in wanted):
        await _clear_throttles(admin, wanted)
    if unfinished:
        raise SystemExit(1)


#: The throttle keys (``sluice.server.replication.throttle``), by where they are set.
_LEADER_REPLICAS = "leader.replication.throttled.replicas"
_FOLLOWER_REPLICAS = "follower.replication.throttled.replicas"
_RATES = ("leader.replication.throttled.rate", "follower.replication.throttled.rate")


async def _moves(
    admin: Admin,
    current: dict[TopicPartition, list[int]],
    wanted: dict[TopicPartition, list[int]],
) -> dict[TopicPartition, tuple[list[int], list[int]]]:
    """``(sources, destinations)`` of each partition of the file (Kafka's
    ``calculateProposedMoveMap``): the sources are its current replicas, or the original ones
    of a move already in progress."""
    active = await admin.list_partition_reassignments(list(wanted))
    moves = {}
    for tp, target in wanted.items():
        ongoing = active.get(tp)
        if ongoing is not None:
            sources = [r for r in ongoing.replicas if r not in ongoing.adding]
        else:
            sources = current[tp]
        moves[tp] = (sources, target)
    return moves


async def _set_throttles(
    admin: Admin, moves: dict[TopicPartition, tuple[list[int], list[int]]], rate: int
) -> None:
    """Kafka's ``modifyReassignmentThrottle``: the topics' throttled-replica lists, then the
    rate on every broker taking part."""
    leaders: dict[str, set[str]] = {}
    followers: dict[str, set[str]] = {}
    for tp, (sources, targets) in moves.items():
        leaders.setdefault(tp.topic, set()).update(f"{tp.partition}:{b}" for b in sources)
        followers.setdefault(tp.topic, set()).update(
            f"{tp.partition}:{b}" for b in targets if b not in sources
        )
    for topic in sorted(leaders):
        await admin.incremental_alter_configs(ResourceType.TOPIC, topic, set_values={
            _LEADER_REPLICAS: ",".join(sorted(leaders[topic])),
            _FOLLOWER_REPLICAS: ",".join(sorted(followers[topic])),
        })  # fmt: skip
    brokers = sorted({b for sources, targets in moves.values() for b in (*sources, *targets)})
    for broker in brokers:
        await admin.incremental_alter_configs(
            ResourceType.BROKER, str(broker), set_values=dict.fromkeys(_RATES, str(rate))
        )
    click.echo(f"The inter-broker throttle limit was set to {rate} B/s")


async def _clear_throttles(admin: Admin, wanted: dict[TopicPartition, list[int]]) -> None:
    """Kafka's ``clearAllThrottles``: the rates on every broker of the cluster (and the
    file's), the throttled-replica lists on the file's topics."""
    live = set(await admin.brokers())
    brokers = sorted(live | {b for r in wanted.values() for b in r})
    click.echo(f"Clearing broker-level throttles on broker{'s' if len(brokers) != 1 else ''} "
               f"{_ids(tuple(brokers))}")  # fmt: skip
    for broker in brokers:
        if broker in live:  # (a broker that is down has nothing to clear now)
            await admin.incremental_alter_configs(ResourceType.BROKER, str(broker), delete=_RATES)
    topics = sorted({tp.topic for tp in wanted})
    click.echo(f"Clearing topic-level throttles on topic{'s' if len(topics) != 1 else ''} "
               f"{','.join(topics)}")  # fmt: skip
    for topic in topics:
        await admin.incremental_alter_configs(
            ResourceType.TOPIC, topic, delete=(_LEADER_REPLICAS, _FOLLOWER_REPLICAS)
        )


@click.command("leader-election")
@click.option(
    "--election-type",
    type=click.Choice(["preferred", "unclean"], case_sensitive=False),
    required=True,
    help="PREFERRED: the first replica leads again; UNCLEAN: any live "
    "replica where no in-sync one is (acknowledged records may be lost).",
)
@click.option("--all-topic-partitions", is_flag=True, help="Every partition of the cluster.")
@click.option("--topic", help="One topic's partition (with --partition).")
@click.option("--partition", type=int, help="The partition of --topic.")
@click.option(
    "--path-to-json-file",
    "json_file",
    type=click.Path(dir_okay=False),
    help='{"partitions":[{"topic":"t","partition":0}]}',
)
def leader_election(
    bootstrap: str,
    election_type: str,
    all_topic_partitions: bool,
    topic: str | None,
    partition: int | None,
    json_file: str | None,
) -> None:
    """Elect partition leaders (like kafka-leader-election)."""
    from sluice.cli.main import _run

    if sum([all_topic_partitions, topic is not None, json_file is not None]) != 1:
        raise click.UsageError(
            "One and only one of the following options is required: --all-topic-partitions, "
            "--topic, --path-to-json-file"
        )
    if (topic is None) != (partition is None):
        raise click.UsageError("--topic and --partition go together")
    partitions: list[TopicPartition] | None = None
    if topic is not None and partition is not None:
        partitions = [TopicPartition(topic, partition)]
    elif json_file is not None:
        document = _read_json(json_file)
        try:
            partitions = [
                TopicPartition(str(e["topic"]), int(e["partition"])) for e in document["partitions"]
            ]
        except (KeyError, TypeError, ValueError) as exc:
            raise click.ClickException(f"{json_file}: not a partitions list: {exc}") from exc
    _run(_elect(bootstrap, partitions, election_type.upper()))


async def _elect(bootstrap: str, partitions: list[TopicPartition] | None, kind: str) -> None:
    """Kafka's ``LeaderElectionCommand`` output; exit status 1 if any could not be elected."""
    from sluice.cli.main import _security

    async with Admin(bootstrap, security=_security()) as admin:
        results = await admin.elect_leaders(partitions, unclean=kind == "UNCLEAN")
    from sluice.protocol.errors import ElectionNotNeeded

    done = sorted(tp for tp, e in results.items() if e is None)
    not_needed = sorted(tp for tp, e in results.items() if isinstance(e, ElectionNotNeeded))
    failed = {tp: e for tp, e in sorted(results.items()) if e is not None and tp not in not_needed}
    if done:
        names = ", ".join(_name(tp) for tp in done)
        click.echo(f"Successfully completed leader election ({kind}) for partitions {names}")
    if not_needed:
        names = ", ".join(_name(tp) for tp in not_needed)
        click.echo(f"Valid replica already elected for partitions {names}")
    if not done and not not_needed and not failed:
        click.echo("No partitions needed an election.")
    if failed:
        for tp, error in failed.items():
            click.echo(
                f"Error completing leader election ({kind}) for partition: {_name(tp)}: "
                f"{_error_text(error)}",
                err=True,
            )
        raise click.ClickException(f"{len(failed)} replica(s) could not be elected")
