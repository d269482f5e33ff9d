"""PromQL shared by the dashboard and the recording rules, so both say the same thing.

Per-pod GPU utilization has to be right on shared GPUs. A GPU held by exactly one container
carries that pod's labels on its own `DCGM_FI_*` series, so its utilization is the device's. A
time-sliced GPU keeps one device series without pod labels (summing it per pod would count it
once per holder); each holder's own share comes from `podgpu_pod_gpu_utilization_ratio`, which
podgpu builds from the per-process utilization and which adds up to the device. MIG instances
have no GPU_UTIL; their graphics-engine ratio is per instance, so it is used for a MIG instance
held by one container. `--kubernetes-virtual-gpus` puts every holder's labels on copies of the
device series; the `unless ... > 1` guards keep those copies out, so no pod is given a whole
shared GPU.
"""

from __future__ import annotations

POD_KEY = "Hostname, gpu, UUID, GPU_I_ID, namespace, pod, container"
"""The labels of one pod's use of one GPU (or MIG instance)."""

HAS_POD = 'pod!=""'
IS_MIG = 'GPU_I_ID!=""'
_SHARED = "on(UUID, GPU_I_ID) (count by (UUID, GPU_I_ID) (podgpu_gpu_allocation) > 1)"


def matchers(*parts: str) -> str:
    """Join label matchers, leaving out empty ones: matchers('a="1"', '') -> 'a="1"'."""
    return ", ".join(p for p in parts if p)


def pod_gpu_utilization(m: str = "") -> str:
    """Each pod's utilization of each GPU it uses, 0..1, labels POD_KEY; `m` filters."""
    return (
        f"(sum by ({POD_KEY}) (DCGM_FI_DEV_GPU_UTIL{{{matchers(HAS_POD, m)}}}) / 100"
        f" unless {_SHARED})"
        f" or sum by ({POD_KEY}) (podgpu_pod_gpu_utilization_ratio{{{m}}})"
        f" or (sum by ({POD_KEY}) (DCGM_FI_PROF_GR_ENGINE_ACTIVE"
        f"{{{matchers(HAS_POD, IS_MIG, m)}}}) unless {_SHARED})"
    )


def pod_gpu_memory(m: str = "") -> str:
    """Each pod's GPU memory in bytes per GPU, labels POD_KEY: its processes' memory (adds up on
    shared GPUs), or the device's FB_USED for an unshared GPU whose processes podgpu cannot see
    (e.g. without hostPID)."""
    return (
        f"sum by ({POD_KEY}) (podgpu_pod_gpu_memory_used_bytes{{{m}}})"
        f" or (sum by ({POD_KEY}) (DCGM_FI_DEV_FB_USED{{{matchers(HAS_POD, m)}}}) * 1048576"
        f" unless {_SHARED})"
    )


def pod_device_ratio(field: str, m: str = "") -> str:
    """A device-wide ratio (a DCGM_FI_PROF_* field) of the GPUs each pod holds, averaged per
    pod. On a shared GPU this is the whole GPU's ratio: NVML has no per-process profiling."""
    return (
        f"avg by (namespace, pod) (podgpu_gpu_allocation{{{m}}} * on(UUID, GPU_I_ID) group_left()"
        f" max by (UUID, GPU_I_ID) ({field}))"
    )


def with_hostname(expr: str, hm: str) -> str:
    """podgpu's self-metrics carry no Hostname label: borrow it from the node's GPU series (by
    scrape target), which also lets the Hostname variable filter them."""
    return (f"{expr} * on(instance, job) group_left(Hostname)"
            f" max by (instance, job, Hostname) (DCGM_FI_DEV_GPU_TEMP{{{hm}}})")


def allocated_idle_gpus(window: str, m: str = "", threshold_percent: float = 5) -> str:
    """Allocated GPUs whose utilization never went above `threshold_percent` in `window`, one
    series per GPU (UUID); value = the peak utilization in %."""
    return (
        f"count by (UUID) (podgpu_gpu_allocation{{{m}}}) * 0 + on(UUID)"
        f" (max by (UUID) (max_over_time(DCGM_FI_DEV_GPU_UTIL{{{m}}}[{window}])) <= {threshold_percent:g})"
    )
