"""sluice.server.storage.dump_log on real segment files written with the RecordBatch builder (and
corrupted
copies of them): the exact printed lines, and --verify finding every planted problem."""

from __future__ import annotations

import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from sluice.protocol.records import CRC_OFFSET, RECORDS_OFFSET, build_batch
from sluice.server.storage import dump_log
from sluice.server.storage.index import OFFSET_ENTRY, TIME_ENTRY

REPO = Path(__file__).resolve().parents[2]


def seg(base: int, suffix: str) -> str:
    return f"{base:020d}{suffix}"


def write_index(path: Path, base: int, entries: list[tuple[int, int]], prealloc: int = 10) -> None:
    """Offset index as Kafka leaves the active segment's: valid entries, then zeros."""
    data = b"".join(OFFSET_ENTRY.pack(off - base, pos) for off, pos in entries)
    path.write_bytes(data + bytes(OFFSET_ENTRY.size * prealloc))


def write_time_index(
    path: Path, base: int, entries: list[tuple[int, int]], prealloc: int = 10
) -> None:
    data = b"".join(TIME_ENTRY.pack(ts, off - base) for ts, off in entries)
    path.write_bytes(data + bytes(TIME_ENTRY.size * prealloc))


B0 = build_batch(
    [
        (1000, b"k", b"hi"),
        (1001, None, b"there", (("h1", b"x"), ("h2", None))),
        (999, b"key2", None),
    ],
    base_offset=0,
    partition_leader_epoch=0,
)
B1 = build_batch(
    [(2000, None, b"txn")],
    base_offset=3,
    producer_id=4000,
    producer_epoch=1,
    base_sequence=2**31 - 1,  # lastSequence/sequence wrap like Kafka's
    is_transactional=True,
    partition_leader_epoch=0,
)
B2 = build_batch([(3000, b"a", b"b"), (3001, b"c", b"d")], base_offset=4, compression=1)
B3 = build_batch([(4000, None, b"x" * 50), (4500, None, b"y")], base_offset=6, compression=3)
# An end-transaction marker: key = version 0, type 1 (COMMIT); value = version 0, epoch 7
B4 = build_batch(
    [(5000, struct.pack(">hh", 0, 1), struct.pack(">hi", 0, 7))],
    base_offset=8,
    producer_id=4000,
    producer_epoch=1,
    is_transactional=True,
    is_control=True,
)


@pytest.fixture
def log_dir(tmp_path: Path) -> Path:
    """data/topic-0 with two segments (base 0 and 6) and their indexes; data/other-1 with one."""
    part = tmp_path / "data" / "topic-0"
    part.mkdir(parents=True)
    (part / seg(0, ".log")).write_bytes(B0 + B1 + B2)
    write_index(part / seg(0, ".index"), 0, [(3, len(B0)), (5, len(B0) + len(B1))])
    write_time_index(part / seg(0, ".timeindex"), 0, [(2000, 3), (3001, 5)])
    (part / seg(6, ".log")).write_bytes(B3 + B4)
    write_index(part / seg(6, ".index"), 6, [(8, len(B3))])
    write_time_index(part / seg(6, ".timeindex"), 6, [(5000, 8)])
    other = tmp_path / "data" / "other-1"
    other.mkdir()
    (other / seg(0, ".log")).write_bytes(build_batch([(1, None, b"z")]))
    write_index(other / seg(0, ".index"), 0, [])
    write_time_index(other / seg(0, ".timeindex"), 0, [])
    return tmp_path / "data"


def lines(path: Path, **kw: bool) -> list[str]:
    return list(dump_log.dump_file(path, **kw))


def test_dump_log_batches(log_dir: Path) -> None:
    path = log_dir / "topic-0" / seg(0, ".log")
    out = lines(path)
    assert out[0] == f"Dumping {path}"
    assert out[1] == "Log starting offset: 0"
    assert out[2] == (
        "baseOffset: 0 lastOffset: 2 count: 3 baseSequence: -1 lastSequence: -1 producerId: -1 "
        "producerEpoch: -1 partitionLeaderEpoch: 0 isTransactional: false isControl: false "
        f"position: 0 CreateTime: 1001 size: {len(B0)} magic: 2 compresscodec: none crcValid: true"
    )
    assert out[3] == (
        "baseOffset: 3 lastOffset: 3 count: 1 baseSequence: 2147483647 lastSequence: 2147483647 "
        "producerId: 4000 producerEpoch: 1 partitionLeaderEpoch: 0 isTransactional: true "
        f"isControl: false position: {len(B0)} CreateTime: 2000 size: {len(B1)} magic: 2 "
        "compresscodec: none crcValid: true"
    )
    assert out[4].startswith("baseOffset: 4 lastOffset: 5 count: 2 ")
    assert out[4].endswith(f"size: {len(B2)} magic: 2 compresscodec: gzip crcValid: true")
    assert len(out) == 5


def test_dump_log_records(log_dir: Path) -> None:
    out = lines(log_dir / "topic-0" / seg(0, ".log"), print_data_log=True)
    assert out[3:6] == [
        "| offset: 0 CreateTime: 1000 keySize: 1 valueSize: 2 sequence: -1 headerKeys: [] "
        "key: k payload: hi",
        "| offset: 1 CreateTime: 1001 keySize: -1 valueSize: 5 sequence: -1 "
        "headerKeys: [h1,h2] payload: there",
        "| offset: 2 CreateTime: 999 keySize: 4 valueSize: -1 sequence: -1 headerKeys: [] "
        "key: key2",
    ]
    # the sequence wraps at Int.MaxValue (baseSequence 2147483647 + delta 0)
    assert out[7] == (
        "| offset: 3 CreateTime: 2000 keySize: -1 valueSize: 3 sequence: 2147483647 "
        "headerKeys: [] payload: txn"
    )
    assert out[9:] == [
        "| offset: 4 CreateTime: 3000 keySize: 1 valueSize: 1 sequence: -1 headerKeys: [] "
        "key: a payload: b",
        "| offset: 5 CreateTime: 3001 keySize: 1 valueSize: 1 sequence: -1 headerKeys: [] "
        "key: c payload: d",
    ]


def test_dump_control_batch_and_lz4(log_dir: Path) -> None:
    out = lines(log_dir / "topic-0" / seg(6, ".log"), print_data_log=True)
    assert out[1] == "Log starting offset: 6"
    assert "compresscodec: lz4 crcValid: true" in out[2]
    assert out[3].startswith("| offset: 6 CreateTime: 4000 keySize: -1 valueSize: 50 ")
    assert "isTransactional: true isControl: true" in out[5]
    assert out[6] == (
        "| offset: 8 CreateTime: 5000 keySize: 4 valueSize: 6 sequence: -1 headerKeys: [] "
        "endTxnMarker: COMMIT coordinatorEpoch: 7"
    )


def test_dump_log_append_time(tmp_path: Path) -> None:
    from sluice.protocol.records import stamp_log_append_time

    batch = bytearray(build_batch([(1, None, b"v")]))
    stamp_log_append_time(batch, 123456)
    path = tmp_path / seg(0, ".log")
    path.write_bytes(batch)
    out = lines(path, print_data_log=True)
    assert " position: 0 LogAppendTime: 123456 size: " in out[2]
    assert out[3].startswith("| offset: 0 LogAppendTime: 123456 keySize: -1")


def test_dump_indexes_stop_at_preallocated_zeros(log_dir: Path) -> None:
    part = log_dir / "topic-0"
    assert lines(part / seg(0, ".index"))[1:] == [
        f"offset: 3 position: {len(B0)}",
        f"offset: 5 position: {len(B0) + len(B1)}",
    ]
    assert lines(part / seg(6, ".index"))[1:] == [f"offset: 8 position: {len(B3)}"]
    assert lines(part / seg(0, ".timeindex"))[1:] == [
        "timestamp: 2000 offset: 3",
        "timestamp: 3001 offset: 5",
    ]
    assert lines(part / seg(6, ".timeindex")) == [
        f"Dumping {part / seg(6, '.timeindex')}",
        "timestamp: 5000 offset: 8",
    ]
    assert lines(log_dir / "other-1" / seg(0, ".index"))[1:] == []


def test_corrupt_batch_and_torn_tail_are_reported(log_dir: Path, tmp_path: Path) -> None:
    bad = bytearray(B0 + B1)
    bad[RECORDS_OFFSET + 3] ^= 0x01  # payload bit flip in the first batch
    path = tmp_path / seg(0, ".log")
    path.write_bytes(bytes(bad) + B2[:40])  # and half a header at the end
    out = lines(path, print_data_log=True)
    assert out[2].endswith("crcValid: false")
    assert out[3].startswith("| records unreadable: CRC mismatch")
    assert out[4].endswith("crcValid: true")
    assert out[-1].startswith(f"Found 40 invalid bytes at the end of {path.name} (position ")


def test_verify_clean_dir(log_dir: Path) -> None:
    assert dump_log.verify_log_dir(log_dir) == []
    assert dump_log.verify_log_dir(log_dir / "topic-0") == []  # one partition dir works too
    result = CliRunner().invoke(dump_log.main, ["--verify", str(log_dir)])
    assert result.exit_code == 0, result.output
    assert result.output == f"Verified 2 partition(s) under {log_dir}: 0 problem(s)\n"


def test_verify_finds_every_planted_problem(log_dir: Path, tmp_path: Path) -> None:
    copy = tmp_path / "corrupt"
    shutil.copytree(log_dir, copy)
    part = copy / "topic-0"
    # 1. CRC: flip a byte of B1's records
    log0 = bytearray((part / seg(0, ".log")).read_bytes())
    log0[len(B0) + RECORDS_OFFSET + 2] ^= 0xFF
    (part / seg(0, ".log")).write_bytes(log0)
    # 2. offset index entry pointing inside a batch, 3. one naming the wrong last offset
    write_index(part / seg(0, ".index"), 0, [(3, len(B0) + 5), (4, len(B0) + len(B1))])
    # 4. a time index entry whose batch has another max timestamp
    write_time_index(part / seg(6, ".timeindex"), 6, [(4999, 8)])
    # 5. offsets going backwards across segments: other-1 gets a second segment starting low
    other = copy / "other-1"
    (other / seg(5, ".log")).write_bytes(
        build_batch([(1, None, b"a")], base_offset=5)
        + build_batch([(1, None, b"b")], base_offset=5)
    )
    write_index(other / seg(5, ".index"), 5, [])
    # 6. ... and no time index for that segment
    result = CliRunner().invoke(dump_log.main, ["--verify", str(copy)])
    assert result.exit_code == 1
    problems = [line for line in result.output.splitlines() if line.startswith("PROBLEM")]
    text = "\n".join(problems)
    assert f"topic-0/{seg(0, '.log')} position {len(B0)} (baseOffset 3): CRC mismatch" in text
    assert f"entry offset: 3 position: {len(B0) + 5}: position is not a batch boundary" in text
    assert "entry offset: 4 position" in text and "the batch there ends at offset 5" in text
    assert "entry timestamp: 4999 offset: 8: the batch holding it has maxTimestamp 5000" in text
    assert f"other-1/{seg(5, '.log')} position 0 " not in text  # its first batch is fine
    assert "offsets not increasing (previous batch ended at 5)" in text
    assert f"time index {seg(5, '.timeindex')} missing" in text
    assert len(problems) == 6, text
    assert result.output.splitlines()[-1].endswith(": 6 problem(s)")


def test_verify_reports_damaged_records_behind_a_valid_crc(tmp_path: Path) -> None:
    part = tmp_path / "t-0"
    part.mkdir()
    batch = bytearray(build_batch([(1, None, b"v")]))
    batch[RECORDS_OFFSET] = 0x7E  # record length 63: overruns the batch
    struct.pack_into(">I", batch, CRC_OFFSET, dump_log.compute_crc(batch))
    (part / seg(0, ".log")).write_bytes(batch)
    write_index(part / seg(0, ".index"), 0, [])
    write_time_index(part / seg(0, ".timeindex"), 0, [])
    problems = dump_log.verify_log_dir(tmp_path)
    assert len(problems) == 1 and "record length 63 overruns the batch" in problems[0]


def test_segments_written_by_log_segment_verify_clean(tmp_path: Path) -> None:
    # Cross-check with the storage layer: indexes LogSegment builds pass our verifier and dump
    # exactly its entries.
    from sluice.server.storage.segment import LogSegment

    part = tmp_path / "t-0"
    part.mkdir()
    segment = LogSegment.open(part, 0, index_interval_bytes=100, max_index_size=4096)
    offset = 0
    for i in range(20):
        records = [(10_000 + i * 10 + j, None, b"v" * 40) for j in range(3)]
        batch = build_batch(records, base_offset=offset)
        segment.append(offset + 2, records[-1][0], offset + 2, batch)
        offset += 3
    index = segment.offset_index
    entries = [(e.offset, e.position) for e in map(index.entry_at, range(index.entries))]
    segment.close()
    assert len(entries) >= 3
    assert dump_log.verify_log_dir(tmp_path) == []
    dumped = lines(part / seg(0, ".index"))[1:]
    assert dumped == [f"offset: {o} position: {p}" for o, p in entries]


def test_cli_as_a_module(log_dir: Path) -> None:
    path = log_dir / "topic-0" / seg(0, ".timeindex")
    proc = subprocess.run(
        [sys.executable, "-m", "sluice.server.storage.dump_log", "--files", str(path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        f"Dumping {path}",
        "timestamp: 2000 offset: 3",
        "timestamp: 3001 offset: 5",
    ]


def test_cli_usage_errors(tmp_path: Path) -> None:
    runner = CliRunner()
    assert runner.invoke(dump_log.main, []).exit_code == 2
    other = tmp_path / "x.txt"
    other.write_text("x")
    assert runner.invoke(dump_log.main, [str(other)]).exit_code == 2
    assert runner.invoke(dump_log.main, ["--files", str(tmp_path / "nope.log")]).exit_code == 2


def test_verify_reports_a_torn_tail(log_dir: Path) -> None:
    log = log_dir / "other-1" / seg(0, ".log")
    whole = log.read_bytes()
    log.write_bytes(whole + B0[:-3])  # a batch cut short, as a crash mid-write leaves it
    problems = dump_log.verify_log_dir(log_dir)
    assert problems == [
        f"other-1/{seg(0, '.log')}: batch of {len(B0)} bytes runs past the end of the file "
        f"({len(B0) - 3} bytes left) (field batchLength, byte {len(whole) + 8})"
    ]


# -- leader epochs -------------------------------------------------------------------------------


def test_dump_and_verify_the_leader_epoch_checkpoint(tmp_path: Path) -> None:
    from sluice.server.storage.layout import LEADER_EPOCH_CHECKPOINT
    from sluice.server.storage.log import Log
    from sluice.server.storage.log_config import LogConfig

    log = Log.open(tmp_path / "t-0", LogConfig(segment_bytes=300))
    for epoch in (0, 0, 3, 3, 4):
        log.append_as_leader(build_batch([(1, None, b"v" * 30)] * 2), leader_epoch=epoch)
    log.assign_leader_epoch(6)  # a new leader's term, nothing written yet
    log.close()
    path = tmp_path / "t-0" / LEADER_EPOCH_CHECKPOINT
    assert lines(path) == [
        f"Dumping {path}",
        "epoch: 0 startOffset: 0",
        "epoch: 3 startOffset: 4",
        "epoch: 4 startOffset: 8",
        "epoch: 6 startOffset: 10",
    ]
    assert dump_log.verify_log_dir(tmp_path) == []
    # The log start moved into epoch 3 (retention): the first entry starts there.
    path.write_text("0\n3\n3 5\n4 8\n6 10\n")
    assert dump_log.verify_log_dir(tmp_path) == []
    # Compacted: entries before their epochs' first batches (the cleaner removed those), an
    # epoch with no batch left; still every batch in its own epoch's range.
    path.write_text("0\n4\n0 0\n1 3\n3 4\n4 7\n")
    assert dump_log.verify_log_dir(tmp_path) == []
    for content, expected in [
        ("0\n2\n0 0\n4 8\n", "holds [0@0, 4@8], the batch headers say [0@0, 3@4, 4@8]"),
        ("0\n3\n0 0\n3 4\n4 9\n", "holds [0@0, 3@4, 4@9], the batch headers say [0@0, 3@4, 4@8]"),
        ("0\n4\n0 0\n3 4\n4 8\n6 12\n", "holds [0@0, 3@4, 4@8, 6@12]"),  # past the log end
        ("0\n2\n3 4\n0 0\n", "entries not increasing: [3@4, 0@0]"),
        ("0\n2\n3 4\n", "unreadable"),
    ]:
        path.write_text(content)
        problems = dump_log.verify_log_dir(tmp_path)
        assert len(problems) == 1 and expected in problems[0], (content, problems)
        assert problems[0].startswith(f"t-0/{LEADER_EPOCH_CHECKPOINT}: ")
    assert lines(path)[1].startswith("Unreadable leader epoch checkpoint: ")
    path.unlink()  # missing: rebuilt at the next open, not a problem
    assert dump_log.verify_log_dir(tmp_path) == []
    result = CliRunner().invoke(dump_log.main, ["--files", str(tmp_path / "t-0" / seg(0, ".log"))])
    assert "partitionLeaderEpoch: 0 " in result.output


def test_dump_a_producer_snapshot_as_kafka_prints_it(tmp_path: Path) -> None:
    from sluice.server.storage.log import Log
    from sluice.server.storage.log_config import LogConfig
    from sluice.server.storage.producer_state import snapshot_files

    log = Log.open(tmp_path / "t-0", LogConfig(segment_bytes=300))
    log.append_as_leader(build_batch([(1_000, None, b"v")] * 2, producer_id=7,
                                     producer_epoch=0, base_sequence=0))  # fmt: skip
    log.append_as_leader(build_batch([(2_000, None, b"w")], producer_id=9, producer_epoch=3,
                                     base_sequence=0, is_transactional=True))  # fmt: skip
    log.close()
    [(offset, path)] = snapshot_files(tmp_path / "t-0")
    assert offset == 3
    assert lines(path) == [
        f"Dumping {path}",
        "producerId: 7 producerEpoch: 0 coordinatorEpoch: -1 currentTxnFirstOffset: "
        "OptionalLong.empty lastTimestamp: 1000 firstSequence: 0 lastSequence: 1 lastOffset: 1 "
        "offsetDelta: 1 timestamp: 1000",
        "producerId: 9 producerEpoch: 3 coordinatorEpoch: -1 currentTxnFirstOffset: "
        "OptionalLong[2] lastTimestamp: 2000 firstSequence: 0 lastSequence: 0 lastOffset: 2 "
        "offsetDelta: 0 timestamp: 2000",
    ]
    path.write_bytes(path.read_bytes()[:-1])
    assert lines(path)[1].startswith("Unreadable producer snapshot:")
