"""MIG on the simulated node: the scenario's `mig` key.

    mig:
      - {gpu: 0, instances: ["3g.40gb", "3g.40gb"]}   # GPU instance ids 1 and 2
    pods:
      - {namespace: ml, name: mig-pod, containers: [{name: c, gpus: [{gpu: 0, instance: 1}]}]}

A listed GPU runs with MIG on, and the node looks as the NVML backend shows a real one
(backends/nvml_mig.py, nvml_read.read_instance): the parent GPU has no `DCGM_FI_DEV_GPU_UTIL` and
no whole-GPU profiling fields (NVML answers NotSupported with MIG on, and GPM refuses the whole
GPU); `DCGM_FI_DEV_MIG_MODE` is 1; each GPU instance is a `Device` with the parent's identity plus
`mig_profile`, `mig_gi_id` (1, 2, ... in the listed order) and a `MIG-<uuid>`, whose sample
carries the parent's GPU-level values (power, temperature, XID, health; not P2P) and its own
memory and profiling ratios. An instance is busy while its GPU is in a busy phase and a scenario
container holds it with a share and processes: its FB_USED is 90 % of its memory, its ratios the
busy values; otherwise 0. A holder's processes are on the instance, with memory and no
utilisation (NVML has no per-process utilisation with MIG on). A pod holds an instance with
`gpus: [{gpu: 0, instance: 1}]`; its resource is `nvidia.com/mig-<profile>` unless given (the
device plugin's mixed strategy), its kubelet device id the instance's MIG UUID. A MIG GPU in
`lost_gpus` exports its instances' last known identity with the lost GPU's values
(backends/lost.py).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from podgpu.backends import derived
from podgpu.backends.lost import with_instances
from podgpu.errors import ConfigError
from podgpu.fields.catalog import BY_NAME
from podgpu.model import Device, Sample
from podgpu.model.device import Value

MAX_SLICES = 7
"""Compute slices of every simulated model with MIG (H100, H200, A100)."""
_PROFILE = re.compile(r"^([1-7])g\.([1-9][0-9]{0,3})gb$")
_MIG_NS = uuid.UUID("9a6f3c2e-7b41-4d0a-8e5c-1f2d3b4a5c6e")
_NOT_ON_MIG = "not supported on a GPU with MIG enabled"


@dataclass(frozen=True, slots=True)
class ScenarioMig:
    gpu: int
    profiles: tuple[str, ...]
    """GPU instance `i + 1` has profile `profiles[i]`."""


def parse_mig(value: Any, source: str, *, max_gpu: int) -> tuple[ScenarioMig, ...]:
    """Validate the `mig` list; ConfigError naming the file and the field."""
    if value is None:
        return ()
    if not isinstance(value, list) or len(value) > max_gpu + 1:
        raise ConfigError(f"{source}: mig: expected a list of at most {max_gpu + 1} entries")
    out: list[ScenarioMig] = []
    for i, entry in enumerate(value):
        where = f"{source}: mig[{i}]"
        if not isinstance(entry, Mapping):
            raise ConfigError(f"{where}: expected a mapping, got {type(entry).__name__}")
        unknown = set(entry) - {"gpu", "instances"}
        if unknown:
            raise ConfigError(f"{where}: unknown field(s) {sorted(map(str, unknown))}; "
                              "allowed: gpu, instances")
        gpu, profiles = entry.get("gpu"), entry.get("instances")
        if isinstance(gpu, bool) or not isinstance(gpu, int) or not 0 <= gpu <= max_gpu:
            raise ConfigError(f"{where}.gpu: expected an integer in 0..{max_gpu}, "
                              f"got {gpu!r:.60}")
        if any(m.gpu == gpu for m in out):
            raise ConfigError(f"{where}.gpu: gpu {gpu} is listed twice")
        if not isinstance(profiles, list) or len(profiles) > MAX_SLICES:
            raise ConfigError(f"{where}.instances: expected a list of 0..{MAX_SLICES} MIG "
                              "profiles such as \"3g.40gb\" ([] is MIG on, no instance yet)")
        slices = 0
        for k, p in enumerate(profiles):
            m = _PROFILE.match(p) if isinstance(p, str) else None
            if m is None:
                raise ConfigError(f"{where}.instances[{k}]: expected a MIG profile such as "
                                  f"\"1g.10gb\" or \"3g.40gb\", got {p!r:.60}")
            slices += int(m.group(1))
        if slices > MAX_SLICES:
            raise ConfigError(f"{where}.instances: {slices} compute slices; a GPU has "
                              f"{MAX_SLICES}")
        out.append(ScenarioMig(gpu, tuple(profiles)))
    return tuple(out)


def check_instance(mig: Sequence[ScenarioMig], gpu: int, instance: int | None, where: str
                   ) -> str | None:
    """The profile of `instance` on `gpu` (None for a whole GPU); ConfigError naming `where`
    (a pod's `gpus[k]`) when a MIG GPU is held whole or the instance does not exist."""
    entry = next((m for m in mig if m.gpu == gpu), None)
    if entry is None:
        if instance is not None:
            raise ConfigError(f"{where}.instance: gpu {gpu} is not in the scenario's mig list")
        return None
    if instance is None:
        raise ConfigError(f"{where}: gpu {gpu} runs MIG; hold one of its instances with "
                          f"instance: 1..{len(entry.profiles)}" if entry.profiles else
                          f"{where}: gpu {gpu} runs MIG with no GPU instance; nothing on it can "
                          "be held")
    if not 1 <= instance <= len(entry.profiles):
        have = f"GPU instances 1..{len(entry.profiles)}" if entry.profiles else "no GPU instance"
        raise ConfigError(f"{where}.instance: gpu {gpu} has {have}, not {instance}")
    return entry.profiles[instance - 1]


def _gb(profile: str) -> int:
    """The memory of a profile parse_mig accepted, in GB (`3g.40gb` -> 40)."""
    m = _PROFILE.match(profile)
    assert m is not None
    return int(m.group(2))


class MigLayout:
    """The simulated node's MIG GPUs: their instance devices and samples."""

    def __init__(self, mig: Sequence[ScenarioMig], gpus: Sequence[Device], *, supported: bool,
                 model: str, source: str, memory_mib: int = 0) -> None:
        """`memory_mib`: the model's memory; the instances' profiles must fit in it."""
        self._instances: dict[int, tuple[Device, ...]] = {}
        for i, m in enumerate(mig):
            if m.gpu >= len(gpus):
                raise ConfigError(f"{source}: mig[{i}].gpu: gpu {m.gpu} does not exist; the "
                                  f"simulated node has {len(gpus)} GPU(s), 0..{len(gpus) - 1}")
            if not supported:
                raise ConfigError(f"{source}: mig[{i}]: the {model} has no MIG (NVML answers "
                                  "NotSupported to nvmlDeviceGetMigMode); simulate an A100, H100 "
                                  "or H200 (--simulate 2xA100)")
            gb = sum(_gb(p) for p in m.profiles)
            if memory_mib and gb > memory_mib // 1000:  # profile names round MiB/1000: 7g.80gb
                raise ConfigError(f"{source}: mig[{i}].instances: {gb} GB of profiles; the "
                                  f"{model} has {memory_mib // 1000} GB")
            parent = gpus[m.gpu]
            self._instances[m.gpu] = tuple(
                parent._replace(mig_profile=p, mig_gi_id=k + 1,
                                mig_uuid=f"MIG-{uuid.uuid5(_MIG_NS, f'{parent.uuid}/{k + 1}')}")
                for k, p in enumerate(m.profiles))

    def devices(self, gpus: Sequence[Device]) -> tuple[Device, ...]:
        """Every GPU followed by its instances, as the NVML backend lists them."""
        return tuple(d for g in gpus for d in (g, *self._instances.get(g.index, ())))

    def expand(self, samples: Sequence[Sample],
               values: Callable[[Device], Mapping[str, Value | None]],
               busy: Callable[[Device], bool]) -> tuple[Sample, ...]:
        """The read's samples with each MIG GPU's parent as NVML shows it and its instances
        after it; a lost GPU's instances are copies of its lost sample (backends/lost.py)."""
        out: list[Sample] = []
        for s in samples:
            if s.device.index not in self._instances:
                out.append(s)
                continue
            insts = self._instances[s.device.index]
            if s.lost is not None:
                out.extend(with_instances(s, insts) if insts else (s,))
                continue
            parent = _parent(s, active=bool(insts))
            table = values(s.device)
            own = [_instance(parent, s, d, table, busy(d)) for d in insts]
            out.extend((_memory(parent, own), *own))
        return tuple(out)

    def usage(self, dev: Device, table: Mapping[str, Value | None], busy: bool
              ) -> tuple[float, int]:
        """(GR_ENGINE_ACTIVE %, FB_USED bytes) of instance `dev`, for its holders' processes."""
        values = _own_values(dev, table, busy)
        active = values.get("DCGM_FI_PROF_GR_ENGINE_ACTIVE")  # None: no GPM (before Hopper)
        used = values["DCGM_FI_DEV_FB_USED"]
        assert isinstance(used, int)
        return (float(active) * 100.0 if isinstance(active, int | float) else 0.0,
                used * 1024 * 1024)


_NOT_ON_MIG_CALLS = frozenset(("nvmlDeviceGetUtilizationRates", "nvmlDeviceGetEncoderUtilization",
                               "nvmlDeviceGetDecoderUtilization"))
"""NVML calls a MIG-enabled GPU answers NotSupported (GPU, memory-copy, encoder and decoder
utilisation: "On MIG-enabled GPUs, querying ... is not currently supported")."""
_REMAPPED_ROWS = "NVML_FI_DEV_REMAPPED_"
"""Row-remapping field values: NotSupported on a MIG-enabled GPU with active instances."""


_NOT_ON_MIG_FIELDS = frozenset(
    f.name for f in BY_NAME.values()
    if f.source.kind == "gpm" or (f.source.kind == "call" and f.source.ref in _NOT_ON_MIG_CALLS))
"""Fields a MIG-enabled GPU never has: whole-GPU GPM and the calls above."""
_NOT_WITH_INSTANCES = _NOT_ON_MIG_FIELDS | frozenset(
    f.name for f in BY_NAME.values()
    if f.source.kind == "fv" and f.source.ref.startswith(_REMAPPED_ROWS))
"""What a MIG-enabled GPU with instances lacks: those and the row-remapping counts."""


def _parent(s: Sample, *, active: bool) -> Sample:
    """A MIG-enabled GPU's own sample: no utilisation rates, no whole-GPU GPM, no row-remapping
    counts while it has instances (`active`), MIG_MODE 1."""
    values = dict(s.values)
    missing = dict(s.missing)
    absent = _NOT_WITH_INSTANCES if active else _NOT_ON_MIG_FIELDS
    for name in list(values):
        if name in absent:
            del values[name]
            missing[name] = _NOT_ON_MIG
    if "DCGM_FI_DEV_MIG_MODE" in values:
        values["DCGM_FI_DEV_MIG_MODE"] = 1
    return s._replace(values=values, missing=missing)


def _memory(parent: Sample, instances: Sequence[Sample]) -> Sample:
    """The parent's FB_USED/FB_FREE as its instances' sum, as NVML reports a MIG GPU."""
    if "DCGM_FI_DEV_FB_USED" not in parent.values:
        return parent
    used = sum(int(s.values.get("DCGM_FI_DEV_FB_USED", 0)) for s in instances)
    values = dict(parent.values)
    values["DCGM_FI_DEV_FB_USED"] = used
    if "DCGM_FI_DEV_FB_FREE" in values:  # used + free stay the GPU's, whatever else is read
        before = int(parent.values["DCGM_FI_DEV_FB_USED"])
        values["DCGM_FI_DEV_FB_FREE"] = max(0, int(values["DCGM_FI_DEV_FB_FREE"]) + before - used)
    return parent._replace(values=values)


def _own_values(dev: Device, table: Mapping[str, Value | None], busy: bool
                ) -> dict[str, Value | None]:
    """An instance's memory (its profile's, in MiB) and profiling ratios (the GPU's busy values
    while it is busy, else 0; absent where the model has no GPM)."""
    m = _PROFILE.match(dev.mig_profile or "")
    assert m is not None
    total = int(m.group(2)) * 1024
    used = int(total * 0.9) if busy else 0
    out: dict[str, Value | None] = {
        "DCGM_FI_DEV_FB_TOTAL": total, "DCGM_FI_DEV_FB_USED": used,
        "DCGM_FI_DEV_FB_FREE": total - used, "DCGM_FI_DEV_FB_RESERVED": 0}
    share = int(m.group(1)) / MAX_SLICES
    for name, v in table.items():
        f = BY_NAME.get(name)
        if f is None or f.scope != "both" or name.startswith("DCGM_FI_DEV_FB_"):
            continue
        if v is None or not busy:
            out[name] = None if v is None else type(v)(0)
        else:  # byte counters scale with the instance's share of the GPU; ratios do not
            out[name] = int(v * share) if isinstance(v, int) else v
    return out


def _instance(parent: Sample, raw: Sample, dev: Device, table: Mapping[str, Value | None],
              busy: bool) -> Sample:
    """One GPU instance: the parent's GPU-level values and series (not P2P), its own
    memory and ratios for the fields the read asked for."""
    wanted = set(raw.values) | set(raw.missing)
    values: dict[str, Value] = {}
    missing: dict[str, str] = {}
    for name, v in parent.values.items():
        f = BY_NAME.get(name)
        if f is None or f.scope != "both":
            values[name] = v
    for name, why in parent.missing.items():
        f = BY_NAME.get(name)
        if f is None or f.scope != "both":
            missing[name] = why
    for name, own in _own_values(dev, table, busy).items():
        if name not in wanted:
            continue
        if own is None:
            missing[name] = raw.missing.get(name, "not supported")
        else:
            values[name] = own
    labeled = tuple(lv for lv in parent.labeled if lv.field != derived.P2P)
    return Sample(dev, values, missing, labeled)
