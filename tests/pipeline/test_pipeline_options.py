"""sluice.pipeline.options / sluice.pipeline.offsets: option parsing with the Kafka connector's
names, offsets
JSON, range splitting and admission control (pure functions: no Spark, no broker)."""

from __future__ import annotations

import itertools
import json
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sluice.pipeline.offsets import (
    EARLIEST,
    LATEST,
    OffsetRange,
    OptionError,
    TopicPartition,
    make_ranges,
    offsets_behind_latest,
    offsets_from_dict,
    offsets_to_dict,
    offsets_to_json,
    parse_partition_offsets,
    rate_limit,
    split_ranges,
)
from sluice.pipeline.options import (
    DEFAULT_MAX_RECORDS_PER_PARTITION,
    Subscription,
    parse,
    parse_sink,
)
from sluice.pipeline.savemode import sink_save_mode

BOOT = {"kafka.bootstrap.servers": "127.0.0.1:9092"}


def test_offsets_json_round_trip_in_the_kafka_connector_format() -> None:
    text = '{"topicA":{"0":23,"1":-1},"topicB":{"0":-2}}'
    parsed = parse_partition_offsets(text, option="startingOffsets")
    assert parsed == {
        TopicPartition("topicA", 0): 23,
        TopicPartition("topicA", 1): LATEST,
        TopicPartition("topicB", 0): EARLIEST,
    }
    assert json.loads(offsets_to_json(parsed)) == json.loads(text)
    assert offsets_from_dict(offsets_to_dict(parsed)) == parsed


@pytest.mark.parametrize(
    "text",
    ["not json", "[1,2]", '{"t":[1]}', '{"t":{"x":1}}', '{"t":{"0":-3}}', '{"t":{"0":1.5}}',
     '{"t":{"0":true}}', '{"t":{"-1":0}}'],
)  # fmt: skip
def test_bad_offsets_json_names_the_option(text: str) -> None:
    with pytest.raises(OptionError, match="startingOffsets"):
        parse_partition_offsets(text, option="startingOffsets")


def test_defaults_follow_the_kafka_connector() -> None:
    batch = parse({**BOOT, "subscribe": "a, b"}, streaming=False)
    assert batch.subscription == Subscription("subscribe", topics=("a", "b"))
    assert batch.starting.default == EARLIEST and batch.ending.default == LATEST
    assert batch.fail_on_data_loss and not batch.include_headers
    assert batch.max_offsets_per_trigger is None
    assert batch.max_records_per_partition == DEFAULT_MAX_RECORDS_PER_PARTITION
    stream = parse({**BOOT, "subscribe": "a"}, streaming=True)
    assert stream.starting.default == LATEST
    assert batch.isolation_level == 0  # read_uncommitted: the Java consumer's default


def test_isolation_level() -> None:
    committed = {**BOOT, "subscribe": "a", "kafka.isolation.level": "READ_COMMITTED"}
    assert parse(committed, streaming=True).isolation_level == 1
    with pytest.raises(OptionError, match=r"kafka\.isolation\.level"):
        parse({**BOOT, "subscribe": "a", "kafka.isolation.level": "committed"}, streaming=False)


def test_option_names_are_case_insensitive_like_spark() -> None:
    opts = parse(
        {
            **BOOT,
            "SUBSCRIBEPATTERN": "ev.*",
            "StartingOffsets": '{"events":{"0":5}}',
            "maxoffsetspertrigger": "100",
            "includeheaders": "TRUE",
            "failondataloss": "false",
        },
        streaming=True,
    )
    assert opts.subscription.kind == "subscribePattern"
    assert opts.starting.specific == {TopicPartition("events", 0): 5}
    assert opts.max_offsets_per_trigger == 100
    assert opts.include_headers and not opts.fail_on_data_loss


@pytest.mark.parametrize(
    ("options", "streaming", "message"),
    [
        ({"subscribe": "a"}, False, "kafka.bootstrap.servers"),
        (BOOT, False, "exactly one of"),
        ({**BOOT, "subscribe": "a", "assign": '{"a":[0]}'}, False, "exactly one of"),
        ({**BOOT, "assign": '{"a":"x"}'}, False, "assign"),
        ({**BOOT, "subscribePattern": "("}, False, "subscribePattern"),
        ({**BOOT, "subscribe": "a", "startingOffsets": "latest"}, False, "batch"),
        ({**BOOT, "subscribe": "a", "endingOffsets": "earliest"}, False, "endingOffsets"),
        ({**BOOT, "subscribe": "a", "endingOffsets": '{"a":{"0":-2}}'}, False, "endingOffsets"),
        ({**BOOT, "subscribe": "a", "endingOffsets": "latest"}, True, "batch queries only"),
        ({**BOOT, "subscribe": "a", "maxOffsetsPerTrigger": "0"}, True, "maxOffsetsPerTrigger"),
        ({**BOOT, "subscribe": "a", "includeHeaders": "maybe"}, False, "includeHeaders"),
        ({**BOOT, "subscribe": "a", "minPartitions": "x"}, False, "minPartitions"),
    ],
)
def test_bad_options_fail_with_the_option_name(
    options: dict[str, str], streaming: bool, message: str
) -> None:
    with pytest.raises(OptionError, match=message):
        parse(options, streaming=streaming)


def test_starting_timestamp_and_assign() -> None:
    opts = parse(
        {**BOOT, "assign": '{"b":[1,0],"a":[0]}', "startingTimestamp": "1700000000000"},
        streaming=False,
    )
    assert opts.subscription.assigned == (("a", 0), ("b", 0), ("b", 1))
    assert opts.starting.timestamp == 1_700_000_000_000
    assert opts.subscription.select({"a": 1, "b": 2, "c": 3}) == [("a", 0), ("b", 0), ("b", 1)]
    with pytest.raises(OptionError, match="b-1"):
        opts.subscription.select({"a": 1, "b": 1})


def test_subscription_selection() -> None:
    counts = {"events": 2, "events-dlq": 1, "other": 1}
    assert Subscription("subscribePattern", pattern="events.*").select(counts) == [
        ("events", 0), ("events", 1), ("events-dlq", 0),
    ]  # fmt: skip
    # A pattern matches whole names, as Java's Pattern.matcher(topic).matches().
    assert Subscription("subscribePattern", pattern="event").select(counts) == []
    with pytest.raises(OptionError, match="unknown topic"):
        Subscription("subscribe", topics=("nope",)).select(counts)


def test_sink_options() -> None:
    sink = parse_sink({**BOOT, "topic": "out", "kafka.acks": "1", "kafka.compression.type": "lz4"})
    assert (sink.topic, sink.acks, sink.compression) == ("out", 1, 3)
    assert parse_sink(BOOT).acks == -1
    with pytest.raises(OptionError, match=r"kafka\.acks"):
        parse_sink({**BOOT, "kafka.acks": "2"})
    with pytest.raises(OptionError, match="compression"):
        parse_sink({**BOOT, "kafka.compression.type": "brotli"})


def test_make_ranges_skips_empty_and_unknown_partitions() -> None:
    a0, a1, b0 = TopicPartition("a", 0), TopicPartition("a", 1), TopicPartition("b", 0)
    ranges = make_ranges({a0: 5, a1: 7, b0: 0}, {a0: 10, a1: 7, b0: 3, TopicPartition("c", 0): 9})
    assert ranges == [OffsetRange("a", 0, 5, 10), OffsetRange("b", 0, 0, 3)]


ranges_st = st.lists(
    st.tuples(st.integers(0, 1000), st.integers(0, 5000)), min_size=1, max_size=6
).map(lambda xs: [OffsetRange("t", i, lo, lo + n) for i, (lo, n) in enumerate(xs)])


@settings(max_examples=100, deadline=None)
@given(
    ranges=ranges_st,
    min_partitions=st.none() | st.integers(1, 40),
    max_records=st.none() | st.integers(1, 3000),
)
def test_split_ranges_tiles_each_range_exactly(
    ranges: list[OffsetRange], min_partitions: int | None, max_records: int | None
) -> None:
    pieces = split_ranges(
        ranges, min_partitions=min_partitions, max_records_per_partition=max_records
    )
    for r in ranges:
        mine = sorted(
            (p for p in pieces if p.partition == r.partition), key=lambda p: p.from_offset
        )
        if r.size == 0:
            assert mine == []
            continue
        assert mine[0].from_offset == r.from_offset and mine[-1].until_offset == r.until_offset
        assert all(a.until_offset == b.from_offset for a, b in itertools.pairwise(mine))
        assert all(p.size > 0 for p in mine)
        if max_records is not None:
            assert all(p.size <= max_records for p in mine)
    nonempty = [r for r in ranges if r.size]
    assert len(pieces) >= len(nonempty)
    if min_partitions is not None and min_partitions <= sum(r.size for r in nonempty):
        # each range gets floor(its share of min_partitions): less than one piece lost per range
        assert len(pieces) > min_partitions - len(nonempty)


@settings(max_examples=100, deadline=None)
@given(
    backlog=st.lists(st.integers(0, 10_000), min_size=1, max_size=5),
    limit=st.integers(1, 20_000),
)
def test_rate_limit_admits_about_the_limit_and_never_passes_latest(
    backlog: list[int], limit: int
) -> None:
    start = {TopicPartition("t", i): 100 for i in range(len(backlog))}
    latest = {TopicPartition("t", i): 100 + n for i, n in enumerate(backlog)}
    end = rate_limit(limit, start, latest)
    assert set(end) == set(latest)
    for tp in latest:
        assert start[tp] <= end[tp] <= latest[tp]
    admitted = sum(end[tp] - start[tp] for tp in latest)
    total = sum(backlog)
    if total <= limit:
        assert end == latest
    else:
        # floor per partition loses < 1 record each, a rounded-up share adds < 1 each
        assert limit - len(backlog) < admitted <= limit + len(backlog)
        assert admitted > 0  # progress is always made


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("startingOffsetsByTimestamp", '{"a":{"0":1700000000000}}', "startingTimestamp takes"),
        ("kafka.group.id", "my-group", "without a consumer group"),
        ("groupIdPrefix", "spark-kafka", "without a consumer group"),
        ("endingTimestamp", "1700000000000", "use endingOffsets"),
        ("kafka.auto.offset.reset", "earliest", "startingOffsets instead"),
        ("startingOffset", "earliest", "which takes kafka.bootstrap.servers, subscribe"),
        ("kafka.fetch.min.bytes", "1", "not an option"),
        ("path", "/data", "not an option"),  # load(path): only sluice-segments reads files
    ],
)
@pytest.mark.parametrize("streaming", [False, True])
def test_options_the_source_does_not_honour_are_refused_by_name(
    key: str, value: str, message: str, streaming: bool
) -> None:
    with pytest.raises(OptionError, match=rf"^{re.escape(key)} .*{message}") as refused:
        parse({**BOOT, "subscribe": "a", key: value}, streaming=streaming)
    assert 'format("sluice")' in str(refused.value)


def test_the_segment_reader_and_the_sink_refuse_options_they_do_not_honour() -> None:
    segments = {"path": "/data", "subscribe": "a"}
    assert parse(segments, streaming=False, segments=True).path == "/data"
    for key in ("startingOffsets", "kafka.bootstrap.servers", "kafka.group.id"):
        with pytest.raises(OptionError, match=rf'^{re.escape(key)} .*"sluice-segments"'):
            parse({**segments, key: "x"}, streaming=False, segments=True)
    # Spark passes a streaming query's checkpointLocation to its sink too.
    assert parse_sink({**BOOT, "topic": "t", "checkpointLocation": "/chk"}).topic == "t"
    for key in ("kafka.linger.ms", "subscribe", "includeHeaders"):
        with pytest.raises(OptionError, match=rf"^{re.escape(key)} "):
            parse_sink({**BOOT, "topic": "t", key: "1"})


def test_the_default_save_mode_means_append_and_ignore_is_refused_as_for_kafka() -> None:
    for chosen in (None, "error", "ErrorIfExists", "default", "append"):
        assert sink_save_mode(chosen) == "append"
    assert sink_save_mode("overwrite") == "overwrite"  # reaches the source, which refuses it
    with pytest.raises(OptionError, match="save mode ignore is not allowed"):
        sink_save_mode("ignore")


def test_offsets_behind_latest_are_kafkas_source_metrics() -> None:
    source = {
        "endOffset": {"a": {"0": 10, "1": 7}},
        "latestOffset": '{"a":{"0":15,"1":7,"2":4}}',  # partition 2 not read yet: from 0
    }
    assert offsets_behind_latest(source) == {
        "minOffsetsBehindLatest": "0",
        "maxOffsetsBehindLatest": "5",
        "avgOffsetsBehindLatest": "3.0",
    }

    class SourceProgress:  # a listener event's: offsets as JSON strings
        endOffset = '{"a":{"0":15}}'
        latestOffset = '{"a":{"0":15}}'

    assert offsets_behind_latest(SourceProgress())["maxOffsetsBehindLatest"] == "0"
    assert offsets_behind_latest({"endOffset": None, "latestOffset": "null"}) == {}
