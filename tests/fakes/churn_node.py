"""A simulated node for accounting: pods coming and going on exclusive,
time-sliced and MIG GPUs over simulated hours, with a device energy counter, missed cycles and
jittered cycle times. A test fake, independent of podgpu's simulated backend.

The workload is a schedule of pods, each holding one slot (the whole GPU, a replica of it, or a
MIG instance) from `start` to `end` at a constant utilisation. A snapshot at time t lists the pods
with start < t <= end (the ones that held their slot during the cycle that just ended); the
energy counter grows by the power of that cycle's workload times the cycle's length.

`expected()` computes every pod's integrals in continuous time from the schedule alone (a sweep
over the start/end events of each GPU), never from the snapshots: the hand-computed values the
integrator is held to.
"""

from __future__ import annotations

import random
import uuid
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass

from podgpu.model import Allocation, ContainerRef, Device, GpuProcess, Sample, Snapshot

IDLE_W = 80.0
BUSY_W = 640.0
SLICES = 7
MIB = 1 << 20
_NS = uuid.UUID("8d0b3a5e-2f5c-4c1e-93a4-1f7a6c2b9e10")


@dataclass(frozen=True)
class Gpu:
    """`kind`: 'exclusive' (one slot), 'shared' (`slots` replicas) or 'mig' (`profiles`)."""

    index: int
    kind: str
    slots: int = 1
    profiles: tuple[int, ...] = ()
    """Compute slices of each MIG instance (of 7)."""


@dataclass(frozen=True)
class Pod:
    name: str
    namespace: str
    gpu: int
    slot: int
    start: float
    end: float
    util: float
    """Busy fraction of what it holds: of the GPU (whole/shared), of its instance (MIG)."""
    memory_bytes: int


def device(g: int, profile: int | None = None, gi: int | None = None) -> Device:
    gpu_uuid = f"GPU-{uuid.uuid5(_NS, str(g))}"
    if profile is None:
        return Device(g, gpu_uuid, f"00000000:{0x18 + g:02X}:00.0", f"nvidia{g}", "NVIDIA H200")
    return Device(g, gpu_uuid, f"00000000:{0x18 + g:02X}:00.0", f"nvidia{g}", "NVIDIA H200",
                  mig_profile=f"{profile}g.{profile * 20}gb", mig_gi_id=gi,
                  mig_uuid=f"MIG-{uuid.uuid5(_NS, f'{g}/{gi}')}")


def schedule(gpus: list[Gpu], hours: float, seed: int = 21, *, min_life: float = 1800.0,
             max_life: float = 5400.0, max_gap: float = 600.0,
             namespaces: tuple[str, ...] = ("ml", "inference", "research")) -> list[Pod]:
    """Pods back to back (with gaps) on every slot of every GPU for `hours`."""
    rng = random.Random(seed)
    horizon = hours * 3600.0
    pods: list[Pod] = []
    for g in gpus:
        nslots = len(g.profiles) if g.kind == "mig" else g.slots
        for slot in range(nslots):
            t = rng.uniform(0, max_gap)
            while True:
                life = rng.uniform(min_life, max_life)
                if t + life > horizon:
                    break
                util = rng.choice((0.0, 0.15, 0.4, 0.55, 0.9, 1.0))
                ns = rng.choice(namespaces)
                pods.append(Pod(f"job-{g.index}-{slot}-{len(pods)}", ns, g.index, slot, t,
                                t + life, util,
                                rng.randrange(1, 40) * 1024 * MIB))
                t += life + rng.uniform(0, max_gap)
    return pods


def _ref(p: Pod) -> ContainerRef:
    return ContainerRef(p.namespace, p.name, "main")


class ChurnNode:
    """Snapshots of `gpus` running `pods`, every `interval` seconds of simulated time, with
    `miss` of the cycles dropped (an overrun) and each time jittered by up to `jitter`."""

    def __init__(self, gpus: list[Gpu], pods: list[Pod], *, interval: float = 1.0,
                 miss: float = 0.03, jitter: float = 0.05, seed: int = 7,
                 epoch: float = 1_800_000_000.0) -> None:
        self.gpus = {g.index: g for g in gpus}
        self.pods = pods
        self.interval, self.miss, self.jitter = interval, miss, jitter
        self.epoch = epoch
        """Unix time of simulated time 0."""
        self.rng = random.Random(seed)
        self.energy_mj = {g.index: 1_000_000_000.0 * (g.index + 1) for g in gpus}
        self.devices = {g.index: device(g.index) for g in gpus}
        self.instances = {g.index: [device(g.index, p, gi + 1) for gi, p in enumerate(g.profiles)]
                          for g in gpus if g.kind == "mig"}
        self._last_allocs: tuple[Allocation, ...] = ()
        self.by_gpu: dict[int, list[Pod]] = defaultdict(list)
        for p in pods:
            self.by_gpu[p.gpu].append(p)

    def slot_device(self, p: Pod) -> Device:
        g = self.gpus[p.gpu]
        return self.instances[p.gpu][p.slot] if g.kind == "mig" else self.devices[p.gpu]

    def power(self, g: Gpu, active: list[Pod]) -> float:
        return IDLE_W + (BUSY_W - IDLE_W) * min(1.0, sum(used_rate(g, p, active) for p in active))

    def snapshots(self, hours: float) -> Iterator[Snapshot]:
        t_prev = 0.0
        k = 0
        end = hours * 3600.0
        while True:
            k += 1
            t = k * self.interval + self.rng.uniform(-self.jitter, self.jitter)
            if t > end:
                return
            if k > 1 and self.rng.random() < self.miss:
                continue
            yield self.snapshot(t, t - t_prev)
            t_prev = t

    def snapshot(self, t: float, dt: float) -> Snapshot:
        samples: list[Sample] = []
        allocs: list[Allocation] = []
        procs: list[GpuProcess] = []
        pid = 1000
        for gi, g in self.gpus.items():
            active = [p for p in self.by_gpu[gi] if p.start < t <= p.end]
            self.energy_mj[gi] += self.power(g, active) * dt * 1000.0
            dev = self.devices[gi]
            total_util = min(1.0, sum(used_rate(g, p, active) for p in active))
            values: dict[str, int | float] = {
                "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": int(self.energy_mj[gi]),
                "DCGM_FI_DEV_POWER_USAGE": self.power(g, active),
            }
            if g.kind != "mig":
                values["DCGM_FI_DEV_GPU_UTIL"] = round(100 * total_util)
                values["DCGM_FI_DEV_FB_USED"] = sum(p.memory_bytes for p in active) // MIB
            samples.append(Sample(dev, values))
            if g.kind == "mig":
                by_slot = {p.slot: p for p in active}
                for slot, inst in enumerate(self.instances[gi]):
                    p = by_slot.get(slot)
                    samples.append(Sample(inst, {"DCGM_FI_PROF_GR_ENGINE_ACTIVE":
                                                 p.util if p else 0.0}))
            for p in active:
                d = self.slot_device(p)
                replica = p.slot if g.kind == "shared" else None
                did = d.key if replica is None else f"{d.key}::{replica}"
                allocs.append(Allocation(d.key, _ref(p), "nvidia.com/gpu", did, replica))
                procs.append(GpuProcess(d.key, pid, p.memory_bytes, None if g.kind == "mig"
                                        else 100.0 * used_rate(g, p, active), _ref(p)))
                pid += 1
        alloc_tuple = tuple(allocs)
        if alloc_tuple == self._last_allocs:  # the attributor hands back the same tuple then
            alloc_tuple = self._last_allocs
        self._last_allocs = alloc_tuple
        return Snapshot(taken_at=self.epoch + t, samples=tuple(samples),
                        allocations=alloc_tuple, processes=tuple(procs))


def used_rate(g: Gpu, p: Pod, active: list[Pod]) -> float:
    """The fraction of the physical GPU pod `p` keeps busy while `active` run. Time-slicing
    cannot give out more than the whole GPU: when the pods on one GPU want more than 100 %
    together, each gets its part of it (NVML's per-process figures add up to at most 100 %)."""
    if g.kind == "mig":
        return p.util * g.profiles[p.slot] / SLICES
    return p.util / max(1.0, sum(q.util for q in active))


@dataclass
class Totals:
    allocated: float = 0.0
    used: float = 0.0
    energy: float = 0.0
    memory: float = 0.0


def expected(gpus: list[Gpu], pods: list[Pod]) -> tuple[dict[str, Totals], dict[int, float]]:
    """Per pod name: its integrals in continuous time; per GPU: the energy (J) nobody held."""
    out: dict[str, Totals] = {p.name: Totals() for p in pods}
    unheld: dict[int, float] = defaultdict(float)
    for g in gpus:
        mine = [p for p in pods if p.gpu == g.index]
        cuts = sorted({0.0} | {p.start for p in mine} | {p.end for p in mine})
        for a, b in zip(cuts, cuts[1:], strict=False):
            mid = (a + b) / 2
            active = [p for p in mine if p.start < mid <= p.end]
            dt = b - a
            watts = IDLE_W + (BUSY_W - IDLE_W) * min(1.0, sum(used_rate(g, p, active)
                                                              for p in active))
            if not active:
                unheld[g.index] += watts * dt
                continue
            used = {p.name: used_rate(g, p, active) for p in active}
            alloc = {p.name: (g.profiles[p.slot] / SLICES if g.kind == "mig" else 1 / len(active))
                     for p in active}
            total_used = sum(used.values())
            weights = ({n: u / total_used for n, u in used.items()} if total_used > 0 else
                       {n: a_ / sum(alloc.values()) for n, a_ in alloc.items()})
            for p in active:
                t = out[p.name]
                t.allocated += alloc[p.name] * dt
                t.used += used[p.name] * dt
                t.energy += watts * dt * weights[p.name]
                t.memory += p.memory_bytes * dt
    return out, dict(unheld)
