"""Replica placement for new topics: Kafka's rack-unaware assignment (``AdminUtils``).

Kafka spreads replicas so that leaders (first replicas) go round-robin over the brokers and the
followers of consecutive partitions are shifted, so no two brokers share every partition:

* partition ``p``'s first replica is broker ``(p + start) mod n`` (brokers sorted by id);
* its ``j``-th follower is ``first + 1 + (shift + j) mod (n - 1)`` (mod n), where ``shift``
  grows by one every ``n`` partitions (the ``nextReplicaShift`` of Kafka's
  ``assignReplicasToBrokersRackUnaware``), so the follower set rotates once per round.

``start`` and ``shift`` are random in Kafka (so topics do not all lead on the same broker); here the
caller passes them (the controller uses a random start, tests a fixed one) and a fixed start
reproduces Kafka's ``fixedStartIndex`` layouts exactly.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping

from sluice.protocol import errors


def assign_replicas(
    brokers: Iterable[int],
    num_partitions: int,
    replication_factor: int,
    *,
    start_index: int | None = None,
    start_partition: int = 0,
    rng: random.Random | None = None,
) -> dict[int, list[int]]:
    """``{partition: [replica, ...]}`` for ``num_partitions`` new partitions.

    ``start_index`` fixes Kafka's start index and replica shift (``fixedStartIndex``); ``None``
    draws both at random like Kafka. ``start_partition`` is the first new partition's id (adding
    partitions to an existing topic). Raises ``InvalidPartitions`` / ``InvalidReplicationFactor``
    with Kafka's messages.
    """
    ids = sorted(set(brokers))
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
