"""Request handlers (Kafka's ``KafkaApis``): one decoded request in, one response out."""
