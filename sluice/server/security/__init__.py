"""Kafka's security model for the broker: TLS, SASL (PLAIN, SCRAM), credentials and ACLs."""
