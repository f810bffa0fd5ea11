"""The config APIs: DescribeConfigs, AlterConfigs, IncrementalAlterConfigs."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sluice.protocol import messages as m
from sluice.protocol.messages import RequestHeader
from sluice.server.api.registry import Answer

if TYPE_CHECKING:
    pass

from sluice.server.api.base import ApiBase


class ConfigApis(ApiBase):
    """This family\'s handlers (module docstring); mixed into ``Handlers``."""

    # --- Configs (32, 33, 44): sluice.server.api.config_resources -------------------------------

    def describe_configs(
        self, header: RequestHeader, body: m.DescribeConfigsRequest
    ) -> m.DescribeConfigsResponse:
        return self.config_resources.describe(body, header.api_version)

    def alter_configs(
        self, header: RequestHeader, body: m.AlterConfigsRequest
    ) -> Answer[m.AlterConfigsResponse]:
        return self.config_resources.alter(body)

    def incremental_alter_configs(
        self, header: RequestHeader, body: m.IncrementalAlterConfigsRequest
    ) -> Answer[m.IncrementalAlterConfigsResponse]:
        return self.config_resources.incremental_alter(body)
