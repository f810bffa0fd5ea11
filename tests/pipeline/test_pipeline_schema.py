"""sluice.pipeline.schema.ColumnBuilder: decoded batch columns -> Arrow record batches (no
Spark)."""

from __future__ import annotations

from datetime import UTC, datetime

import pyarrow as pa
import pytest

from sluice.pipeline.schema import COLUMNS, ColumnBuilder
from sluice.protocol.records import (
    ATTR_CONTROL_MASK,
    build_batch,
    decode_batch_columns,
    iter_batches,
    set_base_offset,
    stamp_log_append_time,
)


def _batch(base: int, n: int, *, log_append_time: bool = False, control: bool = False) -> bytes:
    batch = bytearray(
        build_batch(
            [
                (1000 + i, b"k%d" % i if i % 3 else None, b"v%d" % i, [("h", b"%d" % i)])
                for i in range(n)
            ],
            is_control=control,
        )
    )
    set_base_offset(batch, base)
    if log_append_time:
        stamp_log_append_time(batch, 5000)
    return bytes(batch)


def _add(builder: ColumnBuilder, batch: bytes, lo: int, hi: int) -> None:
    ((_, header, view),) = list(iter_batches(batch))
    builder.add(header, decode_batch_columns(view), lo, hi)


@pytest.mark.parametrize(("lo", "hi"), [(0, 1 << 62), (103, 107), (100, 101), (109, 200)])
def test_keeps_the_records_of_the_range(lo: int, hi: int) -> None:
    builder = ColumnBuilder("t", 3, include_headers=True)
    _add(builder, _batch(100, 10), lo, hi)
    _add(builder, _batch(110, 5, log_append_time=True), lo, hi)
    kept = [o for o in range(100, 115) if lo <= o < hi]
    assert len(builder) == len(kept)
    table = pa.Table.from_batches([builder.build()])
    assert len(builder) == 0  # build() starts over
    assert table.column_names == [*COLUMNS, "headers"]
    rows = table.to_pylist()
    assert [r["offset"] for r in rows] == kept
    for r in rows:
        i = r["offset"] - 100 if r["offset"] < 110 else r["offset"] - 110
        assert r["key"] == (b"k%d" % i if i % 3 else None)
        assert r["value"] == b"v%d" % i
        assert r["headers"] == [{"key": "h", "value": b"%d" % i}]
        assert (r["topic"], r["partition"]) == ("t", 3)
        append_time = r["offset"] >= 110
        assert r["timestampType"] == int(append_time)
        ms = 5000 if append_time else 1000 + i
        assert r["timestamp"] == datetime.fromtimestamp(ms / 1000, UTC)


def test_skips_control_batches() -> None:
    builder = ColumnBuilder("t", 0, include_headers=False)
    batch = _batch(0, 2, control=True)
    ((_, header, _view),) = list(iter_batches(batch))
    assert header.attributes & ATTR_CONTROL_MASK
    _add(builder, batch, 0, 10)
    assert len(builder) == 0
    _add(builder, _batch(2, 2), 0, 10)
    assert builder.build().column("offset").to_pylist() == [2, 3]
