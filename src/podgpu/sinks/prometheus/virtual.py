"""`--kubernetes-virtual-gpus` as dcgm-exporter 4.8.2 does it (dcgm-exporter
`internal/pkg/transformation/kubernetes.go` and `process_metrics.go`, NVIDIA/dcgm-exporter#594).

In that mode every series of a device that pods hold is repeated once per holder (pod,
namespace, container, `vgpu` for a shared replica, `pod_uid` with --kubernetes-enable-pod-uid),
with no device series left beside them, except two fields that 4.8.2 splits by process:

- `DCGM_FI_DEV_GPU_UTIL`: the device series without pod labels, plus one per holder whose value
  is the sum of the SM utilisation (%) of that pod's processes on the device;
- `DCGM_FI_DEV_FB_USED`: the same with the pod's processes' memory (MiB, each process's bytes
  truncated to MiB before summing, as 4.8.2 does).

A holder with no process on the device gets 0. The per-process series always carry `pod_uid`
(when podgpu knows it: from the pod watch, or the processes' cgroups). Pods are matched to
processes by pod, as 4.8.2 matches them by pod UID, so every container of a pod shows the pod's
sum. podgpu's default mode is unchanged: one device series, `podgpu_gpu_allocation` per holder.
"""

from __future__ import annotations

from collections import defaultdict

from podgpu.model import Allocation, ContainerRef, Snapshot
from podgpu.sinks.prometheus.labels import LabelOptions, Pairs, container_pairs

GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"
FB_USED = "DCGM_FI_DEV_FB_USED"
PER_PROCESS = frozenset({GPU_UTIL, FB_USED})
MIB = 1024 * 1024

PodKey = tuple[str, str, str]
"""(device key, namespace, pod), or (device key, '', pod UID) for a pod known by UID only."""


class PodUsage:
    """Per (device, pod): SM utilisation % and memory MiB summed over the pod's processes."""

    def __init__(self, snapshot: Snapshot) -> None:
        self.util: dict[PodKey, float] = defaultdict(float)
        self.fb: dict[PodKey, int] = defaultdict(int)
        self.uids: dict[tuple[str, str], str] = {}
        for p in snapshot.processes:
            ref = p.container
            if ref is None:
                continue
            key = (p.device_key, ref.namespace, ref.pod) if ref.pod else (p.device_key, "",
                                                                           ref.pod_uid)
            if ref.pod and ref.pod_uid:
                self.uids[(ref.namespace, ref.pod)] = ref.pod_uid
            if p.sm_util_percent is not None:
                self.util[key] += p.sm_util_percent
            if p.used_memory_bytes is not None:
                self.fb[key] += p.used_memory_bytes // MIB

    def value(self, field: str, device_key: str, ref: ContainerRef) -> float | int:
        table: dict[PodKey, float] | dict[PodKey, int] = self.util if field == GPU_UTIL else self.fb
        for key in ((device_key, ref.namespace, ref.pod), (device_key, "", ref.pod_uid)):
            if key in table:
                return table[key]
        return 0

    def attributes(self, alloc: Allocation, opts: LabelOptions) -> Pairs:
        """A holder's attributes on a per-process series: `pod_uid` always, when known."""
        ref = alloc.container
        uid = ref.pod_uid or self.uids.get((ref.namespace, ref.pod), "")
        attrs = container_pairs(ContainerRef(ref.namespace, ref.pod, ref.container, uid), opts,
                                always_uid=True)
        if alloc.replica is not None:
            attrs = (*attrs, ("vgpu", str(alloc.replica)))
        return tuple(sorted(attrs))


def holder_allocations(allocs: list[Allocation]) -> list[Allocation]:
    """The holders of one device in 4.8.2's order: one per (container, replica)."""
    return sorted(allocs, key=lambda a: (a.replica if a.replica is not None else -1,
                                         a.container.namespace, a.container.pod,
                                         a.container.container))
