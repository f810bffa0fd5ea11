"""Replica placement for new topics: Kafka's assignment (``AdminUtils.assignReplicasToBrokers``),
rack-unaware, or rack-aware when the brokers have a ``broker.rack``.

Kafka spreads replicas so that leaders (first replicas) go round-robin over the brokers and the
followers of consecutive partitions are shifted, so no two brokers share every partition:

* partition ``p``'s first replica is broker ``(p + start) mod n`` (brokers sorted by id);
* its ``j``-th follower is ``first + 1 + (shift + j) mod (n - 1)`` (mod n), where ``shift``
  grows by one every ``n`` partitions (the ``nextReplicaShift`` of Kafka's
  ``assignReplicasToBrokersRackUnaware``), so the follower set rotates once per round.

``start`` and ``shift`` are random in Kafka (so topics do not all lead on the same broker); here the
caller passes them (the controller uses a random start, tests a fixed one) and a fixed start
reproduces Kafka's ``fixedStartIndex`` layouts exactly.

**Racks** (``broker.rack``): when every broker has one, the same round robin runs over the
*rack-alternated* broker list (one broker of each rack in turn, racks sorted by name, brokers of a
rack by id: ``0->r1, 1->r3, 2->r3, 3->r2, 4->r2, 5->r1`` gives ``0, 3, 1, 5, 4, 2``), with the
follower shift scaled by the number of racks, and a follower is skipped while it would put a
second replica in a rack (or on a broker) when some rack (broker) has none yet. So a partition
has its replicas in ``min(RF, racks)`` distinct racks, and with RF = racks and equal racks the
load is even across brokers and racks. When only some brokers have a rack Kafka refuses (its
``AdminOperationException`` reaches the client as UNKNOWN_SERVER_ERROR with the message); so
does this.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping

from sluice.protocol import errors


def assign_replicas(
    brokers: Iterable[int] | Mapping[int, str | None],
    num_partitions: int,
    replication_factor: int,
    *,
    start_index: int | None = None,
    start_partition: int = 0,
    rng: random.Random | None = None,
) -> dict[int, list[int]]:
    """``{partition: [replica, ...]}`` for ``num_partitions`` new partitions over ``brokers``
    (ids, or ids -> rack: rack-aware as soon as one has a rack).

    ``start_index`` fixes Kafka's start index and replica shift (``fixedStartIndex``); ``None``
    draws both at random like Kafka. ``start_partition`` is the first new partition's id (adding
    partitions to an existing topic). Raises ``InvalidPartitions`` / ``InvalidReplicationFactor``
    with Kafka's messages.
    """
    racks: dict[int, str | None] = (
        dict(brokers) if isinstance(brokers, Mapping) else dict.fromkeys(brokers)
    )
    ids = sorted(racks)
    if num_partitions <= 0:
        raise errors.InvalidPartitions("Number of partitions must be larger than 0.")
    if replication_factor <= 0:
        raise errors.InvalidReplicationFactor("Replication factor must be larger than 0.")
    if replication_factor > len(ids):
        raise errors.InvalidReplicationFactor(
            f"Replication factor: {replication_factor} larger than available brokers: {len(ids)}."
        )
    n = len(ids)
    if start_index is None:
        rng = rng or random.Random()
        start, shift = rng.randrange(n), rng.randrange(n)
    else:
        start = shift = start_index
    if any(rack is not None for rack in racks.values()):
        if any(rack is None for rack in racks.values()):
            raise errors.UnknownServerError(
                "Not all brokers have rack information for replica rack aware assignment."
            )
        return _rack_aware(
            {b: r for b, r in racks.items() if r is not None},
            num_partitions,
            replication_factor,
            start,
            shift,
            start_partition,
        )
    result: dict[int, list[int]] = {}
    partition = max(0, start_partition)
    for _ in range(num_partitions):
        if partition > 0 and partition % n == 0:
            shift += 1
        first = (partition + start) % n
        replicas = [ids[first]]
        for j in range(replication_factor - 1):
            replicas.append(ids[(first + 1 + (shift + j) % (n - 1)) % n])
        result[partition] = replicas
        partition += 1
    return result


def rack_alternated(racks: Mapping[int, str]) -> list[int]:
    """Kafka's ``getRackAlternatedBrokerList``: one broker of each rack in turn (racks sorted by
    name, each rack's brokers by id) until every broker is listed."""
    by_rack: dict[str, list[int]] = {}
    for broker in sorted(racks):
        by_rack.setdefault(racks[broker], []).append(broker)
    queues = [by_rack[rack] for rack in sorted(by_rack)]
    out: list[int] = []
    depth = 0
    while len(out) < len(racks):
        out.extend(queue[depth] for queue in queues if depth < len(queue))
        depth += 1
    return out


def _rack_aware(
    racks: Mapping[int, str],
    num_partitions: int,
    replication_factor: int,
    start: int,
    shift: int,
    start_partition: int,
) -> dict[int, list[int]]:
    """Kafka's ``assignReplicasToBrokersRackAware`` (see the module docstring)."""
    arranged = rack_alternated(racks)
    n = len(arranged)
    num_racks = len(set(racks.values()))
    result: dict[int, list[int]] = {}
    partition = max(0, start_partition)
    for _ in range(num_partitions):
        if partition > 0 and partition % n == 0:
            shift += 1
        first = (partition + start) % n
        leader = arranged[first]
        replicas = [leader]
        racks_used = {racks[leader]}
        brokers_used = {leader}
        k = 0
        for _ in range(replication_factor - 1):
            # Within one lap of the other n - 1 brokers one satisfies both conditions
            # (replication_factor <= n, so a broker without a replica exists, and while a rack
            # has none, its brokers have none either).
            for _ in range(n):
                broker = arranged[(first + 1 + (shift * num_racks + k) % (n - 1)) % n]
                rack = racks[broker]
                k += 1
                if (rack not in racks_used or len(racks_used) == num_racks) and (
                    broker not in brokers_used or len(brokers_used) == n
                ):
                    replicas.append(broker)
                    racks_used.add(rack)
                    brokers_used.add(broker)
                    break
            else:  # pragma: no cover - impossible by the argument above
                raise AssertionError(f"no broker for a replica of partition {partition}")
        result[partition] = replicas
        partition += 1
    return result


def validate_assignment(assignment: Mapping[int, list[int]], live_brokers: Iterable[int]) -> None:
    """Check an explicit assignment (CreateTopics ``assignments``) the way Kafka does.

    Partitions must be numbered 0..n-1, every partition must have the same replication factor, a
    replica list must not repeat a broker, and every broker must be registered.
    """
    live = set(live_brokers)
    if not assignment:
        raise errors.InvalidReplicaAssignment("The replica assignment is empty.")
    if sorted(assignment) != list(range(len(assignment))):
        raise errors.InvalidReplicaAssignment(
            "Partitions should be a consecutive 0-based integer sequence, "
            f"got {sorted(assignment)}."
        )
    sizes = {len(replicas) for replicas in assignment.values()}
    if len(sizes) != 1 or 0 in sizes:
        raise errors.InvalidReplicaAssignment(
            "All partitions should have the same number of replicas (at least one)."
        )
    for partition, replicas in assignment.items():
        if len(set(replicas)) != len(replicas):
            raise errors.InvalidReplicaAssignment(
                f"Duplicate brokers not allowed in replica assignment: {replicas} "
                f"for partition {partition}."
            )
        unknown = sorted(set(replicas) - live)
        if unknown:
            raise errors.InvalidReplicaAssignment(
                f"Unknown broker(s) {unknown} in replica assignment of partition {partition}."
            )
