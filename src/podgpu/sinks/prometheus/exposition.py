"""Snapshot -> Prometheus text format 0.0.4 bytes, once per cycle.

dcgm-exporter-compatible families first (in metric-list order, HELP/TYPE from the list, values
formatted `%d`/`%f`), then podgpu's per-pod families, then podgpu's self-metrics. A family with no
sample this cycle is left out entirely; a value a device could not supply is never printed.

Decision record: docs/decisions/0003-own-exposition-renderer.md.
"""

from __future__ import annotations

from typing import NamedTuple

from podgpu.fields.metriclist import MetricList
from podgpu.fields.xid import error_labels
from podgpu.model import Allocation, Sample, Snapshot
from podgpu.sinks.prometheus import pods, selfmetrics, virtual
from podgpu.sinks.prometheus.labels import (
    LabelOptions,
    field_label_pairs,
    holders_by_device,
    identity_pairs,
    series_variants,
    with_jobs,
)
from podgpu.sinks.prometheus.source import render as render_families
from podgpu.sinks.prometheus.text import family_header, format_value, label_pairs

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
XID_FIELD = "DCGM_FI_DEV_XID_ERRORS"


class RenderOptions(NamedTuple):
    labels: LabelOptions
    build_info: tuple[tuple[str, str], ...] = ()
    timings: tuple[tuple[str, float], ...] = ()
    """Durations measured outside the snapshot (e.g. the previous render), by stage name."""


Pairs = tuple[tuple[str, str], ...]


def _variants(
    sample: Sample, label_fields: tuple[tuple[str, str], ...],
    holders: dict[str, list[Allocation]], opts: LabelOptions, jobs: tuple[str, ...] = (),
) -> list[tuple[Pairs, Pairs, Pairs, str]]:
    """(identity, sorted labels, attributes, rendered `{...}` body) for each series of a device:
    usually one, several with --kubernetes-virtual-gpus on a shared GPU."""
    ident = identity_pairs(sample.device, opts)
    fields = field_label_pairs(sample, label_fields)
    out = []
    for extra, attrs in with_jobs(series_variants(holders.get(sample.device.key, []), opts),
                                  jobs):
        middle = tuple(sorted(fields + extra))
        out.append((ident, middle, attrs, label_pairs(ident + middle + attrs)))
    return out


def _per_process(key: str, name: str, vtype: str, text: str, sample: Sample,
                 held: list[Allocation], usage: virtual.PodUsage,
                 label_fields: tuple[tuple[str, str], ...], opts: LabelOptions,
                 jobs: tuple[str, ...]) -> list[str]:
    """--kubernetes-virtual-gpus, GPU_UTIL/FB_USED: the device series and one per holder with
    its pod's processes' sum (dcgm-exporter 4.8.2)."""
    ident = identity_pairs(sample.device, opts)
    middle = tuple(sorted(field_label_pairs(sample, label_fields)))
    rows: list[tuple[Pairs, str]] = [((), text)]
    for a in virtual.holder_allocations(held):
        value = format_value(usage.value(key, sample.device.key, a.container), vtype)
        rows.append((usage.attributes(a, opts), value or "0"))
    return [f"{name}{{{label_pairs(ident + middle + attrs)}}} {value}\n"
            for row_attrs, value in rows for _, attrs in with_jobs([((), row_attrs)], jobs)]


def render(snapshot: Snapshot, metrics: MetricList, opts: RenderOptions) -> bytes:
    lopts = opts.labels
    # label rows: (value key, label name as the list spells it), sorted by label name
    label_fields = tuple(sorted(((r.name, r.out) for r in metrics.labels), key=lambda p: p[1]))
    holders = holders_by_device(snapshot.allocations)
    variants = [(s, _variants(s, label_fields, holders, lopts, snapshot.jobs_of(s.device)))
                for s in snapshot.samples]
    usage = virtual.PodUsage(snapshot) if lopts.virtual_gpus and snapshot.allocations else None
    parts: list[str] = []
    for row in metrics.metrics:
        key, name, vtype = row.name, row.out, row.field.value_type
        lines: list[str] = []
        split = usage is not None and key in virtual.PER_PROCESS
        for sample, series in variants:
            value = sample.values.get(key)
            text = None if value is None else format_value(value, vtype)
            held = holders.get(sample.device.key) if split else None
            if text is not None and held and usage is not None:
                lines.extend(_per_process(key, name, vtype, text, sample, held, usage,
                                          label_fields, lopts, snapshot.jobs_of(sample.device)))
            elif text is not None and key == XID_FIELD:
                # err_code/err_msg are attributes: after the labels, sorted with pod attributes
                errs = error_labels(value)
                lines.extend(
                    f"{name}{{{label_pairs(ident + middle + tuple(sorted(attrs + errs)))}}}"
                    f" {text}\n" for ident, middle, attrs, _ in series)
            elif text is not None:
                lines.extend(f"{name}{{{v[3]}}} {text}\n" for v in series)
            for lv in sample.labeled:
                if lv.field == key:
                    # exporter labels sort with the other labels, before pod attributes, as dcgm-exporter
                    text = format_value(lv.value, vtype)
                    if text is None:
                        continue
                    lines.extend(
                        f"{name}{{{label_pairs(ident + tuple(sorted(middle + lv.labels)) + attrs)}}}"
                        f" {text}\n"
                        for ident, middle, attrs, _ in series
                    )
        if lines:
            parts.append(family_header(name, row.help, row.prom_type))
            parts.extend(lines)
    parts.append(pods.render_pod_families(snapshot, lopts))
    parts.append(render_families(selfmetrics.self_families(snapshot, lopts, opts.build_info,
                                                           opts.timings,
                                                           unavailable=metrics.unavailable,
                                                           listed=metrics.spellings)))
    return "".join(parts).encode("utf-8")
