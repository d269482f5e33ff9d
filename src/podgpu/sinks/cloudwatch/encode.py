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

_DUMPS = json.JSONEncoder(separators=(",", ":"), allow_nan=False).encode

Directives = list[tuple[tuple[tuple[str, ...], ...], list[str]]]
"""(dimension sets, metric names) of each directive of one event."""

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


def distribution(values: list[float]) -> float | dict[str, object]:
    """One sample as a number; several as Values/Counts with exact Max, Min, Count and Sum.

    Values keep their type from the snapshot (DCGM integer fields stay integers), so the JSON
    carries `100`, not `100.0`, without a conversion pass here."""
    n = len(values)
    if n == 1:
        return values[0]
    first = values[0]
    if values.count(first) == n:  # a steady value (clocks, idle engines): the common case
        return {"Values": [first], "Counts": [n], "Max": first, "Min": first, "Count": n,
                "Sum": sum(values)}
    counts = Counter(values)
    if len(counts) > MAX_VALUES:
        counts = _coalesce(counts)
    return {"Values": list(counts), "Counts": list(counts.values()), "Max": max(values),
            "Min": min(values), "Count": n, "Sum": sum(values)}


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
        self._heads: dict[tuple[object, ...], tuple[str, str]] = {}
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

    def _head(self, key: LabelKey, directives: Directives) -> tuple[str, str]:
        """The JSON around the timestamp that does not change between intervals: the
        directives before it, the labels after it. Cached per label set and directive shape."""
        memo = (key, tuple((sets, tuple(names)) for sets, names in directives))
        head = self._heads.get(memo)
        if head is None:
            if len(self._heads) > 100_000:
                self._heads.clear()
            inner = _DUMPS(dict(key))[1:-1]
            labels = f",{inner}" if inner else ""
            if directives:
                cwm = _DUMPS([{"Namespace": self._config.namespace,
                               "Dimensions": [list(s) for s in sets],
                               "Metrics": [self._metric_def(n) for n in names]}
                              for sets, names in directives])
                route = ""
                if self._route is not None:
                    route = "," + _DUMPS({"LogGroupName": self._route[0],
                                          "LogStreamName": self._route[1]})[1:-1]
                head = ('{"_aws":{"Timestamp":', f',"CloudWatchMetrics":{cwm}{route}}}{labels}')
            else:  # a plain log event, no extraction (like the agent's unmatched lines)
                head = ('{"Timestamp":', labels)
            self._heads[memo] = head
        return head

    def encode(self, window: ClosedWindow) -> list[str]:
        """Every event of the window as one compact JSON line, in a stable order."""
        ts = str(window.timestamp_ms)
        extract = not self._config.disable_metric_extraction
        out: list[str] = []
        for key in sorted(window.groups):
            metrics = window.groups[key]
            extracted: dict[Plan, list[str]] = {}
            plain: list[str] = []
            for name in metrics:
                plan = self.plan(key, name)
                if plan[0] and extract:
                    extracted.setdefault(plan, []).append(name)
                elif plan[0] or self._keep_unmatched:
                    plain.append(name)
            for directives, names in _chunks(extracted, plain):
                before, after = self._head(key, directives)
                values = _DUMPS({n: distribution(metrics[n]) for n in names})
                out.append(f"{before}{ts}{after},{values[1:]}")
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
