"""The live view of one snapshot: a plain JSON-ready document (schema `podgpu.snapshot/v1`, see
docs/live.md) that the page, `/api/v1/snapshot` and `podgpu top` all read, so they cannot
disagree about which pod holds which GPU or how busy it is.

Pure function of the snapshot. Pod-supplied strings are copied verbatim here; escaping is the
job of each output (JSON encoder, HTML renderer, terminal).
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import TYPE_CHECKING, Any, NamedTuple

from podgpu.model import Allocation, ContainerRef, Device, Sample, Snapshot

if TYPE_CHECKING:  # types only: creating schema.py's TypedDicts is ~1 ms of the start
    from podgpu.sinks.live.schema import DeviceView, HealthView, PodView, SnapshotView

SCHEMA = "podgpu.snapshot/v1"
MIB = 1 << 20
IDLE_BELOW = 0.01
"""A container that holds a GPU and uses less than this fraction of it (1 %) is 'idle'."""

UTIL = "DCGM_FI_DEV_GPU_UTIL"
FB_USED, FB_FREE, FB_RESERVED, FB_TOTAL = (
    "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_FB_RESERVED", "DCGM_FI_DEV_FB_TOTAL")
POWER, TEMP = "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_GPU_TEMP"

Holder = tuple[str, str, str]
"""(namespace, pod, container): how the view names a container across sources (the kubelet's
refs carry no pod UID unless asked; process refs do)."""


class ViewOptions(NamedTuple):
    """Node facts that are not in the snapshot. `interval_seconds` tells clients how often to poll."""

    node: str
    backend: str
    version: str
    interval_seconds: float


def gpu_label(dev: Device) -> str:
    """How people name a device: '0' for a GPU, '0/gi3' for a MIG instance."""
    return f"{dev.index}/gi{dev.mig_gi_id}" if dev.mig_gi_id is not None else str(dev.index)


def _finite(v: Any) -> Any:
    return v if not isinstance(v, float) or math.isfinite(v) else None


def _num(sample: Sample, name: str) -> float | None:
    v = sample.values.get(name)
    return float(v) if isinstance(v, (int, float)) and math.isfinite(v) else None


def _memory(sample: Sample) -> tuple[int | None, int | None]:
    used = _num(sample, FB_USED)
    total = _num(sample, FB_TOTAL)
    if total is None and used is not None and _num(sample, FB_FREE) is not None:
        total = used + (_num(sample, FB_FREE) or 0.0) + (_num(sample, FB_RESERVED) or 0.0)
    return (None if used is None else int(used) * MIB, None if total is None else int(total) * MIB)


def _holder(ref: ContainerRef) -> Holder:
    return (ref.namespace, ref.pod, ref.container)


def _holders(allocations: tuple[Allocation, ...]) -> dict[str, dict[Holder, Allocation]]:
    out: dict[str, dict[Holder, Allocation]] = defaultdict(dict)
    for a in allocations:
        out[a.device_key].setdefault(_holder(a.container), a)
    return out


def _usage(snapshot: Snapshot, sample: Sample, holders: dict[Holder, Allocation]
           ) -> tuple[dict[Holder, tuple[int | None, float | None]], str]:
    """Per holder of one device: (memory bytes, utilization 0..1), and where the numbers come
    from. Processes are authoritative when the device has any; an exclusive holder without
    process data gets the device's own values; a shared, busy device without process data has
    no per-holder split (None, never a guess)."""
    key = sample.device.key
    procs = [p for p in snapshot.processes if p.device_key == key]
    if procs:
        mem: dict[Holder, int | None] = dict.fromkeys(holders, 0)
        util: dict[Holder, float | None] = dict.fromkeys(holders, 0.0)
        for p in procs:
            h = _holder(p.container) if p.container is not None else None
            if h is None or h not in holders:
                continue
            m, u = mem[h], util[h]
            mem[h] = None if m is None or p.used_memory_bytes is None else m + p.used_memory_bytes
            util[h] = None if u is None or p.sm_util_percent is None else u + p.sm_util_percent / 100
        return {h: (mem[h], None if util[h] is None else min(util[h] or 0.0, 1.0))
                for h in holders}, "processes"
    dev_util = _num(sample, UTIL)
    dev_util = None if dev_util is None else dev_util / 100.0
    used, _ = _memory(sample)
    if len(holders) == 1:
        return {h: (used, dev_util) for h in holders}, "device"
    if dev_util == 0.0:
        return {h: (None, 0.0) for h in holders}, "device"
    return {h: (None, None) for h in holders}, "unknown"


def build_view(snapshot: Snapshot, opts: ViewOptions) -> SnapshotView:
    """The schema-v1 document for one snapshot (docs/live.md lists every key; schema.py types)."""
    by_dev = _holders(snapshot.allocations)
    devices: list[DeviceView] = []
    pods: dict[Holder, _PodRow] = {}
    for sample in snapshot.samples:
        dev = sample.device
        holders = by_dev.get(dev.key, {})
        shared = len(holders) > 1 or any(a.replica is not None for a in holders.values())
        used, total = _memory(sample)
        util = _num(sample, UTIL)
        devices.append({
            "key": dev.key, "gpu": gpu_label(dev), "index": dev.index, "uuid": dev.uuid,
            "pci_bus_id": dev.pci_bus_id, "device": dev.device_name, "model": dev.model,
            "mig": None if not dev.is_mig else {
                "profile": dev.mig_profile, "gi_id": dev.mig_gi_id, "uuid": dev.mig_uuid},
            "utilization_ratio": None if util is None else util / 100.0,
            "memory_used_bytes": used, "memory_total_bytes": total,
            "power_watts": _num(sample, POWER), "temperature_celsius": _num(sample, TEMP),
            "sharing": "free" if not holders else "shared" if shared else "exclusive",
            "holders": [{"namespace": h[0], "pod": h[1], "container": h[2],
                         "replica": a.replica} for h, a in sorted(holders.items())],
            "values": {k: _finite(v) for k, v in sample.values.items()},
            "missing": dict(sample.missing),
        })
        if not holders:
            continue
        usage, source = _usage(snapshot, sample, holders)
        for h, alloc in holders.items():
            row = pods.setdefault(h, _PodRow(alloc.container.pod_uid,
                                             dict(alloc.container.pod_labels)))
            row.gpus.append(gpu_label(dev))
            row.devices.append(dev.key)
            row.mem.append(usage[h][0])
            row.util.append(usage[h][1])
            if source not in row.sources:
                row.sources.append(source)
    return {
        "schema": SCHEMA, "node": opts.node, "backend": opts.backend, "version": opts.version,
        "interval_seconds": opts.interval_seconds, "taken_at": snapshot.taken_at,
        "cycle": snapshot.cycle, "health": _health(snapshot),
        "devices": devices, "pods": [_finish(h, pods[h]) for h in sorted(pods)],
    }


class _PodRow:
    """One container's devices and per-device usage while the view is built (a plain class,
    not a dataclass: made before the first answer, docs/design.md)."""

    __slots__ = ("devices", "gpus", "labels", "mem", "pod_uid", "sources", "util")

    def __init__(self, pod_uid: str, labels: dict[str, str]) -> None:
        self.pod_uid = pod_uid
        self.labels = labels
        self.gpus: list[str] = []
        self.devices: list[str] = []
        self.mem: list[int | None] = []
        self.util: list[float | None] = []
        self.sources: list[str] = []


def _finish(h: Holder, row: _PodRow) -> PodView:
    """Totals over a container's devices: memory summed, utilization the mean over its GPUs
    (so 1.0 means every GPU it holds is fully busy); unknown when any part is unknown."""
    mem = None if any(m is None for m in row.mem) else sum(m or 0 for m in row.mem)
    util = (None if any(u is None for u in row.util)
            else sum(u or 0.0 for u in row.util) / len(row.util))
    return {"namespace": h[0], "pod": h[1], "container": h[2], "pod_uid": row.pod_uid,
            "labels": row.labels, "gpus": row.gpus, "devices": row.devices,
            "sources": row.sources, "memory_used_bytes": mem, "utilization_ratio": util,
            "idle": util is not None and util < IDLE_BELOW}


def _health(snapshot: Snapshot) -> HealthView:
    """What this cycle says about itself. /health adds freshness (it knows the current time);
    clients of the view judge freshness from `taken_at`."""
    reasons = [f"{s.name}: {s.error or 'failed'}" for s in snapshot.stages if not s.ok]
    reasons += [f"{d}: {why}" for d, why in snapshot.lost_devices
                if not any(d in r for r in reasons)]
    if snapshot.attribution_status.unavailable:
        reasons.append(f"kubelet {snapshot.attribution_status}")
    if not snapshot.samples and not snapshot.lost_devices:
        reasons.append("no GPU devices")
    return {
        "status": "degraded" if reasons else "ok",
        "reasons": reasons,
        "attribution": str(snapshot.attribution_status),
        "lost_devices": [{"device": d, "reason": why} for d, why in snapshot.lost_devices],
        "stages": [{"name": s.name, "ok": s.ok, "seconds": round(s.duration_seconds, 6),
                    "error": s.error} for s in snapshot.stages],
    }
