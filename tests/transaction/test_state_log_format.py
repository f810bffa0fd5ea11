"""``__transaction_state`` records byte for byte as Kafka's ``TransactionLog`` writes them, and
the placement of a transactional id (Java's ``String.hashCode``)."""

from __future__ import annotations

import struct

import pytest

from sluice.protocol.errors import ProtocolError
from sluice.server.group.offsets_store import partition_for
from sluice.server.transaction.state_log import (
    TxnLogValue,
    decode_key,
    decode_value,
    key_bytes,
    topic_config,
    value_bytes,
)


def _string(s: str) -> bytes:
    data = s.encode()
    return struct.pack(">h", len(data)) + data


def test_key_is_version_0_and_the_transactional_id() -> None:
    # TransactionLogKey v0: int16 version 0, then the id as an int16-length string
    assert key_bytes("my-txn") == b"\x00\x00" + _string("my-txn")
    assert key_bytes("my-txn").hex() == "0000" + "0006" + b"my-txn".hex()
    assert decode_key(key_bytes("my-txn")) == "my-txn"
    assert decode_key(b"\x00\x07abc") is None  # a key version Kafka does not know: skipped


def test_value_v0_layout() -> None:
    value = TxnLogValue(
        producer_id=1000, producer_epoch=3, timeout_ms=60000, state_id=1,
        partitions=frozenset({("t", 2), ("t", 0), ("a", 1)}), last_update_ms=5, start_ms=4,
    )  # fmt: skip
    expected = (
        struct.pack(">h", 0)  # version
        + struct.pack(">qhib", 1000, 3, 60000, 1)  # producer id, epoch, timeout, status
        + struct.pack(">i", 2)  # TransactionPartitions: 2 topics (int32 count, v0)
        + _string("a")
        + struct.pack(">ii", 1, 1)  # topic a: [1]
        + _string("t")
        + struct.pack(">iii", 2, 0, 2)  # topic t: [0, 2]
        + struct.pack(">qq", 5, 4)  # last update, start
    )
    assert value_bytes(value) == expected
    assert decode_value(expected) == value


def test_empty_state_writes_null_partitions() -> None:
    empty = TxnLogValue(7, 0, 1000, 0, frozenset(), 9, -1)
    data = value_bytes(empty)
    assert data[2 + 8 + 2 + 4 + 1 : 2 + 8 + 2 + 4 + 1 + 4] == b"\xff\xff\xff\xff"  # null array
    assert decode_value(data) == empty
    with pytest.raises(ValueError):
        value_bytes(TxnLogValue(7, 0, 1000, 0, frozenset({("t", 0)}), 9, -1))


def test_value_v1_flexible_with_tagged_fields_is_read() -> None:
    """Kafka 4's TransactionLogValue v1 (flexible; previous/next producer id and the client's
    transaction version as tagged fields)."""
    data = (
        struct.pack(">h", 1)
        + struct.pack(">qhib", 2000, 1, 30000, 4)
        + bytes([2])  # compact array: 1 topic
        + bytes([2])
        + b"t"  # compact string "t"
        + bytes([2])
        + struct.pack(">i", 3)  # compact array [3]
        + bytes([0])  # the topic entry's (empty) tagged fields
        + struct.pack(">qq", 11, 10)
        + bytes([2])  # 2 tagged fields
        + bytes([0, 8])
        + struct.pack(">q", 1999)  # tag 0: previous producer id
        + bytes([2, 2])
        + struct.pack(">h", 2)  # tag 2: client transaction version
    )
    value = decode_value(data)
    assert value is not None
    assert (value.producer_id, value.previous_producer_id, value.state_id) == (2000, 1999, 4)
    assert value.partitions == frozenset({("t", 3)})
    assert (value.last_update_ms, value.start_ms) == (11, 10)


def test_tombstone_and_unknown_versions() -> None:
    assert decode_value(None) is None
    with pytest.raises(ProtocolError):
        decode_value(b"\x00\x05" + bytes(40))


def _java_hash(s: str) -> int:
    h = 0
    for ch in s:  # BMP only here: one UTF-16 unit per character
        h = (31 * h + ord(ch)) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


@pytest.mark.parametrize("txn_id", ["hello", "my-txn", "producer-1", "z" * 40, "tx-é"])
def test_placement_is_kafkas_partition_for(txn_id: str) -> None:
    assert _java_hash("hello") == 99162322  # Java: "hello".hashCode()
    assert partition_for(txn_id, 50) == (_java_hash(txn_id) & 0x7FFFFFFF) % 50


def test_topic_config_is_compacted_and_caps_min_isr() -> None:
    config = topic_config(2, 1, 104857600)
    assert config["cleanup.policy"] == "compact"
    assert config["min.insync.replicas"] == "1"  # one replica standalone
    assert topic_config(2, 3, 1)["min.insync.replicas"] == "2"
