"""`-d/--devices`: a backend wrapper that keeps only the selected GPUs and MIG GPU instances.

As dcgm-exporter 4.8.2 (`devicemonitoring.GetMonitoredEntities`): `f` (flex, the default) is the
MIG GPU instances on MIG-enabled GPUs and whole GPUs elsewhere, so a MIG GPU has no parent series
beside its instances and sums over series count each GPU once. The parent
series of a MIG GPU appear only when asked for, in dcgm-exporter's own spelling: `-d g` (every
whole GPU, MIG-enabled ones included) or `-d g+i` (whole GPUs and every instance). A lost
MIG GPU's sample comes with a copy for each of its last known instances (backends/lost.py), so it
is selected as a live one; a lost GPU without known instances is whole and kept in flex.

`i` ranges are DCGM's GPU-instance entity ids, as dcgm-exporter matches them
(`deviceinfo.gpuInstanceIDExists` compares the range with each instance's `EntityId`), not the
NVML GPU-instance ids of the `GPU_I_ID` label. DCGM numbers a GPU's instances when it enumerates
them (DcgmCacheManager.cpp, the MIG hierarchy): `gpu index x nvmlDeviceGetMaxMigDeviceCount (7;
4 on an A30) + the instance's position on its GPU`, positions in the order DCGM asks NVML for
them: by GPU-instance profile id (NVML_GPU_INSTANCE_PROFILE_1_SLICE = 0, 2_SLICE, 3_SLICE,
4_SLICE, 7_SLICE, 8_SLICE, 6_SLICE, then the variants: `+me` 1 and 2 slices, the 1-slice
profile with twice the memory, `+gfx`, `-me`, `+me.all`), then, within a profile, by GPU-instance
id (assumed: the order nvmlDeviceGetGpuInstances lists them in). So on GPU 0 with instances 1 and
2 of one profile `-d i:0` is instance 1. The numbering is logged at start.

Selection happens after the read, so one code path serves every backend; the devices left out
still cost their NVML calls (a few ms per GPU), which keeps the NVML backend free of a second
notion of "which devices". Indexes that do not exist are refused at start (exit 2), as
dcgm-exporter's `verifyDevicePresence` refuses them.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from podgpu.backends.base import Backend, Reading
from podgpu.errors import ConfigError
from podgpu.model import Device
from podgpu.model.device import mig_slices
from podgpu.model.selection import DeviceSelection

if TYPE_CHECKING:
    from podgpu.fields.catalog import Field

log = logging.getLogger("podgpu")

_PROFILE = re.compile(r"^(\d+)g\.(\d+)gb(.*)$")
_BASE = {1: 0, 2: 1, 3: 2, 4: 3, 7: 4, 8: 5, 6: 6}
"""NVML's GPU-instance profile ids of the plain profiles, by compute slices."""
_VARIANT = {("+me", 1): 7, ("+me", 2): 8, ("+gfx", 1): 10, ("+gfx", 2): 11, ("+gfx", 4): 12,
            ("-me", 1): 13, ("-me", 2): 14, ("+me.all", 1): 15, ("+me.all", 2): 16,
            ("+gfx", 3): 17}
"""The variants' profile ids (NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1 = 7 ... 3_SLICE_GFX = 17)."""
_REV2 = 9
"""NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV2: one slice with twice the memory (1g.20gb on an
H100 80GB beside 1g.10gb)."""
_LAST = 1 << 10


def _profile_id(profile: str, smallest_1g: int | None) -> int:
    m = _PROFILE.match(profile)
    if m is None:
        return _LAST
    slices, gb, suffix = int(m[1]), int(m[2]), m[3]
    if suffix:
        return _VARIANT.get((suffix, slices), _LAST)
    if slices == 1 and smallest_1g is not None and gb > smallest_1g:
        return _REV2
    return _BASE.get(slices, _LAST)


def entity_ids(devices: Sequence[Device]) -> dict[str, int]:
    """Each MIG GPU instance's DCGM entity id (Device.key -> id; the module docstring's rule)."""
    by_gpu: dict[int, list[Device]] = {}
    for d in devices:
        if d.is_mig:
            by_gpu.setdefault(d.index, []).append(d)
    out: dict[str, int] = {}
    for gpu, insts in by_gpu.items():
        ones = [int(m[2]) for d in insts if (m := _PROFILE.match(d.mig_profile or ""))
                and m[1] == "1" and not m[3]]
        smallest = min(ones) if ones else None
        ordered = sorted(insts, key=lambda d: (_profile_id(d.mig_profile or "", smallest),
                                               d.mig_gi_id or 0))
        base = gpu * mig_slices(insts[0].model)
        for k, d in enumerate(ordered):
            out[d.key] = base + k
    return out


def selected(device: Device, sel: DeviceSelection, mig_gpus: frozenset[int],
             ids: Mapping[str, int] | None = None) -> bool:
    """Whether `device` gets series. Flex (the default): a MIG GPU's instances, not its parent;
    every other GPU whole. `mig_gpus`: indexes of the GPUs with instances in this reading;
    `ids`: the instances' DCGM entity ids (`entity_ids`), which `i` ranges name."""
    if sel.flex:
        return device.is_mig or device.index not in mig_gpus
    if device.is_mig:
        return sel.instances is not None and (not sel.instances or (
            ids or {}).get(device.key) in sel.instances)
    return sel.gpus is not None and (not sel.gpus or device.index in sel.gpus)


def check(devices: Sequence[Device], sel: DeviceSelection) -> dict[str, int]:
    """ConfigError when the selection names a GPU index or GPU-instance id this node lacks;
    else the instances' DCGM entity ids (`entity_ids`)."""
    ids = entity_ids(devices)
    gpus = sorted({d.index for d in devices if not d.is_mig})
    gis = sorted(ids.values())
    for want, have, what in ((sel.gpus, gpus, "GPU"),
                             (sel.instances, gis, "MIG GPU instance (DCGM entity id)")):
        missing = sorted(set(want or ()) - set(have))
        if missing:
            raise ConfigError(f"--devices: no {what} {missing[0]} on this node "
                              f"(present: {', '.join(map(str, have)) or 'none'})")
    return ids


class SelectedBackend:
    """Wraps a backend; `read` and `devices` return only the selected devices."""

    def __init__(self, inner: Backend, sel: DeviceSelection) -> None:
        self._inner = inner
        self._sel = sel
        self.name = inner.name
        self._ids: tuple[tuple[str, ...], dict[str, int]] = ((), {})
        """The last device keys and their entity ids: they change only with the MIG layout."""

    def _mig_gpus(self, devices: Sequence[Device]) -> frozenset[int]:
        return frozenset(d.index for d in devices if d.is_mig)

    def _entity_ids(self, devices: Sequence[Device]) -> dict[str, int] | None:
        """`entity_ids` when `i` ranges need them (None otherwise), worked out again only when
        the devices' keys change."""
        if not self._sel.instances:
            return None
        keys = tuple(d.key for d in devices)
        if keys != self._ids[0]:
            self._ids = (keys, entity_ids(devices))
        return self._ids[1]

    def open(self) -> None:
        self._inner.open()
        devices = self._inner.devices()
        ids = check(devices, self._sel)
        self._ids = (tuple(d.key for d in devices), ids)
        if ids and self._sel.instances:
            by_key = {d.key: d for d in devices}
            log.info("-d i: MIG GPU instances by DCGM entity id: %s", ", ".join(
                f"{n} = GPU {by_key[k].index} GPU_I_ID {by_key[k].mig_gi_id}"
                for k, n in sorted(ids.items(), key=lambda x: x[1])))

    def devices(self) -> tuple[Device, ...]:
        devs = self._inner.devices()
        mig = self._mig_gpus(devs)
        ids = self._entity_ids(devs)
        return tuple(d for d in devs if selected(d, self._sel, mig, ids))

    def info(self) -> dict[str, str]:
        return self._inner.info()

    def read(self, fields: Sequence[Field], *, processes: bool = False) -> Reading:
        r = self._inner.read(fields, processes=processes)
        devs = [s.device for s in r.samples]
        mig = self._mig_gpus(devs)
        ids = self._entity_ids(devs)
        keep = tuple(s for s in r.samples if selected(s.device, self._sel, mig, ids))
        return r._replace(samples=keep)

    def unavailable_fields(self) -> dict[str, str]:
        return self._inner.unavailable_fields()

    def close(self) -> None:
        self._inner.close()
