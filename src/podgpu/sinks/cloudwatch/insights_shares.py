"""What each physical GPU and each of its holders get in the Container Insights GPU events.

The add-on copies one GPU's readings into its node, pod and container events (one arbitrary pod
of a time-sliced GPU; every instance's series named after the GPU on MIG). podgpu sends, per
physical GPU:

- one node event named as the add-on names the GPU (`nvidia2`, MIG or not), with the GPU's
  readings; a MIG GPU's are its GPU instances' together: memory summed, utilisation and
  tensor-core activity each instance's weighted by its compute slices (3g of 7 busy at 100 % is
  42.857 % of the GPU), power and temperature the GPU's;
- for every holder (a container on the GPU or on one of its instances), its share, by the rule
  podgpu's accounting uses (a ShareRule: accounting/holders.py, passed in by the wiring):
  utilisation is its used fraction of the physical GPU; memory used is its processes' (the
  instance's for a sole holder of a MIG instance); memory total its allocated part of its
  device (a time-sliced GPU's total x r/R; a MIG instance's own total); memory utilisation its
  part of its device's; power and tensor-core activity the GPU's x its weight (its used share
  when every holder's use is known and something was used, else its allocated share);
  temperature, which does not add up, the GPU's.

So the holders of a GPU add up to the GPU's node event in every window: exactly for power,
tensor-core activity and memory total (a MIG GPU's: its held instances'); for utilisation and
memory used as far as their processes account for the GPU's (per-process SM samples against
GPU_UTIL, processes outside pods). A GPU held whole by one container gets the GPU's readings
unchanged, as the add-on sends them.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Protocol

from podgpu.model import ContainerRef, Device, Sample, Snapshot
from podgpu.sinks.cloudwatch.insights_contract import device_readings

ADDITIVE = ("utilization", "memory_used", "memory_total", "memory_utilization", "power_draw",
            "tensor_core_utilization")
"""Readings that add up over a GPU's holders (temperature does not: it is copied)."""

Holder = tuple[Device, ContainerRef, dict[str, float]]
"""A container's readings on one device (a GPU or a MIG instance) of the GPU."""

HolderShare = tuple[float, float | None, float | None, Device, ContainerRef, float]
"""(allocated and used fractions of the physical GPU, memory bytes, device, container, weight:
its part of the GPU's power)."""


class ShareRule(Protocol):
    """What each holder has of each GPU: accounting's rule (accounting/holders.py)."""

    def holders(self, snapshot: Snapshot) -> Mapping[str, Sequence[HolderShare]]:
        """Per physical GPU (UUID), each holder's share this cycle."""
        ...

    def fraction(self, device: Device) -> float:
        """The fraction of its GPU a device is (a MIG instance's slices over the GPU's)."""
        ...


def by_gpu(snapshot: Snapshot) -> dict[str, list[Sample]]:
    """Live samples per physical GPU (UUID), in the snapshot's order; lost GPUs left out."""
    out: dict[str, list[Sample]] = {}
    for s in snapshot.samples:
        if s.lost is None:
            out.setdefault(s.device.uuid, []).append(s)
    return out


def gpu_readings(samples: Sequence[Sample], rule: ShareRule) -> tuple[Device, dict[str, float]]:
    """The GPU (its identity without MIG fields) and its node-event readings. A MIG GPU's are
    its instances' (a parent sample beside them, `-d g+i`, is not counted twice); a MIG GPU
    seen only as its parent (`-d g`) or with no instance is that sample."""
    insts = [s for s in samples if s.device.is_mig]
    if not insts:
        return samples[0].device, device_readings(samples[0])
    dev = insts[0].device._replace(mig_profile=None, mig_gi_id=None, mig_uuid=None)
    per = [(rule.fraction(s.device), device_readings(s)) for s in insts]
    first = per[0][1]
    out: dict[str, float] = {k: first[k] for k in ("temperature", "power_draw") if k in first}
    for key, digits in (("utilization", 3), ("tensor_core_utilization", 6)):
        if all(key in r for _, r in per):
            out[key] = round(sum(f * r[key] for f, r in per), digits)
    for key in ("memory_used", "memory_total"):
        if all(key in r for _, r in per):
            out[key] = sum(r[key] for _, r in per)
    used, total = out.get("memory_used"), out.get("memory_total")
    if used is not None and total:
        out["memory_utilization"] = round(used / total * 100.0, 3)
    return dev, out


def holders(shares: Sequence[HolderShare], samples: Sequence[Sample], gpu: dict[str, float],
            rule: ShareRule) -> Iterator[Holder]:
    """Each holder of the GPU of `samples` with its share (the module docstring's rule);
    `shares`: the rule's holders of this GPU this cycle."""
    if not shares or not samples:
        return
    by_key = {s.device.key: s for s in samples}
    if len(shares) == 1 and not shares[0][3].is_mig and shares[0][0] == 1.0:
        _, _, _, dev, ref, _ = shares[0]
        yield dev, ref, dict(gpu)  # held whole by one container: the GPU's readings
        return
    devices: dict[str, dict[str, float]] = {}
    for alloc, used, mem, dev, ref, w in shares:
        sample = by_key.get(dev.key)
        if sample is None:
            continue
        own_dev = devices.get(dev.key)
        if own_dev is None:
            own_dev = devices[dev.key] = device_readings(sample)
        own: dict[str, float] = {}
        if used is not None:
            own["utilization"] = round(min(used, 1.0) * 100.0, 3)
        if mem is not None:
            own["memory_used"] = int(mem)
        total = own_dev.get("memory_total")
        if total is not None:
            own["memory_total"] = round(total * alloc / rule.fraction(dev))
        dev_used, dev_util = own_dev.get("memory_used"), own_dev.get("memory_utilization")
        if mem is not None and dev_used is not None and dev_util is not None:
            own["memory_utilization"] = round(dev_util * mem / dev_used, 3) if dev_used else 0.0
        if "temperature" in gpu:
            own["temperature"] = gpu["temperature"]
        for key, digits in (("power_draw", 3), ("tensor_core_utilization", 6)):
            if key in gpu:
                own[key] = round(gpu[key] * w, digits)
        yield dev, ref, own


def add(into: dict[str, float], more: dict[str, float]) -> None:
    """A second device or container of the same holder: additive readings summed."""
    for k, v in more.items():
        if k in ADDITIVE and k in into:
            into[k] = into[k] + v
        else:
            into.setdefault(k, v)
