"""Totals per holder, advanced by one snapshot pair: `advance(state, prev, cur) -> State` (pure).

Integration is by time, not by count: the interval is `cur.taken_at - prev.taken_at`, so a
cycle that was skipped (an overrun) is covered by the next one. Each cycle's rates (the current
snapshot's: NVML's utilisation describes the period that just ended) are held over that interval.
An interval longer than `max_gap_seconds` (podgpu stalled) is not integrated: nothing is known
about who held what in between. Energy comes from the device's counter (mJ) between the two
snapshots and is split between the GPU's holders by their used share (by their allocated share
when nothing is used or utilisation is unknown); a GPU nobody holds adds to its unattributed
energy, so pods + unattributed = the device's increase. A GPU without the counter (or whose
counter went backwards: a driver reload) uses POWER_USAGE x interval instead.

A holder seen for the last time more than `grace_seconds` ago is dropped, so its series stay long
enough for Prometheus to scrape the final value and memory stays bounded under pod churn.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import NamedTuple

from podgpu.accounting.shares import ENERGY, POWER, HolderKey, Rate, cycle_rates
from podgpu.model import Device, Snapshot

DEFAULT_GRACE_SECONDS = 600.0
DEFAULT_MAX_GAP_SECONDS = 300.0


@dataclass(frozen=True, slots=True)
class Options:
    grace_seconds: float = DEFAULT_GRACE_SECONDS
    """How long a finished holder's counters stay exported (seconds)."""
    max_gap_seconds: float = DEFAULT_MAX_GAP_SECONDS
    """Longest interval between two snapshots that is integrated (seconds)."""


class Entry(NamedTuple):
    """One holder's totals since podgpu started (or since the holder first appeared)."""

    device: Device
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


def _empty() -> Mapping[HolderKey, Entry]:
    return MappingProxyType({})


def _empty_gpu() -> Mapping[str, GpuEnergy]:
    return MappingProxyType({})


@dataclass(frozen=True, slots=True)
class State:
    entries: Mapping[HolderKey, Entry] = field(default_factory=_empty)
    unattributed: Mapping[str, GpuEnergy] = field(default_factory=_empty_gpu)
    """Per GPU UUID: energy used while no container held the GPU or any of its instances."""
    skipped_seconds: float = 0.0
    """Time in intervals longer than max_gap_seconds, not integrated."""


def _energy_mj(prev: Snapshot, cur: Snapshot) -> dict[str, tuple[Device, float | None, float]]:
    """Per physical GPU UUID: (device, counter increase in J or None, power x dt in J)."""
    before = {s.device.uuid: s.values.get(ENERGY) for s in prev.samples if not s.device.is_mig}
    dt = cur.taken_at - prev.taken_at
    out: dict[str, tuple[Device, float | None, float]] = {}
    for s in cur.samples:
        if s.device.is_mig:
            continue
        now, then = s.values.get(ENERGY), before.get(s.device.uuid)
        delta = None
        if isinstance(now, int | float) and isinstance(then, int | float) and now >= then:
            delta = (now - then) / 1000.0
        power = s.values.get(POWER)
        estimate = float(power) * dt if isinstance(power, int | float) and power >= 0 else 0.0
        out[s.device.uuid] = (s.device, delta, estimate)
    return out


def advance(state: State, prev: Snapshot | None, cur: Snapshot,
            opts: Options = Options()) -> State:
    """The totals after `cur`, given those after `prev` (None: `cur` is the first snapshot, which
    only makes its holders' series appear at 0)."""
    rates, devices = cycle_rates(cur)
    now = cur.taken_at
    entries = dict(state.entries)
    unattributed = dict(state.unattributed)
    skipped = state.skipped_seconds
    dt = 0.0 if prev is None else now - prev.taken_at
    if dt > opts.max_gap_seconds:
        skipped += dt
        dt = 0.0
    if dt > 0 and prev is not None:
        energy = _split_energy(rates, devices, _energy_mj(prev, cur))
        for gpu_uuid, (dev, joules) in energy.unheld.items():
            old = unattributed.get(gpu_uuid)
            unattributed[gpu_uuid] = GpuEnergy(dev, (old.joules if old else 0.0) + joules)
    else:
        energy = _Split({}, {})
    for key, r in rates.items():
        e = entries.get(key)
        dev = devices[key]
        if e is None:
            e = Entry(dev, 0.0, 0.0, 0.0, 0.0, now)
        if dt > 0:
            e = Entry(dev, e.allocated_seconds + r.allocated * dt,
                      e.used_seconds + (r.used * dt if r.used is not None else 0.0),
                      e.energy_joules + energy.held.get(key, 0.0),
                      e.memory_byte_seconds + (r.memory_bytes * dt
                                               if r.memory_bytes is not None else 0.0),
                      now)
        else:
            e = e._replace(device=dev, last_seen=now)
        entries[key] = e
    horizon = now - opts.grace_seconds
    if len(entries) > len(rates):
        entries = {k: e for k, e in entries.items() if e.last_seen >= horizon}
    return State(MappingProxyType(entries), MappingProxyType(unattributed), skipped)


class _Split(NamedTuple):
    held: dict[HolderKey, float]
    unheld: dict[str, tuple[Device, float]]


def _split_energy(rates: dict[HolderKey, Rate], devices: dict[HolderKey, Device],
                  energy: dict[str, tuple[Device, float | None, float]]) -> _Split:
    """Each GPU's energy this interval between its holders (by used share; by allocated share
    when no holder's use is known or nothing was used)."""
    by_gpu: dict[str, list[HolderKey]] = {}
    for key in rates:
        by_gpu.setdefault(devices[key].uuid, []).append(key)
    held: dict[HolderKey, float] = {}
    unheld: dict[str, tuple[Device, float]] = {}
    for gpu_uuid, (dev, delta, estimate) in energy.items():
        joules = delta if delta is not None else estimate
        keys = by_gpu.get(gpu_uuid)
        if not keys:
            unheld[gpu_uuid] = (dev, joules)
            continue
        used = [rates[k].used for k in keys]
        if all(u is not None for u in used) and (total := sum(u for u in used if u)) > 0:
            weights = [(u or 0.0) / total for u in used]
        else:
            alloc = sum(rates[k].allocated for k in keys)
            weights = [rates[k].allocated / alloc for k in keys]
        for k, w in zip(keys, weights, strict=True):
            held[k] = joules * w
    return _Split(held, unheld)
