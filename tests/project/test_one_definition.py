"""STYLE item 15: a fact that several layers use is defined once and re-exported, not copied."""

from __future__ import annotations

import sluice
import sluice.client
import sluice.pipeline.offsets
import sluice.protocol
from sluice.protocol.structs import TopicPartition
from sluice.server.storage.layout import parse_partition_dir


def test_one_topic_partition_for_every_layer() -> None:
    exported = {
        "sluice": sluice.TopicPartition,
        "sluice.client": sluice.client.TopicPartition,
        "sluice.protocol": sluice.protocol.TopicPartition,
        "sluice.pipeline.offsets": sluice.pipeline.offsets.TopicPartition,
    }
    assert {name: cls for name, cls in exported.items() if cls is not TopicPartition} == {}
    # Storage hands out the same type, and it still keys a dict like a plain tuple does.
    tp = parse_partition_dir("orders.eu-3")
    assert type(tp) is TopicPartition
    assert tp == ("orders.eu", 3) and {("orders.eu", 3): 1}[tp] == 1
    assert (tp.topic, tp.partition) == ("orders.eu", 3)
