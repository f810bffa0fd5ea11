"""Transactions as ``kafka-transactions`` sees them: ListTransactions on every broker,
DescribeTransactions at an id's coordinator (FindCoordinator key type 1)."""

from __future__ import annotations

from dataclasses import dataclass

from sluice.client.cluster import Cluster, find_coordinator
from sluice.protocol import messages
from sluice.protocol.errors import for_code

#: FindCoordinator's key type of a transactional id.
TRANSACTION_KEY_TYPE = 1


@dataclass(frozen=True)
class TransactionListing:
    transactional_id: str
    producer_id: int
    state: str
    coordinator_id: int


@dataclass(frozen=True)
class TransactionDescription:
    transactional_id: str
    coordinator_id: int
    state: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    start_time_ms: int
    partitions: tuple[tuple[str, int], ...]


async def list_transactions(
    cluster: Cluster, states: list[str] | None = None, producer_ids: list[int] | None = None
) -> list[TransactionListing]:
    """Every transactional id of every broker's coordinator, filtered as ListTransactions is."""
    await cluster.refresh([])
    out: list[TransactionListing] = []
    body = messages.ListTransactionsRequest(
        state_filters=list(states or ()), producer_id_filters=list(producer_ids or ())
    )
    for node in sorted(cluster.brokers):
        conn = await cluster.connection(node)
        resp = await conn.request(messages.ListTransactions.key, body)
        if resp.error_code:
            raise for_code(resp.error_code)("ListTransactions")
        out += [
            TransactionListing(t.transactional_id, t.producer_id, t.transaction_state, node)
            for t in resp.transaction_states
        ]
    return sorted(out, key=lambda t: t.transactional_id)


async def describe_transaction(cluster: Cluster, transactional_id: str) -> TransactionDescription:
    node, conn = await find_coordinator(
        cluster, transactional_id, TRANSACTION_KEY_TYPE, f"transactional id {transactional_id!r}",
        30_000, 100,
    )  # fmt: skip
    resp = await conn.request(
        messages.DescribeTransactions.key,
        messages.DescribeTransactionsRequest(transactional_ids=[transactional_id]),
    )
    (t,) = resp.transaction_states
    if t.error_code:
        raise for_code(t.error_code)(f"DescribeTransactions {transactional_id}")
    return TransactionDescription(
        transactional_id,
        node,
        t.transaction_state,
        t.producer_id,
        t.producer_epoch,
        t.transaction_timeout_ms,
        t.transaction_start_time_ms,
        tuple((topic.topic, p) for topic in t.topics for p in topic.partitions),
    )
