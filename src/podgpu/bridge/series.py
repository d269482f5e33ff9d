"""Scraped families -> EMF series groups, with a Prometheus scrape's labels and the agent's types.

Labels follow the one model of the agent's scrape (sinks/cloudwatch/series.py, `AgentTarget`),
the same as `podgpu serve`'s:

1. the series' own labels, as the target exposed them;
2. target labels: `job`, `instance` (the URL's host:port), `kubernetes_node` (the node) and every
   `--target-label` (what the agent job's relabelling gives: `Namespace`, `Service`, `pod_name`,
   ...). On a clash with a label of the series, `honor_labels` decides as in Prometheus: false
   (Prometheus' and the agent's default) sets the target's and keeps the series' value as
   `exported_<name>`; true keeps the series' value. dcgm-exporter's `pod`/`namespace`/`container`
   name the workload and no target label of the agent's jobs clashes with them;
3. what the CloudWatch agent adds: `ClusterName` when the series has none, `prom_metric_type`.

`identity="workload"` gives podgpu's older labels instead (`NodeName`, `Namespace` from the
series' `namespace`).

Types follow the agent: gauges as they are; counters, and the `_sum`/`_count` of summaries,
as deltas (the window turns them into deltas: first sample seeds, a fall is a reset); summary
quantiles as gauges. Histograms, which the agent drops, are kept: `_sum`, `_count` and every
`_bucket` (with its `le`) as deltas, so a declaration can extract the interval's observation count
and sum, or per-bucket counts. Untyped, info and stateset families have no sound meaning as a
CloudWatch number and are dropped, like the agent drops them, but counted.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from podgpu.bridge.parse import Family
from podgpu.sinks.cloudwatch.series import (
    AGENT,
    COUNTER,
    GAUGE,
    AgentTarget,
    Item,
    LabelKey,
    merge_target,
)

Group = tuple[LabelKey, str, list[Item]]


@dataclass(frozen=True, slots=True)
class TargetLabels:
    """The labels a scrape of one target attaches, and the agent-path defaults."""

    job: str
    instance: str
    extra: tuple[tuple[str, str], ...] = ()
    honor_labels: bool = False
    cluster_name: str = ""
    node_name: str = ""
    identity: str = AGENT

    def agent_target(self) -> AgentTarget:
        return AgentTarget(job=self.job, instance=self.instance, node_name=self.node_name,
                           extra=self.extra, honor_labels=self.honor_labels,
                           cluster_name=self.cluster_name)

    def pairs(self) -> tuple[tuple[str, str], ...]:
        return (("job", self.job), ("instance", self.instance), *self.extra)


@dataclass(slots=True)
class Dropped:
    """Samples left out of one scrape, by reason."""

    unsupported_type: int = 0
    not_finite: int = 0
    names: set[str] = field(default_factory=set)
    """Families dropped for their type (for one log line per name)."""


def kind_of(family_type: str, sample_name: str, family_name: str) -> str | None:
    """GAUGE or COUNTER for a sample of this family, or None when it is not sent."""
    if family_type == "gauge":
        return GAUGE
    if family_type == "counter":
        return COUNTER
    if family_type == "summary":
        return GAUGE if sample_name == family_name else COUNTER
    if family_type == "histogram":
        return COUNTER
    return None


def label_key(own: dict[str, str], target: TargetLabels, prom_type: str,
              agent: AgentTarget | None = None) -> LabelKey:
    if target.identity == AGENT:
        return merge_target(own, agent or target.agent_target(), prom_type)
    labels = dict(own)
    for name, value in target.pairs():
        if name in labels and labels[name] != "":
            if target.honor_labels:
                continue
            labels[f"exported_{name}"] = labels[name]
        labels[name] = value
    if target.cluster_name:
        labels.setdefault("ClusterName", target.cluster_name)
    if target.node_name:
        labels.setdefault("NodeName", target.node_name)
    if labels.get("namespace"):
        labels.setdefault("Namespace", labels["namespace"])
    labels["prom_metric_type"] = prom_type
    return tuple(sorted((k, v) for k, v in labels.items() if v != ""))


def to_series(families: Sequence[Family], target: TargetLabels, dropped: Dropped | None = None
              ) -> list[Group]:
    """One scrape's families as (label key, kind, [(metric, value), ...]) groups: metrics with
    the same labels share a group (one EMF event per label set, as the agent merges them)."""
    groups: dict[tuple[LabelKey, str], list[Item]] = {}
    agent = target.agent_target()
    for fam in families:
        for s in fam.samples:
            kind = kind_of(fam.type, s.name, fam.name)
            if kind is None:
                if dropped is not None:
                    dropped.unsupported_type += 1
                    dropped.names.add(fam.name)
                continue
            if not math.isfinite(s.value):  # NaN, ±Inf, staleness markers: never sent
                if dropped is not None:
                    dropped.not_finite += 1
                continue
            key = label_key(s.labels, target, fam.type, agent)
            groups.setdefault((key, kind), []).append((s.name, _number(s.value)))
    return [(key, kind, items) for (key, kind), items in groups.items()]


def _number(v: float) -> float:
    """Integral values as ints, so EMF carries `100`, not `100.0` (like the snapshot's values)."""
    return int(v) if v.is_integer() and abs(v) < 2**53 else v

