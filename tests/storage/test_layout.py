"""The on-disk names: round trips, Kafka's directory names, garbage, and one spelling of each."""

from __future__ import annotations

import ast
import re
import uuid
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sluice.server.storage import layout
from sluice.server.storage.layout import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    SNAPSHOT_SUFFIX,
    TIME_INDEX_SUFFIX,
    deleted_partition_dir_name,
    is_deleted_partition_dir,
    offset_file_name,
    parse_offset_file_name,
    parse_partition_dir,
    partition_dir_name,
    segment_file_names,
)

PACKAGE = Path(layout.__file__).resolve().parents[2]
OFFSETS = st.integers(min_value=0, max_value=2**63 - 1)
# Kafka's legal topic characters ([a-zA-Z0-9._-]), so dots and dashes anywhere.
TOPICS = st.text(alphabet="abcXYZ019._-", min_size=1, max_size=40).filter(
    lambda t: t not in (".", "..")
)


def test_kafka_file_names() -> None:
    assert offset_file_name(0, LOG_SUFFIX) == "00000000000000000000.log"
    assert segment_file_names(133) == (
        "00000000000000000133.log",
        "00000000000000000133.index",
        "00000000000000000133.timeindex",
    )
    assert segment_file_names(133, ".deleted")[0] == "00000000000000000133.log.deleted"
    assert offset_file_name(2**63 - 1, SNAPSHOT_SUFFIX) == "09223372036854775807.snapshot"


@given(OFFSETS, st.sampled_from([LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, SNAPSHOT_SUFFIX]))
def test_offset_file_names_round_trip_and_sort_by_offset(offset: int, suffix: str) -> None:
    name = offset_file_name(offset, suffix)
    assert parse_offset_file_name(name, suffix) == offset
    assert len(name) == 20 + len(suffix)
    assert (name < offset_file_name(offset + 1, suffix)) is True


@pytest.mark.parametrize(
    "name",
    [
        "00000000000000000133.log.deleted",  # a suffix after the suffix
        "00000000000000000133.index",  # another suffix
        ".log",  # no offset
        "abc.log",
        "-1.log",
        "12 .log",
        "\u00b2.log",  # a digit to str.isdigit() that int() refuses
        "\u0663.log",  # Arabic-Indic three: int() would take it; Kafka's parseLong too, not ours
        "00000000000000000133.timeindex",
    ],
)
def test_parse_offset_file_name_refuses_other_names(name: str) -> None:
    assert parse_offset_file_name(name, LOG_SUFFIX) is None


@given(TOPICS, st.integers(min_value=0, max_value=100_000))
def test_partition_dir_round_trip(topic: str, partition: int) -> None:
    name = partition_dir_name(topic, partition)
    assert parse_partition_dir(name) == (topic, partition)
    assert not is_deleted_partition_dir(name)
    # A deleted topic's directory is never taken for a live partition.
    deleted = deleted_partition_dir_name(name, uuid.uuid4().hex)
    assert is_deleted_partition_dir(deleted)
    with pytest.raises(ValueError):
        parse_partition_dir(deleted)


@pytest.mark.parametrize(
    ("name", "topic", "partition"),
    [
        ("events-0", "events", 0),
        ("my-topic-12", "my-topic", 12),
        ("com.example.orders-3", "com.example.orders", 3),
        ("__consumer_offsets-49", "__consumer_offsets", 49),
        ("a--1", "a-", 1),  # topic "a-", not partition -1
        ("t-007", "t", 7),
    ],
)
def test_parse_kafka_partition_dirs(name: str, topic: str, partition: int) -> None:
    parsed = parse_partition_dir(name)
    assert (parsed.topic, parsed.partition) == (topic, partition)


@pytest.mark.parametrize(
    "name",
    [
        "events",
        "events-",
        "-0",
        "events-x",
        "events-1a",
        "events-\u00b2",
        "events-0.9f2c4b1e8d7a4f0e9c3b2a1d0e9f8a7b-delete",
        "",
    ],
)
def test_parse_partition_dir_refuses_garbage(name: str) -> None:
    with pytest.raises(ValueError, match="<topic>-<partition>"):
        parse_partition_dir(name)


# -- one spelling of each name -----------------------------------------------------------------

SPELLED_ONLY_IN_LAYOUT = {LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, SNAPSHOT_SUFFIX}
# "%020d" % x, "{:020d}".format(x), format(x, "020d")
OFFSET_FORMAT = re.compile(r"%020d|^020d$|\{[^{}]*:020d\}")


def layout_literals(source: str) -> list[str]:
    """Literals in ``source`` that only layout.py may spell: the file suffixes, and the 20-digit
    offset format as ``"%020d"`` or as a format spec ``020d`` (an f-string's spec is a constant
    node of its own)."""
    return [
        node.value
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and (node.value in SPELLED_ONLY_IN_LAYOUT or OFFSET_FORMAT.search(node.value))
    ]


@pytest.mark.parametrize(
    "source",
    [
        'x = ".log"',
        'SUFFIX = ".snapshot"',
        "p.glob(f\"*{'.timeindex'}\")",
        'name = f"{base:020d}"',
        'name = "%020d" % base',
        'name = "{:020d}".format(base)',
        'name = format(base, "020d")',
    ],
)
def test_the_literal_check_catches_each_spelling(source: str) -> None:
    assert layout_literals(source)


def test_no_module_but_layout_spells_a_file_name_rule() -> None:
    offenders = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == Path(layout.__file__).resolve():
            continue
        found = layout_literals(path.read_text())
        if found:
            offenders[str(path.relative_to(PACKAGE.parent))] = found
    assert offenders == {}, "use sluice.server.storage.layout instead"
