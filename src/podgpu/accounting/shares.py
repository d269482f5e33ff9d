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

A lost GPU (`Sample.lost`: fell off the bus) keeps its holders' allocation while the kubelet
lists it (nobody else can be given it), with used and memory unknown (None) whatever values
its sample carries: nothing on it can be read, so nothing is measured.
"""

from __future__ import annotations

import re
from typing import Any

from podgpu.model import ContainerRef, Device, Sample, Snapshot
from podgpu.model.device import mig_slices

UTIL = "DCGM_FI_DEV_GPU_UTIL"
GR_ACTIVE = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
FB_USED = "DCGM_FI_DEV_FB_USED"
ENERGY = "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"
POWER = "DCGM_FI_DEV_POWER_USAGE"
FIELDS = (UTIL, GR_ACTIVE, FB_USED, ENERGY, POWER)
"""The DCGM fields accounting reads; the collector reads them even when the metric list leaves
them out (they are not exported unless listed)."""

MIB = 1 << 20
_SLICES = re.compile(r"^(?:\d+c\.)?(\d+)g\.")

HolderKey = tuple[str, str, str, str, str, tuple[tuple[str, str], ...]]
"""(Device.key, namespace, pod, container, pod_uid, pod labels) of a holder, as the allocation
names the container (pod_uid and labels are there only when their flags are on). A plain tuple:
hashing it is C code, which keeps a cycle of 100 holders well under a millisecond."""


Rate = tuple[float, float | None, float | None, Device, ContainerRef]
"""What one holder has of a GPU in one cycle: (allocated, used, memory bytes, device, container);
allocated and used are fractions of one physical GPU. A plain tuple, not a NamedTuple: building
one costs a twentieth (measured in bench/bench_accounting.py), and there are 100s per cycle."""


def mig_fraction(device: Device) -> float:
    """The fraction of its GPU a device is: 1 for a whole GPU, slices/total for a MIG instance
    (`3g.40gb` -> 3/7; an unrecognised profile counts 1 slice)."""
    if not device.is_mig:
        return 1.0
    m = _SLICES.match(device.mig_profile or "")
    total = mig_slices(device.model)
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


ProcKey = tuple[str, str, str, str]
"""(Device.key, namespace, pod, container): how processes are matched to holders."""
Holder = tuple[HolderKey, ProcKey, float, ContainerRef]
"""(holder, its process key, its allocated share of the physical GPU, the container)."""
Group = tuple[tuple[str, str, float, tuple[Holder, ...]], ...]
"""Per held device: (device key, its GPU's UUID, its fraction of the GPU, its holders)."""

_memo: list[tuple[object, tuple[str, ...], Group]] = []


def group_allocations(snapshot: Snapshot) -> Group:
    """The allocations grouped by device and holder, for devices with a sample this cycle, with
    each holder's allocated share.

    Pure, memoised on the identity of the allocation tuple: the attributor hands back the same
    tuple while the kubelet's answer is unchanged, so a steady node groups once."""
    allocs = snapshot.allocations
    present = tuple(s.device.key for s in snapshot.samples)
    if _memo and _memo[0][0] is allocs and _memo[0][1] == present:
        return _memo[0][2]
    devices = {s.device.key: s.device for s in snapshot.samples}
    by_dev: dict[str, dict[HolderKey, list[Any]]] = {}
    for a in allocs:
        dkey = a.device_key
        if dkey not in devices:
            continue
        c = a.container
        key = (dkey, c.namespace, c.pod, c.container, c.pod_uid, c.pod_labels)
        held = by_dev.setdefault(dkey, {})
        slot = held.get(key)
        if slot is None:
            held[key] = [1, c]
        else:
            slot[0] += 1
    groups: list[tuple[str, str, float, tuple[Holder, ...]]] = []
    for dkey, held in by_dev.items():
        device = devices[dkey]
        frac = mig_fraction(device)
        total = sum(n for n, _ in held.values())
        groups.append((dkey, device.uuid, frac, tuple(
            (key, (key[0], key[1], key[2], key[3]), frac * n / total, ref)
            for key, (n, ref) in held.items())))
    out: Group = tuple(groups)
    _memo[:] = [(allocs, present, out)]
    return out


def cycle_rates(snapshot: Snapshot) -> dict[str, list[tuple[HolderKey, Rate]]]:
    """Every holder's rate this cycle, per physical GPU (UUID). Holders of devices without a
    sample this cycle are left out: nothing is known about them. Holders of a lost GPU (a
    sample with `lost` set) keep their allocation; their use and memory are unknown."""
    groups = group_allocations(snapshot)
    if not groups:
        return {}
    samples = {s.device.key: s for s in snapshot.samples}
    # per (device, namespace, pod, container): SM utilisation (0..1) and memory of its processes
    proc_util: dict[ProcKey, float] = {}
    proc_mem: dict[ProcKey, int] = {}
    for p in snapshot.processes:
        c = p.container
        if c is None:
            continue
        pk = (p.device_key, c.namespace, c.pod, c.container)
        util, mem = p.sm_util_percent, p.used_memory_bytes
        if util is not None:
            proc_util[pk] = proc_util.get(pk, 0.0) + util / 100.0
        if mem is not None:
            proc_mem[pk] = proc_mem.get(pk, 0) + mem
    out: dict[str, list[tuple[HolderKey, Rate]]] = {}
    for dkey, gpu_uuid, frac, held in groups:
        sample = samples[dkey]
        device = sample.device
        rates = out.get(gpu_uuid)
        if rates is None:
            rates = out[gpu_uuid] = []
        if sample.lost is not None:  # held, but nothing on it can be read
            rates.extend((key, (share, None, None, device, ref)) for key, _, share, ref in held)
            continue
        per_proc = False
        if proc_util:
            for _, pk, _, _ in held:
                if pk in proc_util:
                    per_proc = True
                    break
        dev_util = None if per_proc else device_utilisation(sample)
        fb = _number(sample, FB_USED) if len(held) == 1 else None
        for key, pk, share, ref in held:
            if per_proc:
                used: float | None = proc_util.get(pk, 0.0) * frac
                if used > frac:  # type: ignore[operator]
                    used = frac
            else:
                used = None if dev_util is None else dev_util * share
            mem_b: float | None = proc_mem.get(pk)
            if mem_b is None and fb is not None:
                mem_b = fb * MIB
            rates.append((key, (share, used, mem_b, device, ref)))
    return out
