"""A CloudWatch dashboard body (the JSON `PutDashboard` takes) for per-pod GPU metrics.

Each graph is a metric-math SEARCH over the config's namespace and one of its dimension sets,
`SEARCH('{Namespace,dim,...} MetricName="X" ClusterName="c"', 'Average', 60)`: the schema in
braces matches exactly the metrics with those dimensions, so every pod that appears later is on
the graph without editing the dashboard (the seed post built one graph by hand in the console).
Legends name the pod (`${PROP('Dim.pod')}`), as the seed's Grafana legend `Pod {{pod}}` did.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from podgpu.cwassets.targets import MetricTarget, filters, per_pod, quote, targets
from podgpu.sinks.cloudwatch.declarations import EmfConfig


@dataclass(frozen=True, slots=True)
class Graph:
    title: str
    metrics: tuple[str, ...]
    """Candidates in order of preference; every one the config extracts is drawn."""
    stat: str = "Average"
    unit_note: str = ""


GRAPHS: tuple[Graph, ...] = (
    Graph("GPU utilization per pod (%)", ("DCGM_FI_DEV_GPU_UTIL",)),
    Graph("GPU utilization per pod on shared GPUs (ratio 0..1)",
          ("podgpu_pod_gpu_utilization_ratio",)),
    Graph("GPU memory used per pod", ("DCGM_FI_DEV_FB_USED", "podgpu_pod_gpu_memory_used_bytes"),
          unit_note="FB_USED in MiB; podgpu_pod_gpu_memory_used_bytes in bytes"),
    Graph("GPU power per pod (W)", ("DCGM_FI_DEV_POWER_USAGE",)),
    Graph("Graphics engine active per pod (ratio)", ("DCGM_FI_PROF_GR_ENGINE_ACTIVE",)),
    Graph("SM active per pod (ratio)", ("DCGM_FI_PROF_SM_ACTIVE",)),
    Graph("Tensor pipe active per pod (ratio)", ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",)),
    Graph("DRAM active per pod (ratio)", ("DCGM_FI_PROF_DRAM_ACTIVE",)),
    Graph("XID errors per pod (last XID)", ("DCGM_FI_DEV_XID_ERRORS",), stat="Maximum"),
    # podgpu's accounting counters arrive as per-minute deltas; Sum is the minute's
    Graph("GPU-seconds held and used per pod, per minute (60 = one whole GPU)",
          ("podgpu_pod_gpu_allocated_seconds_total", "podgpu_pod_gpu_used_seconds_total"),
          stat="Sum"),
    Graph("GPU energy per pod (J per minute)", ("podgpu_pod_gpu_energy_joules_total",),
          stat="Sum"),
)
WIDTH, HEIGHT = 12, 6


def search(t: MetricTarget, cluster: str, stat: str, period: int,
           constant: Mapping[str, str] | None = None) -> str:
    schema = ",".join(quote(x) for x in (t.namespace, *t.dimensions))
    where = "".join(f' {k}="{v}"' for k, v in filters(t, constant or {}, cluster).items())
    return f"SEARCH('{{{schema}}} MetricName=\"{t.metric}\"{where}', '{stat}', {period})"


def legend(t: MetricTarget, constant: Mapping[str, str] | None = None) -> str:
    parts = [f"${{PROP('Dim.{d}')}}" for d in per_pod(t, constant or {})]
    return "/".join(parts) or "${PROP('MetricName')}"


def dashboard(config: EmfConfig, *, region: str, cluster: str = "", period: int = 60,
              constant: Mapping[str, str] | None = None) -> tuple[dict[str, Any], list[str]]:
    """(body, what the config does not extract and so is not graphed). `constant`: the labels
    every series carries as configured (targets.py)."""
    widgets: list[dict[str, Any]] = []
    missing: list[str] = []
    n = 0
    for g in GRAPHS:
        found = [t for m in g.metrics for t in targets(config, m, constant=constant)]
        if not found:
            missing.append(" or ".join(g.metrics))
            continue
        lines = []
        for t in found:
            n += 1
            lines.append([{"expression": search(t, cluster, g.stat, period, constant),
                           "id": f"e{n}", "label": legend(t, constant), "period": period}])
        title = g.title + (f" ({g.unit_note})" if g.unit_note and len(found) > 1 else "")
        i = len(widgets)
        widgets.append({"type": "metric", "x": (i % 2) * WIDTH, "y": (i // 2) * HEIGHT,
                        "width": WIDTH, "height": HEIGHT,
                        "properties": {"title": title, "region": region, "view": "timeSeries",
                                       "stat": g.stat, "period": period, "metrics": lines,
                                       "yAxis": {"left": {"min": 0}}}})
    if missing:
        y = ((len(widgets) + 1) // 2) * HEIGHT
        text = ("Not graphed: this CloudWatch config extracts no per-pod "
                + "; ".join(f"`{m}`" for m in missing)
                + ". Add them to a declaration's metric_selectors (with a dimension set naming "
                "`pod`) to see them here.")
        widgets.append({"type": "text", "x": 0, "y": y, "width": 2 * WIDTH, "height": 2,
                        "properties": {"markdown": text}})
    return {"start": "-PT3H", "periodOverride": "inherit", "widgets": widgets}, missing
