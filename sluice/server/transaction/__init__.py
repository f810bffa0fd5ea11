"""The transaction coordinator (Kafka's ``kafka.coordinator.transaction``)."""
