"""podgpu's own metrics: what it is, how each stage of the last cycle went, what is missing.

Names follow Prometheus conventions (base units, `_total` on counters, `_info` for info) and pass
`promtool check metrics` lint, unlike the DCGM-compatible families whose names are a contract.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from podgpu.fields.metriclist import UnavailableRow
from podgpu.model import Snapshot
from podgpu.sinks.prometheus.labels import LabelOptions, short_identity_pairs
from podgpu.sinks.prometheus.text import family_header, format_seconds, label_pairs


def render_self_metrics(
    snapshot: Snapshot,
    opts: LabelOptions,
    build_info: tuple[tuple[str, str], ...],
    timings: tuple[tuple[str, float], ...],
    *,
    unavailable: Sequence[UnavailableRow] = (),
    listed: Mapping[str, tuple[str, ...]] | None = None,
) -> str:
    """`listed`: catalog field -> the names the metric list gives it (issue 9); None reports
    every missing field under its catalog name."""
    out: list[str] = []
    out.append(family_header("podgpu_build_info",
                             "podgpu version, GPU backend and driver; always 1.", "gauge"))
    out.append(f"podgpu_build_info{{{label_pairs(build_info)}}} 1\n")

    out.append(family_header(
        "podgpu_collect_duration_seconds",
        "Wall time of each stage of the last collection cycle (render: the previous cycle's); "
        "total is their sum.",
        "gauge"))
    total = 0.0
    for st in snapshot.stages:
        total += st.duration_seconds
        out.append(f'podgpu_collect_duration_seconds{{stage="{st.name}"}} '
                   f"{format_seconds(st.duration_seconds)}\n")
    for name, seconds in timings:
        total += seconds
        out.append(f'podgpu_collect_duration_seconds{{stage="{name}"}} {format_seconds(seconds)}\n')
    out.append(f'podgpu_collect_duration_seconds{{stage="total"}} {format_seconds(total)}\n')

    out.append(family_header("podgpu_collect_success",
                             "1 if the stage succeeded in the last cycle, else 0.", "gauge"))
    for st in snapshot.stages:
        out.append(f'podgpu_collect_success{{stage="{st.name}"}} {int(st.ok)}\n')

    out.append(family_header("podgpu_collect_errors_total",
                             "Collection errors since start, by source.", "counter"))
    for source, n in snapshot.errors_total:
        out.append(f'podgpu_collect_errors_total{{source="{source}"}} {n}\n')

    out.append(family_header("podgpu_collect_cycles_total",
                             "Collection cycles completed since start.", "counter"))
    out.append(f"podgpu_collect_cycles_total {snapshot.cycle}\n")

    out.append(family_header("podgpu_last_collect_timestamp_seconds",
                             "Unix time at which the last collection cycle ended.", "gauge"))
    out.append(f"podgpu_last_collect_timestamp_seconds {format_seconds(snapshot.taken_at)}\n")

    out.append(family_header("podgpu_devices", "Devices by state in the last cycle.", "gauge"))
    ok = sum(1 for s in snapshot.samples if s.lost is None)  # a lost GPU keeps a sample
    out.append(f'podgpu_devices{{state="ok"}} {ok}\n')
    out.append(f'podgpu_devices{{state="lost"}} {len(snapshot.lost_devices)}\n')

    # listed rows no device of this node can export (issue 9): node-wide, without device labels
    missing_lines = [
        f"podgpu_field_unavailable{{{label_pairs((('field', u.name), ('reason', u.reason)))}}} 1\n"
        for u in unavailable
    ]
    for s in snapshot.samples:
        ident = short_identity_pairs(s.device, opts)
        for name, reason in sorted(s.missing.items()):
            # under the list's spelling(s); a field read only to derive another is not listed
            for shown in (listed.get(name, ()) if listed is not None else (name,)):
                pairs = (*ident, ("field", shown), ("reason", reason))
                missing_lines.append(f"podgpu_field_unavailable{{{label_pairs(pairs)}}} 1\n")
    if missing_lines:
        out.append(family_header(
            "podgpu_field_unavailable",
            "1 for each listed field a device could not supply this cycle, with the reason.",
            "gauge"))
        out.extend(missing_lines)
    return "".join(out)
