"""Broker metrics: the counters and histograms the broker keeps, and their Prometheus endpoint."""
