"""One snapshot -> what each holder has of each GPU right now (pure; docs/accounting.md).

A holder is one container on one device (a whole GPU or a MIG instance). Per holder:

* **allocated**: the fraction of a physical GPU it holds. A whole GPU is 1, split between the
  replicas allocated on it (time-slicing/MPS: a container holding r of the R allocated replicas
  gets r/R, so the holders of one GPU add up to 1). A MIG instance is its compute slices over the
  GPU's (`1g.10gb` on an H100 is 1/7), split between its replicas the same way.
* **used**: the fraction of a physical GPU it keeps busy. From the container's own processes'
  SM utilisation when NVML reports per-process utilisation on that device; otherwise the device's
  utilisation (GPU_UTIL, or GR_ENGINE_ACTIVE on a MIG instance) split like the allocation; None
  when neither is known.
* **memory**: bytes of GPU memory its processes use; for a sole holder whose processes podgpu
  cannot see, the device's FB_USED.
"""

from __future__ import annotations

import re
from collections import defaultdict
from typing import NamedTuple

from podgpu.model import ContainerRef, Device, Sample, Snapshot

UTIL = "DCGM_FI_DEV_GPU_UTIL"
GR_ACTIVE = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
FB_USED = "DCGM_FI_DEV_FB_USED"
ENERGY = "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"
POWER = "DCGM_FI_DEV_POWER_USAGE"
FIELDS = (UTIL, GR_ACTIVE, FB_USED, ENERGY, POWER)
"""The DCGM fields accounting reads; the collector reads them even when the metric list leaves
them out (they are not exported unless listed)."""

MIB = 1 << 20
DEFAULT_COMPUTE_SLICES = 7
"""Compute slices of a MIG-capable GPU (A100, H100, H200, B200); the A30 has 4."""
_SLICES = re.compile(r"^(?:\d+c\.)?(\d+)g\.")

HolderKey = tuple[str, ContainerRef]
"""(Device.key, the container as the allocation names it)."""


class Rate(NamedTuple):
    """What one holder has of a GPU in one cycle; fractions of one physical GPU."""

    allocated: float
    used: float | None
    memory_bytes: float | None


def gpu_slices(model: str) -> int:
    """Compute slices of a GPU model when it runs MIG."""
    return 4 if "A30" in model else DEFAULT_COMPUTE_SLICES


def mig_fraction(device: Device) -> float:
    """The fraction of its GPU a device is: 1 for a whole GPU, slices/total for a MIG instance
    (`3g.40gb` -> 3/7; an unrecognised profile counts 1 slice)."""
    if not device.is_mig:
        return 1.0
    m = _SLICES.match(device.mig_profile or "")
    total = gpu_slices(device.model)
    return min(1.0, (int(m.group(1)) if m else 1) / total)


def _number(sample: Sample | None, name: str) -> float | None:
    if sample is None:
        return None
    v = sample.values.get(name)
    return None if v is None or isinstance(v, str) else float(v)


def device_utilisation(sample: Sample | None) -> float | None:
    """The device's busy fraction: GPU_UTIL/100, or GR_ENGINE_ACTIVE for a MIG instance (NVML
    has no GPU_UTIL per instance)."""
    util = _number(sample, UTIL)
    if util is not None:
        return min(1.0, max(0.0, util / 100.0))
    gr = _number(sample, GR_ACTIVE)
    return None if gr is None else min(1.0, max(0.0, gr))


def _strip(ref: ContainerRef) -> tuple[str, str, str]:
    return (ref.namespace, ref.pod, ref.container)


def cycle_rates(snapshot: Snapshot) -> tuple[dict[HolderKey, Rate], dict[HolderKey, Device]]:
    """Every holder's rate this cycle and its device. Holders of devices without a sample this
    cycle (a lost GPU) are left out: nothing is known about them."""
    samples = {s.device.key: s for s in snapshot.samples}
    replicas: dict[str, dict[ContainerRef, int]] = defaultdict(dict)
    for a in snapshot.allocations:
        if a.device_key in samples:
            held = replicas[a.device_key]
            held[a.container] = held.get(a.container, 0) + 1
    if not replicas:
        return {}, {}
    # per (device, namespace, pod, container): SM utilisation (0..1) and memory of its processes
    proc_util: dict[tuple[str, tuple[str, str, str]], float] = {}
    proc_mem: dict[tuple[str, tuple[str, str, str]], int] = {}
    for p in snapshot.processes:
        if p.container is None or p.device_key not in replicas:
            continue
        k = (p.device_key, _strip(p.container))
        if p.sm_util_percent is not None:
            proc_util[k] = proc_util.get(k, 0.0) + p.sm_util_percent / 100.0
        if p.used_memory_bytes is not None:
            proc_mem[k] = proc_mem.get(k, 0) + p.used_memory_bytes
    rates: dict[HolderKey, Rate] = {}
    devices: dict[HolderKey, Device] = {}
    for dkey, held in replicas.items():
        sample = samples[dkey]
        device = sample.device
        frac = mig_fraction(device)
        total = sum(held.values())
        per_proc = any((dkey, _strip(ref)) in proc_util for ref in held)
        dev_util = None if per_proc else device_utilisation(sample)
        fb = _number(sample, FB_USED)
        sole = len(held) == 1
        for ref, n in held.items():
            share = frac * n / total
            pk = (dkey, _strip(ref))
            if per_proc:
                used: float | None = min(frac, proc_util.get(pk, 0.0) * frac)
            else:
                used = None if dev_util is None else dev_util * share
            mem: float | None = proc_mem.get(pk)
            if mem is None and sole and fb is not None:
                mem = fb * MIB
            key = (dkey, ref)
            rates[key] = Rate(share, used, mem)
            devices[key] = device
    return rates, devices
