"""podgpu's own metrics: what it is, how each stage of the last cycle went, what is missing.

Names follow Prometheus conventions (base units, `_total` on counters, `_info` for info) and pass
`promtool check metrics` lint, unlike the DCGM-compatible families whose names are a contract.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from podgpu.fields.metriclist import UnavailableRow
from podgpu.model import Snapshot
from podgpu.sinks.prometheus.labels import LabelOptions, short_identity_pairs
from podgpu.sinks.prometheus.source import Family, Sample, counter, gauge


def self_families(
    snapshot: Snapshot,
    opts: LabelOptions,
    build_info: tuple[tuple[str, str], ...],
    timings: tuple[tuple[str, float], ...],
    *,
    unavailable: Sequence[UnavailableRow] = (),
    listed: Mapping[str, tuple[str, ...]] | None = None,
) -> list[Family]:
    """The collect loop's families for one snapshot (a MetricSource's answer, built per cycle)."""
    stages = [(st.name, st.duration_seconds) for st in snapshot.stages] + list(timings)
    durations = [Sample((("stage", name),), float(sec)) for name, sec in stages]
    durations.append(Sample((("stage", "total"),), float(sum(sec for _, sec in stages))))
    ok = sum(1 for s in snapshot.samples if s.lost is None)  # a lost GPU keeps a sample
    out = [
        gauge("podgpu_build_info", "podgpu version, GPU backend and driver; always 1.", 1,
              build_info),
        Family("podgpu_collect_duration_seconds",
               "Wall time of each stage of the last collection cycle (render: the previous "
               "cycle's); total is their sum.", "gauge", tuple(durations)),
        Family("podgpu_collect_success", "1 if the stage succeeded in the last cycle, else 0.",
               "gauge", tuple(Sample((("stage", st.name),), int(st.ok))
                              for st in snapshot.stages)),
        counter("podgpu_collect_errors_total", "Collection errors since start, by source.",
                "source", snapshot.errors_total),
        Family("podgpu_collect_cycles_total", "Collection cycles completed since start.",
               "counter", (Sample((), snapshot.cycle),)),
        gauge("podgpu_last_collect_timestamp_seconds",
              "Unix time at which the last collection cycle ended.", float(snapshot.taken_at)),
        Family("podgpu_devices", "Devices by state in the last cycle.", "gauge",
               (Sample((("state", "ok"),), ok),
                Sample((("state", "lost"),), len(snapshot.lost_devices)))),
    ]
    # listed rows no device of this node can export: node-wide, without device labels
    missing = [Sample((("field", u.name), ("reason", u.reason)), 1) for u in unavailable]
    for s in snapshot.samples:
        ident = short_identity_pairs(s.device, opts)
        for name, reason in sorted(s.missing.items()):
            # under the list's spelling(s); a field read only to derive another is not listed
            for shown in (listed.get(name, ()) if listed is not None else (name,)):
                missing.append(Sample((*ident, ("field", shown), ("reason", reason)), 1))
    out.append(Family("podgpu_field_unavailable",
                      "1 for each listed field a device could not supply this cycle, with the "
                      "reason.", "gauge", tuple(missing)))
    return out
