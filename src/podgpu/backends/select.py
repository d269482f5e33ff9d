"""`-d/--devices`: a backend wrapper that keeps only the selected GPUs and MIG GPU instances.

As dcgm-exporter 4.8.2 (`devicemonitoring.GetMonitoredEntities`): `f` (flex, the default) is the
MIG GPU instances on MIG-enabled GPUs and whole GPUs elsewhere, so a MIG GPU has no parent series
beside its instances and sums over series count each GPU once. The parent
series of a MIG GPU appear only when asked for, in dcgm-exporter's own spelling: `-d g` (every
whole GPU, MIG-enabled ones included) or `-d g+i` (whole GPUs and every instance). A lost
MIG GPU's sample comes with a copy for each of its last known instances (backends/lost.py), so it
is selected as a live one; a lost GPU without known instances is whole and kept in flex.

Selection happens after the read, so one code path serves every backend; the devices left out
still cost their NVML calls (a few ms per GPU), which keeps the NVML backend free of a second
notion of "which devices". Indexes that do not exist are refused at start (exit 2), as
dcgm-exporter's `verifyDevicePresence` refuses them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from podgpu.backends.base import Backend, Reading
from podgpu.errors import ConfigError
from podgpu.fields.catalog import Field
from podgpu.model import Device
from podgpu.model.selection import DeviceSelection


def selected(device: Device, sel: DeviceSelection, mig_gpus: frozenset[int]) -> bool:
    """Whether `device` gets series. Flex (the default): a MIG GPU's instances, not its parent;
    every other GPU whole. `mig_gpus`: indexes of the GPUs with instances in this reading."""
    if sel.flex:
        return device.is_mig or device.index not in mig_gpus
    if device.is_mig:
        return sel.instances is not None and (not sel.instances
                                              or device.mig_gi_id in sel.instances)
    return sel.gpus is not None and (not sel.gpus or device.index in sel.gpus)


def check(devices: Sequence[Device], sel: DeviceSelection) -> None:
    """ConfigError when the selection names a GPU index or GPU-instance id this node lacks."""
    gpus = sorted({d.index for d in devices if not d.is_mig})
    gis = sorted({d.mig_gi_id for d in devices if d.mig_gi_id is not None})
    for want, have, what in ((sel.gpus, gpus, "GPU"), (sel.instances, gis, "MIG GPU instance")):
        missing = sorted(set(want or ()) - set(have))
        if missing:
            raise ConfigError(f"--devices: no {what} {missing[0]} on this node "
                              f"(present: {', '.join(map(str, have)) or 'none'})")


class SelectedBackend:
    """Wraps a backend; `read` and `devices` return only the selected devices."""

    def __init__(self, inner: Backend, sel: DeviceSelection) -> None:
        self._inner = inner
        self._sel = sel
        self.name = inner.name

    def _mig_gpus(self, devices: Sequence[Device]) -> frozenset[int]:
        return frozenset(d.index for d in devices if d.is_mig)

    def open(self) -> None:
        self._inner.open()
        check(self._inner.devices(), self._sel)

    def devices(self) -> tuple[Device, ...]:
        devs = self._inner.devices()
        mig = self._mig_gpus(devs)
        return tuple(d for d in devs if selected(d, self._sel, mig))

    def info(self) -> dict[str, str]:
        return self._inner.info()

    def read(self, fields: Sequence[Field], *, processes: bool = False) -> Reading:
        r = self._inner.read(fields, processes=processes)
        mig = self._mig_gpus([s.device for s in r.samples])
        keep = tuple(s for s in r.samples if selected(s.device, self._sel, mig))
        return replace(r, samples=keep)

    def unavailable_fields(self) -> dict[str, str]:
        return self._inner.unavailable_fields()

    def close(self) -> None:
        self._inner.close()
