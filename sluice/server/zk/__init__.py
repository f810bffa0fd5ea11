"""ZooKeeper for cluster mode (spec ``replication.md`` §2): everything that talks to ZooKeeper.

* :mod:`sluice.server.zk.client` -- :class:`ZkClient`, an asyncio adapter over kazoo: requests,
  multi, one-shot watches and session state, all delivered on the event loop.
* :mod:`sluice.server.zk.data` -- Kafka's znode paths and JSON (Kafka's ``ZkData.scala``):
  typed values, validated codecs.
* :mod:`sluice.server.zk.kafka_zk` -- :class:`KafkaZkClient`, the operations a broker and the
  controller need (Kafka's ``KafkaZkClient`` subset): broker registration, controller election
  and fenced writes, topic assignments, partition state with conditional ISR updates.
* :mod:`sluice.server.zk.errors` -- the few ZooKeeper errors callers act on.

The room imports :mod:`sluice.protocol`, :mod:`sluice.server.logging` and itself, nothing of the
core, storage or group rooms (``tests/project/test_layering.py``). Nothing here imports kazoo at
module import: a standalone broker never loads it.
"""
