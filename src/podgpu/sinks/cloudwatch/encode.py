"""Closed windows -> EMF documents (one JSON line per label set per interval).

The document follows the public EMF specification (the CloudWatch documentation): `_aws.Timestamp`
in milliseconds, `_aws.CloudWatchMetrics` directives with Namespace, Dimensions and Metrics, every
dimension and metric a root member. A metric with several samples is written as a value
distribution `{"Values": [...], "Counts": [...], "Max", "Min", "Count", "Sum"}` — the form the
CloudWatch agent's awsemf exporter writes for its high-frequency GPU metrics — with
at most 100 distinct values. An event never holds more than 100 metrics: a larger label set is
split into several events (the agent does not split, and CloudWatch then rejects the extraction).

As the CloudWatch agent does:
- **Units** only where the declaration's `metric_unit` names one (the agent's metrics carry none);
  the catalog's units only in podgpu's "workload" identity (`catalog_units=True`).
- **No duplicate keys.** An event is one JSON object built as the agent builds its map: the
  labels, then the metric values (a label named like a metric of its label set is replaced by the
  value), then the reserved keys (`_aws`, or `Timestamp` on a plain event) replace a label of the
  same name. A dimension set naming such a replaced key is left out (in the agent's event it
  would name a number or the `_aws` object, and CloudWatch would refuse the extraction).
- **Bounded events.** No event is over MAX_EVENT_BYTES (the agent's 256 KiB cap on message plus
  PutLogEvents' 26 bytes of overhead): a bigger one is split in two by its metrics, again until
  each fits - never cut, so every event is whole JSON. An event that cannot fit (one metric with
  labels over the cap) is dropped, counted in `too_large` and logged.

Decision record: docs/decisions/0014-emf-own-encoder.md.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Mapping

from podgpu.fields.catalog import lookup
from podgpu.sinks.cloudwatch.declarations import EmfConfig, fill_placeholders
from podgpu.sinks.cloudwatch.series import POD_UNITS, LabelKey
from podgpu.sinks.cloudwatch.window import ClosedWindow

log = logging.getLogger(__name__)

MAX_METRICS_PER_EVENT = 100
MAX_VALUES = 100
EVENT_OVERHEAD_BYTES = 26
MAX_EVENT_BYTES = 256 * 1024 - EVENT_OVERHEAD_BYTES
"""UTF-8 bytes of one event's message: the agent's cwlogs pusher caps message + 26 at 256 KiB.
CloudWatch Logs' own limit was 256 KB and is 1 MB in the current PutLogEvents reference; the
lower one holds for both."""

# DCGM catalog units -> CloudWatch units. CloudWatch has no unit for degrees, watts, hertz or
# joules, nor nanoseconds; those are "None" (the number stays in DCGM's unit, named in the docs).
CATALOG_UNITS: Mapping[str, str] = {
    "%": "Percent", "B/s": "Bytes/Second", "MB/s": "Megabytes/Second", "MiB": "Megabytes",
    "count": "Count", "bytes": "Bytes", "B": "Bytes",
}

_DUMPS = json.JSONEncoder(separators=(",", ":"), allow_nan=False).encode

Plan = tuple[tuple[int, ...], tuple[tuple[str, ...], ...]]
"""For one (label set, metric): indices of the declarations selecting it, and its dimension sets."""


def cloudwatch_unit(metric: str, config_units: Mapping[str, str], catalog: bool = False
                    ) -> str | None:
    """The config's metric_unit; else, with `catalog`, the catalog's unit mapped; else None
    (no `Unit` key: the agent path's metrics have none)."""
    if metric in config_units:
        return config_units[metric]
    if not catalog:
        return None
    if metric in POD_UNITS:
        return POD_UNITS[metric]
    f = lookup(metric)
    unit = CATALOG_UNITS.get(f.unit) if f is not None else None
    return unit


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


Directive = tuple[tuple[tuple[str, ...], ...], list[str]]


class Encoder:
    """Applies the declarations to closed windows. Plans are memoised per (label set, metric)."""

    def __init__(
        self,
        config: EmfConfig,
        *,
        storage_resolution: int = 60,
        keep_unmatched: bool = False,
        route: tuple[str, str] | None = None,
        catalog_units: bool = False,
        max_event_bytes: int = MAX_EVENT_BYTES,
    ) -> None:
        self._config = config
        self._keep_unmatched = keep_unmatched
        self._route = route
        """(log group, log stream) templates written into `_aws` for the agent's EMF listener;
        placeholders are filled from each event's labels."""
        self._catalog_units = catalog_units
        self._max_bytes = max_event_bytes
        self._plans: dict[tuple[LabelKey, str], Plan] = {}
        self._kept: dict[LabelKey, tuple[int, ...]] = {}
        self._selected: dict[str, frozenset[int]] = {}
        """Metric name -> declarations whose selectors match it (labels play no part)."""
        self._by_index = {d.index: d for d in config.declarations}
        self._metric_defs: dict[str, dict[str, object]] = {}
        self._heads: dict[tuple[object, ...], tuple[str, str]] = {}
        self._storage_resolution = storage_resolution
        self.too_large = 0
        """Events dropped because even alone they exceed the size cap (counted, logged)."""

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
            by_index = self._by_index
            selected = self._selected.get(metric)
            if selected is None:
                if len(self._selected) > 100_000:
                    self._selected.clear()
                selected = self._selected[metric] = frozenset(
                    d.index for d in cfg.declarations if d.selects(metric))
            idx = tuple(i for i in kept if i in selected)
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
            d = {"Name": name}
            unit = cloudwatch_unit(name, self._config.units, self._catalog_units)
            if unit is not None:
                d["Unit"] = unit
            if self._storage_resolution == 1:
                d["StorageResolution"] = 1
            self._metric_defs[name] = d
        return d

    def _head(self, key: LabelKey, shadowed: frozenset[str], directives: list[Directive]
              ) -> tuple[str, str]:
        """The JSON around the timestamp that does not change between intervals: the
        directives before it, the labels after it. Cached per label set and directive shape.
        Labels in `shadowed` (metric names of the label set, and the reserved key) are left
        out, as the agent's map overwrites them."""
        memo = (key, shadowed, tuple((sets, tuple(names)) for sets, names in directives))
        head = self._heads.get(memo)
        if head is None:
            if len(self._heads) > 100_000:
                self._heads.clear()
            inner = _DUMPS({k: v for k, v in key if k not in shadowed})[1:-1]
            labels = f",{inner}" if inner else ""
            if directives:
                cwm = _DUMPS([{"Namespace": self._config.namespace,
                               "Dimensions": [list(s) for s in sets],
                               "Metrics": [self._metric_def(n) for n in names]}
                              for sets, names in directives])
                route = ""
                if self._route is not None:
                    label_map = dict(key)
                    route = "," + _DUMPS({
                        "LogGroupName": fill_placeholders(self._route[0], label_map),
                        "LogStreamName": fill_placeholders(self._route[1], label_map)})[1:-1]
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
        dropped = 0
        for key in sorted(window.groups):
            metrics = window.groups[key]
            label_names = {k for k, _ in key}
            clash = frozenset(label_names.intersection(metrics))
            bad = clash | ({"_aws"} & label_names)
            extracted: dict[Plan, list[str]] = {}
            plain: list[str] = []
            for name in metrics:
                plan = self.plan(key, name)
                if plan[0] and extract:
                    sets = tuple(s for s in plan[1] if not bad.intersection(s)) if bad else plan[1]
                    if sets:
                        extracted.setdefault((plan[0], sets), []).append(name)
                        continue
                if plan[0] or self._keep_unmatched:
                    plain.append(name)
            for directives, names in _chunks(extracted, plain):
                dropped += self._emit(out, key, clash, ts, directives, names, metrics)
        if dropped:
            self.too_large += dropped
            log.warning("EMF: %d event(s) over %d bytes even with one metric each (labels too "
                        "long): dropped (%d so far)", dropped, self._max_bytes, self.too_large)
        return out

    def _emit(self, out: list[str], key: LabelKey, clash: frozenset[str], ts: str,
              directives: list[Directive], names: list[str],
              metrics: dict[str, list[float]]) -> int:
        """Append the event (split in halves until each part fits); the number dropped."""
        reserved = "_aws" if directives else "Timestamp"
        shadowed = clash | {reserved} if any(k == reserved for k, _ in key) else clash
        before, after = self._head(key, shadowed, directives)
        values = _DUMPS({n: distribution(metrics[n]) for n in names})
        line = f"{before}{ts}{after},{values[1:]}"
        if len(line) <= self._max_bytes:  # ASCII JSON (ensure_ascii): characters are bytes
            out.append(line)
            return 0
        if len(names) == 1:
            return 1
        half = names[:len(names) // 2], names[len(names) // 2:]
        return sum(self._emit(out, key, clash, ts, _only(directives, part), part, metrics)
                   for part in half)


def _only(directives: list[Directive], names: list[str]) -> list[Directive]:
    keep = set(names)
    return [(sets, part) for sets, ns in directives if (part := [n for n in ns if n in keep])]


def _chunks(extracted: dict[Plan, list[str]], plain: list[str]
            ) -> list[tuple[list[Directive], list[str]]]:
    """Split one label set into events of at most MAX_METRICS_PER_EVENT extracted metrics.

    Returns (directives, every metric name in the event); plain (unextracted) values ride in
    the first event (the size cap splits them further when they are many)."""
    events: list[tuple[list[Directive], list[str]]] = []
    current: list[Directive] = []
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
