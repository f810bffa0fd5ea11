"""Replication: ``Partition`` (leader, followers, ISR, high watermark), the delayed-operation
purgatory, the ``ReplicaManager`` between the handlers and the logs, and the replica fetcher."""
