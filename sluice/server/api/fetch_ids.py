"""Fetch v13+: topics named by id (KIP-516). Resolved to names before the name-based Fetch
handler runs, and the answer given the ids back, so the read path knows nothing of ids.

Kafka's rules (``KafkaApis.handleFetchRequest``, ``ReplicaManager.readFromLog``): an id this
broker does not know is answered UNKNOWN_TOPIC_ID for each partition asked; an id known under a
name whose log here records another id (``partition.metadata``: a log of an earlier topic of the
same name) is INCONSISTENT_TOPIC_ID. Both are retriable metadata errors: the client refreshes
its metadata (and, librdkafka, learns that a topic was deleted and created again). The forgotten
topics of a fetch session name ids too; Sluice keeps no sessions (session id 0), so they are
not read.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from sluice.protocol import errors
from sluice.protocol import messages as m
from sluice.server.api.registry import Answer

if TYPE_CHECKING:
    from sluice.server.metadata.view import MetadataView
    from sluice.server.storage.log_manager import LogManager

__all__ = ["FETCH_TOPIC_IDS_VERSION", "fetch_by_topic_id"]

#: The first Fetch version that names topics by id only.
FETCH_TOPIC_IDS_VERSION = 13


def fetch_by_topic_id(
    header: m.RequestHeader,
    body: m.FetchRequest,
    view: MetadataView,
    logs: LogManager,
    fetch_by_name: Callable[[m.RequestHeader, m.FetchRequest], Answer[m.FetchResponse]],
) -> Answer[m.FetchResponse]:
    """Answer a v13+ Fetch: ``fetch_by_name`` answers the topics whose id resolves (called
    with the names filled in and a v12 header), the rest are answered here."""
    ids: dict[str, uuid.UUID] = {}
    failed: list[m.FetchResponse.FetchableTopicResponse] = []
    known: list[m.FetchRequest.FetchTopic] = []
    for t in body.topics:
        name = view.topic_name(t.topic_id)
        code = 0
        if name is None:
            code = errors.UnknownTopicId.code
        else:
            recorded = logs.topic_id(name)
            if recorded is not None and recorded != t.topic_id:
                code = errors.InconsistentTopicId.code
        if code:
            failed.append(
                m.FetchResponse.FetchableTopicResponse(
                    topic_id=t.topic_id,
                    partitions=[_failed_partition(p.partition, code) for p in t.partitions],
                )
            )
            continue
        assert name is not None
        t.topic = name
        ids[name] = t.topic_id
        known.append(t)
    body.topics = known  # (the decoded request is this call's own)
    named_header = m.RequestHeader(
        api_key=header.api_key,
        api_version=FETCH_TOPIC_IDS_VERSION - 1,
        correlation_id=header.correlation_id,
        client_id=header.client_id,
    )
    answer = fetch_by_name(named_header, body)
    if isinstance(answer, m.FetchResponse):
        return _with_ids(answer, ids, failed)
    if asyncio.iscoroutine(answer) or isinstance(answer, Awaitable):
        return _await_with_ids(answer, ids, failed)
    return answer


async def _await_with_ids(
    answer: Awaitable[Any],
    ids: dict[str, uuid.UUID],
    failed: list[m.FetchResponse.FetchableTopicResponse],
) -> Any:
    response = await answer
    if isinstance(response, m.FetchResponse):
        return _with_ids(response, ids, failed)
    return response


def _with_ids(
    response: m.FetchResponse,
    ids: dict[str, uuid.UUID],
    failed: list[m.FetchResponse.FetchableTopicResponse],
) -> m.FetchResponse:
    for topic in response.responses:
        topic.topic_id = ids[topic.topic]
    response.responses.extend(failed)
    return response


def _failed_partition(index: int, code: int) -> m.FetchResponse.PartitionData:
    return m.FetchResponse.PartitionData(
        partition_index=index,
        error_code=code,
        high_watermark=-1,
        last_stable_offset=-1,
        log_start_offset=-1,
        aborted_transactions=None,
        preferred_read_replica=-1,
        records=b"",
    )
