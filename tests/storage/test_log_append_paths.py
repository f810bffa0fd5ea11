"""The append fast paths against the general ones they shortcut.

* ``Log._append_one`` (one batch, no producer id, CreateTime) against ``Log._append_general``
  (every other request): the same files byte for byte, the same AppendInfo, the same rolls.
* ``sluice.protocol.records.validate_batch``'s fast accept against its field-by-field checks
  (``_validate_batch_fields``): the same header, or the same error, on arbitrary input.
"""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sluice.protocol import records as rec
from sluice.protocol.errors import CorruptRecordError, KafkaError
from sluice.server.storage.log import AppendInfo, Log
from sluice.server.storage.log_config import LogConfig


class GeneralPathLog(Log):
    """A Log whose single-batch requests take the general path."""

    def _append_one(
        self,
        view: memoryview,
        header: rec.BatchHeader,
        total: int,
        leader_epoch: int,
        in_place: bool,
    ) -> AppendInfo:
        return self._append_general(
            view, total, [(0, header)], header.last_offset_delta + 1, leader_epoch, in_place
        )


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000_000

    def __call__(self) -> int:
        return self.now


def _files(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir()) if p.is_file()}


# One request: (record timestamps, value size, in_place, leader epoch). Timestamps may be -1
# (no timestamp) and may go backwards; sizes cross index.interval.bytes and segment.bytes.
requests_strategy = st.lists(
    st.tuples(
        st.lists(st.sampled_from([-1, 0, 5, 1_000, 1_001, 90_000]), min_size=1, max_size=4),
        st.integers(0, 300),
        st.booleans(),
        st.integers(0, 3),
    ),
    min_size=1,
    max_size=25,
)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(requests=requests_strategy)
def test_fast_append_equals_general_append(
    tmp_path_factory: pytest.TempPathFactory, requests: list[tuple[list[int], int, bool, int]]
) -> None:
    root = tmp_path_factory.mktemp("paths")
    config = LogConfig(segment_bytes=2_000, index_interval_bytes=200, segment_ms=60_000)
    logs: list[Log] = []
    for cls, name in ((Log, "fast-0"), (GeneralPathLog, "general-0")):
        logs.append(cls.open(root / name, config, clock=Clock()))
    fast, general = logs
    assert type(general) is GeneralPathLog
    for timestamps, size, in_place, epoch in requests:
        data = rec.build_batch([(ts, None, bytes([len(timestamps)]) * size) for ts in timestamps])
        infos = []
        for log in logs:
            records = bytearray(data) if in_place else data
            infos.append(log.append_as_leader(records, leader_epoch=epoch, in_place=in_place))
        assert infos[0] == infos[1]
        assert infos[0].last_offset - infos[0].first_offset + 1 == len(timestamps)
    assert fast.log_end_offset == general.log_end_offset
    assert [s.base_offset for s in fast.segments] == [s.base_offset for s in general.segments]
    assert len(fast.segments) > 1 or len(requests) < 10  # rolls are exercised
    for log in logs:
        log.close()
    assert _files(root / "fast-0") == _files(root / "general-0")


def test_fast_append_errors_equal_general_errors(tmp_path: Path) -> None:
    config = LogConfig(max_message_bytes=500)
    fast = Log.open(tmp_path / "fast-0", config)
    general = GeneralPathLog.open(tmp_path / "general-0", config)
    good = rec.build_batch([(1, None, b"v")])
    bad_crc = bytearray(good)
    bad_crc[-1] ^= 1
    moved = bytearray(good)
    rec.set_base_offset(moved, 7)
    too_big = rec.build_batch([(1, None, b"x" * 600)])
    for data in (bytes(bad_crc), bytes(moved), too_big):
        errors = []
        for log in (fast, general):
            with pytest.raises(KafkaError) as caught:
                log.append_as_leader(data)
            errors.append((type(caught.value), str(caught.value)))
        assert errors[0] == errors[1]
    assert fast.log_end_offset == general.log_end_offset == 0
    fast.close()
    general.close()


def _validate(check, data: bytes, max_batch_size: int, from_client: bool):  # type: ignore[no-untyped-def]
    try:
        return check(data, max_batch_size, from_client)
    except CorruptRecordError as exc:
        return (type(exc), str(exc), exc.field, exc.position)


VALID = rec.build_batch([(10, b"k", b"value"), (11, None, b"w" * 40)])


@settings(max_examples=300, deadline=None)
@given(
    patches=st.lists(st.tuples(st.integers(0, len(VALID) - 1), st.integers(0, 255)), max_size=3),
    cut=st.integers(0, 8),
    fix_crc=st.booleans(),
    max_batch_size=st.sampled_from([1 << 20, len(VALID), len(VALID) - 1]),
    from_client=st.booleans(),
)
def test_validate_fast_accept_equals_field_checks(
    patches: list[tuple[int, int]], cut: int, fix_crc: bool, max_batch_size: int, from_client: bool
) -> None:
    buf = bytearray(VALID[: len(VALID) - cut])
    for position, value in patches:
        if position < len(buf):
            buf[position] = value
    if fix_crc and len(buf) >= rec.HEADER_SIZE:
        struct.pack_into(">I", buf, rec.CRC_OFFSET, rec.compute_crc(buf))
    data = bytes(buf)
    fast = _validate(
        lambda d, m, f: rec.validate_batch(d, max_batch_size=m, from_client=f),
        data,
        max_batch_size,
        from_client,
    )
    fields = _validate(
        lambda d, m, f: rec._validate_batch_fields(memoryview(d), m, f, None),
        data,
        max_batch_size,
        from_client,
    )
    assert fast == fields
    assert type(fast) is rec.BatchHeader or fast[0] is CorruptRecordError


def test_validate_fast_accept_takes_the_valid_batch() -> None:
    header = rec.validate_batch(VALID, max_batch_size=1 << 20)
    assert type(header) is rec.BatchHeader
    assert header == rec.parse_header(VALID)
    assert (header.record_count, header.last_offset_delta) == (2, 1)
