"""The ``sluice`` command line: Kafka's console tools (produce, consume, topics, configs, groups,
dump-log, perf) and the Spark pipeline jobs, on top of the client, storage and pipeline rooms."""
