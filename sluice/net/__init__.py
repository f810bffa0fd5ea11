"""One asyncio connection to a Kafka broker (framing, correlation ids, version negotiation), under
both the user-facing client and the broker's inter-broker client (replica fetcher, controlled
shutdown); it imports only :mod:`sluice.protocol`."""
