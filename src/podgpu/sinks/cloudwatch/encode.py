"""Closed windows -> EMF documents (one JSON line per label set per interval).

The document follows the public EMF specification (reference/cloudwatch.md §4): `_aws.Timestamp`
in milliseconds, `_aws.CloudWatchMetrics` directives with Namespace, Dimensions and Metrics, every
dimension and metric a root member. A metric with several samples is written as a value
distribution `{"Values": [...], "Counts": [...], "Max", "Min", "Count", "Sum"}` — the form the
CloudWatch agent's awsemf exporter writes for its high-frequency GPU metrics (§6.2, §7.1) — with
at most 100 distinct values. An event never holds more than 100 metrics: a larger label set is
split into several events (the agent does not split, and CloudWatch then rejects the extraction).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping

from podgpu.fields.catalog import lookup
from podgpu.sinks.cloudwatch.declarations import EmfConfig
from podgpu.sinks.cloudwatch.series import POD_UNITS, LabelKey
from podgpu.sinks.cloudwatch.window import ClosedWindow

MAX_METRICS_PER_EVENT = 100
MAX_VALUES = 100

# DCGM catalog units -> CloudWatch units. CloudWatch has no unit for degrees, watts, hertz or
# joules, nor nanoseconds; those are "None" (the number stays in DCGM's unit, named in the docs).
CATALOG_UNITS: Mapping[str, str] = {
    "%": "Percent", "B/s": "Bytes/Second", "MB/s": "Megabytes/Second", "MiB": "Megabytes",
    "count": "Count", "bytes": "Bytes", "B": "Bytes",
}

Plan = tuple[tuple[int, ...], tuple[tuple[str, ...], ...]]
"""For one (label set, metric): indices of the declarations selecting it, and its dimension sets."""


def cloudwatch_unit(metric: str, config_units: Mapping[str, str]) -> str:
    """The config's metric_unit wins; else the catalog's unit mapped; else None."""
    if metric in config_units:
        return config_units[metric]
    if metric in POD_UNITS:
        return POD_UNITS[metric]
    f = lookup(metric)
    return CATALOG_UNITS.get(f.unit, "None") if f is not None else "None"


def distribution(values: list[float]) -> float | int | dict[str, object]:
    """One sample as a number; several as Values/Counts with exact Max, Min, Count and Sum."""
    if len(values) == 1:
        v = values[0]
        return int(v) if v.is_integer() and abs(v) < 2**53 else v
    counts = Counter(values)
    if len(counts) > MAX_VALUES:
        counts = _coalesce(counts)
    vals = [int(v) if v.is_integer() and abs(v) < 2**53 else v for v in counts]
    return {"Values": vals, "Counts": list(counts.values()), "Max": max(values),
            "Min": min(values), "Count": len(values), "Sum": sum(values)}


def _coalesce(counts: Counter[float]) -> Counter[float]:
    """Merge the closest neighbouring values (count-weighted mean) until at most MAX_VALUES stay;
    Max, Min, Count and Sum are computed from the raw samples, so they stay exact."""
    items = sorted(counts.items())
    while len(items) > MAX_VALUES:
        gaps = [items[i + 1][0] - items[i][0] for i in range(len(items) - 1)]
        i = gaps.index(min(gaps))
        (v1, c1), (v2, c2) = items[i], items[i + 1]
        items[i:i + 2] = [((v1 * c1 + v2 * c2) / (c1 + c2), c1 + c2)]
    return Counter(dict(items))


class Encoder:
    """Applies the declarations to closed windows. Plans are memoised per (label set, metric)."""

    def __init__(
        self,
        config: EmfConfig,
        *,
        storage_resolution: int = 60,
        keep_unmatched: bool = False,
        route: tuple[str, str] | None = None,
    ) -> None:
        self._config = config
        self._keep_unmatched = keep_unmatched
        self._route = route
        self._plans: dict[tuple[LabelKey, str], Plan] = {}
        self._kept: dict[LabelKey, tuple[int, ...]] = {}
        self._metric_defs: dict[str, dict[str, object]] = {}
        self._storage_resolution = storage_resolution

    def plan(self, key: LabelKey, metric: str) -> Plan:
        plan = self._plans.get((key, metric))
        if plan is None:
            if len(self._plans) > 200_000:  # pod churn: forget old label sets
                self._plans.clear()
                self._kept.clear()
            cfg = self._config
            kept = self._kept.get(key)
            labels = dict(key)
            if kept is None:
                kept = self._kept[key] = tuple(
                    d.index for d in cfg.declarations if d.matches_labels(labels))
            by_index = {d.index: d for d in cfg.declarations}
            idx = tuple(i for i in kept if by_index[i].selects(metric))
            sets: list[tuple[str, ...]] = []
            for i in idx:
                for s in by_index[i].dimension_sets(labels):
                    if s not in sets:
                        sets.append(s)
            plan = self._plans[(key, metric)] = (idx if sets else (), tuple(sets))
        return plan

    def wanted(self, key: LabelKey, metric: str) -> bool:
        """Whether a series is worth collecting: it is extracted, or unmatched ones are kept."""
        return self._keep_unmatched or bool(self.plan(key, metric)[0])

    def _metric_def(self, name: str) -> dict[str, object]:
        d = self._metric_defs.get(name)
        if d is None:
            d = {"Name": name, "Unit": cloudwatch_unit(name, self._config.units)}
            if self._storage_resolution == 1:
                d["StorageResolution"] = 1
            self._metric_defs[name] = d
        return d

    def encode(self, window: ClosedWindow) -> list[str]:
        """Every event of the window as one compact JSON line, in a stable order."""
        ts = window.timestamp_ms
        cfg = self._config
        out: list[str] = []
        dumps = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False,
                                 allow_nan=False).encode
        for key in sorted(window.groups):
            metrics = window.groups[key]
            extracted: dict[Plan, list[str]] = {}
            plain: list[str] = []
            for name in metrics:
                plan = self.plan(key, name)
                if plan[0] and not cfg.disable_metric_extraction:
                    extracted.setdefault(plan, []).append(name)
                elif self._keep_unmatched or (plan[0] and cfg.disable_metric_extraction):
                    plain.append(name)
            chunks = _chunks(extracted, plain)
            for directives, names in chunks:
                doc: dict[str, object] = {}
                if directives:
                    aws: dict[str, object] = {"Timestamp": ts, "CloudWatchMetrics": [
                        {"Namespace": cfg.namespace, "Dimensions": [list(s) for s in sets],
                         "Metrics": [self._metric_def(n) for n in dnames]}
                        for sets, dnames in directives]}
                    if self._route is not None:
                        aws["LogGroupName"], aws["LogStreamName"] = self._route
                    doc["_aws"] = aws
                else:
                    doc["Timestamp"] = ts  # plain log event: no extraction (like the agent's)
                doc.update(key)
                for n in names:
                    doc[n] = distribution(metrics[n])
                out.append(dumps(doc))
        return out


def _chunks(extracted: dict[Plan, list[str]], plain: list[str]
            ) -> list[tuple[list[tuple[tuple[tuple[str, ...], ...], list[str]]], list[str]]]:
    """Split one label set into events of at most MAX_METRICS_PER_EVENT extracted metrics.

    Returns (directives, every metric name in the event); plain (unextracted) values ride in
    the first event."""
    events: list[tuple[list[tuple[tuple[tuple[str, ...], ...], list[str]]], list[str]]] = []
    current: list[tuple[tuple[tuple[str, ...], ...], list[str]]] = []
    count = 0
    for (_idx, sets), names in extracted.items():
        pos = 0
        while pos < len(names):
            room = MAX_METRICS_PER_EVENT - count
            if room == 0:
                events.append((current, [n for _, ns in current for n in ns]))
                current, count = [], 0
                room = MAX_METRICS_PER_EVENT
            part = names[pos:pos + room]
            current.append((sets, part))
            count += len(part)
            pos += len(part)
    if current or not events:
        events.append((current, [n for _, ns in current for n in ns]))
    if plain:
        first_dirs, first_names = events[0]
        events[0] = (first_dirs, first_names + plain)
    return [(d, n) for d, n in events if n]
