"""The controller's broker keys (Kafka's names), declared for the broker's ``Config`` to collect
and for :class:`sluice.server.controller.controller.ControllerSettings` to default from.
"""

from __future__ import annotations

from sluice.server.config_def import BOOLEAN, HIGH, INT, LONG, ConfigDef, boolean, int_in

CONTROLLER_CONFIG = (
    ConfigDef()
    .section("cluster: the controller")
    .define("auto.leader.rebalance.enable", BOOLEAN, True, boolean, HIGH, "the controller moves leadership back to preferred replicas")  # noqa: E501
    .define("leader.imbalance.check.interval.seconds", LONG, 300, int_in(1), HIGH, "how often the controller checks for non-preferred leaders")  # noqa: E501
    .define("leader.imbalance.per.broker.percentage", INT, 10, int_in(0, 100), HIGH, "rebalance a broker's partitions when more than this % of those it should lead it does not")  # noqa: E501
)  # fmt: skip
