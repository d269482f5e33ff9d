"""podgpu's per-pod families: who holds each device, and what each container uses on it.

`podgpu_gpu_allocation` is 1 per (device, container) in every case, so
`DCGM_FI_DEV_GPU_UTIL * on(UUID) group_left(pod, namespace) podgpu_gpu_allocation` answers "how
busy is the GPU my pod holds" on shared GPUs too, without duplicating device series (which would
make sums over pods over-count). Per-container usage comes from per-process data, summed.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator, Mapping

from podgpu.model import ContainerRef, Device, Snapshot
from podgpu.sinks.prometheus.labels import (
    LabelOptions,
    Pairs,
    container_pairs,
    holders_by_device,
    short_identity_pairs,
)
from podgpu.sinks.prometheus.source import Family, Sample, render

ALLOCATION = "podgpu_gpu_allocation"
MEMORY = "podgpu_pod_gpu_memory_used_bytes"
UTIL = "podgpu_pod_gpu_utilization_ratio"


def _ordered(ident: Pairs, attrs: Pairs) -> Pairs:
    # gpu, UUID, [GPU_I_ID], Hostname, pod, namespace, container, [pod_uid], [vgpu]
    order = {"pod": 0, "namespace": 1, "container": 2, "pod_uid": 3, "vgpu": 4}
    return ident + tuple(sorted(attrs, key=lambda kv: order.get(kv[0], 9)))


def pod_families(snapshot: Snapshot, opts: LabelOptions) -> list[Family]:
    """The per-pod families of one snapshot, as data for the one renderer (source.render)."""
    devices: dict[str, Device] = {s.device.key: s.device for s in snapshot.samples}
    allocations = tuple(Sample(_ordered(ident, attrs), 1)
                        for ident, attrs in allocation_series(snapshot, devices, opts))
    mem, util = pod_usage(snapshot, devices)

    def usage(table: Mapping[tuple[str, ContainerRef], float]) -> tuple[Sample, ...]:
        rows = sorted(table.items(), key=lambda kv: (kv[0][0], kv[0][1].pod))
        return tuple(Sample(_ordered(short_identity_pairs(devices[key], opts),
                                     container_pairs(ref, opts)), value)
                     for (key, ref), value in rows)

    return [
        Family(ALLOCATION, "1 for each container holding a GPU or MIG instance (kubelet "
               "PodResources).", "gauge", allocations),
        Family(MEMORY, "GPU memory used by the container's processes on this device (bytes).",
               "gauge", usage(mem)),
        Family(UTIL, "Sum of the container's per-process SM utilization on this device (0..1).",
               "gauge", usage({k: min(v, 1.0) for k, v in util.items()})),
    ]


def render_pod_families(snapshot: Snapshot, opts: LabelOptions) -> str:
    """The per-pod families' text (a family without series says nothing)."""
    return render(pod_families(snapshot, opts))


def allocation_series(snapshot: Snapshot, devices: dict[str, Device], opts: LabelOptions
                      ) -> Iterator[tuple[Pairs, Pairs]]:
    """(device identity, container attributes) of each `podgpu_gpu_allocation` series: one per
    container holding a device (a container with two replicas of one GPU counts once)."""
    for key, allocs in holders_by_device(snapshot.allocations).items():
        dev = devices.get(key)
        if dev is None:
            continue
        ident = short_identity_pairs(dev, opts)
        done: set[tuple[str, str, str, str]] = set()
        for a in allocs:
            ref = a.container
            hk = (ref.namespace, ref.pod, ref.container, ref.pod_uid)
            if hk in done:
                continue
            done.add(hk)
            attrs = container_pairs(ref, opts)
            if a.replica is not None:
                attrs = (*attrs, ("vgpu", str(a.replica)))
            yield ident, attrs


def pod_usage(snapshot: Snapshot, devices: dict[str, Device]
              ) -> tuple[dict[tuple[str, ContainerRef], int], dict[tuple[str, ContainerRef], float]]:
    """Per (device key, container): GPU memory in bytes and SM utilization ratio, summed over the
    container's processes on that device. Shared with the CloudWatch sink so both agree."""
    mem: dict[tuple[str, ContainerRef], int] = defaultdict(int)
    util: dict[tuple[str, ContainerRef], float] = defaultdict(float)
    for p in snapshot.processes:
        if p.container is None or p.device_key not in devices:
            continue
        k = (p.device_key, _strip_labels(p.container))
        if p.used_memory_bytes is not None:
            mem[k] += p.used_memory_bytes
        if p.sm_util_percent is not None:
            util[k] += p.sm_util_percent / 100.0
    return mem, util


def _strip_labels(ref: ContainerRef) -> ContainerRef:
    return ContainerRef(ref.namespace, ref.pod, ref.container, ref.pod_uid)
