"""The ``consumer`` embedded protocol: what consumers put inside JoinGroup and SyncGroup.

The broker treats these bytes as opaque; the members read them. Each blob is ``int16 version``
followed by a struct (Kafka's ``ConsumerProtocolSubscription`` / ``ConsumerProtocolAssignment``).
We write version 0 and read any version by its v0 prefix: later versions only append fields,
which is how Kafka's own clients read newer members' blobs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from .errors import ProtocolError
from .schema import F, Message, StructSchema
from .types import INT16

# Not API messages, so not in the generated messages.pyi: their instances are untyped (Any).
SUBSCRIPTION: StructSchema[Any] = StructSchema(
    "ConsumerProtocolSubscription",
    [F("topics", "[]string"), F("user_data", "bytes", nullable="0+", default=None)],
)
ASSIGNMENT: StructSchema[Any] = StructSchema(
    "ConsumerProtocolAssignment",
    [
        F(
            "assigned_partitions",
            "[]TopicPartition",
            fields=[F("topic", "string"), F("partitions", "[]int32")],
        ),
        F("user_data", "bytes", nullable="0+", default=None),
    ],
)


def _encode(schema: StructSchema[Any], msg: Message) -> bytes:
    out = bytearray(INT16.pack(0))
    schema.encoder(0, False)(msg, out, [])
    return bytes(out)


def _decode(schema: StructSchema[Any], data: bytes | bytearray | memoryview) -> Any:
    if len(data) < 2:
        raise ProtocolError(f"{schema.name}: {len(data)} bytes, no version")
    msg, _ = schema.decoder(0, False)(bytes(data), 2)
    return msg


def encode_subscription(topics: Iterable[str], user_data: bytes | None = None) -> bytes:
    """A subscription blob for JoinGroup's protocol metadata (topics sorted, deduplicated)."""
    return _encode(SUBSCRIPTION, SUBSCRIPTION.cls(topics=sorted(set(topics)), user_data=user_data))


def decode_subscription(data: bytes | bytearray | memoryview) -> list[str]:
    return list(_decode(SUBSCRIPTION, data).topics)


def encode_assignment(assignment: Mapping[str, Iterable[int]]) -> bytes:
    """An assignment blob for SyncGroup: topic -> partitions (both sorted)."""
    item = ASSIGNMENT.cls.TopicPartition
    return _encode(
        ASSIGNMENT,
        ASSIGNMENT.cls(
            assigned_partitions=[
                item(topic=topic, partitions=sorted(parts))
                for topic, parts in sorted(assignment.items())
            ]
        ),
    )


def decode_assignment(data: bytes | bytearray | memoryview) -> dict[str, list[int]]:
    """Topic -> partitions; an empty blob (a member given nothing) is an empty assignment."""
    if not data:
        return {}
    return {a.topic: list(a.partitions) for a in _decode(ASSIGNMENT, data).assigned_partitions}
