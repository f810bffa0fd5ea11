"""Topic ids on disk: ``partition.metadata`` (Kafka's PartitionMetadataFile, byte for byte), the
ids in the topic metadata, the check that a partition directory belongs to its topic's id, and
``meta.properties``' cluster id."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from sluice.protocol.errors import InconsistentTopicId
from sluice.protocol.types import ONE_UUID, ZERO_UUID, random_uuid, uuid_from_str, uuid_to_str
from sluice.server.storage.layout import META_PROPERTIES_FILE, TOPICS_FILE
from sluice.server.storage.log import Log
from sluice.server.storage.log_config import LogConfig
from sluice.server.storage.log_manager import LogManager
from sluice.server.storage.meta_properties import (
    LEGACY_STANDALONE_CLUSTER_ID,
    read_meta_properties,
)
from sluice.server.storage.partition_metadata import (
    CorruptPartitionMetadataError,
    encode_partition_metadata,
    read_partition_metadata,
    write_partition_metadata,
)
from tests.broker.test_server import batch

DEFAULT = LogConfig()
# A file Kafka 3.9 wrote (UnifiedLog of topic "t", id printed by kafka-topics as this).
KAFKA_FILE = b"version: 0\ntopic_id: bSVmi_SBQfCNUvPeRC6LzA"
KAFKA_ID = uuid_from_str("bSVmi_SBQfCNUvPeRC6LzA")


def opened(path: Path) -> LogManager:
    m = LogManager(path, DEFAULT)
    m.open()
    return m


def stored_ids(path: Path) -> dict[str, str]:
    document = json.loads((path / TOPICS_FILE).read_bytes())
    return {n: e["topic_id"] for n, e in document["topics"].items() if "topic_id" in e}


# --- the file -----------------------------------------------------------------------------------


def test_partition_metadata_is_kafkas_format(tmp_path: Path) -> None:
    assert encode_partition_metadata(KAFKA_ID) == KAFKA_FILE
    write_partition_metadata(tmp_path, KAFKA_ID)
    assert (tmp_path / "partition.metadata").read_bytes() == KAFKA_FILE
    assert read_partition_metadata(tmp_path) == KAFKA_ID
    assert read_partition_metadata(tmp_path / "missing") is None


@pytest.mark.parametrize(
    "content",
    [
        b"",
        b"version: 0\n",
        b"version: -1\ntopic_id: bSVmi_SBQfCNUvPeRC6LzA",
        b"version: 0 0\ntopic_id: bSVmi_SBQfCNUvPeRC6LzA",
        b"version: x\ntopic_id: bSVmi_SBQfCNUvPeRC6LzA",
        b"version: 0\ntopic_id: !!",
        b"version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAA",  # the zero id (Kafka refuses it)
        b"\xff\xfe",
    ],
)
def test_a_damaged_partition_metadata_is_refused(tmp_path: Path, content: bytes) -> None:
    (tmp_path / "partition.metadata").write_bytes(content)
    with pytest.raises(CorruptPartitionMetadataError):
        read_partition_metadata(tmp_path)


def test_a_later_version_is_read_for_its_id(tmp_path: Path) -> None:
    # Kafka's reader accepts any version >= 0 (downgrade compatibility), whitespace-split.
    (tmp_path / "partition.metadata").write_bytes(
        b"version:  1\ntopic_id:\tbSVmi_SBQfCNUvPeRC6LzA\n"
    )
    assert read_partition_metadata(tmp_path) == KAFKA_ID


def test_random_ids_avoid_kafkas_reserved_ones() -> None:
    for _ in range(2000):
        value = random_uuid()
        assert value not in (ZERO_UUID, ONE_UUID)
        text = uuid_to_str(value)
        assert len(text) == 22 and not text.startswith("-")
        assert uuid_from_str(text) == value


# --- the log ------------------------------------------------------------------------------------


def test_a_log_records_its_topic_id_once_and_refuses_another(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    log = Log.open(directory, DEFAULT)
    assert log.topic_id is None and not (directory / "partition.metadata").exists()
    first = random_uuid()
    log.assign_topic_id(first)
    log.assign_topic_id(first)  # the same again: nothing to do
    assert read_partition_metadata(directory) == first
    other = random_uuid()
    with pytest.raises(InconsistentTopicId, match="already contained topic ID"):
        log.assign_topic_id(other)
    assert read_partition_metadata(directory) == first and log.topic_id == first
    log.close()
    assert Log.open(directory, DEFAULT).topic_id == first


def test_an_unreadable_file_is_ignored_and_written_again(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    Log.open(directory, DEFAULT).close()
    (directory / "partition.metadata").write_bytes(b"")  # a power loss after the rename
    log = Log.open(directory, DEFAULT)
    assert log.topic_id is None
    given = random_uuid()
    log.assign_topic_id(given)
    assert read_partition_metadata(directory) == given


# --- the log manager ----------------------------------------------------------------------------


def test_a_new_topic_gets_an_id_recorded_by_every_partition_before_any_append(
    tmp_path: Path,
) -> None:
    m = opened(tmp_path)
    logs = m.create_topic("t", 3)
    topic_id = m.topic_id("t")
    assert topic_id is not None and topic_id not in (ZERO_UUID, ONE_UUID)
    assert m.topic_name(topic_id) == "t"
    for log in logs:
        assert log.log_end_offset == 0
        assert read_partition_metadata(log.directory) == topic_id
    logs[0].append_as_leader(batch(2))
    assert stored_ids(tmp_path) == {"t": uuid_to_str(topic_id)}
    m.add_partitions("t", 4)
    assert read_partition_metadata(tmp_path / "t-3") == topic_id
    m.close()
    again = opened(tmp_path)
    assert again.topic_id("t") == topic_id  # the same id after a restart
    again.close()


def test_a_recreated_topic_gets_a_new_id(tmp_path: Path) -> None:
    m = opened(tmp_path)
    m.create_topic("t", 1)
    first = m.topic_id("t")
    assert first is not None
    m.delete_topic("t")
    assert m.topic_id("t") is None and m.topic_name(first) is None
    m.create_topic("t", 1)
    second = m.topic_id("t")
    assert second is not None and second != first
    assert read_partition_metadata(tmp_path / "t-0") == second
    m.close()


def test_topics_of_an_older_sluice_are_given_ids(tmp_path: Path) -> None:
    m = opened(tmp_path)
    m.create_topic("old", 2)
    m.close()
    # As an older Sluice left it: no ids in the metadata, no partition.metadata.
    document = json.loads((tmp_path / TOPICS_FILE).read_bytes())
    for entry in document["topics"].values():
        del entry["topic_id"]
    (tmp_path / TOPICS_FILE).write_text(json.dumps(document))
    for p in (0, 1):
        (tmp_path / f"old-{p}" / "partition.metadata").unlink()
    m = opened(tmp_path)
    assert m.topic_id("old") is None
    given = m.assign_missing_topic_ids()
    assert set(given) == {"old"} and m.topic_id("old") == given["old"]
    for p in (0, 1):
        assert read_partition_metadata(tmp_path / f"old-{p}") == given["old"]
    assert m.assign_missing_topic_ids() == {}  # once only
    m.close()


def test_lost_topic_metadata_takes_the_ids_from_the_partitions(tmp_path: Path) -> None:
    m = opened(tmp_path)
    m.create_topic("t", 2)
    topic_id = m.topic_id("t")
    m.close()
    (tmp_path / TOPICS_FILE).write_bytes(b"{ damaged")
    m = opened(tmp_path)  # rebuilt from the directories
    assert m.topic_id("t") == topic_id
    assert m.assign_missing_topic_ids() == {}
    m.close()
    assert topic_id is not None
    assert stored_ids(tmp_path) == {"t": uuid_to_str(topic_id)}


def test_a_partition_directory_of_another_topic_id_is_not_served(tmp_path: Path) -> None:
    m = opened(tmp_path)
    m.create_topic("t", 2)
    m.get_log("t", 1).append_as_leader(batch(3))  # type: ignore[union-attr]
    topic_id = m.topic_id("t")
    m.close()
    # t-1 is left from an earlier topic "t" (its own id), e.g. copied back by hand.
    stale = random_uuid()
    write_partition_metadata(tmp_path / "t-1", stale)
    m = opened(tmp_path)
    assert m.topic_id("t") == topic_id
    assert m.get_log("t", 0) is not None
    assert m.get_log("t", 1) is None  # not served as the new topic's
    assert m.inconsistent_logs == {("t", 1): stale}
    assert read_partition_metadata(tmp_path / "t-1") == stale  # left on disk, untouched
    assert (tmp_path / "t-1" / "00000000000000000000.log").stat().st_size > 0
    # A cluster asking for the log gets the reason.
    with pytest.raises(InconsistentTopicId, match="belongs to topic id"):
        m.create_log("t", 1, 2, {}, topic_id)
    m.close()


def test_a_cluster_log_takes_the_id_it_is_given(tmp_path: Path) -> None:
    m = opened(tmp_path)
    given = random_uuid()
    log = m.create_log("c", 1, 3, {}, given)
    assert read_partition_metadata(log.directory) == given
    assert m.topic_id("c") == given and m.topic_name(given) == "c"
    m.close()
    m = opened(tmp_path)
    assert m.assign_missing_topic_ids() == {}
    newer = random_uuid()  # the topic znode's id changed: this log is an earlier topic's
    assert m.set_topic_id("c", newer) == [1]
    assert m.get_log("c", 1) is None and m.topic_id("c") == newer
    m.close()


# --- meta.properties ----------------------------------------------------------------------------


def test_a_new_data_dir_gets_a_kafka_style_cluster_id(tmp_path: Path) -> None:
    m = opened(tmp_path / "data")
    cluster_id = m.ensure_meta_properties(3)
    assert len(cluster_id) == 22 and uuid_from_str(cluster_id) not in (ZERO_UUID, ONE_UUID)
    text = (tmp_path / "data" / META_PROPERTIES_FILE).read_text()
    lines = text.splitlines()
    assert lines[0] == "#" and lines[1].startswith("#")
    assert lines[2:] == [f"cluster.id={cluster_id}", "version=0", "broker.id=3"]
    assert m.ensure_meta_properties(3) == cluster_id  # kept
    m.close()
    m = opened(tmp_path / "data")
    assert m.ensure_meta_properties(3) == cluster_id  # kept across restarts
    assert m.ensure_meta_properties(3, "AnotherClusterIdXXXXXX") == cluster_id  # logged, kept
    m.close()


def test_a_data_dir_of_an_older_sluice_keeps_its_cluster_id(tmp_path: Path) -> None:
    m = opened(tmp_path)
    m.create_topic("t", 1)
    m.close()
    (tmp_path / META_PROPERTIES_FILE).unlink(missing_ok=True)
    m = opened(tmp_path)
    assert m.ensure_meta_properties(0) == LEGACY_STANDALONE_CLUSTER_ID
    m.close()
    meta = read_meta_properties(tmp_path)
    assert meta is not None and meta.cluster_id == LEGACY_STANDALONE_CLUSTER_ID


def test_a_cluster_member_writes_zookeepers_cluster_id(tmp_path: Path) -> None:
    m = opened(tmp_path)
    assert m.ensure_meta_properties(2, "Zk-ClusterId_xxxxxxxxx") == "Zk-ClusterId_xxxxxxxxx"
    m.close()
    meta = read_meta_properties(tmp_path)
    assert meta is not None and (meta.cluster_id, meta.broker_id) == ("Zk-ClusterId_xxxxxxxxx", 2)


def test_kafkas_own_meta_properties_is_read(tmp_path: Path) -> None:
    (tmp_path / META_PROPERTIES_FILE).write_text(
        "#\n#Tue Nov 12 10:00:00 UTC 2024\n"
        "broker.id=1\nversion=0\ncluster.id=uV3t1Fh6QcOq3u5K1b7x2A\n"
    )
    meta = read_meta_properties(tmp_path)
    assert meta is not None and meta.cluster_id == "uV3t1Fh6QcOq3u5K1b7x2A"
    shutil.rmtree(tmp_path)
    tmp_path.mkdir()
    assert read_meta_properties(tmp_path) is None
