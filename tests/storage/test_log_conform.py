"""Log.append_as_leader under topic settings that rewrite or refuse batches: ``compression.type``
(the broker stores every batch in the topic's codec), the ``message.timestamp.*.max.ms``
bounds and ``cleanup.policy=compact`` (records without a key refused). Checked against what the
producer sent: the records read back are the same records (offsets, timestamps, keys, values,
headers), only the codec differs."""

from __future__ import annotations

from pathlib import Path

import pytest

from sluice.protocol import records as rec
from sluice.protocol.errors import InvalidRecord, InvalidTimestamp, MessageTooLarge
from sluice.server.storage.log import Isolation, Log
from sluice.server.storage.log_config import LogConfig

NOW = 1_700_000_000_000
CODECS = {"uncompressed": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


def batch(codec: int, n: int = 5, *, ts: int = NOW, producer_id: int = -1) -> bytes:
    records = [(ts + i, b"k%d" % i, b"value %d " % i * 20, [("h", b"%d" % i)]) for i in range(n)]
    return rec.build_batch(
        records,
        compression=codec,
        producer_id=producer_id,
        producer_epoch=0 if producer_id >= 0 else -1,
        base_sequence=0 if producer_id >= 0 else -1,
    )


def open_log(tmp_path: Path, **props: str) -> Log:
    config = LogConfig.from_properties({k.replace("_", "."): v for k, v in props.items()})
    return Log.open(tmp_path / "t-0", config, clock=lambda: NOW)


def stored(log: Log) -> list[tuple[rec.BatchHeader, list[rec.Record]]]:
    info = log.read(0, 1 << 20, Isolation.LOG_END)
    data = info.slice.read_bytes() if info.slice is not None else b""
    out = []
    for _, header, view in rec.iter_batches(data):
        out.append((header, rec.decode_batch(view).records))
    return out


@pytest.mark.parametrize("target", list(CODECS))
@pytest.mark.parametrize("source", [0, 1, 2, 3, 4])
def test_compression_type_stores_every_batch_in_the_topic_codec(
    tmp_path: Path, target: str, source: int
) -> None:
    log = open_log(tmp_path, compression_type=target)
    sent = batch(source) + batch((source + 1) % 5, 3)
    log.append_as_leader(sent)
    got = stored(log)
    assert [h.compression for h, _ in got] == [CODECS[target]] * 2
    expected = [r for _, _, v in rec.iter_batches(sent) for r in rec.decode_batch(v).records]
    for offset, r in enumerate(expected):  # same records, offsets assigned from 0
        r.offset = offset
    assert [r for _, rs in got for r in rs] == expected
    log.close()


def test_producer_keeps_the_batch_as_sent_and_idempotence_survives_recompression(
    tmp_path: Path,
) -> None:
    as_sent = open_log(tmp_path / "a")
    as_sent.append_as_leader(batch(3))
    assert [h.compression for h, _ in stored(as_sent)] == [3]
    as_sent.close()
    recompressed = open_log(tmp_path / "b", compression_type="gzip", compression_gzip_level="1")
    info = recompressed.append_as_leader(batch(4, producer_id=7))
    ((header, records),) = stored(recompressed)
    assert (header.compression, header.producer_id, header.base_sequence) == (1, 7, 0)
    assert len(records) == 5 and info.last_offset == 4
    # The retry of the same batch is recognised as a duplicate after recompression too.
    again = recompressed.append_as_leader(batch(4, producer_id=7))
    assert (again.first_offset, again.last_offset) == (0, 4)
    assert recompressed.log_end_offset == 5
    recompressed.close()


def test_recompressed_batch_is_still_checked_against_max_message_bytes(tmp_path: Path) -> None:
    big = rec.build_batch([(NOW, None, bytes(range(256)) * 40)], compression=4)
    log = open_log(tmp_path, compression_type="uncompressed", max_message_bytes=str(len(big) + 1))
    with pytest.raises(MessageTooLarge):
        log.append_as_leader(big)  # 10 KiB once uncompressed
    assert log.log_end_offset == 0
    log.close()


@pytest.mark.parametrize(
    ("props", "ts", "ok"),
    [
        ({"message_timestamp_before_max_ms": "1000"}, NOW - 1000, True),
        ({"message_timestamp_before_max_ms": "1000"}, NOW - 1001, False),
        ({"message_timestamp_after_max_ms": "1000"}, NOW + 1000 - 4, True),  # last record +4
        ({"message_timestamp_after_max_ms": "1000"}, NOW + 1000, False),
        ({"message_timestamp_difference_max_ms": "50"}, NOW - 51, False),
        ({"message_timestamp_difference_max_ms": "50"}, NOW + 47, False),
        ({"message_timestamp_difference_max_ms": "50"}, NOW - 50, True),
        # LogAppendTime topics stamp the broker's time: the producer's timestamps do not matter
        ({"message_timestamp_before_max_ms": "1", "message_timestamp_type": "LogAppendTime"},
         0, True),
    ],
)  # fmt: skip
def test_timestamp_bounds(tmp_path: Path, props: dict[str, str], ts: int, ok: bool) -> None:
    log = open_log(tmp_path, **props)
    if ok:
        log.append_as_leader(batch(0, ts=ts))
        assert log.log_end_offset == 5
    else:
        with pytest.raises(InvalidTimestamp) as info:
            log.append_as_leader(batch(1, ts=ts))
        assert info.value.code == 32
        assert log.log_end_offset == 0
    log.close()


def test_config_change_applies_to_the_next_append(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append_as_leader(batch(2))
    log.update_config(LogConfig.from_properties({"compression.type": "zstd"}))
    log.append_as_leader(batch(2))
    assert [h.compression for h, _ in stored(log)] == [2, 4]
    log.close()


@pytest.mark.parametrize("policy", ["compact", "compact,delete"])
@pytest.mark.parametrize("codec", [0, 1, 4])
@pytest.mark.parametrize("keyless", [0, 3])
def test_a_compacted_topic_refuses_records_without_a_key(
    tmp_path: Path, policy: str, codec: int, keyless: int
) -> None:
    """Kafka's LogValidator.validateKey: INVALID_RECORD with Kafka's message, nothing written
    (the other batches of the request neither)."""
    log = open_log(tmp_path, cleanup_policy=policy)
    log.append_as_leader(batch(codec))
    records = [(NOW, b"k", b"v"), (NOW, b"k2", None)]
    records.insert(keyless, (NOW, None, b"no key"))
    bad = rec.build_batch(records, compression=codec)
    with pytest.raises(InvalidRecord) as info:
        log.append_as_leader(batch(codec) + bad)
    assert info.value.code == 87
    assert str(info.value).endswith(
        "Compacted topic cannot accept message without key in topic partition t-0."
    )
    assert log.log_end_offset == 5
    # A tombstone (a key, no value) is a keyed record; on a delete-only topic keys are optional.
    log.append_as_leader(rec.build_batch([(NOW, b"k", None)], compression=codec))
    assert log.log_end_offset == 6
    log.update_config(LogConfig())
    log.append_as_leader(bad)
    assert log.log_end_offset == 9
    log.close()
