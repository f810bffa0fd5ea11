"""kill -9 of a standalone broker -- transaction coordinator, group coordinator and partition
leader at once -- at each step of a commit and of an abort (issue 26), then a restart on the same
data dir, compared against a model.

One broker serves the module, armed with a :mod:`sluice.server.crash_points` point for every
test (``SLUICE_CRASH_AT``, each scoped to its test's transactional id, topic or group): a test's
transaction dies at its point with SIGKILL while a confluent-kafka transactional producer drives
it (3 records on each of 3 partitions, ``send_offsets_to_transaction`` for a group, then commit
or abort) on a thread; the test restarts the broker on the same port and data dir
(``SLUICE_CRASH_ONCE_DIR``: the point that fired stays quiet) and the producer's call finishes
against the new process.
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

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from sluice.server.crash_points import ENV, ONCE_DIR_ENV
from tests.broker_util import BrokerProcess, start_broker
from tests.transaction.crash_model import (
    CLIENT,
    WAIT,
    Batch,
    Names,
    Victim,
    check_after_recovery,
    check_log,
    kafka_model,
    log_batches,
    offsets,
    read_txn_index,
    wait_for,
)

pytestmark = pytest.mark.interop

PARTITIONS = [0, 1, 2]
OVERRIDES = ["transaction.state.log.num.partitions=3", "num.partitions=1"]

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


def names_of(step: str, commit: bool) -> Names:
    point, scope_kind = STEPS[step][:2]
    return Names.of(f"{step}-{ENDS[commit]}", point, scope_kind, commit)


class ArmedBroker:
    """The module's broker, armed with every test's point, each firing once."""

    def __init__(self, root: Path) -> None:
        self.data = root / "data"
        (root / "once").mkdir()
        armed = ",".join(names_of(s, c).armed for s in STEPS for c in ENDS)
        self.env = {ENV: armed, ONCE_DIR_ENV: str(root / "once")}
        self.broker = start_broker(self.data, overrides=OVERRIDES, env=self.env)

    def crashed(self, names: Names) -> None:
        """Wait for the broker to die at ``names``' point (bounded)."""
        assert self.broker.proc.wait(WAIT) == -9
        assert names.crash_line in self.broker.log_text(), self.broker.log_text()[-3000:]

    def running(self) -> BrokerProcess:
        """The broker, restarted (same data dir and port) if it is dead."""
        if self.broker.proc.poll() is not None:
            port = self.broker.port
            self.broker = start_broker(self.data, overrides=OVERRIDES, port=port, env=self.env)
        return self.broker


@pytest.fixture(scope="module")
def armed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ArmedBroker]:
    broker = ArmedBroker(tmp_path_factory.mktemp("txn-crash"))
    try:
        yield broker
    finally:
        code = broker.broker.stop() if broker.broker.proc.poll() is None else None
    assert code == 0, broker.broker.log_text()[-3000:]


def check_partitions(
    broker: BrokerProcess, topic: str, expected_hw: dict[int, int]
) -> dict[int, list[Batch]]:
    """Wait until each partition has its expected high watermark, then check ``.txnindex`` and
    the LSO against :func:`kafka_model`; the batches by partition."""

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
    names = names_of(step, commit)
    topic = names.topic
    broker = armed.running()  # restarted if an earlier test failed before its restart
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
    victim = Victim(bootstrap, names, PARTITIONS, group_consumer.consumer_group_metadata(), commit)
    try:
        # --- the crash, what it left, the restart
        armed.crashed(names)
        before = {p: log_batches(data / f"{topic}-{p}") for p in PARTITIONS}
        at_crash = tuple(len([b for b in before[p] if b.commit is not None]) for p in PARTITIONS)
        assert at_crash == marked_at_crash, before
        broker = armed.running()
    finally:
        victim.thread.join(WAIT)
    victim.finished()

    # --- the log after recovery: every record once, where its delivery report said; the
    # markers, .txnindex and LSO
    markers = {p: 1 + (marked_at_crash[p] if resent else 0) for p in PARTITIONS}
    expected_hw = {p: max(victim.delivered[p]) + 1 + markers[p] for p in PARTITIONS}
    batches = check_partitions(broker, topic, expected_hw)
    pid, epoch = check_log(batches, victim, lambda p, n: n == markers[p])
    # the bystander's transaction is still open on partition 0: the LSO stays at its record
    assert batches[0][0].base == 0 and batches[0][0].producer_id != pid
    still_open = offsets(broker.port, topic, [0])
    assert still_open is not None and still_open[0].lso == 0

    # --- the bystander commits: partition 0's LSO reaches its high watermark
    bystander.commit_transaction(WAIT)
    expected_hw[0] += 1
    check_partitions(broker, topic, expected_hw)

    # --- the clients' view
    check_after_recovery(
        bootstrap, victim, pid, epoch, group_consumer, lambda p: log_batches(data / f"{topic}-{p}")
    )
    group_consumer.close()
