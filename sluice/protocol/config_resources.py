"""The codes of the config admin APIs (DescribeConfigs, AlterConfigs, IncrementalAlterConfigs),
sans-I/O: one definition for the broker that answers them and the client that asks.

The names are those of Kafka's admin client (``ConfigResource.Type``, ``ConfigEntry.ConfigSource``,
``AlterConfigOp.OpType``), which is also how ``kafka-configs`` prints them
(``synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=1000, DEFAULT_CONFIG:log.retention.hours=168}``).
"""

from __future__ import annotations

import enum


class ResourceType(enum.IntEnum):
    """``ConfigResource.Type``: what a config resource names (its ``resource_type`` byte)."""

    UNKNOWN = 0
    TOPIC = 2
    BROKER = 4
    BROKER_LOGGER = 8
    CLIENT_METRICS = 16
    GROUP = 32


class ConfigSource(enum.IntEnum):
    """Where a config entry's value comes from (DescribeConfigs v1+ ``config_source``), most
    specific first. The names are the admin client's: the wire calls 1 ``TOPIC_CONFIG``."""

    UNKNOWN = 0
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5
    DYNAMIC_BROKER_LOGGER_CONFIG = 6
    DYNAMIC_CLIENT_METRICS_CONFIG = 7
    DYNAMIC_GROUP_CONFIG = 8

    @classmethod
    def name_of(cls, code: int) -> str:
        """The name of ``code``; ``UNKNOWN`` for a code this table does not have."""
        try:
            return cls(code).name
        except ValueError:
            return cls.UNKNOWN.name


class AlterConfigOp(enum.IntEnum):
    """``AlterConfigOp.OpType`` of IncrementalAlterConfigs: APPEND and SUBTRACT edit the items
    of a list config (``cleanup.policy``)."""

    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3
