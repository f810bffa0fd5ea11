"""One request must not stop the broker from starting again (issue 13): under a low open-file
limit (``prlimit --nofile``), a CreateTopics for more partitions than the limit allows fails
with KAFKA_STORAGE_ERROR and a message saying what would run out, creates nothing, and the broker
stops cleanly and starts again under the same limit. confluent-kafka's AdminClient asks."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.broker_util import start_broker

pytestmark = pytest.mark.slow  # two broker processes

LIMIT = 128


def test_create_topics_beyond_the_open_file_limit_leaves_nothing(tmp_path: Path) -> None:
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic

    if shutil.which("prlimit") is None:
        pytest.skip("needs prlimit (util-linux)")
    limited = ["prlimit", f"--nofile={LIMIT}:{LIMIT}"]
    data = tmp_path / "data"
    broker = start_broker(data, command_prefix=limited)
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        future = admin.create_topics([NewTopic("wide", 400, 1)], operation_timeout=30)["wide"]
        with pytest.raises(KafkaException) as info:
            future.result(60)
        error = info.value.args[0]
        assert error.code() == KafkaError.KAFKA_STORAGE_ERROR, error
        # Refused before any file is opened: the partitions' active segments would not fit the
        # open-file bound derived from the limit (which the next start would refuse to load).
        assert "open files" in error.str() and f"open-file limit {LIMIT}" in error.str()
        assert "nothing was created" in error.str() and "ulimit -n" in error.str()
        assert "wide" not in admin.list_topics(timeout=30).topics
        assert not list(data.glob("wide-*"))
        admin.create_topics([NewTopic("narrow", 3, 1)])["narrow"].result(60)
        assert broker.stop() == 0, broker.log_text()[-3000:]
    finally:
        if broker.proc.poll() is None:
            broker.kill()
    assert '"exception"' not in broker.log_text()
    broker = start_broker(data, command_prefix=limited, log_path=tmp_path / "again.log")
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        topics = admin.list_topics(timeout=30).topics
        assert "wide" not in topics and len(topics["narrow"].partitions) == 3
    finally:
        assert broker.stop() == 0
