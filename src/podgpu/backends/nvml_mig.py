"""MIG enumeration: one podgpu Device per GPU instance of a MIG-enabled GPU (NVML's API reference).

Series of an instance carry the parent's gpu/UUID/device/modelName labels plus GPU_I_PROFILE and
GPU_I_ID, as dcgm-exporter's do. The profile comes from the MIG device's name ("NVIDIA H100 80GB
HBM3 MIG 1g.10gb" -> "1g.10gb"), which needs no privilege (nvmlDeviceGetGpuInstanceById does).
A GPU instance split into several compute instances shows up as several MIG devices with one GI
id; podgpu keeps one Device per GI (the first MIG device handle found), like dcgm-exporter.
"""

from __future__ import annotations

import re
from typing import Any, NamedTuple

from podgpu.backends.nvml_lib import INVALID_ARGUMENT, NOT_FOUND, NOT_SUPPORTED, Lib, text
from podgpu.model import Device

_PROFILE = re.compile(r"(\d+g\.\d+gb(?:\+\w+)?)\s*$", re.IGNORECASE)


def profile_from_name(name: str) -> str:
    """'NVIDIA A100-SXM4-40GB MIG 1g.5gb' -> '1g.5gb'; the last word when no profile matches."""
    match = _PROFILE.search(name)
    if match:
        return match.group(1)
    _head, sep, tail = name.rpartition(" MIG ")
    return tail.strip() if sep else name.split()[-1] if name.split() else name


class MigInstance(NamedTuple):
    device: Device
    handle: Any
    """A MIG device handle inside this GPU instance (memory info, processes)."""
    gi_id: int


def mig_enabled(lib: Lib, handle: Any) -> bool:
    """True when MIG mode is currently on; GPUs without MIG (NotSupported) count as off."""
    fn = lib.const("nvmlDeviceGetMigMode")
    if fn is None:
        return False
    try:
        current, _pending = fn(handle)
    except lib.error as exc:
        if lib.code(exc) in (NOT_SUPPORTED, INVALID_ARGUMENT):
            return False
        raise
    return int(current) == int(getattr(lib.m, "NVML_DEVICE_MIG_ENABLE", 1))


def enumerate_instances(lib: Lib, handle: Any, parent: Device) -> tuple[MigInstance, ...]:
    """The GPU instances of a MIG-enabled GPU, ordered by GI id; () when MIG is off."""
    if not mig_enabled(lib, handle):
        return ()
    m = lib.m
    count = int(m.nvmlDeviceGetMaxMigDeviceCount(handle))
    found: dict[int, MigInstance] = {}
    for slot in range(count):
        try:
            mig = m.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)
        except lib.error as exc:
            if lib.code(exc) in (NOT_FOUND, INVALID_ARGUMENT):
                continue  # empty slot (dcgm-exporter skips both)
            raise
        gi_id = int(m.nvmlDeviceGetGpuInstanceId(mig))
        if gi_id in found:
            continue  # another compute instance of the same GPU instance
        device = parent._replace(
            mig_profile=profile_from_name(text(m.nvmlDeviceGetName(mig))),
            mig_gi_id=gi_id,
            mig_uuid=text(m.nvmlDeviceGetUUID(mig)),
        )
        found[gi_id] = MigInstance(device, mig, gi_id)
    return tuple(found[g] for g in sorted(found))
