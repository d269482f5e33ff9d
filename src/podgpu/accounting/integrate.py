"""Totals per holder, advanced by one snapshot pair: `advance(state, prev, cur) -> State` (pure).

Integration is by time, not by count: the interval is `cur.taken_at - prev.taken_at`, so a
cycle that was skipped (an overrun) is covered by the next one. Each cycle's rates (the current
snapshot's: NVML's utilisation describes the period that just ended) are held over that interval.
An interval longer than `max_gap_seconds` (podgpu stalled) is not integrated: nothing is known
about who held what in between. Energy comes from the device's counter (mJ) between the two
snapshots and is split between the GPU's holders by their used share (by their allocated share
when nothing is used or utilisation is unknown); a GPU nobody holds adds to its unattributed
energy, so pods + unattributed = the device's increase. A GPU without the counter (or whose
counter went backwards: a driver reload) uses POWER_USAGE x interval instead. A lost GPU
(`Sample.lost`) adds no energy for an interval that ends with it lost (nothing on it can be
read; what it drew while lost is attributed to nobody, its holders keep their allocation:
shares.py); the first interval after it returns has no counter reading before it and uses power.

A holder seen for the last time more than `grace_seconds` ago is dropped, so its series stay long
enough for Prometheus to scrape the final value and memory stays bounded under pod churn.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import NamedTuple

from podgpu.accounting.shares import ENERGY, POWER, HolderKey, Rate, cycle_rates
from podgpu.model import ContainerRef, Device, Snapshot
from podgpu.model.device import EMPTY

DEFAULT_GRACE_SECONDS = 600.0
DEFAULT_MAX_GAP_SECONDS = 300.0
PRUNE_EVERY = 10.0
"""Seconds between looks for holders past their grace period: a finished pod's series go
between `grace` and `grace + PRUNE_EVERY` after it was last seen."""


class Options(NamedTuple):
    grace_seconds: float = DEFAULT_GRACE_SECONDS
    """How long a finished holder's counters stay exported (seconds)."""
    max_gap_seconds: float = DEFAULT_MAX_GAP_SECONDS
    """Longest interval between two snapshots that is integrated (seconds)."""


DEFAULT_OPTIONS = Options()

_new = tuple.__new__
"""Entry(...) through NamedTuple's generated __new__ costs ~1 us; this a third of that."""


class Entry(NamedTuple):
    """One holder's totals since podgpu started (or since the holder first appeared)."""

    device: Device
    ref: ContainerRef
    """The container as its allocation names it (with pod_uid/labels when those flags are on)."""
    allocated_seconds: float
    """GPU-seconds held (a fraction of a GPU x seconds)."""
    used_seconds: float
    """GPU-seconds kept busy."""
    energy_joules: float
    memory_byte_seconds: float
    last_seen: float
    """Unix time of the last snapshot that listed the holder."""


class GpuEnergy(NamedTuple):
    """Energy of one physical GPU that no pod held (joules), with the GPU for its labels."""

    device: Device
    joules: float


class State(NamedTuple):
    entries: Mapping[HolderKey, Entry] = EMPTY
    unattributed: Mapping[str, GpuEnergy] = EMPTY
    """Per GPU UUID: energy used while no container held the GPU or any of its instances."""
    skipped_seconds: float = 0.0
    """Time in intervals longer than max_gap_seconds, not integrated."""
    pruned_at: float = 0.0
    """When finished holders were last looked for (every PRUNE_EVERY seconds, not every cycle)."""


def _energy_j(prev: Snapshot, cur: Snapshot) -> dict[str, tuple[Device, float]]:
    """Per physical GPU UUID: (device, joules between the two snapshots): the energy counter's
    increase, or POWER_USAGE x interval where the counter is missing or went backwards."""
    before = {s.device.uuid: s.values.get(ENERGY) for s in prev.samples
              if not s.device.is_mig and s.lost is None}
    dt = cur.taken_at - prev.taken_at
    out: dict[str, tuple[Device, float]] = {}
    for s in cur.samples:
        if s.device.is_mig or s.lost is not None:
            continue
        now, then = s.values.get(ENERGY), before.get(s.device.uuid)
        if isinstance(now, int | float) and isinstance(then, int | float) and now >= then:
            out[s.device.uuid] = (s.device, (now - then) / 1000.0)
            continue
        power = s.values.get(POWER)
        joules = float(power) * dt if isinstance(power, int | float) and power >= 0 else 0.0
        out[s.device.uuid] = (s.device, joules)
    return out


def advance(state: State, prev: Snapshot | None, cur: Snapshot,
            opts: Options = DEFAULT_OPTIONS) -> State:
    """The totals after `cur`, given those after `prev` (None: `cur` is the first snapshot, which
    only makes its holders' series appear at 0)."""
    by_gpu = cycle_rates(cur)
    now = cur.taken_at
    src = state.entries  # mappingproxy.copy() is the C dict copy; dict(proxy) is 30x slower
    entries = src.copy() if isinstance(src, MappingProxyType) else dict(src)
    unattributed = state.unattributed
    skipped = state.skipped_seconds
    dt = 0.0 if prev is None else now - prev.taken_at
    if dt > opts.max_gap_seconds:
        skipped += dt
        dt = 0.0
    energy = _energy_j(prev, cur) if dt > 0 and prev is not None else {}
    get = entries.get
    seen = 0
    for gpu_uuid, rates in by_gpu.items():
        seen += len(rates)
        if dt <= 0:
            for key, (_, _, _, dev, ref) in rates:
                e = get(key)
                entries[key] = (_new(Entry, (dev, ref, 0.0, 0.0, 0.0, 0.0, now)) if e is None
                                else e._replace(device=dev, last_seen=now))
            continue
        gpu = energy.pop(gpu_uuid, None)
        joules = 0.0 if gpu is None else gpu[1]
        weights = holder_weights(rates)
        for i, (key, (alloc, used, mem, dev, ref)) in enumerate(rates):
            e = get(key)
            a = alloc * dt
            u = 0.0 if used is None else used * dt
            j = joules * weights[i]
            m = 0.0 if mem is None else mem * dt
            if e is not None:
                a += e[2]
                u += e[3]
                j += e[4]
                m += e[5]
            entries[key] = _new(Entry, (dev, ref, a, u, j, m, now))
    if energy:  # GPUs nobody held this interval
        more = dict(unattributed)
        for gpu_uuid, (dev, joules) in energy.items():
            old = more.get(gpu_uuid)
            more[gpu_uuid] = GpuEnergy(dev, (old.joules if old else 0.0) + joules)
        unattributed = MappingProxyType(more)
    pruned_at = state.pruned_at
    if len(entries) > seen and not 0 <= now - pruned_at < PRUNE_EVERY:
        horizon = now - opts.grace_seconds
        entries = {k: e for k, e in entries.items() if e.last_seen >= horizon}
        pruned_at = now
    return State(MappingProxyType(entries), unattributed, skipped, pruned_at)


def holder_weights(rates: list[tuple[HolderKey, Rate]]) -> list[float]:
    """Each holder's part of its GPU's energy this interval (and of its power in the Container
    Insights events, accounting/holders.py): its used share when every holder's
    use is known and something was used, else its allocated share."""
    total = 0.0
    for _, r in rates:
        used = r[1]
        if used is None:
            break
        total += used
    else:
        if total > 0:
            return [(r[1] or 0.0) / total for _, r in rates]
    alloc = 0.0
    for _, r in rates:
        alloc += r[0]
    return [r[0] / alloc for _, r in rates]
