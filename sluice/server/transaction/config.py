"""The transaction coordinator's broker keys (``transaction.*``, ``transactional.id.*``) and
:class:`TransactionConfig`.

Declared apart from the coordinator (as :mod:`sluice.server.group.config`) so that the broker's
``Config`` collects and validates them without importing the coordinator, which a broker needs
only once a transactional producer shows up. Names, types and defaults are Kafka 3.9's
(``TransactionLogConfig`` and ``TransactionStateManagerConfig``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from sluice.server.config_def import HIGH, INT, LOW, ConfigDef, int_in, typed_values

TRANSACTION_CONFIG = (
    ConfigDef()
    .section("transactions")
    .define("transaction.state.log.num.partitions", INT, 50, int_in(1), HIGH, "partitions of __transaction_state (fixed once the topic exists)")  # noqa: E501
    .define("transaction.state.log.replication.factor", INT, 3, int_in(1), HIGH, "replicas of __transaction_state in a cluster (standalone: 1); created when that many brokers live")  # noqa: E501
    .define("transaction.state.log.min.isr", INT, 2, int_in(1), HIGH, "min.insync.replicas of __transaction_state (capped at its replication factor)")  # noqa: E501
    .define("transaction.state.log.segment.bytes", INT, 104857600, int_in(1), HIGH, "segment.bytes of __transaction_state")  # noqa: E501
    .define("transaction.state.log.load.buffer.size", INT, 5242880, int_in(1), HIGH, "bytes read per step when loading a __transaction_state partition")  # noqa: E501
    .define("transaction.max.timeout.ms", INT, 900000, int_in(1), HIGH, "largest transaction.timeout.ms a producer may ask (larger: INVALID_TRANSACTION_TIMEOUT)")  # noqa: E501
    .define("transactional.id.expiration.ms", INT, 604800000, int_in(1), HIGH, "a transactional id without a transaction for this long is forgotten")  # noqa: E501
    .define("transaction.abort.timed.out.transaction.cleanup.interval.ms", INT, 10000, int_in(1), LOW, "how often transactions past their timeout are aborted")  # noqa: E501
    .define("transaction.remove.expired.transaction.cleanup.interval.ms", INT, 3600000, int_in(1), LOW, "how often expired transactional ids are removed")  # noqa: E501
)  # fmt: skip

_setting = TRANSACTION_CONFIG.setting


@dataclass(frozen=True)
class TransactionConfig:
    """The coordinator's settings, typed: one field per key of :data:`TRANSACTION_CONFIG`."""

    state_log_num_partitions: int = _setting("transaction.state.log.num.partitions")
    #: Cluster mode: FindCoordinator answers COORDINATOR_NOT_AVAILABLE until that many brokers
    #: are alive to create the topic (Kafka's rule).
    state_log_replication_factor: int = _setting("transaction.state.log.replication.factor")
    state_log_min_isr: int = _setting("transaction.state.log.min.isr")
    state_log_segment_bytes: int = _setting("transaction.state.log.segment.bytes")
    state_log_load_buffer_size: int = _setting("transaction.state.log.load.buffer.size")
    max_timeout_ms: int = _setting("transaction.max.timeout.ms")
    transactional_id_expiration_ms: int = _setting("transactional.id.expiration.ms")
    abort_timed_out_interval_ms: int = _setting(
        "transaction.abort.timed.out.transaction.cleanup.interval.ms"
    )
    remove_expired_interval_ms: int = _setting(
        "transaction.remove.expired.transaction.cleanup.interval.ms"
    )

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> TransactionConfig:
        """From broker properties (Kafka names; other keys are left out). Raises
        :class:`sluice.server.config_def.ConfigError` (a ValueError) for an invalid value."""
        return cls(**typed_values(cls, TRANSACTION_CONFIG.parse(props)))
