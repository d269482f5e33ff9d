"""What the Container Insights profile (`serve --emf-container-insights`) sends for a cluster
shape: events, PutLogEvents bytes and observations per month, priced per observation when the
price is given.

Enhanced observability for EKS bills Container Insights metrics per observation instead of per
custom metric or GB ingested (AWS's "Container Insights with enhanced observability for Amazon
EKS" page). Its per-observation price is not published where this plan could check it, so it is
an input (`--ci-observation-price`, $ per million). Counted as one observation: one metric value
in one event (a high-frequency distribution is one value: the add-on's detailed mode says
ingestion stays at one per minute).

Measured, not modelled: one node of the shape on the simulated backend runs through the real
Container Insights series and encoder (sinks/cloudwatch/insights*.py) for MEASURED_WINDOWS
intervals of a fake clock, then scales to the cluster and the month.
"""

from __future__ import annotations

from dataclasses import dataclass

from podgpu.accounting.holders import AccountingShares
from podgpu.fields.metriclist import MetricList
from podgpu.sim.models import MODELS
from podgpu.sim.node import Shape, SimNode, scenario_pods, simulated_node
from podgpu.sinks.cloudwatch.insights import (
    FixedNode,
    InsightsBuilder,
    InsightsOptions,
    with_insights_fields,
)
from podgpu.sinks.cloudwatch.insights_encode import InsightsEncoder
from podgpu.sinks.cloudwatch.window import WindowAccumulator

MEASURED_WINDOWS = 2
EVENT_OVERHEAD_BYTES = 26


@dataclass(frozen=True, slots=True)
class InsightsEstimate:
    events_per_minute: float
    """Cluster-wide."""
    bytes_per_minute: float
    """PutLogEvents bytes (26 per event included), cluster-wide."""
    observations_per_minute: float
    observations_in_period: float
    price_per_million: float | None
    dollars: float | None
    """None without a price."""


def estimate_insights(shape: Shape, metrics: MetricList, *, cluster: str, emf_interval: float,
                      collect_interval: float, days: float,
                      price_per_million: float | None) -> InsightsEstimate:
    node = SimNode(shape, metrics, 0, fields=with_insights_fields(metrics.fields))
    node.now -= node.now % emf_interval
    pods = scenario_pods(node.scenario)
    builder = InsightsBuilder(
        InsightsOptions(cluster, node.name),
        FixedNode(simulated_node(MODELS[shape.gpu_model.upper()], shape.gpus_per_node,
                                 node.name)), lambda: pods, shares=AccountingShares())
    acc = WindowAccumulator(emf_interval, lambda k, m: True)
    enc = InsightsEncoder()
    lines: list[str] = []
    closed_windows = 0
    # one window to warm up, then MEASURED_WINDOWS measured
    while closed_windows < MEASURED_WINDOWS + 1:
        closed = acc.add(node.now, builder.series(node.snapshot()))
        if closed is not None:
            closed_windows += 1
            if closed_windows > 1:
                lines += enc.encode(closed)
        node.advance(collect_interval)
    import json

    per_node_minutes = MEASURED_WINDOWS * emf_interval / 60.0
    events = len(lines) / per_node_minutes * shape.nodes
    nbytes = sum(len(x) + EVENT_OVERHEAD_BYTES for x in lines) / per_node_minutes * shape.nodes
    values = sum(sum(1 for k in json.loads(x) if "_gpu_" in k) for x in lines)
    obs = values / per_node_minutes * shape.nodes
    period = obs * days * 24 * 60
    dollars = None if price_per_million is None else period / 1e6 * price_per_million
    return InsightsEstimate(events, nbytes, obs, period, price_per_million, dollars)
