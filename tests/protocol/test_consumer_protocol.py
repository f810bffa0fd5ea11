"""sluice.protocol.consumer_protocol against kafka-python's own ConsumerProtocol v0 classes."""

from __future__ import annotations

import io

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.protocol.old.consumer_protocol import (
    ConsumerProtocolMemberAssignment_v0,
    ConsumerProtocolMemberMetadata_v0,
)

from sluice.protocol.consumer_protocol import (
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)
from sluice.protocol.errors import ProtocolError

topics = st.lists(st.text(min_size=1, max_size=12), max_size=6, unique=True)


@settings(max_examples=50, deadline=None)
@given(names=topics)
def test_subscription_is_byte_identical_to_kafka_python(names: list[str]) -> None:
    theirs = ConsumerProtocolMemberMetadata_v0(version=0, topics=sorted(names), user_data=None)
    assert encode_subscription(names) == bytes(theirs.encode())
    decoded = ConsumerProtocolMemberMetadata_v0.decode(io.BytesIO(encode_subscription(names)))
    assert list(decoded.topics) == sorted(names)


@settings(max_examples=50, deadline=None)
@given(
    assignment=st.dictionaries(
        st.text(min_size=1, max_size=12), st.sets(st.integers(0, 1000), max_size=5), max_size=5
    )
)
def test_assignment_is_byte_identical_to_kafka_python(assignment: dict[str, set[int]]) -> None:
    theirs = ConsumerProtocolMemberAssignment_v0(
        version=0,
        assigned_partitions=[(t, sorted(ps)) for t, ps in sorted(assignment.items())],
        user_data=None,
    )
    ours = encode_assignment(assignment)
    assert ours == bytes(theirs.encode())
    assert decode_assignment(ours) == {t: sorted(ps) for t, ps in assignment.items()}


def test_newer_versions_are_read_by_their_v0_prefix() -> None:
    # A v1 subscription appends owned partitions after user_data; v0 readers ignore the rest.
    blob = bytearray(encode_subscription(["a"]))
    blob[0:2] = b"\x00\x01"
    blob += b"\x00\x00\x00\x00"  # owned_partitions: empty array
    assert decode_subscription(bytes(blob)) == ["a"]


def test_empty_assignment_blob_means_nothing_assigned() -> None:
    assert decode_assignment(b"") == {}


@pytest.mark.parametrize("garbage", [b"\x00", b"\x00\x00\x00\x00\x00\x09", b"\x00\x00\xff"])
def test_garbage_raises_protocol_error(garbage: bytes) -> None:
    with pytest.raises(ProtocolError):
        decode_subscription(garbage)
