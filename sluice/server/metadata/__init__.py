"""Cluster metadata: brokers, topics and partition leaders as this broker knows them, behind one
interface (``view.MetadataView``: standalone a one-broker cluster, else a cache of ZooKeeper),
the cluster member (topic creation and deletion, ISR writes), producer-id blocks."""
