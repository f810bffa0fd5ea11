"""Golden bytes: our codec against protocol classes nobody here wrote, and hand-checked frames.

Three independent oracles:

* kafka-python 3's JSON-driven classes (``kafka.protocol.*``): same Kafka schemas, a different
  codec implementation. Every API/version/direction we implement.
* kafka-python's hand-written classes (``kafka.protocol.old``) and aiokafka's
  (``aiokafka.protocol``): schemas typed in by hand from the protocol guide.
* frames assembled byte by byte below from the protocol guide (and librdkafka's source for the
  ApiVersions v3 request it opens every connection with).
"""

from __future__ import annotations

import importlib
import importlib.util
import io
import pkgutil
import struct
import warnings
from pathlib import Path
from typing import Any

import aiokafka.protocol
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sluice.protocol import framing
from sluice.protocol import messages as m
from sluice.protocol.schema import Message, StructSchema

# kafka-python loads its JSON schemas with a deprecated importlib call; pytest makes that an error.
with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    import kafka.protocol.admin
    import kafka.protocol.consumer
    import kafka.protocol.metadata
    import kafka.protocol.old
    import kafka.protocol.producer
    import kafka.protocol.sasl

_spec = importlib.util.spec_from_file_location(  # the schema-derived strategy lives there
    "_protocol_schema_helpers", Path(__file__).with_name("test_protocol_schema.py")
)
assert _spec is not None and _spec.loader is not None
_helpers = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_helpers)
message_strategy = _helpers.message_strategy
all_versions = _helpers.all_versions

SETTINGS = settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _draw(data: Any, key: int, version: int, kind: str) -> tuple[Any, Message, bytes]:
    a = m.APIS[key]
    schema = getattr(a, kind)
    msg = data.draw(message_strategy(schema.struct, version, a.is_flexible(version)))
    if key == m.ApiVersions.key and kind == "response":
        msg.error_code = 0  # a non-zero error makes every client decode the body as v0
    return schema, msg, schema.encode(msg, version)


# ---------------------------------------------------------------------------------------------
# kafka-python 3 (JSON-driven classes)
# ---------------------------------------------------------------------------------------------

_KP_MODULES = (
    kafka.protocol.admin,
    kafka.protocol.consumer,
    kafka.protocol.metadata,
    kafka.protocol.producer,
    kafka.protocol.sasl,
)


#: APIs kafka-python 3 has no classes for (a client library: broker-to-controller requests are
#: not in it). Their golden bytes are hand-built frames in a test module of their own.
_NO_KP_ORACLE = {m.ControlledShutdown.key: "test_controlled_shutdown_codec.py"}


def _kp_class(key: int, kind: str) -> Any:
    name = m.APIS[key].name + kind.capitalize()
    for mod in _KP_MODULES:
        if hasattr(mod, name):
            return getattr(mod, name)
    raise LookupError(name)


def _ours(msg: Any, s: StructSchema, version: int) -> Any:
    if isinstance(msg, list):
        return [_ours(x, s, version) for x in msg]
    out = {}
    for f in s.fields:
        if f.present(version) and "authorized_operations" not in f.name:
            v = getattr(msg, f.name)
            if f.struct is not None and v is not None:
                v = _ours(v, f.struct, version)
            elif isinstance(v, memoryview):
                v = bytes(v)
            out[f.name] = v
    return out


def _theirs(obj: Any, version: int) -> Any:
    if isinstance(obj, list):
        return [_theirs(x, version) for x in obj]
    if hasattr(obj, "_struct"):
        return {
            f.name: _theirs(getattr(obj, f.name), version)
            for f in obj._struct._fields
            # kafka-python turns these bit fields into sets under other names (the re-encode
            # check below still covers their bytes)
            if f.for_version_q(version) and "authorized_operations" not in f.name
        }
    if isinstance(obj, bytearray | memoryview):
        return bytes(obj)
    return obj


def test_only_the_listed_apis_lack_a_kafka_python_class() -> None:
    missing = set()
    for key in m.APIS:
        try:
            _kp_class(key, "request"), _kp_class(key, "response")
        except LookupError:
            missing.add(key)
    assert missing == set(_NO_KP_ORACLE)
    for module in _NO_KP_ORACLE.values():
        assert Path(__file__).with_name(module).is_file()


@pytest.mark.parametrize(
    ("key", "version"), [(k, v) for k, v in all_versions() if k not in _NO_KP_ORACLE]
)
@pytest.mark.parametrize("kind", ["request", "response"])
@SETTINGS
@given(data=st.data())
def test_kafka_python_decodes_ours_and_reencodes_identically(
    key: int, version: int, kind: str, data: Any
) -> None:
    schema, msg, ours = _draw(data, key, version, kind)
    theirs = _kp_class(key, kind)[version].decode(ours)
    theirs._header = None  # decode leaves this slot unset; some of their encode() paths read it
    assert _theirs(theirs, version) == _ours(msg, schema.struct, version)
    assert bytes(theirs.encode()) == ours
    # ...and we decode what they encode.
    back, end = schema.decode(bytes(theirs.encode()), version)
    assert end == len(ours) and schema.encode(back, version) == ours


# ---------------------------------------------------------------------------------------------
# Hand-written classes: kafka.protocol.old (kafka-python 2.x) and aiokafka.protocol
# ---------------------------------------------------------------------------------------------


def _hand_written(pkg: Any) -> dict[tuple[int, int, str], Any]:
    found: dict[tuple[int, int, str], Any] = {}
    for info in pkgutil.iter_modules(pkg.__path__):
        mod = importlib.import_module(f"{pkg.__name__}.{info.name}")
        for name, cls in vars(mod).items():
            if (
                isinstance(cls, type)
                and isinstance(getattr(cls, "API_KEY", None), int)
                and isinstance(getattr(cls, "API_VERSION", None), int)
                and hasattr(cls, "SCHEMA")
            ):
                kind = "request" if "Request" in name else "response"
                found[(cls.API_KEY, cls.API_VERSION, kind)] = cls  # type: ignore[attr-defined]
    return found


_HAND = {"kafka.protocol.old": _hand_written(kafka.protocol.old)}
_HAND["aiokafka.protocol"] = _hand_written(aiokafka.protocol)
# Bugs in an oracle, not in us: aiokafka declares ListOffsets v4-5 current_leader_epoch as int64
# (Kafka's ListOffsetsRequest.json and kafka-python say int32); kafka-python 2's DescribeLogDirs
# v0 request declares ``partitions`` as one int32 (Kafka's JSON and kafka-python 3: []int32).
_ORACLE_BUGS = {
    ("aiokafka.protocol", 2, 4, "request"),
    ("aiokafka.protocol", 2, 5, "request"),
    ("kafka.protocol.old", 35, 0, "request"),
}
_HAND_CASES = [
    (lib, key, version, kind)
    for lib, classes in _HAND.items()
    for key, version in all_versions()
    for kind in ("request", "response")
    if (key, version, kind) in classes
    and not m.APIS[key].is_flexible(version)
    and (lib, key, version, kind) not in _ORACLE_BUGS
]


# Kafka's authorized_operations use INT32_MIN for "not requested". The oracles disagree on how to
# model it (kafka-python's BitField decodes it as None, aiokafka's Int32 keeps the number), so
# both flatteners map INT32_MIN to None: a symmetric normalisation that hides no difference.
_INT32_MIN = -(2**31)


def _flatten_ours(msg: Any, s: StructSchema, version: int, out: list[Any]) -> list[Any]:
    for f in s.fields:
        if not f.present(version):
            continue
        v = getattr(msg, f.name)
        if v is None:
            out.append(None)
        elif f.is_array:
            out.append(("len", len(v)))
            for x in v:
                if f.struct is not None:
                    _flatten_ours(x, f.struct, version, out)
                else:
                    out.append(None if x == _INT32_MIN else x)
        elif f.struct is not None:
            _flatten_ours(v, f.struct, version, out)
        elif v == _INT32_MIN:
            out.append(None)  # see _INT32_MIN
        else:
            out.append(bytes(v) if isinstance(v, memoryview) else v)
    return out


def _flatten_theirs(value: Any, out: list[Any]) -> list[Any]:
    if hasattr(value, "SCHEMA"):
        for name in value.SCHEMA.names:
            _flatten_theirs(value.__dict__[name], out)
    elif isinstance(value, list):  # an Array
        out.append(("len", len(value)))
        for x in value:
            _flatten_theirs(x, out)
    elif isinstance(value, tuple):  # one item of an Array of structs
        for x in value:
            _flatten_theirs(x, out)
    elif isinstance(value, set):  # kafka-python's BitField (authorized operations): bits -> int32
        bits = sum(1 << b for b in value)
        bits = bits - (1 << 32) if bits >= 1 << 31 else bits
        out.append(None if bits == _INT32_MIN else bits)
    else:
        out.append(None if value == _INT32_MIN else value)
    return out


def test_hand_written_oracles_cover_most_of_our_versions() -> None:
    assert len(_HAND_CASES) >= 2 * 60


@pytest.mark.parametrize(("lib", "key", "version", "kind"), _HAND_CASES)
@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_hand_written_classes_agree(lib: str, key: int, version: int, kind: str, data: Any) -> None:
    schema, msg, ours = _draw(data, key, version, kind)
    cls = _HAND[lib][(key, version, kind)]
    buf = io.BytesIO(ours)
    theirs = cls.decode(buf)
    assert buf.tell() == len(ours), "their decoder did not consume exactly our encoding"
    assert _flatten_theirs(theirs, []) == _flatten_ours(msg, schema.struct, version, [])
    assert bytes(theirs.encode()) == ours


# ---------------------------------------------------------------------------------------------
# Frames kafka-python builds itself (header included), decoded by our broker side
# ---------------------------------------------------------------------------------------------


def _kp_frame(req: Any, correlation_id: int) -> bytes:
    req.with_header(correlation_id=correlation_id, client_id="kp-client")
    return bytes(req.encode(header=True, framed=True))


def test_kafka_python_built_requests_decode() -> None:
    produce_cls = kafka.protocol.producer.ProduceRequest
    fetch_cls = kafka.protocol.consumer.FetchRequest
    create_cls = kafka.protocol.admin.CreateTopicsRequest
    tpd = produce_cls.TopicProduceData
    produce = produce_cls[8](
        transactional_id=None, acks=-1, timeout_ms=1500,
        topic_data=[tpd(name="t", partition_data=[
            tpd.PartitionProduceData(index=3, records=b"batch-bytes")])],
    )  # fmt: skip
    fetch = fetch_cls[11](
        replica_id=-1, max_wait_ms=500, min_bytes=1, max_bytes=52428800, isolation_level=1,
        session_id=0, session_epoch=-1, rack_id="rack-a", forgotten_topics_data=[],
        topics=[fetch_cls.FetchTopic(topic="t", partitions=[fetch_cls.FetchTopic.FetchPartition(
            partition=3, current_leader_epoch=-1, fetch_offset=42, log_start_offset=-1,
            partition_max_bytes=1048576)])],
    )  # fmt: skip
    ct = create_cls.CreatableTopic
    create = create_cls[4](
        topics=[ct(name="n", num_partitions=2, replication_factor=1, assignments=[],
                   configs=[ct.CreatableTopicConfig(name="retention.ms", value=None)])],
        timeout_ms=1000, validate_only=True,
    )  # fmt: skip
    api_versions = kafka.protocol.metadata.ApiVersionsRequest[3](
        client_software_name="kafka-python", client_software_version="3.0.12"
    )
    metadata = kafka.protocol.metadata.MetadataRequest[9](
        topics=None, allow_auto_topic_creation=False,
        include_cluster_authorized_operations=False, include_topic_authorized_operations=True,
    )  # fmt: skip

    requests = [produce, fetch, create, api_versions, metadata]
    decoded = []
    for i, req in enumerate(requests):
        frame = _kp_frame(req, 100 + i)
        assert struct.unpack(">i", frame[:4])[0] == len(frame) - 4
        got = framing.decode_request(frame[4:])
        assert got.trailing_bytes == 0
        assert (got.header.correlation_id, got.header.client_id) == (100 + i, "kp-client")
        decoded.append(got.body)
    p, f, c, a, md = decoded
    part = p.topic_data[0].partition_data[0]
    assert (p.acks, p.timeout_ms, part.index, bytes(part.records)) == (-1, 1500, 3, b"batch-bytes")
    fp = f.topics[0].partitions[0]
    assert (f.isolation_level, f.rack_id, fp.partition, fp.fetch_offset) == (1, "rack-a", 3, 42)
    assert fp.partition_max_bytes == 1048576 and f.max_bytes == 52428800
    assert c.validate_only is True and c.topics[0].configs[0].value is None
    assert (a.client_software_name, a.client_software_version) == ("kafka-python", "3.0.12")
    assert md.topics is None and md.include_topic_authorized_operations is True


# ---------------------------------------------------------------------------------------------
# Hand-checked frames
# ---------------------------------------------------------------------------------------------


def _str16(s: str) -> bytes:
    return struct.pack(">h", len(s)) + s.encode()


def test_librdkafka_api_versions_v3_request() -> None:
    # librdkafka (rdkafka_request.c, rd_kafka_ApiVersionRequest): a flexver request -> header v2
    # with the classic int16 client_id ("rdkafka" by default) and an empty tag section; the body
    # is compact sw_name, compact sw_version, empty tag section.
    body = b"\x00\x12\x00\x03" + b"\x00\x00\x00\x01" + _str16("rdkafka") + b"\x00"
    body += b"\x0blibrdkafka" + b"\x062.0.2" + b"\x00"
    req = framing.decode_request(body)
    assert (req.header.api_key, req.header.api_version) == (18, 3)
    assert req.header.correlation_id == 1 and req.header.client_id == "rdkafka"
    assert req.body == m.ApiVersionsRequest(
        client_software_name="librdkafka", client_software_version="2.0.2"
    )
    frame = framing.encode_request(18, 3, 1, "rdkafka", req.body)
    assert frame == struct.pack(">i", len(body)) + body


def test_api_versions_v3_response_uses_header_v0_and_tagged_fields() -> None:
    header = framing.RequestHeader(api_key=18, api_version=3, correlation_id=9, client_id=None)
    entry = m.ApiVersionsResponse.ApiVersion
    body = m.ApiVersionsResponse(
        error_code=0,
        api_keys=[entry(api_key=0, min_version=0, max_version=8)],
        throttle_time_ms=0,
        finalized_features_epoch=5,
    )
    (frame,) = framing.encode_response(header, body)
    expected = (
        b"\x00\x00\x00\x09"  # correlation id; header v0: no tag section
        + b"\x00\x00"  # error_code
        + b"\x02" + b"\x00\x00\x00\x00\x00\x08" + b"\x00"  # compact array of 1, item tags
        + b"\x00\x00\x00\x00"  # throttle_time_ms
        + b"\x01" + b"\x01\x08" + struct.pack(">q", 5)  # one tagged field: tag 1, 8 bytes
    )  # fmt: skip
    assert frame == struct.pack(">i", len(expected)) + expected
    # kafka-python reads it the same way.
    theirs = kafka.protocol.metadata.ApiVersionsResponse[3].decode(expected[4:])
    assert theirs.finalized_features_epoch == 5 and theirs.api_keys[0].max_version == 8


def test_list_groups_v4_states_filter_frames() -> None:
    # KIP-518: the v4 request carries a compact array of state names; the response one
    # group_state per group. Flexible (v3+): header v2 / v1 with empty tag sections.
    req = (
        b"\x00\x10\x00\x04" + b"\x00\x00\x00\x05" + _str16("adm") + b"\x00"  # header v2
        + b"\x02" + b"\x07Stable" + b"\x00"  # states_filter = ["Stable"]; body tags
    )  # fmt: skip
    decoded = framing.decode_request(req)
    assert decoded.body == m.ListGroupsRequest(states_filter=["Stable"])
    assert framing.encode_request(16, 4, 5, "adm", decoded.body)[4:] == req
    group = m.ListGroupsResponse.ListedGroup
    body = m.ListGroupsResponse(
        throttle_time_ms=0,
        error_code=0,
        groups=[group(group_id="g", protocol_type="consumer", group_state="Stable")],
    )
    (frame,) = framing.encode_response(decoded.header, body)
    expected = (
        b"\x00\x00\x00\x05" + b"\x00"  # correlation id; header v1 tag section
        + b"\x00\x00\x00\x00" + b"\x00\x00"  # throttle_time_ms, error_code
        + b"\x02" + b"\x02g" + b"\x09consumer" + b"\x07Stable" + b"\x00"  # one group, its tags
        + b"\x00"  # body tags
    )  # fmt: skip
    assert frame == struct.pack(">i", len(expected)) + expected
    theirs = kafka.protocol.admin.ListGroupsResponse[4].decode(expected[5:])
    assert theirs.groups[0].group_state == "Stable"


def test_produce_v3_request_frame() -> None:
    batch = bytes(range(61))  # records are opaque to this layer
    frame = (
        b"\x00\x00\x00\x03" + b"\x00\x00\x00\x2a" + _str16("cli")  # header v1
        + b"\xff\xff"  # transactional_id = null
        + b"\xff\xff" + b"\x00\x00\x75\x30"  # acks = -1, timeout 30000
        + b"\x00\x00\x00\x01" + _str16("topic")
        + b"\x00\x00\x00\x01" + b"\x00\x00\x00\x02"  # partition 2
        + struct.pack(">i", len(batch)) + batch
    )  # fmt: skip
    req = framing.decode_request(frame)
    part = req.body.topic_data[0].partition_data[0]
    assert req.body.acks == -1 and req.body.timeout_ms == 30000 and part.index == 2
    assert bytes(part.records) == batch
    assert isinstance(part.records, memoryview)
    assert framing.encode_request(0, 3, 42, "cli", req.body)[4:] == frame


def test_metadata_v1_all_topics_is_a_null_array() -> None:
    frame = b"\x00\x03\x00\x01" + b"\x00\x00\x00\x07" + _str16("c") + b"\xff\xff\xff\xff"
    req = framing.decode_request(frame)
    assert req.body.topics is None
    v4 = framing.encode_request(
        3, 4, 7, "c", m.MetadataRequest(topics=[], allow_auto_topic_creation=False)
    )
    assert v4[4:] == b"\x00\x03\x00\x04" + b"\x00\x00\x00\x07" + _str16("c") + bytes(4) + b"\x00"


def test_fetch_v11_response_with_file_slice_records() -> None:
    class FileSlice:  # stands in for the server's FetchSlice
        def __init__(self, data: bytes) -> None:
            self.data = data
            self.size = len(data)

    batch = bytes(range(100))
    body = m.FetchResponse(
        throttle_time_ms=0, error_code=0, session_id=0,
        responses=[m.FetchResponse.FetchableTopicResponse(topic="t", partitions=[
            m.FetchResponse.PartitionData(
                partition_index=0, error_code=0, high_watermark=10, last_stable_offset=10,
                log_start_offset=0, aborted_transactions=None, records=FileSlice(batch),
            )
        ])],
    )  # fmt: skip
    header = framing.RequestHeader(api_key=1, api_version=11, correlation_id=3, client_id="c")
    parts = framing.encode_response(header, body)
    assert len(parts) == 2 and isinstance(parts[1], FileSlice)
    wire = parts[0] + batch
    assert framing.frame_size(parts) == len(wire)
    assert struct.unpack(">i", wire[:4])[0] == len(wire) - 4
    expected_body = (
        bytes(4) + b"\x00\x00" + bytes(4)  # throttle, error, session
        + b"\x00\x00\x00\x01" + _str16("t") + b"\x00\x00\x00\x01"
        + bytes(4) + b"\x00\x00" + struct.pack(">qqq", 10, 10, 0)
        + b"\xff\xff\xff\xff"  # aborted_transactions = null
        + b"\xff\xff\xff\xff"  # preferred_read_replica = -1
        + struct.pack(">i", 100) + batch
    )  # fmt: skip
    assert wire[4:] == b"\x00\x00\x00\x03" + expected_body
    theirs = kafka.protocol.consumer.FetchResponse[11].decode(expected_body)
    assert bytes(theirs.responses[0].partitions[0].records) == batch


# ---------------------------------------------------------------------------------------------
# Real clients: librdkafka (confluent-kafka) and kafka-python against a minimal socket server
# that speaks only through this codec (ApiVersions + Metadata), on 127.0.0.1.
# ---------------------------------------------------------------------------------------------


class _MetadataOnlyServer:
    """Answers ApiVersions and Metadata with our codec; records every decoded request header."""

    def __init__(self) -> None:
        import socket
        import threading

        self.seen: list[tuple[int, int, Any]] = []
        self._sock = socket.create_server(("127.0.0.1", 0))
        self._sock.settimeout(0.2)
        self.port = self._sock.getsockname()[1]
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._accept_loop, daemon=True)]
        self._threads[0].start()

    def _accept_loop(self) -> None:
        import threading

        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            t = threading.Thread(target=self._serve, args=(conn,), daemon=True)
            self._threads.append(t)
            t.start()

    def _serve(self, conn: Any) -> None:
        conn.settimeout(0.2)
        reader = framing.FrameReader(1 << 20)
        with conn:
            while not self._stop.is_set():
                try:
                    data = conn.recv(65536)
                except TimeoutError:
                    continue
                except OSError:
                    return
                if not data:
                    return
                reader.feed(data)
                while (frame := reader.next_frame()) is not None:
                    try:
                        req = framing.decode_request(frame)
                    except framing.UnsupportedVersionError as exc:
                        self.seen.append((exc.api_key, exc.api_version, None))
                        parts = framing.unsupported_version_response(exc, [3, 18])
                        if parts is None:
                            return
                        conn.sendall(b"".join(parts))
                        continue
                    self.seen.append((req.header.api_key, req.header.api_version, req.body))
                    conn.sendall(b"".join(framing.encode_response(req.header, self._answer(req))))

    def _answer(self, req: framing.Request) -> Message:
        if req.header.api_key == 18:
            return framing.api_versions_response(api_keys=[3, 18])
        if req.header.api_key != 3:
            raise AssertionError(f"unexpected API {req.header.api_key}")
        r = m.MetadataResponse
        part = r.MetadataResponsePartition(
            error_code=0, partition_index=0, leader_id=0, leader_epoch=0,
            replica_nodes=[0], isr_nodes=[0], offline_replicas=[],
        )  # fmt: skip
        return r(
            brokers=[r.MetadataResponseBroker(node_id=0, host="127.0.0.1", port=self.port)],
            cluster_id="golden-cluster",
            controller_id=0,
            topics=[r.MetadataResponseTopic(error_code=0, name="golden", partitions=[part])],
        )

    def close(self) -> None:
        self._stop.set()
        self._sock.close()
        for t in self._threads:
            t.join(timeout=5)


@pytest.fixture
def metadata_server() -> Any:
    server = _MetadataOnlyServer()
    try:
        yield server
    finally:
        server.close()


@pytest.mark.interop
def test_librdkafka_reads_our_api_versions_and_metadata(metadata_server: Any) -> None:
    confluent_kafka = pytest.importorskip("confluent_kafka")
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{metadata_server.port}"})
    md = admin.list_topics(timeout=10)
    assert md.cluster_id == "golden-cluster"
    assert [(b.id, b.host, b.port) for b in md.brokers.values()] == [
        (0, "127.0.0.1", metadata_server.port)
    ]
    assert list(md.topics) == ["golden"]
    assert md.topics["golden"].partitions[0].leader == 0
    api_versions = [(k, v) for k, v, _ in metadata_server.seen if k == 18]
    # librdkafka opens with ApiVersions v3 or newer; anything above 3 is answered with the v0
    # error body and it retries at the version we advertise.
    assert api_versions[0][1] >= 3 and api_versions[-1] == (18, 3)
    # librdkafka takes our highest Metadata version (9: flexible, so compact fields, tagged
    # fields and response header v1 go through a real client).
    top = framing.SUPPORTED_VERSIONS[3][1]
    assert {v for k, v, _ in metadata_server.seen if k == 3} == {top}
    assert confluent_kafka.libversion()[0]


@pytest.mark.interop
def test_kafka_python_steps_down_from_api_versions_v4(metadata_server: Any) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from kafka import KafkaConsumer

        consumer = KafkaConsumer(
            bootstrap_servers=f"127.0.0.1:{metadata_server.port}",
            request_timeout_ms=10000,
        )
        try:
            assert consumer.topics() == {"golden"}
        finally:
            consumer.close()
    seen = [(k, v) for k, v, _ in metadata_server.seen]
    assert seen[0][0] == 18
    if seen[0][1] > 3:  # kafka-python 3 asks for v4 first: answered with the v0 error body
        assert seen[1] == (18, 3)
    assert (3, framing.SUPPORTED_VERSIONS[3][1]) in seen


@pytest.mark.interop
async def test_aiokafka_reads_our_metadata(metadata_server: Any) -> None:
    import aiokafka

    consumer = aiokafka.AIOKafkaConsumer(
        bootstrap_servers=f"127.0.0.1:{metadata_server.port}", request_timeout_ms=10000
    )
    await consumer.start()
    try:
        assert await consumer.topics() == {"golden"}
        assert consumer.partitions_for_topic("golden") == {0}
    finally:
        await consumer.stop()
    assert [k for k, _, _ in metadata_server.seen][:2] == [18, 3]


@pytest.mark.parametrize("lib", sorted(_HAND))
def test_authorized_operations_sentinel_agrees_with_hand_written_classes(lib: str) -> None:
    # Found by hypothesis: INT32_MIN ("not requested") round-trips as None in kafka-python.
    if (3, 8, "response") not in _HAND[lib]:
        pytest.skip(f"{lib} has no Metadata v8 response class")
    schema = m.APIS[3].response
    msg = m.MetadataResponse(brokers=[], topics=[], cluster_authorized_operations=-(2**31))
    ours = schema.encode(msg, 8)
    theirs = _HAND[lib][(3, 8, "response")].decode(io.BytesIO(ours))
    assert _flatten_theirs(theirs, []) == _flatten_ours(msg, schema.struct, 8, [])
    assert bytes(theirs.encode()) == ours
