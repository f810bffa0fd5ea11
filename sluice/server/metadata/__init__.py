"""Cluster metadata: brokers, topics and partition leaders as this broker knows them (a cache of
ZooKeeper in a cluster), topic creation and deletion, producer-id blocks."""
