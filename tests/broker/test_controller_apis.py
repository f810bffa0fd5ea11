"""The handlers of the controller's admin APIs (ElectLeaders 43, AlterPartitionReassignments
45, ListPartitionReassignments 46): how Kafka's ``KafkaApis`` answers around the controller.

The controller's decisions are tested against ZooKeeper (``tests/controller/
test_reassignment.py``) and on a real cluster (``tests/cluster/test_cluster_reassignment.py``);
here a recording stand-in controller lets each answer shape be checked: authorization (Alter on
the cluster; Describe for the list), NOT_CONTROLLER on a broker that is not the controller (per
partition for ElectLeaders, at the top for the others), v0's implicit preferred election, and
the partitions that needed no election left out when all were asked for.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from sluice.protocol import errors
from sluice.protocol import messages as m
from sluice.protocol.structs import TopicPartition
from sluice.server.api.cluster import ClusterApis
from sluice.server.zk.data import ReplicaAssignment

TP0 = TopicPartition("t", 0)
TP1 = TopicPartition("t", 1)


class Controller:
    def __init__(self, active: bool = True) -> None:
        self.is_active = active
        self.calls: list[tuple[str, Any]] = []

    async def elect_leaders(self, partitions: Any, *, unclean: bool) -> dict[Any, Any]:
        self.calls.append(("elect", (partitions, unclean)))
        return {TP0: None, TP1: errors.ElectionNotNeeded()}

    async def alter_partition_reassignments(self, wanted: Any) -> dict[Any, Any]:
        self.calls.append(("alter", wanted))
        return {TP0: None, TP1: errors.InvalidReplicaAssignment("no such broker")}

    async def list_partition_reassignments(self, wanted: Any) -> dict[Any, Any]:
        self.calls.append(("list", wanted))
        return {TP0: ReplicaAssignment((2, 3, 1), (3,), (1,))}


class Apis(ClusterApis):
    def __init__(self, controller: Controller | None, allowed_ops: set[str]) -> None:
        self.cluster = SimpleNamespace(controller=controller)  # type: ignore[assignment]
        self.allowed_ops = allowed_ops

    def allowed(self, operation: Any, *args: Any, **kwargs: Any) -> bool:  # type: ignore[override]
        return operation.name in self.allowed_ops


def header(version: int = 2) -> Any:
    return SimpleNamespace(api_version=version)


def elect_request(partitions: list[int] | None, election_type: int = 0) -> Any:
    req = m.ElectLeadersRequest
    return req(
        election_type=election_type,
        topic_partitions=None
        if partitions is None
        else [req.TopicPartitions(topic="t", partitions=partitions)],
        timeout_ms=1000,
    )


def codes(response: m.ElectLeadersResponse) -> dict[int, int]:
    return {
        p.partition_id: p.error_code
        for t in response.replica_election_results
        for p in t.partition_result
    }


async def test_elect_leaders_answers() -> None:
    controller = Controller()
    apis = Apis(controller, {"ALTER", "DESCRIBE"})
    response = await apis.elect_leaders(header(), elect_request([0, 1], election_type=1))
    assert response.error_code == 0
    assert codes(response) == {0: 0, 1: errors.ElectionNotNeeded.code}
    assert controller.calls == [("elect", ([TP0, TP1], True))]
    # v0 has no election type: preferred; null partitions: all, ELECTION_NOT_NEEDED left out.
    response = await apis.elect_leaders(header(0), elect_request(None, election_type=1))
    assert codes(response) == {0: 0}
    assert controller.calls[-1] == ("elect", (None, False))
    bad = await apis.elect_leaders(header(), elect_request([0], election_type=7))
    assert bad.error_code == errors.InvalidRequest.code
    assert codes(bad) == {0: errors.InvalidRequest.code}


async def test_elect_leaders_refusals() -> None:
    denied = await Apis(Controller(), {"DESCRIBE"}).elect_leaders(header(), elect_request([0]))
    assert denied.error_code == errors.ClusterAuthorizationFailed.code
    assert codes(denied) == {0: errors.ClusterAuthorizationFailed.code}
    for controller in (Controller(active=False), None):
        elsewhere = await Apis(controller, {"ALTER"}).elect_leaders(header(), elect_request([0, 1]))
        assert elsewhere.error_code == 0  # Kafka: per partition
        assert codes(elsewhere) == {0: errors.NotController.code, 1: errors.NotController.code}


async def test_alter_partition_reassignments_answers() -> None:
    controller = Controller()
    req = m.AlterPartitionReassignmentsRequest
    body = req(
        timeout_ms=1000,
        topics=[
            req.ReassignableTopic(
                name="t",
                partitions=[
                    req.ReassignablePartition(partition_index=0, replicas=[2, 3]),
                    req.ReassignablePartition(partition_index=1, replicas=None),
                ],
            )
        ],
    )
    response = await Apis(controller, {"ALTER"}).alter_partition_reassignments(header(0), body)
    assert controller.calls == [("alter", {TP0: [2, 3], TP1: None})]
    assert response.error_code == 0
    (topic,) = response.responses
    assert [(p.partition_index, p.error_code, p.error_message) for p in topic.partitions] == [
        (0, 0, None),
        (1, errors.InvalidReplicaAssignment.code, "no such broker"),
    ]
    denied = await Apis(controller, {"DESCRIBE"}).alter_partition_reassignments(header(0), body)
    assert (denied.error_code, denied.responses) == (errors.ClusterAuthorizationFailed.code, [])
    elsewhere = await Apis(Controller(False), {"ALTER"}).alter_partition_reassignments(
        header(0), body
    )
    assert (elsewhere.error_code, elsewhere.responses) == (errors.NotController.code, [])


@pytest.mark.parametrize("topics", [None, ["t"]])
async def test_list_partition_reassignments_answers(topics: list[str] | None) -> None:
    controller = Controller()
    req = m.ListPartitionReassignmentsRequest
    body = req(
        timeout_ms=1000,
        topics=None
        if topics is None
        else [req.ListPartitionReassignmentsTopics(name=t, partition_indexes=[0]) for t in topics],
    )
    response = await Apis(controller, {"DESCRIBE"}).list_partition_reassignments(header(0), body)
    assert controller.calls == [("list", None if topics is None else [TP0])]
    (topic,) = response.topics
    (p,) = topic.partitions
    assert (p.replicas, p.adding_replicas, p.removing_replicas) == ([2, 3, 1], [3], [1])
    denied = await Apis(controller, {"ALTER"}).list_partition_reassignments(header(0), body)
    assert denied.error_code == errors.ClusterAuthorizationFailed.code
    elsewhere = await Apis(None, {"DESCRIBE"}).list_partition_reassignments(header(0), body)
    assert elsewhere.error_code == errors.NotController.code
