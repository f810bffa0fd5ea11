"""The controller: the one broker (elected through ZooKeeper) that decides cluster state.

Kafka's ``kafka.controller`` in ZooKeeper mode (``shared/spec/replication.md`` §2). The controller
writes each partition's state znode (leader, leader epoch, ISR) when a topic is created, a broker
dies or comes back, a broker shuts down in a controlled way, the preferred leader should take
over again, or an admin asks for an election or moves replicas (reassignment); brokers watch
those znodes and the topics' assignments and apply a state only if it is newer than the one they
hold.

* :mod:`.controller` -- :class:`~.controller.Controller`, the elected actor: one event queue,
  reads the znodes, decides with the functions below, writes fenced and conditional.
* :mod:`.assignment` -- where a new topic's replicas go (Kafka's rack-unaware spread).
* :mod:`.election` -- who leads a partition after a change (Kafka's leader election algorithms).

Both are pure functions of the state they are given, so the controller's decisions can be tested
without a ZooKeeper; the controller around them only reads state, calls them and writes results
fenced by the controller epoch.
"""
