"""Accounting totals -> Prometheus counter families and EMF series (pure, given the state).

Labels: `gpu, UUID, [GPU_I_ID], Hostname`, the pod labels copied by the allowlist
(`--kubernetes-enable-pod-labels`), then `pod, namespace, container, [pod_uid]` — the order of
podgpu's other per-pod families, so `on(UUID)` joins with them and with the device series work.
"""

from __future__ import annotations

from collections.abc import Iterator, MutableMapping

from podgpu.accounting.integrate import Entry, State
from podgpu.accounting.shares import HolderKey
from podgpu.model import ContainerRef, Device
from podgpu.sinks.prometheus.labels import (
    LabelOptions,
    Pairs,
    container_pairs,
    pod_label_pairs,
    short_identity_pairs,
)
from podgpu.sinks.prometheus.source import Family, Sample

ALLOCATED = "podgpu_pod_gpu_allocated_seconds_total"
USED = "podgpu_pod_gpu_used_seconds_total"
ENERGY = "podgpu_pod_gpu_energy_joules_total"
MEMORY = "podgpu_pod_gpu_memory_byte_seconds_total"
UNATTRIBUTED = "podgpu_gpu_unattributed_energy_joules_total"
SKIPPED = "podgpu_accounting_skipped_seconds_total"

FAMILIES: tuple[tuple[str, str], ...] = (
    (ALLOCATED, "GPU-seconds the container held on this device: a time-sliced replica counts its "
                "share (the holders of one GPU add up to 1 per second), a MIG instance its "
                "compute slices over the GPU's."),
    (USED, "Utilisation-weighted GPU-seconds: the container's processes' SM utilisation (or the "
           "device's, split by allocation, when NVML has no per-process figure) x seconds."),
    (ENERGY, "Joules of the GPU's energy counter while the container held it, split between "
             "holders by used share (by allocated share when nothing is used or use is unknown)."),
    (MEMORY, "GPU memory of the container's processes integrated over time (byte-seconds)."),
)
"""(name, help) of the per-holder counters, in Entry field order."""

_ORDER = {"pod": 0, "namespace": 1, "container": 2, "pod_uid": 3}


def holder_pairs(device: Device, ref: ContainerRef, opts: LabelOptions) -> Pairs:
    """The label pairs of one holder's accounting series."""
    attrs = sorted(container_pairs(ref, opts), key=lambda kv: _ORDER.get(kv[0], 9))
    return short_identity_pairs(device, opts) + tuple(sorted(pod_label_pairs(ref, opts))) \
        + tuple(attrs)


UNATTRIBUTED_HELP = ("Joules of the GPU's energy counter while no container held it (pods + this "
                     "= the device's increase).")
SKIPPED_HELP = ("Seconds between snapshots too far apart to integrate (podgpu stalled); not in "
                "any accounting counter.")


def families(state: State, opts: LabelOptions,
             cache: MutableMapping[tuple[HolderKey, int], Pairs] | None = None) -> list[Family]:
    """The accounting counters as metric families (rendered by sinks/prometheus/source.py with
    every other source's): holders in device order, GPUs by UUID. `cache` (each holder's label
    pairs, kept by the caller between cycles) saves rebuilding the labels of a steady node; the
    same tuple in every cycle also lets the renderer reuse its label text."""
    if cache is None:
        cache = {}
    rows: list[tuple[Pairs, tuple[float, float, float, float]]] = []
    for key, e in sorted(state.entries.items(), key=_device_index):
        ck = (key, e.device.index)
        labels = cache.get(ck)
        if labels is None:
            labels = cache[ck] = holder_pairs(e.device, e.ref, opts)
        rows.append((labels, e[2:6]))  # allocated, used, energy, memory: FAMILIES' order
    out = [Family(name, help_text, "counter", tuple([Sample(lb, v[i]) for lb, v in rows]))
           for i, (name, help_text) in enumerate(FAMILIES)]
    out.append(Family(UNATTRIBUTED, UNATTRIBUTED_HELP, "counter", tuple(
        Sample(short_identity_pairs(g.device, opts), g.joules)
        for _, g in sorted(state.unattributed.items()))))
    out.append(Family(SKIPPED, SKIPPED_HELP, "counter", (Sample((), state.skipped_seconds),)))
    return out


def _device_index(item: tuple[HolderKey, Entry]) -> int:
    return item[1].device.index


def emf_items(state: State, opts: LabelOptions) -> Iterator[tuple[Pairs, list[tuple[str, float]]]]:
    """(label pairs, [(metric, total), ...]) per holder, for the EMF sink's counter deltas."""
    for e in state.entries.values():
        yield holder_pairs(e.device, e.ref, opts), [
            (ALLOCATED, e.allocated_seconds), (USED, e.used_seconds),
            (ENERGY, e.energy_joules), (MEMORY, e.memory_byte_seconds)]
