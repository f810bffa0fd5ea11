"""Fetch v13's topic ids resolved before the name-based handler (``sluice.server.api.fetch_ids``),
with the handler replaced by a recorder: which names it is asked for, under which version, and
what the answer says for ids it cannot serve."""

from __future__ import annotations

import uuid
from typing import Any

from sluice.protocol import errors
from sluice.protocol import messages as m
from sluice.protocol.types import random_uuid
from sluice.server.api.fetch_ids import fetch_by_topic_id


class View:
    def __init__(self, names: dict[uuid.UUID, str]) -> None:
        self.names = names

    def topic_name(self, topic_id: uuid.UUID) -> str | None:
        return self.names.get(topic_id)


class Logs:
    def __init__(self, ids: dict[str, uuid.UUID]) -> None:
        self.ids = ids

    def topic_id(self, topic: str) -> uuid.UUID | None:
        return self.ids.get(topic)


def request(*ids: uuid.UUID) -> m.FetchRequest:
    part = m.FetchRequest.FetchPartition
    return m.FetchRequest(
        topics=[
            m.FetchRequest.FetchTopic(
                topic_id=i, partitions=[part(partition=0, fetch_offset=0, partition_max_bytes=1)]
            )
            for i in ids
        ]
    )


def named_answer(header: Any, body: m.FetchRequest) -> m.FetchResponse:
    """What the name-based handler answers: each topic asked, partition 0, no error."""
    calls.append((header.api_version, [t.topic for t in body.topics]))
    return m.FetchResponse(
        responses=[
            m.FetchResponse.FetchableTopicResponse(
                topic=t.topic, partitions=[m.FetchResponse.PartitionData(partition_index=0)]
            )
            for t in body.topics
        ]
    )


calls: list[tuple[int, list[str]]] = []
HEADER = m.RequestHeader(api_key=m.Fetch.key, api_version=13, correlation_id=7, client_id="c")


def test_ids_are_resolved_and_given_back() -> None:
    calls.clear()
    a, b, unknown, stale = (random_uuid() for _ in range(4))
    view = View({a: "a", b: "b", stale: "c"})
    logs = Logs({"a": a, "b": b, "c": random_uuid()})  # "c"'s logs hold another id
    answer = fetch_by_topic_id(HEADER, request(a, unknown, b, stale), view, logs, named_answer)  # type: ignore[arg-type]
    assert isinstance(answer, m.FetchResponse)
    assert calls == [(12, ["a", "b"])]  # the name-based handler: names, a v12 header
    codes = {t.topic_id: t.partitions[0].error_code for t in answer.responses}
    assert codes == {
        a: 0,
        b: 0,
        unknown: errors.UnknownTopicId.code,
        stale: errors.InconsistentTopicId.code,
    }


async def test_a_long_poll_answer_gets_the_ids_too() -> None:
    calls.clear()
    a = random_uuid()

    def waiting(header: Any, body: m.FetchRequest) -> Any:
        async def later() -> m.FetchResponse:
            return named_answer(header, body)

        return later()

    answer = fetch_by_topic_id(HEADER, request(a), View({a: "a"}), Logs({}), waiting)  # type: ignore[arg-type]
    response = await answer  # type: ignore[misc]
    assert [t.topic_id for t in response.responses] == [a]
