"""The CloudWatch Container Insights GPU event contract, restated from the add-on's published
rules, with no podgpu code: a checker for the events podgpu writes with
--emf-container-insights.

Facts restated (the CloudWatch agent's translator and EMF exporter, aws/amazon-cloudwatch-agent
translator/translate/otel/exporter/awsemf/kubernetes.go and processor/metricstransformprocessor,
its gpuattributes processor's allow-lists, and the agent-test JSON schemas of
aws/amazon-cloudwatch-agent-test test/metric_value_benchmark/eks_resources/test_schemas):

- EMF v0: `CloudWatchMetrics` at the root (no `_aws`), `Version` "0", `Timestamp` a string of
  epoch milliseconds; namespace `ContainerInsights`.
- Per GPU and interval one `NodeGPU` event; when a pod holds it one `ContainerGPU` and one
  `PodGPU` event; each with the level's metrics `<level>_gpu_<x>`.
- Seven readings and units: utilization (Percent, 0..100), memory_utilization (Percent, DCGM's
  ratio x 100), memory_used and memory_total (Bytes, MiB x 1048576), temperature (None),
  power_draw (None), tensor_core_utilization (Percent, the raw 0..1 ratio: the add-on does not
  scale it).
- Dimension sets per level (exact; `[ClusterName, Namespace, Service]` only with a Service).
- `Service` (the first Service selecting the pod, a non-empty name) is a field of the container
  and pod events when a Service selects the pod, and absent otherwise; the dimension set
  `[ClusterName, Namespace, Service]` belongs to the pod level only: a PodGPU event has it
  exactly when it has `Service`, a ContainerGPU or NodeGPU event never. A pod's container and
  pod events of one interval name the same Service (or none).
- Required keys per Type (the test schemas plus the decorator's): container: ClusterName,
  ContainerName, FullPodName, GpuDevice, InstanceId, InstanceType, Namespace, NodeName, PodName,
  Timestamp, Type, Version, Sources, kubernetes, UUID; pod: the same without ContainerName;
  node: ClusterName, GpuDevice, InstanceId, InstanceType, NodeName, Timestamp, Type, Version,
  Sources, kubernetes, and no UUID. Only the allow-listed keys survive the agent's filter.
- `Sources` the JSON array the decorator tags the Type with; `kubernetes` a JSON object with
  only the sub-keys the decorator writes and the filter keeps (no `namespace`).
- High-frequency form of a value: {"Values": [...], "Counts": [...], "Max", "Min", "Count", "Sum"}.

Run as a script on a stream of events (`podgpu serve ... --emf-destination stdout | python
tests/ci_contract.py --shared nvidia1=infer-a,infer-b`): non-JSON lines and the declarations'
events are skipped; exit 1 with every violation listed, else a one-line summary.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from collections.abc import Iterable
from typing import Any, TypedDict

NAMESPACE = "ContainerInsights"
LEVEL_PREFIX = {"ContainerGPU": "container_gpu_", "PodGPU": "pod_gpu_", "NodeGPU": "node_gpu_"}
UNITS = {"utilization": "Percent", "memory_utilization": "Percent", "memory_used": "Bytes",
         "memory_total": "Bytes", "temperature": "None", "power_draw": "None",
         "tensor_core_utilization": "Percent"}
DIMS = {
    "ContainerGPU": [["ClusterName"], ["ClusterName", "ContainerName", "Namespace", "PodName"],
                     ["ClusterName", "ContainerName", "FullPodName", "Namespace", "PodName"],
                     ["ClusterName", "ContainerName", "FullPodName", "GpuDevice", "Namespace",
                      "PodName"]],
    "PodGPU": [["ClusterName"], ["ClusterName", "Namespace"],
               ["ClusterName", "Namespace", "Service"], ["ClusterName", "Namespace", "PodName"],
               ["ClusterName", "FullPodName", "Namespace", "PodName"],
               ["ClusterName", "FullPodName", "GpuDevice", "Namespace", "PodName"]],
    "NodeGPU": [["ClusterName"], ["ClusterName", "InstanceId", "NodeName"],
                ["ClusterName", "GpuDevice", "InstanceId", "InstanceType", "NodeName"]],
}
SERVICE_SET = ["ClusterName", "Namespace", "Service"]
COMMON = ["ClusterName", "InstanceId", "InstanceType", "NodeName", "GpuDevice", "Type", "Version",
          "Sources", "Timestamp", "kubernetes", "CloudWatchMetrics"]
REQUIRED = {
    "ContainerGPU": [*COMMON, "Namespace", "PodName", "FullPodName", "UUID", "ContainerName"],
    "PodGPU": [*COMMON, "Namespace", "PodName", "FullPodName", "UUID"],
    "NodeGPU": COMMON,
}
ALLOWED = {
    "ContainerGPU": {*REQUIRED["ContainerGPU"], "Service"},
    "PodGPU": {*REQUIRED["PodGPU"], "Service"},
    "NodeGPU": set(COMMON),
}
K8S_KEYS = {
    "ContainerGPU": {"host", "labels", "pod_id", "pod_name", "pod_owners", "container_name",
                     "containerd"},
    "PodGPU": {"host", "labels", "pod_id", "pod_name", "pod_owners"},
    "NodeGPU": {"host"},
}
"""The `kubernetes` keys a GPU event can carry: those the gpuattributes filter keeps
(plugins/processors/gpuattributes/internal/metricFilters/gpumetricfilters.go @ab55b8d) that the
decorator writes (receiver/awscontainerinsightreceiver/internal/stores/utils.go
AddKubernetesInfo, opentelemetry-collector-contrib fork @8e059f1): the filter keeps `namespace`,
the decorator writes `namespace_name`, so neither is ever in a GPU event."""
SOURCES = {
    "ContainerGPU": ["dcgm", "pod", "calculated"], "PodGPU": ["dcgm", "pod", "calculated"],
    "NodeGPU": ["dcgm", "pod", "calculated"], "Pod": ["cadvisor", "pod", "calculated"],
    "Node": ["cadvisor", "/proc", "pod", "calculated"],
}
"""`Sources` per Type (stores/utils.go tagMetricSourceLinux @8e059f1): the DCGM series are
tagged as ContainerGPU before the agent copies them to the pod and node levels, so the three GPU
levels carry the same list."""
CAPACITY_K8S_KEYS = {"Pod": {"host", "labels", "namespace_name", "pod_id", "pod_name",
                             "pod_owners", "service_name"},
                     "Node": {"host"}}
"""The `kubernetes` keys of `Type: Pod` / `Type: Node` events (AddKubernetesInfo; no filter)."""
DIST_KEYS = {"Values", "Counts", "Max", "Min", "Count", "Sum"}

class CapacitySpec(TypedDict):
    names: dict[str, str]
    """Metric name -> unit."""
    dims: list[list[str]]
    required: list[str]
    """Top-level keys every such event carries."""


# The GPU capacity metrics ride in the add-on's `Type: Pod` and `Type: Node` events, declared
# with the pod and node metrics' dimension sets (only those podgpu sends are listed).
CAPACITY: dict[str, CapacitySpec] = {
    "Pod": {"names": {"pod_gpu_request": "Count", "pod_gpu_limit": "Count",
                      "pod_gpu_usage_total": "Count", "pod_gpu_reserved_capacity": "Percent"},
            "dims": [["ClusterName", "Namespace", "PodName"], ["ClusterName"],
                     ["ClusterName", "FullPodName", "Namespace", "PodName"],
                     ["ClusterName", "Namespace", "Service"]],
            "required": ["ClusterName", "NodeName", "Namespace", "PodName", "FullPodName",
                         "Timestamp", "Type", "Version", "CloudWatchMetrics"]},
    "Node": {"names": {"node_gpu_limit": "Count", "node_gpu_usage_total": "Count",
                       "node_gpu_reserved_capacity": "Percent"},
             "dims": [["ClusterName", "InstanceId", "NodeName"], ["ClusterName"]],
             "required": ["ClusterName", "NodeName", "InstanceId", "Timestamp", "Type",
                          "Version", "CloudWatchMetrics"]},
}


def check_capacity(ev: dict[str, Any]) -> list[str]:
    """A `Type: Pod` / `Type: Node` event with GPU capacity metrics."""
    spec = CAPACITY[ev["Type"]]
    errs = [f"missing {k}" for k in spec["required"] if k not in ev]
    if ev.get("Sources") != SOURCES[ev["Type"]]:
        errs.append(f"Sources {ev.get('Sources')} != {SOURCES[ev['Type']]}")
    k8s = ev.get("kubernetes")
    if not isinstance(k8s, dict) or "host" not in k8s:
        errs.append("kubernetes is not a JSON object with host")
    elif set(k8s) - CAPACITY_K8S_KEYS[ev["Type"]]:
        errs.append(f"kubernetes keys the agent never writes: "
                    f"{sorted(set(k8s) - CAPACITY_K8S_KEYS[ev['Type']])}")
    elif ("service_name" in k8s) != ("Service" in ev):
        errs.append("kubernetes.service_name and Service disagree")
    if ev.get("Version") != "0" or not str(ev.get("Timestamp", "")).isdigit():
        errs.append("not EMF v0 (Version '0', Timestamp a string of milliseconds)")
    cwm = ev.get("CloudWatchMetrics") or [{}]
    d = cwm[0]
    want = [s for s in spec["dims"] if "Service" not in s or "Service" in ev]
    if len(cwm) != 1 or sorted(map(sorted, d.get("Dimensions") or [])) != sorted(
            map(sorted, want)):
        errs.append(f"Dimensions {d.get('Dimensions')} != {want}")
    for m in d.get("Metrics") or []:
        if spec["names"].get(m.get("Name")) != m.get("Unit"):
            errs.append(f"metric {m}: not one of {spec['names']}")
        elif not isinstance(ev.get(m["Name"]), (int, float, dict)):
            errs.append(f"{m['Name']}: no value")
    return [f"{ev['Type']} {ev.get('FullPodName', '')}: {e}" for e in errs]


def samples(value: Any) -> tuple[float, float, float]:
    """(min, max, mean) of a plain number or a high-frequency distribution."""
    if isinstance(value, dict):
        return value["Min"], value["Max"], value["Sum"] / value["Count"]
    return value, value, value


def check_value(name: str, value: Any) -> list[str]:
    out = []
    if isinstance(value, dict):
        if set(value) != DIST_KEYS:
            return [f"{name}: distribution keys {sorted(value)}"]
        vals, counts = value["Values"], value["Counts"]
        if len(vals) != len(counts) or not vals or sum(counts) != value["Count"]:
            out.append(f"{name}: Values/Counts/Count disagree")
        if not value["Min"] <= min(vals) <= max(vals) <= value["Max"]:
            out.append(f"{name}: Min/Max do not bound Values")
    elif isinstance(value, bool) or not isinstance(value, (int, float)):
        return [f"{name}: not a number or distribution: {value!r}"]
    lo, hi, _ = samples(value)
    suffix = name.split("_gpu_", 1)[1]
    if suffix in ("utilization", "memory_utilization") and not 0 <= lo <= hi <= 100:
        out.append(f"{name}: {lo}..{hi} outside 0..100 percent")
    if suffix == "tensor_core_utilization" and not 0 <= lo <= hi <= 1:
        out.append(f"{name}: {lo}..{hi}: the add-on sends DCGM's 0..1 ratio unscaled")
    if suffix in ("memory_used", "memory_total"):
        vals = value["Values"] if isinstance(value, dict) else [value]
        if any(v < 0 for v in vals):
            out.append(f"{name}: negative bytes")
    return out


def check_event(ev: dict[str, Any]) -> list[str]:
    """Every rule one event must follow; [] when it does."""
    t = ev.get("Type")
    if t in CAPACITY:
        return check_capacity(ev)
    if t not in LEVEL_PREFIX:
        return [f"Type {t!r} is not ContainerGPU, PodGPU, NodeGPU, Pod or Node"]
    where = f"{t} {ev.get('GpuDevice')} {ev.get('FullPodName', '')}/{ev.get('ContainerName', '')}"
    errs = []
    if "_aws" in ev:
        errs.append("has _aws: the add-on writes EMF v0")
    if ev.get("Version") != "0":
        errs.append(f"Version {ev.get('Version')!r}, not '0'")
    ts = ev.get("Timestamp")
    if not (isinstance(ts, str) and ts.isdigit() and len(ts) >= 13):
        errs.append(f"Timestamp {ts!r} is not epoch milliseconds as a string")
    for k in REQUIRED[t]:
        if k not in ev:
            errs.append(f"missing {k}")
    prefix = LEVEL_PREFIX[t]
    metric_keys = {k for k in ev if k.startswith(prefix)}
    extra = set(ev) - ALLOWED[t] - metric_keys
    if extra:
        errs.append(f"keys the agent's filter removes: {sorted(extra)}")
    for k in ALLOWED[t] - {"Sources", "kubernetes", "CloudWatchMetrics"}:
        if k in ev and not isinstance(ev[k], str):
            errs.append(f"{k} is not a string")
    if ev.get("Sources") != SOURCES[t]:
        errs.append(f"Sources {ev.get('Sources')} != {SOURCES[t]}")
    k8s = ev.get("kubernetes")
    if not isinstance(k8s, dict) or "host" not in k8s:
        errs.append("kubernetes is not a JSON object with host")
    elif set(k8s) - K8S_KEYS[t]:
        errs.append(f"kubernetes keys the agent never writes: {sorted(set(k8s) - K8S_KEYS[t])}")
    cwm = ev.get("CloudWatchMetrics")
    if not (isinstance(cwm, list) and len(cwm) == 1 and isinstance(cwm[0], dict)):
        return [f"{where}: {e}" for e in [*errs, "CloudWatchMetrics is not one directive"]]
    d = cwm[0]
    if d.get("Namespace") != NAMESPACE:
        errs.append(f"Namespace {d.get('Namespace')!r}")
    want = [s for s in DIMS[t] if "Service" not in s or "Service" in ev]
    got = d.get("Dimensions") or []
    if sorted(map(sorted, got)) != sorted(map(sorted, want)):
        errs.append(f"Dimensions {got} != {want}")
    for s in got:
        for k in s:
            if not isinstance(ev.get(k), str):
                errs.append(f"dimension {k} has no string value")
    service_set = any(sorted(s) == SERVICE_SET for s in got)
    if t == "PodGPU" and "Service" in ev and not service_set:
        errs.append("has Service but not the pod-level [ClusterName, Namespace, Service] set")
    if service_set and "Service" not in ev:
        errs.append("the [ClusterName, Namespace, Service] set without a Service field")
    if service_set and t != "PodGPU":
        errs.append("the [ClusterName, Namespace, Service] set belongs to the pod level only")
    if "Service" in ev and not (isinstance(ev["Service"], str) and ev["Service"]):
        errs.append(f"Service {ev['Service']!r} is not a name")
    declared = {}
    for m in d.get("Metrics") or []:
        name, unit = m.get("Name", ""), m.get("Unit")
        suffix = name[len(prefix):] if name.startswith(prefix) else ""
        if suffix not in UNITS:
            errs.append(f"metric {name!r} is not one of the level's seven")
            continue
        if unit != UNITS[suffix]:
            errs.append(f"{name}: unit {unit!r}, the add-on's is {UNITS[suffix]!r}")
        declared[name] = m
    if set(declared) != metric_keys:
        errs.append(f"declared {sorted(declared)} != values {sorted(metric_keys)}")
    if not declared:
        errs.append("no metric")
    for name in metric_keys:
        errs += check_value(name, ev[name])
    return [f"{where}: {e}" for e in errs]


def check_stream(events: Iterable[dict[str, Any]]) -> tuple[list[str], dict[str, Any]]:
    """Per-event rules plus the per-interval shape: one NodeGPU per GpuDevice and Timestamp;
    container/pod events only beside their GPU's node event, one pod event per pod and GPU."""
    errs: list[str] = []
    node: dict[tuple[str, str], int] = defaultdict(int)
    held: dict[tuple[str, str], set[str]] = defaultdict(set)
    pods: dict[tuple[str, str, str], int] = defaultdict(int)
    containers: dict[tuple[str, str, str], set[str]] = defaultdict(set)
    services: dict[tuple[str, str, str], set[str]] = defaultdict(set)
    count: dict[str, int] = defaultdict(int)
    for ev in events:
        errs += check_event(ev)
        t = ev.get("Type", "")
        count[t] += 1
        if t in CAPACITY:
            continue
        if t in ("ContainerGPU", "PodGPU"):
            services[(ev.get("Timestamp", ""), ev.get("Namespace", ""),
                      ev.get("FullPodName", ""))].add(ev.get("Service", ""))
        k = (ev.get("Timestamp", ""), ev.get("GpuDevice", ""))
        if t == "NodeGPU":
            node[k] += 1
        elif t == "PodGPU":
            pods[(*k, ev.get("FullPodName", ""))] += 1
            held[k].add(ev.get("FullPodName", ""))
        elif t == "ContainerGPU":
            containers[(*k, ev.get("FullPodName", ""))].add(ev.get("ContainerName", ""))
            held[k].add(ev.get("FullPodName", ""))
    for k, n in node.items():
        if n != 1:
            errs.append(f"{k}: {n} NodeGPU events (one per GPU and interval)")
    for k in held:
        if k not in node:
            errs.append(f"{k}: pod events without the GPU's NodeGPU event")
    for k3, names in services.items():
        if len(names) > 1:
            errs.append(f"{k3}: the pod's events name different Services {sorted(names)}")
    for (ts, dev, pod), n in pods.items():
        if n != 1:
            errs.append(f"{(ts, dev, pod)}: {n} PodGPU events")
        if (ts, dev, pod) not in containers:
            errs.append(f"{(ts, dev, pod)}: a PodGPU event without ContainerGPU")
    return errs, {"events": dict(count), "gpus": len({d for _, d in node}),
                  "intervals": len({ts for ts, _ in node}), "holders": held}


def read_events(lines: Iterable[str]) -> list[dict[str, Any]]:
    out = []
    for line in lines:
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            ev = json.loads(line)
        except ValueError:
            continue
        if isinstance(ev, dict) and "CloudWatchMetrics" in ev and "_aws" not in ev:
            out.append(ev)
    return out


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shared", action="append", default=[], metavar="GPU=POD,POD",
                    help="a GPU every listed pod must have its own container and pod events on, "
                         "with values of its own")
    args = ap.parse_args(argv)
    events = read_events(sys.stdin)
    errs, summary = check_stream(events)
    if not events:
        errs.append("no Container Insights event read")
    for spec in args.shared:
        dev, _, names = spec.partition("=")
        want = names.split(",")
        per_pod: dict[str, list[float]] = defaultdict(list)
        for ev in events:
            if ev.get("Type") == "ContainerGPU" and ev.get("GpuDevice") == dev:
                util = ev.get("container_gpu_utilization")
                if util is not None:
                    per_pod[ev["FullPodName"]].append(samples(util)[2])
        for pod in want:
            if pod not in per_pod:
                errs.append(f"{dev}: no ContainerGPU utilization for {pod}")
        means = {p: round(sum(v) / len(v), 3) for p, v in per_pod.items()}
        if len(set(means.values())) < len(want):
            errs.append(f"{dev}: the sharing pods do not have values of their own: {means}")
        print(f"{dev}: mean container_gpu_utilization per pod {means}")
    for e in errs[:50]:
        print("VIOLATION", e)
    print(f"{len(events)} events, {summary['intervals']} interval(s), {summary['gpus']} GPU(s), "
          f"by Type {summary['events']}: {len(errs)} violation(s)")
    return 1 if errs else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
