"""Container Insights series -> the add-on's EMF v0 events; one encoder for both profiles.

The add-on's exporter writes EMF **v0**: no `_aws` object, `CloudWatchMetrics` at the root, a
string `Timestamp` (epoch milliseconds), `Version: "0"`, every key in Go's sorted order and the
metric values after the labels; `Sources` and `kubernetes` are JSON, not strings. One event per
label set and interval; a metric with several samples in the interval is the add-on's
high-frequency form `{"Values", "Counts", "Max", "Min", "Count", "Sum"}` (encode.distribution),
a single sample a plain number. The GPU capacity metrics (`Type: Pod`/`Node`), which the add-on
never sends as distributions, are the interval's last value.

`CombinedEncoder` serves one sink and one queue for the declarations (`--cloudwatch-config`) and
Container Insights together: each label set goes to its encoder; the destination routes an
event to the Container Insights log group when it starts as a v0 event does
(`is_insights_event`), which the declarations' events (`{"_aws"` or `{"Timestamp"`) never do.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

from podgpu.model import Snapshot
from podgpu.sinks.cloudwatch.destinations import V0_PREFIX
from podgpu.sinks.cloudwatch.encode import Encoder, distribution
from podgpu.sinks.cloudwatch.insights import InsightsBuilder
from podgpu.sinks.cloudwatch.insights_contract import (
    CAPACITY_UNITS,
    DIMENSIONS,
    MARK,
    NAMESPACE,
    RAW_JSON,
    is_insights,
    unit_of,
)
from podgpu.sinks.cloudwatch.series import Item, LabelKey, SeriesBuilder
from podgpu.sinks.cloudwatch.window import ClosedWindow, SlotSampler

_DUMPS = json.JSONEncoder(separators=(",", ":"), allow_nan=False).encode


class InsightsEncoder:
    """Closed windows' Container Insights label sets -> v0 events."""

    def __init__(self, *, storage_resolution: int = 60) -> None:
        self._resolution = storage_resolution
        self._heads: dict[tuple[LabelKey, tuple[str, ...]], tuple[str, str]] = {}
        self.too_large = 0

    def _head(self, key: LabelKey, names: tuple[str, ...]) -> tuple[str, str]:
        memo = (key, names)
        head = self._heads.get(memo)
        if head is None:
            if len(self._heads) > 50_000:
                self._heads.clear()
            labels = {k: v for k, v in key if k != MARK}
            level = dict(key)[MARK]
            sets = [list(s) for s in DIMENSIONS[level] if all(d in labels for d in s)]
            metrics = []
            for n in names:
                m: dict[str, object] = {"Name": n, "Unit": unit_of(n)}
                if self._resolution == 1:
                    m["StorageResolution"] = 1
                metrics.append(m)
            cwm = _DUMPS([{"Namespace": NAMESPACE, "Dimensions": sets, "Metrics": metrics}])
            before = [f'{V0_PREFIX}{cwm}']
            after: list[str] = []
            part = before
            for k in sorted([*labels, "Timestamp"]):
                if k == "Timestamp":
                    before.append('"Timestamp":"')
                    part = after
                    continue
                v = labels[k]
                part.append(f"{_DUMPS(k)}:{v if k in RAW_JSON else _DUMPS(v)}")
            head = self._heads[memo] = (",".join(before), '"' + "".join(
                "," + p for p in after))
        return head

    def encode(self, window: ClosedWindow) -> list[str]:
        ts = str(window.timestamp_ms)
        out = []
        for key in sorted(k for k in window.groups if is_insights(k)):
            metrics = window.groups[key]
            names = tuple(sorted(metrics))
            if not names:
                continue
            before, after = self._head(key, names)
            values = _DUMPS({n: metrics[n][-1] if n in CAPACITY_UNITS else distribution(
                metrics[n]) for n in names})
            out.append(f"{before}{ts}{after},{values[1:]}")
        return out


class CombinedEncoder:
    """The declarations' Encoder (or none) and the Container Insights encoder behind one
    interface: label sets marked as Container Insights go to the second."""

    def __init__(self, declarations: Encoder | None, insights: InsightsEncoder) -> None:
        self._decl = declarations
        self._insights = insights

    def with_declarations(self, declarations: Encoder) -> CombinedEncoder:
        return CombinedEncoder(declarations, self._insights)

    @property
    def too_large(self) -> int:
        return (self._decl.too_large if self._decl is not None else 0) + self._insights.too_large

    def wanted(self, key: LabelKey, metric: str) -> bool:
        if is_insights(key):
            return True
        return self._decl is not None and self._decl.wanted(key, metric)

    def encode(self, window: ClosedWindow) -> list[str]:
        out: list[str] = []
        if self._decl is not None:
            rest = {k: v for k, v in window.groups.items() if not is_insights(k)}
            if rest:
                out = self._decl.encode(ClosedWindow(window.start, rest))
        return out + self._insights.encode(window)


class CombinedSeries:
    """serve's SeriesBuilder (or none) and the InsightsBuilder as one series source.

    `sample_every` (seconds): the Container Insights series go into the window once per
    `sample_every`-second slot of the clock (the first cycle in it), as the add-on's agent
    scrapes once per collection interval: at the EMF interval, one value per event (the
    add-on's default), 0 every cycle (its high-frequency mode). The declarations' series are
    sampled by the sink's window (the same --emf-sample-interval when given)."""

    def __init__(self, declarations: SeriesBuilder | None, insights: InsightsBuilder,
                 sample_every: float = 0.0) -> None:
        self._decl = declarations
        self._insights = insights
        self._sampler = SlotSampler(sample_every)

    def with_declarations(self, declarations: SeriesBuilder | None) -> CombinedSeries:
        return CombinedSeries(declarations, self._insights, self._sampler.every)

    def insights_health(self) -> dict[str, object]:
        """The Container Insights inputs' state, for /health (EmfSink.health)."""
        return self._insights.health()

    def series(self, snapshot: Snapshot) -> Iterator[tuple[LabelKey, str, list[Item]]]:
        if self._decl is not None:
            yield from self._decl.series(snapshot)
        if self._sampler.take(snapshot.taken_at):
            yield from self._insights.series(snapshot)

    @property
    def own_series(self) -> bool:
        """Whether the declarations are offered podgpu's own series (--emf-podgpu-series)."""
        return self._decl is not None and self._decl.own_series

    def key(self, pairs: tuple[tuple[str, str], ...], kind: str) -> LabelKey:
        """Accounting's counters: the declarations' labels; without declarations a key no
        encoder wants."""
        if self._decl is not None:
            return self._decl.key(pairs, kind)
        return tuple(sorted(pairs))
