"""The monitoring docs hold to what the broker exports: the README's metric table lists exactly
the declared families (:data:`sluice.server.metrics.metrics.METRICS`), and every metric the Grafana
dashboard queries is a sample name the endpoint serves (``tests/broker/test_metrics.py`` checks
that a scrape has every declared family)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from sluice.server.metrics.metrics import METRICS

REPO = Path(__file__).resolve().parents[2]
DASHBOARD = REPO / "config" / "grafana-dashboard.json"
_SUFFIXES = {"counter": ("_total",), "gauge": ("",), "histogram": ("_bucket", "_sum", "_count")}


def exported_samples() -> set[str]:
    return {d.name + suffix for d in METRICS for suffix in _SUFFIXES[d.kind]}


def queries(dashboard: dict[str, Any]) -> list[str]:
    out = []
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            out.append(target["expr"])
    return out


def test_dashboard_queries_only_exported_metrics() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = queries(dashboard)
    assert exprs, "no queries"
    used = set()
    for expr in exprs:
        without_labels = re.sub(r"\{[^}]*\}", "", expr)  # label matchers and {{legend}} refs
        used.update(re.findall(r"\b(kafka_[a-z0-9_]+)", without_labels))
    variable_queries = [
        v["definition"] for v in dashboard["templating"]["list"] if "definition" in v
    ]
    for query in variable_queries:
        used.update(re.findall(r"\b(kafka_[a-z0-9_]+)", query))
    assert sorted(used - exported_samples()) == []
    # The figures an operator looks at first are all on it.
    for family in (
        "kafka_server_brokertopicmetrics_bytesin_total",
        "kafka_server_brokertopicmetrics_bytesout_total",
        "kafka_server_brokertopicmetrics_messagesin_total",
        "kafka_network_requestmetrics_requests_total",
        "kafka_network_requestmetrics_errors_total",
        "kafka_network_requestmetrics_totaltime_seconds_bucket",
        "kafka_server_replicamanager_underreplicatedpartitions",
        "kafka_controller_kafkacontroller_activecontrollercount",
        "kafka_controller_kafkacontroller_offlinepartitionscount",
        "kafka_consumergroup_lag",
    ):
        assert family in used, family
    for panel in dashboard["panels"]:
        if panel["type"] != "row":
            assert panel["targets"] and panel["datasource"]["type"] == "prometheus", panel["title"]


def test_readme_lists_every_exported_family() -> None:
    readme = (REPO / "README.md").read_text()
    section = readme.split("## Monitoring", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `([a-z0-9_]+)` \| (\w+) \|", section, re.MULTILINE)
    expected = [(d.name + ("_total" if d.kind == "counter" else ""), d.kind) for d in METRICS]
    assert rows == expected
    assert "sluice.metrics.listener" in section and "grafana-dashboard.json" in section
