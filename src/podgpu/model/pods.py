"""Who holds a device and who runs on it: kubelet allocations and GPU processes."""

from __future__ import annotations

from typing import NamedTuple


class ContainerRef(NamedTuple):
    """A container in a pod, as the kubelet or the Kubernetes API names it."""

    namespace: str
    pod: str
    container: str
    pod_uid: str = ""
    pod_labels: tuple[tuple[str, str], ...] = ()


class Allocation(NamedTuple):
    """One device assigned to one container by a device plugin.

    `device_key` is `Device.key` of the GPU or MIG instance; `replica` is the sharing suffix of the
    kubelet device id (`::N` or `/vgpuN`), None when the id names the device exclusively.
    """

    device_key: str
    container: ContainerRef
    resource: str
    device_id: str
    replica: int | None = None


class GpuProcess(NamedTuple):
    """A process running on a device, with the pod it belongs to when that is known.

    `used_memory_bytes` and `sm_util_percent` are None when NVML cannot report them.
    """

    device_key: str
    pid: int
    used_memory_bytes: int | None
    sm_util_percent: float | None
    container: ContainerRef | None = None
    container_id: str = ""
