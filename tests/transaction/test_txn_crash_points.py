"""kill -9 of a standalone broker -- transaction coordinator, group coordinator and partition
leader at once -- at each step of a commit and of an abort (issue 26), then a restart on the same
data dir, compared against a model.

One broker serves the module, armed with a :mod:`sluice.server.crash_points` point for every
test (``SLUICE_CRASH_AT``, each scoped to its test's transactional id, topic or group): a test's
transaction dies at its point with SIGKILL while a confluent-kafka transactional producer drives
it (3 records on each of 3 partitions, ``send_offsets_to_transaction`` for a group, then commit
or abort) on a thread; the test restarts the broker on the same port and data dir, armed with
the points not yet reached, and the producer's call finishes against the new process.
Another producer's transaction (the *bystander*) is open on partition 0 from before the victim's
records until after recovery, so the LSO and the aborted-transaction entries depend on producer
state recovered from the log, not only on the victim's own markers.

The model (:mod:`tests.transaction.crash_model`):

* the outcome is what the producer asked for, all or nothing: the crash points before
  PrepareCommit/PrepareAbort are written leave an Ongoing transaction the producer's retry ends;
  from PrepareX on, the restarted coordinator finishes it itself;
* which partitions hold a marker at the crash (the point decides: none, partition 0 alone, or
  all), and how many each holds after recovery: one more for every partition when the
  coordinator finds PrepareX and sends the markers again (Kafka writes a second marker there,
  which completes no transaction: no second aborted-transaction entry);
* every record produced is in the log once, at the offset its delivery report gave;
* ``.txnindex`` (parsed from the files) and the LSO (ListOffsets read_committed and Fetch's
  ``last_stable_offset``) are what Kafka's producer-state rules give for that log;
* a read_committed consumer sees the victim's records in every partition or in none, and the
  group's offset is committed with a commit and absent after an abort;
* producer state is recovered: a new producer with the same ``transactional.id`` gets the same
  producer id at the next epoch and commits, and the old instance is fenced.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

import pytest
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic

from sluice.server.crash_points import ENV
from tests.broker_util import BrokerProcess, start_broker
from tests.transaction.crash_model import (
    Batch,
    kafka_model,
    log_batches,
    offsets,
    read_txn_index,
)

pytestmark = pytest.mark.interop

WAIT = 60.0
PARTITIONS = [0, 1, 2]
RECORDS = 3  # per partition
OFFSET = 7  # the group offset the transaction commits
OVERRIDES = ["transaction.state.log.num.partitions=3", "num.partitions=1"]
T = TypeVar("T")
#: Every client here: reconnect to the restarted broker at once (librdkafka backs off up to 10 s).
CLIENT = {"reconnect.backoff.max.ms": 100, "retry.backoff.max.ms": 200}

#: step -> (crash point, what it is scoped to, markers on partitions 0/1/2 at the crash, whether
#: the restarted coordinator sends the markers itself). ``{end}``: Commit or Abort.
STEPS: dict[str, tuple[str, str, tuple[int, int, int], bool]] = {
    # AddPartitionsToTxn's Ongoing written, not answered
    "add_partitions": ("txn.after.Ongoing", "txn", (0, 0, 0), False),
    # TxnOffsetCommit written (pending until the marker), not answered
    "txn_offsets_pending": ("group.txn_offsets.written", "group", (0, 0, 0), False),
    # EndTxn received, nothing written
    "end_txn_received": ("txn.before.Prepare{end}", "txn", (0, 0, 0), False),
    # PrepareX written, no marker sent
    "prepare_written": ("txn.after.Prepare{end}", "txn", (0, 0, 0), True),
    # the marker on partition 0 written, partitions 1 and 2 not
    "some_markers": ("partition.marker.appended", "topic", (1, 0, 0), True),
    # every marker written, WriteTxnMarkers not answered
    "markers_written": ("partition.markers.written", "topic", (1, 1, 1), True),
    # every marker acknowledged, CompleteX not written
    "before_complete": ("txn.before.Complete{end}", "txn", (1, 1, 1), True),
}
ENDS = {True: "commit", False: "abort"}


class Names(NamedTuple):
    """One test's transactional ids, topic and group, and its armed point."""

    txn_id: str
    bystander: str
    topic: str
    group: str
    point: str
    scope: str

    @classmethod
    def of(cls, step: str, commit: bool) -> Names:
        point, scope_kind = STEPS[step][:2]
        case = f"{step}-{ENDS[commit]}"
        txn_id, topic, group = f"victim-{case}", f"crash-{case}", f"group-{case}"
        scope = {"txn": txn_id, "topic": topic, "group": group}[scope_kind]
        end = "Commit" if commit else "Abort"
        return cls(txn_id, f"bystander-{case}", topic, group, point.format(end=end), scope)

    @property
    def armed(self) -> str:
        return f"{self.point}@{self.scope}"


class ArmedBroker:
    """The module's broker: started armed with every test's point; :meth:`crashed` checks that
    it died at a given point and restarts it armed with the rest."""

    def __init__(self, data: Path) -> None:
        self.data = data
        self.armed = {Names.of(s, c).armed for s in STEPS for c in ENDS}
        self.broker = self._start(None)

    def _start(self, port: int | None) -> BrokerProcess:
        env = {ENV: ",".join(sorted(self.armed))}
        return start_broker(self.data, overrides=OVERRIDES, port=port, env=env)

    def crashed(self, names: Names) -> None:
        """Wait for the broker to die at ``names``' point (bounded)."""
        assert self.broker.proc.wait(WAIT) == -9
        line = f'"event": "crash point", "point": "{names.point}", "scope": "{names.scope}"'
        assert line in self.broker.log_text(), self.broker.log_text()[-3000:]
        self.armed.discard(names.armed)

    def restart(self) -> BrokerProcess:
        if self.broker.proc.poll() is None:
            return self.broker
        self.broker = self._start(self.broker.port)
        return self.broker


@pytest.fixture(scope="module")
def armed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ArmedBroker]:
    broker = ArmedBroker(tmp_path_factory.mktemp("txn-crash") / "data")
    try:
        yield broker
    finally:
        code = broker.broker.stop() if broker.broker.proc.poll() is None else None
    assert code == 0, broker.broker.log_text()[-3000:]


def wait_for(condition: Callable[[], T | None], what: str, timeout: float = WAIT) -> T:
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def markers_of(batches: list[Batch], producer_id: int) -> list[Batch]:
    return [b for b in batches if b.commit is not None and b.producer_id == producer_id]


class Victim:
    """The transactional producer whose transaction is crashed, driven on a thread."""

    def __init__(self, bootstrap: str, names: Names, group_metadata: Any, commit: bool) -> None:
        self.names = names
        self.producer = Producer(
            {**CLIENT, "bootstrap.servers": bootstrap, "transactional.id": names.txn_id}
        )
        self.producer.init_transactions(WAIT)
        self.group_metadata = group_metadata
        self.commit = commit
        self.delivered: dict[int, list[int]] = {p: [] for p in PARTITIONS}
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _delivered(self, err: Any, msg: Any) -> None:
        if err is None:
            self.delivered[msg.partition()].append(msg.offset())

    def _run(self) -> None:
        p, topic = self.producer, self.names.topic
        try:
            p.begin_transaction()
            for partition in PARTITIONS:
                for i in range(RECORDS):
                    value = b"victim-%d-%d" % (partition, i)
                    p.produce(topic, value=value, partition=partition, on_delivery=self._delivered)
            p.flush(WAIT)
            p.send_offsets_to_transaction(
                [TopicPartition(topic, 0, OFFSET)], self.group_metadata, WAIT
            )
            if self.commit:
                p.commit_transaction(WAIT)
            else:
                p.abort_transaction(WAIT)
        except BaseException as exc:  # reported by the test
            self.error = exc


def read_committed(bootstrap: str, topic: str, until: bytes) -> dict[int, list[bytes]]:
    """Every value a read_committed consumer gets from each partition up to ``until`` (a
    non-transactional record the test wrote last to each)."""
    consumer = Consumer(
        {
            **CLIENT,
            "bootstrap.servers": bootstrap,
            "group.id": "reader",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in PARTITIONS])
        got: dict[int, list[bytes]] = {p: [] for p in PARTITIONS}
        deadline = time.monotonic() + WAIT
        while any(not v or v[-1] != until for v in got.values()):
            assert time.monotonic() < deadline, f"read_committed got only {got}"
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                got[msg.partition()].append(msg.value())
        return got
    finally:
        consumer.close()


def check_partitions(
    broker: BrokerProcess, topic: str, expected_hw: dict[int, int]
) -> dict[int, list[Batch]]:
    """Wait until each partition has its expected high watermark and its LSO is settled, then
    check ``.txnindex`` and the LSO against :func:`kafka_model`; the batches by partition."""

    def settled() -> dict[int, Any] | None:
        got = offsets(broker.port, topic, PARTITIONS)
        if got is None or any(got[p].high_watermark != hw for p, hw in expected_hw.items()):
            return None
        return got

    got = wait_for(settled, f"high watermarks {expected_hw}")
    out = {}
    for p in PARTITIONS:
        batches = log_batches(broker.data_dir / f"{topic}-{p}")
        entries, lso = kafka_model(batches, got[p].high_watermark)
        where = f"partition {p}: {batches}"
        assert read_txn_index(broker.data_dir / f"{topic}-{p}") == entries, where
        assert (got[p].lso, got[p].fetch_lso) == (lso, lso), where
        out[p] = batches
    return out


@pytest.mark.parametrize("commit", list(ENDS), ids=list(ENDS.values()))
@pytest.mark.parametrize("step", list(STEPS))
def test_kill_9_at_each_step_of_a_transaction(armed: ArmedBroker, step: str, commit: bool) -> None:
    marked_at_crash, resent = STEPS[step][2:]
    names = Names.of(step, commit)
    topic = names.topic
    broker = armed.restart()  # running, unless an earlier test failed before its restart
    data = broker.data_dir
    bootstrap = broker.bootstrap
    admin = AdminClient({**CLIENT, "bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, len(PARTITIONS), 1)])[topic].result(WAIT)
    bystander = Producer(
        {**CLIENT, "bootstrap.servers": bootstrap, "transactional.id": names.bystander}
    )
    bystander.init_transactions(WAIT)
    bystander.begin_transaction()
    bystander.produce(topic, value=b"bystander", partition=0)
    bystander.flush(WAIT)
    group_consumer = Consumer({**CLIENT, "bootstrap.servers": bootstrap, "group.id": names.group,
                               "enable.auto.commit": False})  # fmt: skip
    victim = Victim(bootstrap, names, group_consumer.consumer_group_metadata(), commit)
    victim.thread.start()
    try:
        # --- the crash, what it left, the restart
        armed.crashed(names)
        before = {p: log_batches(data / f"{topic}-{p}") for p in PARTITIONS}
        at_crash = tuple(len([b for b in before[p] if b.commit is not None]) for p in PARTITIONS)
        assert at_crash == marked_at_crash, before
        broker = armed.restart()
    finally:
        victim.thread.join(WAIT)
    assert not victim.thread.is_alive()
    assert victim.error is None, f"the producer's {step}: {victim.error!r}"

    # --- the log after recovery: every record once, where its delivery report said
    delivered = victim.delivered
    assert {p: len(o) for p, o in delivered.items()} == {p: RECORDS for p in PARTITIONS}
    markers = {p: 1 + (marked_at_crash[p] if resent else 0) for p in PARTITIONS}
    expected_hw = {p: max(delivered[p]) + 1 + markers[p] for p in PARTITIONS}
    first_data = next(b for b in log_batches(data / f"{topic}-1") if b.commit is None)
    pid, epoch = first_data.producer_id, first_data.epoch
    batches = check_partitions(broker, topic, expected_hw)
    for p in PARTITIONS:
        data_offsets = sorted(
            o for b in batches[p] if b.commit is None and b.producer_id == pid
            for o in range(b.base, b.last + 1)
        )  # fmt: skip
        assert data_offsets == sorted(delivered[p]), batches[p]
        mine = markers_of(batches[p], pid)
        assert [b.commit for b in mine] == [commit] * markers[p], batches[p]
        assert [b.base for b in mine] == [max(delivered[p]) + 1 + i for i in range(markers[p])], (
            batches[p]
        )
    # the bystander's transaction is still open on partition 0: the LSO stays at its record
    still_open = offsets(broker.port, topic, [0])
    assert still_open is not None and still_open[0].lso == 0

    # --- the bystander commits: partition 0's LSO reaches its high watermark
    bystander.commit_transaction(WAIT)
    expected_hw[0] += 1
    check_partitions(broker, topic, expected_hw)

    # --- producer state: the same id at the next epoch; the old instance fenced
    again = Producer({**CLIENT, "bootstrap.servers": bootstrap, "transactional.id": names.txn_id})
    again.init_transactions(WAIT)
    with pytest.raises(KafkaException) as fenced:
        victim.producer.begin_transaction()
        victim.producer.produce(topic, value=b"zombie", partition=1)
        victim.producer.commit_transaction(WAIT)
    assert fenced.value.args[0].code() in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED)
    again.begin_transaction()
    again.produce(topic, value=b"after", partition=1)
    again.commit_transaction(WAIT)
    after = [b for b in log_batches(data / f"{topic}-1") if b.commit is None][-1]
    assert (after.producer_id, after.epoch) == (pid, epoch + 1)

    # --- what a read_committed consumer sees: the victim's records everywhere or nowhere
    plain = Producer({**CLIENT, "bootstrap.servers": bootstrap, "acks": "all"})
    for p in PARTITIONS:
        plain.produce(topic, value=b"end", partition=p)
    plain.flush(WAIT)
    seen = read_committed(bootstrap, topic, b"end")
    visible = {p: [b"victim-%d-%d" % (p, i) for i in range(RECORDS)] if commit else []
            for p in PARTITIONS}  # fmt: skip
    assert seen == {
        0: [b"bystander", *visible[0], b"end"],
        1: [*visible[1], b"after", b"end"],
        2: [*visible[2], b"end"],
    }
    committed = group_consumer.committed([TopicPartition(topic, 0)], WAIT)[0].offset
    assert committed == (OFFSET if commit else -1001)
    group_consumer.close()
