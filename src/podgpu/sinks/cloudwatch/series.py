"""A snapshot as the CloudWatch agent would have seen it: every series with its labels.

The agent scrapes the exporter through Prometheus, so each series it matches carries the
exporter's labels plus those its scrape path adds: `job`, `instance`, `ClusterName`,
`prom_metric_type`, and whatever relabelling makes (the seed post's job adds `Namespace` and
`NodeName`). podgpu builds the same label sets from the snapshot directly (reference/cloudwatch.md
§3.1), with one honest difference: `pod`, `namespace` and `container` are the workload's, not the
exporter pod's (the agent path needs `honor_labels` for that).

Series come from the same label helpers as the Prometheus exposition, so `/metrics` and the EMF
documents never disagree about who holds a GPU.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

from podgpu.fields.metriclist import MetricList
from podgpu.model import Device, Snapshot
from podgpu.sinks.prometheus.labels import (
    LabelOptions,
    container_pairs,
    field_label_pairs,
    holders_by_device,
    identity_pairs,
    series_variants,
    short_identity_pairs,
)
from podgpu.sinks.prometheus.pods import ALLOCATION, MEMORY, UTIL, allocation_series, pod_usage

LabelKey = tuple[tuple[str, str], ...]
"""A label set, sorted by name: hashable, and the identity of one EMF event per flush."""

Item = tuple[str, float]
"""(metric name, value) of one series."""

GAUGE = "gauge"
COUNTER = "counter"
POD_UNITS = {MEMORY: "Bytes", UTIL: "None", ALLOCATION: "Count"}


@dataclass(frozen=True, slots=True)
class SeriesOptions:
    """Labels the agent's scrape path would add, and the exporter's own label options."""

    labels: LabelOptions
    job: str = "podgpu"
    instance: str = ""
    cluster_name: str = ""
    node_name: str = ""
    extra: tuple[tuple[str, str], ...] = ()
    """--emf-label KEY=VALUE pairs; they win over every other label of the same name."""


class SeriesBuilder:
    """Turns snapshots into label sets with their values, cheaply per cycle.

    Label keys are memoised per (device, holders) so a steady node builds no new tuples.
    """

    def __init__(self, metrics: MetricList, opts: SeriesOptions) -> None:
        self._rows = tuple((r.name, COUNTER if r.prom_type == "counter" else GAUGE)
                           for r in metrics.metrics)
        self._kinds = dict(self._rows)
        self._label_fields = tuple(sorted(r.name for r in metrics.labels))
        self._opts = opts
        self._memo: dict[tuple[object, ...], LabelKey] = {}

    def _key(self, pairs: tuple[tuple[str, str], ...], kind: str) -> LabelKey:
        memo_key = (pairs, kind)
        key = self._memo.get(memo_key)
        if key is None:
            if len(self._memo) > 100_000:  # label churn (pods coming and going): start over
                self._memo.clear()
            key = self._memo[memo_key] = self._finish(pairs, kind)
        return key

    def _finish(self, pairs: tuple[tuple[str, str], ...], kind: str) -> LabelKey:
        o = self._opts
        labels = dict(pairs)
        if o.cluster_name and "ClusterName" not in labels:
            labels["ClusterName"] = o.cluster_name
        labels.setdefault("job", o.job)
        if o.instance:
            labels.setdefault("instance", o.instance)
        if o.node_name:
            labels.setdefault("NodeName", o.node_name)
        if labels.get("namespace"):
            labels.setdefault("Namespace", labels["namespace"])
        labels["prom_metric_type"] = kind
        labels.update(o.extra)
        return tuple(sorted(labels.items()))

    def series(self, snapshot: Snapshot) -> Iterator[tuple[LabelKey, str, list[Item]]]:
        """(label key, type, [(metric, value), ...]) per label set: the per-key work is done once
        per cycle, not once per value."""
        lopts = self._opts.labels
        holders = holders_by_device(snapshot.allocations)
        kinds = self._kinds
        for sample in snapshot.samples:
            ident = identity_pairs(sample.device, lopts)
            fields = field_label_pairs(sample, self._label_fields)
            values = sample.values
            gauges: list[Item] = []
            counters: list[Item] = []
            for name, kind in self._rows:
                v = values.get(name)
                if v is not None and not isinstance(v, str) and math.isfinite(v):
                    (counters if kind == COUNTER else gauges).append((name, v))
            for extra, attrs in series_variants(holders.get(sample.device.key, []), lopts):
                base = ident + fields + extra + attrs
                if gauges:
                    yield self._key(base, GAUGE), GAUGE, gauges
                if counters:
                    yield self._key(base, COUNTER), COUNTER, counters
                for lv in sample.labeled:
                    lkind = kinds.get(lv.field)
                    if lkind is not None and math.isfinite(lv.value):
                        yield self._key(base + lv.labels, lkind), lkind, [(lv.field, lv.value)]
        yield from self._pod_series(snapshot)

    def _pod_series(self, snapshot: Snapshot) -> Iterator[tuple[LabelKey, str, list[Item]]]:
        lopts = self._opts.labels
        devices: dict[str, Device] = {s.device.key: s.device for s in snapshot.samples}
        per_key: dict[LabelKey, list[Item]] = {}
        for ident, attrs in allocation_series(snapshot, devices, lopts):
            per_key.setdefault(self._key(ident + attrs, GAUGE), []).append((ALLOCATION, 1))
        mem, util = pod_usage(snapshot, devices)
        for name, table in ((MEMORY, mem), (UTIL, util)):
            for (dkey, ref), value in table.items():
                pairs = short_identity_pairs(devices[dkey], lopts) + container_pairs(ref, lopts)
                v = min(value, 1.0) if name == UTIL else value
                per_key.setdefault(self._key(pairs, GAUGE), []).append((name, v))
        for label_key, items in per_key.items():
            yield label_key, GAUGE, items
