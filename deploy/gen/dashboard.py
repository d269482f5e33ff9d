"""podgpu's Grafana dashboard, built with Grafana's typed builder (grafana-foundation-sdk) so the
JSON follows Grafana's current dashboard schema.

Rows: the fleet, per pod, per GPU, podgpu itself. Every query filters on the variables
(`Hostname`, `namespace`, `pod`, `gpu`; `job` is hidden and finds podgpu's scrape jobs by
`podgpu_build_info`). Panels whose data a GPU may not have (profiling ratios without GPM, fields
left out of the metric list) say why instead of showing "No data".
"""

from __future__ import annotations

import json
from typing import Any

from deploy.gen import promql
from grafana_foundation_sdk.builders import common as cb
from grafana_foundation_sdk.builders import dashboard as db
from grafana_foundation_sdk.builders import prometheus, stat, table, timeseries
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common as cm
from grafana_foundation_sdk.models import dashboard as dm
from grafana_foundation_sdk.models import prometheus as pm

UID = "podgpu-pods"
TITLE = "podgpu: GPUs by pod"
DS = dm.DataSourceRef(type_val="prometheus", uid="${datasource}")

H = 'Hostname=~"$Hostname"'
G = 'gpu=~"$gpu"'
HG = f"{H}, {G}"
POD = f'{H}, {G}, namespace=~"$namespace", pod=~"$pod"'
JOB = 'job=~"$job"'

NO_PROF = ("No profiling data for these GPUs: DCGM_FI_PROF_* need NVML GPM (Hopper or newer) and "
           "a metric list that enables them. See 'Fields podgpu cannot read' below.")


def _q(expr: str, legend: str = "", ref: str = "A", *, instant: bool = False) -> prometheus.Dataquery:
    q = prometheus.Dataquery().expr(expr).ref_id(ref).datasource(DS)
    q = q.legend_format(legend) if legend else q.legend_format("__auto")
    return q.instant().format(pm.PromQueryFormat.TABLE) if instant else q.range()


def _ts(title: str, desc: str, unit: str, *queries: prometheus.Dataquery, w: int = 12,
        no_value: str = "", max_val: float | None = None) -> timeseries.Panel:
    p = (timeseries.Panel().title(title).description(desc).unit(unit).datasource(DS)
         .height(8).span(w).fill_opacity(10).line_width(1)
         .legend(cb.VizLegendOptions().display_mode(cm.LegendDisplayMode.TABLE)
                 .placement(cm.LegendPlacement.RIGHT).show_legend(True)
                 .calcs(["mean", "max", "lastNotNull"])))
    if no_value:
        p = p.no_value(no_value)
    if max_val is not None:
        p = p.min(0).max(max_val)
    for q in queries:
        p = p.with_target(q)
    return p


def _stat(title: str, desc: str, *queries: prometheus.Dataquery, unit: str = "none",
          color: str = "blue") -> stat.Panel:
    p = (stat.Panel().title(title).description(desc).unit(unit).datasource(DS).height(4).span(4)
         .graph_mode(cm.BigValueGraphMode.NONE).color_mode(cm.BigValueColorMode.VALUE)
         .reduce_options(cb.ReduceDataOptions().calcs(["lastNotNull"]).values(False))
         .color_scheme(db.FieldColor().mode(dm.FieldColorModeId.FIXED).fixed_color(color)))
    for q in queries:
        p = p.with_target(q)
    return p


def _var(name: str, query: str, label: str, *, hide: bool = False) -> db.QueryVariable:
    v = (db.QueryVariable(name).label(label).datasource(DS)
         .query({"query": query, "refId": f"{name}-var", "qryType": 1})
         .refresh(dm.VariableRefresh.ON_TIME_RANGE_CHANGED).sort(dm.VariableSort.NATURAL_ASC)
         .multi(True).include_all(True).all_value(".*")
         .current(dm.VariableOption(selected=True, text="All", value="$__all")))
    return v.hide(dm.VariableHide.HIDE_VARIABLE) if hide else v


def fleet_row() -> list[Any]:
    alloc = f"podgpu_gpu_allocation{{{HG}}}"
    return [
        _stat("GPUs", "Physical GPUs reporting (one per UUID; MIG instances are not counted again).",
              _q(f"count(count by (UUID) (DCGM_FI_DEV_GPU_TEMP{{{HG}}})) or vector(0)")),
        _stat("Allocated", "GPUs held by at least one container (kubelet PodResources; a "
              "time-sliced GPU counts once).",
              _q(f"count(count by (UUID) ({alloc})) or vector(0)"), color="green"),
        _stat("Allocated but idle", "Allocated GPUs whose utilization never went above 5 % in the "
              "selected time range: paid for, not used.",
              _q(f"count({promql.allocated_idle_gpus('$__range', HG)}) or vector(0)"),
              color="orange"),
        _stat("podgpu targets up", "Scrape targets of podgpu's jobs answering now, of all.",
              _q(f"sum(up{{{JOB}}})", "up"), _q(f"count(up{{{JOB}}})", "targets", "B"),
              color="green"),
        _stat("GPUs lost", "GPUs podgpu found but could not read in its last cycle (fell off the "
              "bus, driver error); they keep only their identity, XID (79) and health FAIL "
              "series, no readings. /health/gpus on the node says which.",
              _q(f"sum(podgpu_devices{{state=\"lost\", {JOB}}}) or vector(0)"), color="red"),
        _stat("Busy pods", "Pods using more than 5 % of a GPU now.",
              _q(f"count(count by (namespace, pod) (({promql.pod_gpu_utilization(POD)}) > 0.05))"
                 " or vector(0)")),
    ]


def pod_row() -> list[Any]:
    util = promql.pod_gpu_utilization(POD)
    return [
        _ts("GPU utilization per pod",
            "Average over the pod's GPUs. An unshared GPU counts as the device's utilization; on "
            "a time-sliced GPU each pod gets only its own processes' share (they add up to the "
            "device), never the whole GPU.", "percentunit",
            _q(f"avg by (namespace, pod) ({util})", "{{namespace}}/{{pod}}"), max_val=1),
        _ts("GPU memory used per pod",
            "Memory of the pod's GPU processes, summed over its GPUs (adds up on shared GPUs).",
            "bytes",
            _q(f"sum by (namespace, pod) ({promql.pod_gpu_memory(POD)})", "{{namespace}}/{{pod}}")),
        _ts("Tensor pipe active", "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE of the pod's GPUs (whole-GPU "
            "ratio: on a shared GPU every holder sees the same value).", "percentunit",
            _q(promql.pod_device_ratio("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", POD),
               "{{namespace}}/{{pod}}"), w=8, no_value=NO_PROF, max_val=1),
        _ts("DRAM active", "DCGM_FI_PROF_DRAM_ACTIVE of the pod's GPUs (whole-GPU ratio).",
            "percentunit", _q(promql.pod_device_ratio("DCGM_FI_PROF_DRAM_ACTIVE", POD),
                              "{{namespace}}/{{pod}}"), w=8, no_value=NO_PROF, max_val=1),
        _ts("Graphics engine active", "DCGM_FI_PROF_GR_ENGINE_ACTIVE of the pod's GPUs (whole-GPU "
            "ratio; per instance on MIG).", "percentunit",
            _q(promql.pod_device_ratio("DCGM_FI_PROF_GR_ENGINE_ACTIVE", POD),
               "{{namespace}}/{{pod}}"), w=8, no_value=NO_PROF, max_val=1),
    ]


def accounting_row() -> list[Any]:
    """Who held GPUs, how much of them they used, the energy, over the selected range
    (podgpu's per-pod counters; each series' increase is taken before summing)."""
    def per_ns(metric: str, fn: str = "increase", window: str = "$__range") -> str:
        return f"sum by (namespace) ({fn}({metric}{{{POD}}}[{window}]))"

    alloc, used = "podgpu_pod_gpu_allocated_seconds_total", "podgpu_pod_gpu_used_seconds_total"
    energy = "podgpu_pod_gpu_energy_joules_total"
    ns = "{{namespace}}"
    return [
        table.Panel().title("GPU-hours by namespace").description(
            "Over the selected range: GPU-hours held (a time-sliced replica counts its share, a "
            "MIG instance its slices of 7), GPU-hours used (utilisation-weighted), idle-allocated "
            "GPU-hours (held, not used) and the GPUs' energy in kWh. `podgpu report` prints the "
            "same per pod with costs.").datasource(DS).height(8).span(12)
        .no_value("No accounting counters: is podgpu's /metrics scraped?")
        .with_target(_q(per_ns(alloc) + " / 3600", ns, "A", instant=True))
        .with_target(_q(per_ns(used) + " / 3600", ns, "B", instant=True))
        .with_target(_q(f"clamp_min(({per_ns(alloc)} - {per_ns(used)}) / 3600, 0)", ns, "C",
                        instant=True))
        .with_target(_q(per_ns(energy) + " / 3.6e6", ns, "D", instant=True))
        # one row per namespace: the four instant queries joined on it, columns named
        .with_transformation(dm.DataTransformerConfig(id_val="merge", options={}))
        .with_transformation(dm.DataTransformerConfig(id_val="organize", options={
            "excludeByName": {"Time": True},
            "renameByName": {"Value #A": "GPU-hours held", "Value #B": "GPU-hours used",
                             "Value #C": "idle-allocated GPU-hours", "Value #D": "kWh"}})),
        _ts("GPUs held and used by namespace", "GPUs held (solid) and kept busy (the 'used' "
            "lines) per namespace: the gap is allocated but idle.", "none",
            _q(per_ns(alloc, "rate", "$__rate_interval"), ns + " held"),
            _q(per_ns(used, "rate", "$__rate_interval"), ns + " used", "B")),
        _ts("GPU power by namespace", "Watts of GPU energy per namespace: each GPU's energy "
            "counter split between its pods by use.", "watt",
            _q(per_ns(energy, "rate", "$__rate_interval"), ns), w=8),
        _stat("GPU efficiency", "GPU-hours used over GPU-hours held in the selected range, all "
              "selected namespaces.",
              _q(f"sum(increase({used}{{{POD}}}[$__range])) / "
                 f"sum(increase({alloc}{{{POD}}}[$__range]))"), unit="percentunit", color="green"),
        _stat("Energy", "kWh of the selected pods' GPUs in the selected range.",
              _q(f"sum(increase({energy}{{{POD}}}[$__range])) / 3.6e6"), unit="kwatth"),
    ]


def gpu_row() -> list[Any]:
    legend = "{{Hostname}} GPU {{gpu}}"

    def dev(field: str, scale: str = "") -> str:
        return f"max by (Hostname, gpu) ({field}{{{HG}}}){scale}"

    return [
        _ts("GPU utilization", "DCGM_FI_DEV_GPU_UTIL per GPU.", "percent",
            _q(dev("DCGM_FI_DEV_GPU_UTIL"), legend), max_val=100),
        _ts("Power", "DCGM_FI_DEV_POWER_USAGE.", "watt", _q(dev("DCGM_FI_DEV_POWER_USAGE"), legend)),
        _ts("Temperature", "GPU and memory (HBM) temperature.", "celsius",
            _q(dev("DCGM_FI_DEV_GPU_TEMP"), legend),
            _q(dev("DCGM_FI_DEV_MEMORY_TEMP"), legend + " memory", "B")),
        _ts("Clocks", "SM and memory clocks.", "hertz",
            _q(dev("DCGM_FI_DEV_SM_CLOCK", " * 1000000"), legend + " SM"),
            _q(dev("DCGM_FI_DEV_MEM_CLOCK", " * 1000000"), legend + " memory", "B")),
        _ts("Memory", "Framebuffer used and free.", "bytes",
            _q(dev("DCGM_FI_DEV_FB_USED", " * 1048576"), legend + " used"),
            _q(dev("DCGM_FI_DEV_FB_FREE", " * 1048576"), legend + " free", "B")),
        _ts("XID and row remapping", "Last XID per GPU (0 = none since podgpu started), and "
            "remapped rows / remap failure. A non-zero line is a GPU error to read in the "
            "XID catalog.", "none",
            _q(f"max by (Hostname, gpu, err_code, err_msg) (DCGM_FI_DEV_XID_ERRORS{{{HG}}})",
               legend + " XID {{err_code}} ({{err_msg}})"),
            _q(dev("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS"), legend + " uncorrectable rows", "B"),
            _q(dev("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS"), legend + " correctable rows", "C"),
            _q(dev("DCGM_FI_DEV_ROW_REMAP_FAILURE"), legend + " remap failure", "D")),
    ]


def self_row() -> list[Any]:
    hm = H
    return [
        _ts("Collect duration by stage", "Wall time of each stage of podgpu's last cycle.", "s",
            _q(f"max by (Hostname, stage) ({promql.with_hostname('podgpu_collect_duration_seconds', hm)})",
               "{{Hostname}} {{stage}}"), w=8),
        _ts("Collection errors by source", "Errors per second by source (nvml, kubelet, "
            "podwatch, cgroups, ...).", "ops",
            _q("sum by (Hostname, source) ("
               + promql.with_hostname("rate(podgpu_collect_errors_total[$__rate_interval])", hm)
               + ")", "{{Hostname}} {{source}}"), w=8),
        table.Panel().title("Fields podgpu cannot read").description(
            "Listed fields a GPU cannot supply, with why (podgpu_field_unavailable); their "
            "series are left out rather than faked.").datasource(DS).height(8).span(8)
        .no_value("Every listed field is available on every selected GPU.")
        .with_target(_q(f"podgpu_field_unavailable{{{HG}}}", instant=True)),
    ]


def build() -> dict[str, Any]:
    d = (db.Dashboard(TITLE).uid(UID).tags(["podgpu", "gpu", "kubernetes"]).editable()
         .description("Per-pod NVIDIA GPU use from podgpu, right on shared GPUs. Generated by "
                      "scripts/gen-dashboard; edit the generator, not this JSON.")
         .time("now-30m", "now").refresh("30s").timezone("browser")
         .tooltip(dm.DashboardCursorSync.CROSSHAIR)
         .with_variable(db.DatasourceVariable("datasource").label("Data source").type("prometheus"))
         .with_variable(_var("job", "label_values(podgpu_build_info, job)", "job", hide=True))
         .with_variable(_var("Hostname", "label_values(DCGM_FI_DEV_GPU_TEMP, Hostname)", "Node"))
         .with_variable(_var("namespace", 'label_values(podgpu_gpu_allocation{Hostname=~"$Hostname"}, '
                                          "namespace)", "Namespace"))
         .with_variable(_var("pod", 'label_values(podgpu_gpu_allocation{Hostname=~"$Hostname", '
                                    'namespace=~"$namespace"}, pod)', "Pod"))
         .with_variable(_var("gpu", 'label_values(DCGM_FI_DEV_GPU_TEMP{Hostname=~"$Hostname"}, gpu)',
                             "GPU")))
    for title, panels in (("Fleet", fleet_row()), ("Per pod", pod_row()),
                          ("Accounting", accounting_row()), ("Per GPU", gpu_row()),
                          ("podgpu", self_row())):
        d = d.with_row(db.Row(title))
        for p in panels:
            d = d.with_panel(p)
    doc: dict[str, Any] = json.loads(json.dumps(d.build(), cls=JSONEncoder))
    for i, panel in enumerate(doc["panels"], start=1):
        panel["id"] = i
    return doc


def render_json() -> str:
    return json.dumps(build(), indent=2, sort_keys=True) + "\n"


def render_configmap(dashboard_json: str) -> str:
    """The dashboard as a ConfigMap for Grafana's dashboard sidecar (kube-prometheus-stack's
    grafana.sidecar.dashboards looks for the `grafana_dashboard: "1"` label)."""
    body = "".join(f"    {line}\n" if line else "\n" for line in dashboard_json.splitlines())
    return ("# Generated by scripts/gen-dashboard from deploy/gen/dashboard.py; do not edit.\n"
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: podgpu-dashboard\n"
            "  labels:\n    grafana_dashboard: \"1\"\n    app.kubernetes.io/name: podgpu\n"
            "data:\n  podgpu-dashboard.json: |\n" + body)
