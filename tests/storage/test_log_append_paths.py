"""The append fast paths against the general ones they shortcut.

* ``Log._append_one`` (one batch, no producer id, CreateTime) against ``Log._append_general``
  (every other request): the same files byte for byte, the same AppendInfo, the same rolls.
* ``sluice.protocol.records.validate_batch``'s fast accept against its field-by-field checks
  (``_validate_batch_fields``): the same header, or the same error, on arbitrary input.
* ``Log.append_as_follower``'s runs (several batches, one write: ``LogSegment.append_batches``)
  against one append per batch: the same files byte for byte (indexes included), the same
  AppendInfo, the same rolls; and ``validate_fetched_batches`` against ``iter_batches`` plus
  ``validate_batch`` per batch: the same headers, or the same error, on arbitrary input.
"""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
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


class OneByOneFollowerLog(Log):
    """A Log whose follower appends write one batch per segment append (no runs)."""

    def _append_run(self, view: memoryview, run: list[tuple[int, rec.BatchHeader]]) -> bool:
        return False


class CountingFollowerLog(Log):
    """A Log counting the runs its follower appends wrote with one segment append."""

    runs = 0

    def _append_run(self, view: memoryview, run: list[tuple[int, rec.BatchHeader]]) -> bool:
        done = super()._append_run(view, run)
        CountingFollowerLog.runs += done
        return done


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


# A leader's log to copy: requests of (record timestamps, value size, epoch step, producer id?).
leader_requests_strategy = st.lists(
    st.tuples(
        st.lists(st.sampled_from([-1, 0, 5, 1_000, 1_001, 90_000]), min_size=1, max_size=4),
        st.integers(0, 300),
        st.sampled_from([0, 0, 0, 1]),
        st.booleans(),
    ),
    min_size=1,
    max_size=60,
)


def _leader_batches(root: Path, requests: list[tuple[list[int], int, int, bool]]) -> list[bytes]:
    """The batches of a leader log built from ``requests`` (offsets and epochs assigned)."""
    leader = Log.open(root / "leader-0", LogConfig(), clock=Clock())
    epoch = 0
    sequence = 0
    for timestamps, size, step, idempotent in requests:
        epoch += step
        records = [(ts, None, bytes([len(timestamps)]) * size) for ts in timestamps]
        if idempotent:
            data = rec.build_batch(records, producer_id=7, producer_epoch=0, base_sequence=sequence)
            sequence += len(records)
        else:
            data = rec.build_batch(records)
        leader.append_as_leader(data, leader_epoch=epoch)
    raw = b"".join(p.read_bytes() for p in sorted((root / "leader-0").glob("*.log")))
    leader.close()
    return [bytes(batch) for _, _, batch in rec.iter_batches(raw)]


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    requests=leader_requests_strategy,
    fetch_sizes=st.lists(st.integers(1, 8), min_size=1, max_size=30),
    partial_tails=st.lists(st.integers(0, 80), min_size=1, max_size=30),
    index_rolls=st.booleans(),
)
def test_follower_runs_equal_one_append_per_batch(
    tmp_path_factory: pytest.TempPathFactory,
    requests: list[tuple[list[int], int, int, bool]],
    fetch_sizes: list[int],
    partial_tails: list[int],
    index_rolls: bool,
) -> None:
    root = tmp_path_factory.mktemp("follower")
    batches = _leader_batches(root, requests)
    # Small segments, dense indexes that fill up (96 bytes: 12 offset entries, 8 time entries),
    # time-based rolls on the record clock: every reason to roll inside a fetch.
    config = LogConfig(
        segment_bytes=100_000 if index_rolls else 3_000,
        index_interval_bytes=100,
        segment_index_bytes=96,
        segment_ms=60_000,
    )
    logs = [
        CountingFollowerLog.open(root / "runs-0", config, clock=Clock()),
        OneByOneFollowerLog.open(root / "single-0", config, clock=Clock()),
    ]
    position = 0
    n = 0
    while position < len(batches):
        take = fetch_sizes[n % len(fetch_sizes)]
        fetched = b"".join(batches[position : position + take])
        if position + take < len(batches):  # a fetch cut inside the next batch
            following = batches[position + take]
            fetched += following[: min(partial_tails[n % len(partial_tails)], len(following) - 1)]
        infos = [log.append_as_follower(fetched) for log in logs]
        assert infos[0] == infos[1]
        position += take
        n += 1
    runs, single = logs
    assert runs.log_end_offset == single.log_end_offset
    assert [s.base_offset for s in runs.segments] == [s.base_offset for s in single.segments]
    assert runs.leader_epoch_cache.entries == single.leader_epoch_cache.entries
    assert _producers(runs) == _producers(single)
    for log in logs:
        log.close()
    # (producer snapshots hold the wall-clock time they were taken: compared above instead)
    files = [
        {n: b for n, b in _files(root / d).items() if not n.endswith(".snapshot")}
        for d in ("runs-0", "single-0")
    ]
    assert files[0] == files[1]
    assert b"".join(batches) == b"".join(
        p.read_bytes() for p in sorted((root / "runs-0").glob("*.log"))
    )


def test_follower_runs_are_taken_and_roll_where_single_appends_do(tmp_path: Path) -> None:
    """The property test above, once with data known to take every path: runs, and rolls for
    size, time and full indexes inside fetches."""
    CountingFollowerLog.runs = 0
    requests = [([ts], 150, step, n % 3 == 0) for n, (ts, step) in enumerate(
        [(0, 0)] * 30 + [(5, 1)] * 10 + [(90_000, 0)] * 5 + [(90_001, 0)] * 40
    )]  # fmt: skip
    for index_rolls in (False, True):
        test_follower_runs_equal_one_append_per_batch.hypothesis.inner_test(  # type: ignore[attr-defined]
            _Factory(tmp_path / str(index_rolls)), requests, [7, 2, 5], [0, 30, 70], index_rolls
        )
    assert CountingFollowerLog.runs > 10


class _Factory:
    def __init__(self, root: Path) -> None:
        self.root = root

    def mktemp(self, name: str) -> Path:
        path = self.root / name
        path.mkdir(parents=True)
        return path


def _producers(log: Log) -> dict[int, tuple[int, list[object]]]:
    return {p: (e.epoch, list(e.batches)) for p, e in log.producer_state().producers.items()}


def _fetched(check, data: bytes):  # type: ignore[no-untyped-def]
    try:
        return check(data)
    except CorruptRecordError as exc:
        return (type(exc), str(exc), exc.field, exc.position)


# int32 header fields a patch may set (batch index, field offset, value): lengths, counts and
# deltas that disagree, with the CRC fixed or not.
_FIELDS = (rec.LENGTH_OFFSET, rec.LAST_OFFSET_DELTA_OFFSET, rec.RECORD_COUNT_OFFSET)
_VALUES = (-5, -1, 0, 1, 2, 3, 48, 49, 60, 1000, 2**31 - 1)


def _fields_example(*fields: tuple[int, int, int]):  # type: ignore[no-untyped-def]
    return example(sizes=[3, 5], patches=[], fields=list(fields), cut=0, fix_crc=True, codec=0)


@settings(max_examples=400, deadline=None)
@_fields_example((1, rec.LAST_OFFSET_DELTA_OFFSET, -1), (1, rec.RECORD_COUNT_OFFSET, 0))
@_fields_example((1, rec.LAST_OFFSET_DELTA_OFFSET, 1000), (1, rec.RECORD_COUNT_OFFSET, 1000))
@_fields_example((0, rec.RECORD_COUNT_OFFSET, 3))
@_fields_example((0, rec.RECORD_COUNT_OFFSET, -1))
@_fields_example((1, rec.LENGTH_OFFSET, 48))
@_fields_example((1, rec.LENGTH_OFFSET, 2**31 - 1))
@given(
    sizes=st.lists(st.integers(0, 40), min_size=1, max_size=3),
    patches=st.lists(st.tuples(st.integers(0, 400), st.integers(0, 255)), max_size=3),
    fields=st.lists(
        st.tuples(st.integers(0, 2), st.sampled_from(_FIELDS), st.sampled_from(_VALUES)),
        max_size=2,
    ),
    cut=st.integers(0, 90),
    fix_crc=st.booleans(),
    codec=st.sampled_from([0, 1]),
)
def test_validate_fetched_batches_equals_one_by_one(
    sizes: list[int],
    patches: list[tuple[int, int]],
    fields: list[tuple[int, int, int]],
    cut: int,
    fix_crc: bool,
    codec: int,
) -> None:
    batches = []
    offset = 0
    for size in sizes:
        batch = bytearray(
            rec.build_batch([(10, b"k", b"v" * size), (11, None, b"w")], compression=codec)
        )
        rec.set_base_offset(batch, offset)
        offset += 2
        batches.append(batch)
    starts = [sum(len(b) for b in batches[:n]) for n in range(len(batches))]
    buf = bytearray(b"".join(batches))
    for n, field, value in fields:
        if n < len(batches):
            struct.pack_into(">i", buf, starts[n] + field, value)
    buf = buf[: len(buf) - cut]
    for position, value in patches:
        if position < len(buf):
            buf[position] = value
    if fix_crc:
        for start, batch in zip(starts, batches, strict=True):
            end = start + len(batch)
            if end <= len(buf):
                struct.pack_into(">I", buf, start + rec.CRC_OFFSET, rec.compute_crc(buf[start:end]))
    data = bytes(buf)
    fused = _fetched(rec.validate_fetched_batches, data)
    one_by_one = _fetched(lambda d: rec._validate_fetched_batches_one_by_one(memoryview(d)), data)
    assert fused == one_by_one
