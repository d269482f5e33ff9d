"""The Container Insights GPU events' contract, as the CloudWatch Observability add-on's agent
writes them (docs/cloudwatch.md, "Container Insights GPU views"): the levels, the seven readings
with their units and scaling, the capacity metrics, the dimension sets per level, and the
fields the events read. insights.py builds the series, insights_encode.py the events.
"""

from __future__ import annotations

import json
from typing import Protocol

from podgpu.fields.catalog import lookup
from podgpu.fields.field import Field
from podgpu.model import Device, Sample
from podgpu.sinks.cloudwatch.series import LabelKey

NAMESPACE = "ContainerInsights"
VERSION = "0"
MIB = 1024 * 1024
CONTAINER, POD, NODE = "ContainerGPU", "PodGPU", "NodeGPU"
LEVELS = {CONTAINER: "container", POD: "pod", NODE: "node"}
POD_CAPACITY, NODE_CAPACITY = "Pod", "Node"
"""The add-on's pod and node events, here with only their GPU capacity metrics."""
MARK = ""
"""The name of the first pair of every Container Insights label set."""
RAW_JSON = frozenset(("Sources", "kubernetes"))
SOURCES = json.dumps(["dcgm", "pod", "calculated"], separators=(",", ":"))
"""`Sources` of the three GPU levels: the agent tags the DCGM series as ContainerGPU before it
copies them to the pod and node levels (stores/utils.go tagMetricSourceLinux)."""
CAPACITY_SOURCES = {
    "Pod": json.dumps(["cadvisor", "pod", "calculated"], separators=(",", ":")),
    "Node": json.dumps(["cadvisor", "/proc", "pod", "calculated"], separators=(",", ":")),
}
"""`Sources` of the agent's `Type: Pod` and `Type: Node` events, which carry the capacity
metrics."""

UNITS: dict[str, str] = {
    "utilization": "Percent",
    "memory_utilization": "Percent",
    "memory_used": "Bytes",
    "memory_total": "Bytes",
    "temperature": "None",
    "power_draw": "None",
    "tensor_core_utilization": "Percent",
}
"""The add-on's seven readings (suffix -> CloudWatch unit)."""

CAPACITY_UNITS: dict[str, str] = {
    "pod_gpu_request": "Count", "pod_gpu_limit": "Count", "pod_gpu_usage_total": "Count",
    "pod_gpu_reserved_capacity": "Percent", "node_gpu_limit": "Count",
    "node_gpu_usage_total": "Count", "node_gpu_reserved_capacity": "Percent",
}
"""The GPU capacity metrics of the `Type: Pod` and `Type: Node` events (docs/cloudwatch.md).
`node_gpu_unreserved_capacity` and `node_gpu_available_capacity` are declared by the agent but
their formula is not published where podgpu could check it: left out."""


def unit_of(name: str) -> str:
    """The CloudWatch unit of a Container Insights metric name."""
    return CAPACITY_UNITS.get(name) or UNITS[name.split("_gpu_", 1)[1]]

DIMENSIONS: dict[str, tuple[tuple[str, ...], ...]] = {
    CONTAINER: (("ClusterName",),
                ("ClusterName", "ContainerName", "Namespace", "PodName"),
                ("ClusterName", "ContainerName", "FullPodName", "Namespace", "PodName"),
                ("ClusterName", "ContainerName", "FullPodName", "GpuDevice", "Namespace",
                 "PodName")),
    POD: (("ClusterName",),
          ("ClusterName", "Namespace"),
          ("ClusterName", "Namespace", "Service"),
          ("ClusterName", "Namespace", "PodName"),
          ("ClusterName", "FullPodName", "Namespace", "PodName"),
          ("ClusterName", "FullPodName", "GpuDevice", "Namespace", "PodName")),
    NODE: (("ClusterName",),
           ("ClusterName", "InstanceId", "NodeName"),
           ("ClusterName", "GpuDevice", "InstanceId", "InstanceType", "NodeName")),
    POD_CAPACITY: (("ClusterName", "Namespace", "PodName"),
                   ("ClusterName",),
                   ("ClusterName", "FullPodName", "Namespace", "PodName"),
                   ("ClusterName", "Namespace", "Service")),
    NODE_CAPACITY: (("ClusterName", "InstanceId", "NodeName"),
                    ("ClusterName",)),
}
"""Per level, the add-on's dimension sets (names sorted within a set, sets in its order). A set
naming a key the event lacks (`Service` without a Service) is left out, as the add-on does."""

FIELDS = ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE",
          "DCGM_FI_DEV_FB_TOTAL", "DCGM_FI_DEV_FB_RESERVED", "DCGM_FI_DEV_GPU_TEMP",
          "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
          "DCGM_FI_PROF_GR_ENGINE_ACTIVE")
"""What the events read: collected with the profile on even when the metric list leaves them
out (they are then not exported on /metrics)."""


def gpu_device(device: Device) -> str:
    """`GpuDevice`: the GPU's device name (`nvidia2`), for a MIG instance too, as the add-on
    names it (dcgm-exporter's MIG series carry their GPU's `device`; the agent maps `device` to
    `GpuDevice`)."""
    return device.device_name


def device_readings(sample: Sample) -> dict[str, float]:
    """The seven readings of one GPU or MIG instance, in the add-on's units and scaling:
    utilisation in percent as DCGM gives it; memory in bytes (MiB x 2^20); memory utilisation
    used / (total - reserved) x 100, DCGM's FB_USED_PERCENT x 100; temperature (C) and power (W)
    as they are; tensor-core activity as DCGM's 0..1 ratio, unscaled, as the add-on sends it.
    A reading the device cannot give is absent."""
    v = sample.values
    out: dict[str, float] = {}

    def num(name: str) -> float | None:
        x = v.get(name)
        return None if x is None or isinstance(x, str) else x

    util = num("DCGM_FI_DEV_GPU_UTIL")
    if util is None and sample.device.is_mig:  # no GPU_UTIL per MIG instance: its GR engine
        gr = num("DCGM_FI_PROF_GR_ENGINE_ACTIVE")
        util = None if gr is None else round(gr * 100.0, 3)
    if util is not None:
        out["utilization"] = util
    used, free = num("DCGM_FI_DEV_FB_USED"), num("DCGM_FI_DEV_FB_FREE")
    reserved, total = num("DCGM_FI_DEV_FB_RESERVED"), num("DCGM_FI_DEV_FB_TOTAL")
    if total is None and used is not None and free is not None:
        total = used + free + (reserved or 0)
    if used is not None:
        out["memory_used"] = int(used) * MIB
    if total is not None:
        out["memory_total"] = int(total) * MIB
        usable = total - (reserved or 0)
        if used is not None and usable > 0:
            out["memory_utilization"] = round(used / usable * 100.0, 3)
    for name, key in (("DCGM_FI_DEV_GPU_TEMP", "temperature"),
                      ("DCGM_FI_DEV_POWER_USAGE", "power_draw"),
                      ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "tensor_core_utilization")):
        x = num(name)
        if x is not None:
            out[key] = x
    return out


def is_insights(key: LabelKey) -> bool:
    return bool(key) and key[0][0] == MARK


def with_insights_fields(fields: tuple[Field, ...]) -> tuple[Field, ...]:
    """`fields` plus the ones the events read (FIELDS) that the metric list leaves out: they
    are collected, not exported (the exposition prints the list's rows only)."""
    have = {f.name for f in fields}
    return fields + tuple(f for name in FIELDS if name not in have
                          and (f := lookup(name)) is not None)


class UsesFields(Protocol):
    def use_fields(self, fields: tuple[Field, ...]) -> None: ...


class KeepsInsightsFields:
    """A collector whose metric list is switched (SIGHUP) keeps the fields the events read."""

    def __init__(self, collector: UsesFields) -> None:
        self._collector = collector

    def use_fields(self, fields: tuple[Field, ...]) -> None:
        self._collector.use_fields(with_insights_fields(fields))
