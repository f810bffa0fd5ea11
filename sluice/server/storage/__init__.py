"""The storage engine: Kafka's on-disk log (segments, indexes, checkpoints, recovery).

Imports only :mod:`sluice.protocol` and itself (a layering test keeps it so).
"""
