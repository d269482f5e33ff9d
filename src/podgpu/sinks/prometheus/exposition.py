"""Snapshot -> Prometheus text format 0.0.4 bytes, once per cycle (STYLE rule 1).

dcgm-exporter-compatible families first (in metric-list order, HELP/TYPE from the list, values
formatted `%d`/`%f`), then podgpu's per-pod families, then podgpu's self-metrics. A family with no
sample this cycle is left out entirely; a value a device could not supply is never printed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from podgpu.fields.metriclist import MetricList
from podgpu.model import Sample, Snapshot
from podgpu.sinks.prometheus import pods, selfmetrics
from podgpu.sinks.prometheus.labels import (
    LabelOptions,
    field_label_pairs,
    holders_by_device,
    identity_pairs,
    series_variants,
)
from podgpu.sinks.prometheus.text import family_header, format_value, label_pairs

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


@dataclass(frozen=True, slots=True)
class RenderOptions:
    labels: LabelOptions
    build_info: tuple[tuple[str, str], ...] = ()
    timings: tuple[tuple[str, float], ...] = field(default=())
    """Durations measured outside the snapshot (e.g. the previous render), by stage name."""


def _prefixes(
    sample: Sample, label_fields: tuple[str, ...], snapshot_holders: dict[str, list], opts: LabelOptions
) -> list[str]:
    """The `{...}` contents of each series of one device (usually one; several with vGPUs)."""
    ident = identity_pairs(sample.device, opts)
    fields = field_label_pairs(sample, label_fields)
    out = []
    for extra, attrs in series_variants(snapshot_holders.get(sample.device.key, []), opts):
        middle = tuple(sorted(fields + extra))
        out.append(label_pairs(ident + middle + attrs))
    return out


def render(snapshot: Snapshot, metrics: MetricList, opts: RenderOptions) -> bytes:
    lopts = opts.labels
    label_fields = tuple(sorted(r.name for r in metrics.labels))
    holders = holders_by_device(snapshot.allocations)
    prefixes = [(s, _prefixes(s, label_fields, holders, lopts)) for s in snapshot.samples]
    parts: list[str] = []
    for row in metrics.metrics:
        name, vtype = row.name, row.field.value_type
        lines: list[str] = []
        for sample, pre in prefixes:
            value = sample.values.get(name)
            if value is not None:
                text = format_value(value, vtype)
                lines.extend(f"{name}{{{p}}} {text}\n" for p in pre)
            for lv in sample.labeled:
                if lv.field == name:
                    text = format_value(lv.value, vtype)
                    extra = label_pairs(lv.labels)
                    lines.extend(f"{name}{{{p},{extra}}} {text}\n" for p in pre)
        if lines:
            parts.append(family_header(name, row.help, row.prom_type))
            parts.extend(lines)
    parts.append(pods.render_pod_families(snapshot, lopts))
    parts.append(selfmetrics.render_self_metrics(snapshot, lopts, opts.build_info, opts.timings))
    return "".join(parts).encode("utf-8")
