"""The schema engine: declarations -> classes and codecs, version rules, round trips per API."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sluice.protocol import messages as m
from sluice.protocol.errors import ProtocolError
from sluice.protocol.schema import F, Field, Message, StructSchema, api

# ---------------------------------------------------------------------------------------------
# A hypothesis strategy derived from the declarations (also used by the golden and fuzz tests).
# ---------------------------------------------------------------------------------------------

_INT_RANGES = {
    "int8": (-(2**7), 2**7 - 1),
    "int16": (-(2**15), 2**15 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "int64": (-(2**63), 2**63 - 1),
    "uint16": (0, 2**16 - 1),
}


def _scalar(typ: str) -> st.SearchStrategy[Any]:
    if typ in _INT_RANGES:
        lo, hi = _INT_RANGES[typ]
        return st.integers(lo, hi)
    if typ == "bool":
        return st.booleans()
    if typ == "float64":
        return st.floats(allow_nan=False)
    if typ == "uuid":
        return st.uuids()
    if typ == "string":
        return st.text(max_size=12)
    if typ in ("bytes", "records"):
        return st.binary(max_size=24)
    raise AssertionError(typ)


def _field_strategy(f: Field, version: int, flexible: bool) -> st.SearchStrategy[Any]:
    if f.struct is not None:
        item = message_strategy(f.struct, version, flexible)
    else:
        item = _scalar(f.item_type)
    value = st.lists(item, max_size=3) if f.is_array else item
    if f.is_nullable(version) or f.item_type == "records":
        value = st.none() | value
    return value


_STRATEGIES: dict[tuple[int, int, bool], tuple[StructSchema, st.SearchStrategy[Any]]] = {}


def message_strategy(s: StructSchema, version: int, flexible: bool) -> st.SearchStrategy[Any]:
    """Random instances of ``s.cls`` with every field of ``version`` set (others default).

    Built once per schema and version: a test draws one per example, and a new strategy tree is
    validated again by Hypothesis at each draw (a fifth of these tests' time)."""
    key = (id(s), version, flexible)
    if key not in _STRATEGIES:
        kwargs = {
            f.name: _field_strategy(f, version, flexible) for f in s.fields if f.present(version)
        }
        _STRATEGIES[key] = (s, st.builds(s.cls, **kwargs))  # s kept: its id stays its own
    return _STRATEGIES[key][1]


def all_versions() -> list[tuple[int, int]]:
    return [
        (k, v) for k, a in sorted(m.APIS.items()) for v in range(a.min_version, a.max_version + 1)
    ]


def normalize(value: Any) -> Any:
    """Message -> dict, memoryview -> bytes (decoded records are views)."""
    if isinstance(value, Message):
        return value.to_dict()
    return value


# ---------------------------------------------------------------------------------------------
# Round trips for every API, version and direction.
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("key", "version"), all_versions())
@pytest.mark.parametrize("kind", ["request", "response"])
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_round_trip_every_api_version(key: int, version: int, kind: str, data: Any) -> None:
    a = m.APIS[key]
    schema = getattr(a, kind)
    msg = data.draw(message_strategy(schema.struct, version, a.is_flexible(version)))
    encoded = schema.encode(msg, version)
    decoded, end = schema.decode(memoryview(encoded), version)
    assert end == len(encoded)
    assert normalize(decoded) == normalize(msg)
    assert schema.encode(decoded, version) == encoded
    # Every strict prefix is rejected with a ProtocolError, never another exception.
    for cut in sorted({0, 1, len(encoded) // 2, len(encoded) - 1}):
        if 0 <= cut < len(encoded):
            with pytest.raises(ProtocolError):
                schema.decode(encoded[:cut], version)
                # a prefix can only decode if the message is shorter than the cut: impossible
                raise AssertionError("prefix decoded")


# ---------------------------------------------------------------------------------------------
# Engine semantics on a small declaration.
# ---------------------------------------------------------------------------------------------

Toy = api(
    99, "Toy", versions="0-3", flexible="2+",
    request=[
        F("name", "string"),
        F("count", "int32", "1+", default=7),
        F("maybe", "string", "1+", nullable="1+", default=None),
        F("items", "[]Item", fields=[
            F("id", "int64"),
            F("label", "string", "0-1"),
        ]),
        F("ids", "[]int32", nullable="3+"),
        F("epoch", "int64", "2+", tag=0, default=-1),
        F("leader", "Leader", "2+", tag=1, fields=[
            F("leader_id", "int32", "2+", default=-1),
        ]),
        F("blob", "bytes", "3+"),
    ],
    response=[F("error_code", "int16")],
)  # fmt: skip


def test_generated_class_defaults_and_construction() -> None:
    cls = Toy.request.cls
    msg = cls(name="a")
    assert msg.count == 7 and msg.maybe is None and msg.items == [] and msg.epoch == -1
    assert msg.leader == cls.Leader(leader_id=-1)
    assert msg.blob == b""
    assert cls("a", 3).count == 3  # positional in declaration order
    assert cls(name="a") == cls(name="a")
    assert cls(name="a") != cls(name="b")
    assert cls().items is not cls().items  # fresh mutable defaults
    assert "Toy" in repr(msg) and "count=7" in repr(msg)
    with pytest.raises(TypeError, match="no field"):
        cls(nope=1)
    with pytest.raises(TypeError, match="twice"):
        cls("a", name="b")


def test_versions_drop_and_default_fields() -> None:
    cls = Toy.request.cls
    msg = cls(name="n", count=3, maybe="x", items=[cls.Item(id=1, label="l")], ids=[1, 2])
    v0 = Toy.request.encode(msg, 0)
    assert v0 == b"\x00\x01n" + b"\x00\x00\x00\x01" + b"\x00" * 7 + b"\x01\x00\x01l" + (
        b"\x00\x00\x00\x02\x00\x00\x00\x01\x00\x00\x00\x02"
    )
    back, _ = Toy.request.decode(v0, 0)
    assert back.count == 7 and back.maybe is None  # absent in v0: defaults
    back2, _ = Toy.request.decode(Toy.request.encode(msg, 2), 2)
    assert back2.items[0].label == ""  # label only exists in v0-1


def test_flexible_encoding_and_tagged_fields() -> None:
    cls = Toy.request.cls
    msg = cls(name="n", count=1, maybe=None, items=[], ids=[5])
    # Compact string, int32, compact null string, compact empty array, compact [5], no tags.
    expected = b"\x02n" + b"\x00\x00\x00\x01" + b"\x00" + b"\x01" + b"\x02\x00\x00\x00\x05"
    assert Toy.request.encode(msg, 2) == expected + b"\x00"
    msg.epoch = 9
    msg.leader = cls.Leader(leader_id=3)
    tagged = b"\x02" + b"\x00\x08" + b"\x00" * 7 + b"\x09" + b"\x01\x05\x00\x00\x00\x03\x00"
    assert Toy.request.encode(msg, 2) == expected + tagged
    back, _ = Toy.request.decode(expected + tagged, 2)
    assert back.epoch == 9 and back.leader.leader_id == 3
    # An unknown tag (7) is skipped.
    back, _ = Toy.request.decode(expected + b"\x01\x07\x02ab", 2)
    assert back.epoch == -1
    # Wrong size for a known tag is an error.
    with pytest.raises(ProtocolError, match="tagged field 0"):
        Toy.request.decode(expected + b"\x01\x00\x09" + b"\x00" * 9, 2)


def test_nullability_follows_versions() -> None:
    cls = Toy.request.cls
    # items empty (0x01), ids null (0x00), blob empty (0x01), no tagged fields (0x00)
    assert Toy.request.encode(cls(name="n", ids=None), 3).endswith(b"\x01\x00\x01\x00")
    with pytest.raises(ValueError, match="ids"):
        Toy.request.encode(cls(name="n", ids=None), 2)
    with pytest.raises(ValueError, match="name"):
        Toy.request.encode(cls(name=None), 0)
    with pytest.raises(ValueError, match="count"):
        Toy.request.encode(cls(name="n", count=2**31), 1)
    with pytest.raises(ProtocolError, match=r"ToyRequest\.ids"):
        Toy.request.decode(b"\x02n\x00\x00\x00\x01\x00\x01\x00\x00", 2)


def test_decode_errors_name_the_field_path() -> None:
    cls = Toy.request.cls
    data = Toy.request.encode(cls(name="n", items=[cls.Item(id=1, label="xyz")]), 0)
    with pytest.raises(ProtocolError, match=r"ToyRequest\.items: Item\.label"):
        Toy.request.decode(data[:-6], 0)


def test_unsupported_version_and_wrong_type() -> None:
    with pytest.raises(ValueError, match="no version 4"):
        Toy.request.encode(Toy.request.cls(), 4)
    with pytest.raises(TypeError, match="expected ToyRequest"):
        Toy.request.encode(Toy.response.cls(), 0)


def test_declaration_errors() -> None:
    with pytest.raises(ValueError, match="unknown type"):
        F("x", "Thing")
    with pytest.raises(ValueError, match="cannot have fields"):
        F("x", "int32", fields=[])
    with pytest.raises(ValueError, match="needs nullable"):
        F("x", "string", default=None)
    with pytest.raises(ValueError, match="duplicate"):
        StructSchema("S", [F("a", "int8"), F("a", "int8")])
    with pytest.raises(ValueError, match="records"):
        F("r", "records", tag=0)


def test_generated_source_is_inspectable() -> None:
    src = m.Produce.request.struct.source("decode", 8, False)
    assert "def decode(buf, pos):" in src
    # acks and timeout_ms are unpacked by one struct call
    assert "o.acks, o.timeout_ms, =" in src


def test_nested_classes_are_exposed_on_the_message() -> None:
    resp = m.ProduceResponse
    part = resp.PartitionProduceResponse(index=1, error_code=0, base_offset=5)
    topic = resp.TopicProduceResponse(name="t", partition_responses=[part])
    data = m.Produce.response.encode(resp(responses=[topic]), 8)
    back, _ = m.Produce.response.decode(data, 8)
    assert back.responses[0].partition_responses[0].base_offset == 5
    assert back.responses[0].partition_responses[0].log_append_time_ms == -1
    assert m.FetchRequest.FetchTopic is m.Fetch.request.struct.fields[8].struct.cls  # type: ignore[union-attr]


def test_declared_kafka_facts() -> None:
    """Spot checks against Kafka's JSON: flexible versions and nullability."""
    assert m.ApiVersions.is_flexible(3) and not m.ApiVersions.is_flexible(2)
    assert not m.Metadata.is_flexible(8) and m.Metadata.is_flexible(9)
    assert not m.Fetch.is_flexible(11) and m.Fetch.is_flexible(12)
    assert not m.Produce.is_flexible(8) and m.Produce.is_flexible(9)
    topics = m.Metadata.request.struct.fields[0]
    assert not topics.is_nullable(0) and topics.is_nullable(1)
    uuid_default = StructSchema("U", [F("u", "uuid")]).cls().u
    assert uuid_default == uuid.UUID(int=0)
