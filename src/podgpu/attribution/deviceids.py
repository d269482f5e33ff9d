"""Device-plugin device IDs: parse every known form and match it to a `Device` of this node.

Forms (the kubelet's PodResources API and dcgm-exporter's device-plugin parsing):

| id                         | names                      | replica |
|----------------------------|----------------------------|---------|
| `GPU-<uuid>`               | whole GPU by UUID          | -       |
| `GPU-<uuid>::N`            | time-slicing/MPS replica   | N       |
| `MIG-<uuid>`               | MIG instance by MIG UUID   | -       |
| `MIG-<uuid>::N`            | shared MIG instance        | N       |
| `MIG-GPU-<uuid>/<gi>/<ci>` | MIG instance, R450/R460    | -       |
| `nvidia<N>`                | whole GPU by minor (GKE)   | -       |
| `nvidia<N>/vgpu<K>`        | GKE time-sharing           | K       |
| `nvidia<N>/gi<G>[/vgpu<K>]`| GKE MIG instance           | K       |

`--kubernetes-gpu-id-type` says which whole-GPU form the node's device plugin reports, as in
dcgm-exporter: under `uid`, `nvidia<N>` and `nvidia<N>/vgpu<K>` match nothing; under
`device-name`, `GPU-<uuid>[::N]` match nothing. MIG forms match under both (dcgm-exporter keys MIG
series the same way regardless of the id type). A mismatch is logged once with the fix.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from podgpu.model import Device

log = logging.getLogger(__name__)

GpuIdType = Literal["uid", "device-name"]
GPU_ID_TYPES: tuple[GpuIdType, ...] = ("uid", "device-name")

NVIDIA_GPU_RESOURCE = "nvidia.com/gpu"
NVIDIA_MIG_RESOURCE_PREFIX = "nvidia.com/mig-"

_UUID = r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
# Numbers are at most 9 digits: a peer's `::<5000 digits>` is an unknown form, not a ValueError
# from int().
_N = r"\d{1,9}"
_GPU = re.compile(rf"^(GPU-{_UUID})(?:::({_N}))?$")
_MIG = re.compile(rf"^(MIG-{_UUID})(?:::({_N}))?$")
_MIG_OLD = re.compile(rf"^MIG-(GPU-{_UUID})/({_N})/({_N})$")
_GKE = re.compile(rf"^(nvidia{_N})(?:/gi({_N}))?(?:/vgpu({_N}))?$")
# NVIDIA DRA driver device names (the kubelet's PodResources API): `gpu-<minor>`,
# `gpu-<parent minor>-mig-<profile without dots>-<profile id>-<placement start>`
_DRA_GPU = re.compile(rf"^gpu-({_N})$")
_DRA_MIG = re.compile(rf"^gpu-({_N})-mig-([0-9a-z+]{{1,32}})-({_N})-({_N})$")
DRA_GPU_RESOURCE = "dra/gpu.nvidia.com"

Kind = Literal["gpu-uuid", "mig-uuid", "mig-legacy", "gpu-name", "mig-name", "dra-gpu",
               "dra-mig"]


@dataclass(frozen=True, slots=True)
class DeviceId:
    """A parsed device id. Fields not used by `kind` are None."""

    raw: str
    kind: Kind
    gpu_uuid: str | None = None
    """`GPU-<uuid>` for gpu-uuid and mig-legacy ids."""
    mig_uuid: str | None = None
    """`MIG-<uuid>` for mig-uuid ids."""
    device_name: str | None = None
    """`nvidia<N>` for gpu-name and mig-name ids."""
    gi: int | None = None
    """GPU-instance id for mig-legacy and mig-name ids."""
    replica: int | None = None
    """The sharing suffix `::N` or `/vgpuN`; None for an exclusive id."""
    profile: str | None = None
    """MIG profile without dots (`1g24gb`) for dra-mig ids."""


def parse_device_id(raw: str) -> DeviceId | None:
    """Parse one device id from the kubelet; None for a form this module does not know.

    Replica suffixes are split at the first `::` as the NVIDIA plugin's AnnotatedID.Split does.
    """
    s = raw.strip()
    if m := _GPU.match(s):
        return DeviceId(raw, "gpu-uuid", gpu_uuid=_norm_uuid(m[1]), replica=_int(m[2]))
    if m := _MIG_OLD.match(s):
        return DeviceId(raw, "mig-legacy", gpu_uuid=_norm_uuid(m[1]), gi=int(m[2]))
    if m := _MIG.match(s):
        return DeviceId(raw, "mig-uuid", mig_uuid=_norm_uuid(m[1]), replica=_int(m[2]))
    if m := _DRA_GPU.match(s):
        return DeviceId(raw, "dra-gpu", device_name=f"nvidia{m[1]}")
    if m := _DRA_MIG.match(s):
        return DeviceId(raw, "dra-mig", device_name=f"nvidia{m[1]}", profile=m[2])
    if m := _GKE.match(s):
        kind: Kind = "mig-name" if m[2] is not None else "gpu-name"
        return DeviceId(raw, kind, device_name=m[1], gi=_int(m[2]), replica=_int(m[3]))
    return None


def _int(text: str | None) -> int | None:
    return int(text) if text is not None else None


def _norm_uuid(text: str) -> str:
    """`GPU-`/`MIG-` prefix as is, hex digits lower-case (NVML prints lower-case)."""
    prefix, _, rest = text.partition("-")
    return f"{prefix}-{rest.lower()}"


def is_gpu_resource(name: str, extra_names: Iterable[str] = ()) -> bool:
    """True for `nvidia.com/gpu`, any `nvidia.com/mig-*`, and the `--nvidia-resource-names`.

    Renamed sharing resources such as `nvidia.com/gpu.shared` count only when listed (#151).
    """
    return (
        name == NVIDIA_GPU_RESOURCE
        or name == DRA_GPU_RESOURCE  # listed only with --kubernetes-enable-dra (kubelet.flatten)
        or name.startswith(NVIDIA_MIG_RESOURCE_PREFIX)
        or name in extra_names
    )


class DeviceIndex:
    """Looks device ids up among one cycle's devices. Build once per distinct device tuple."""

    def __init__(self, devices: Iterable[Device], id_type: GpuIdType = "uid") -> None:
        if id_type not in GPU_ID_TYPES:
            raise ValueError(f"gpu id type {id_type!r} is not one of {GPU_ID_TYPES}")
        self.id_type = id_type
        self._by_uuid: dict[str, Device] = {}
        self._by_name: dict[str, Device] = {}
        self._by_mig_uuid: dict[str, Device] = {}
        self._by_uuid_gi: dict[tuple[str, int], Device] = {}
        self._by_name_gi: dict[tuple[str, int], Device] = {}
        self._by_name_profile: dict[tuple[str, str], list[Device]] = {}
        for d in devices:
            uuid = _norm_uuid(d.uuid)
            if d.mig_gi_id is None:
                self._by_uuid[uuid] = d
                self._by_name[d.device_name] = d
            else:
                if d.mig_uuid:
                    self._by_mig_uuid[_norm_uuid(d.mig_uuid)] = d
                self._by_uuid_gi[(uuid, d.mig_gi_id)] = d
                self._by_name_gi[(d.device_name, d.mig_gi_id)] = d
                key = (d.device_name, (d.mig_profile or "").replace(".", ""))
                self._by_name_profile.setdefault(key, []).append(d)

    def match(self, dev_id: DeviceId) -> Device | None:
        """The device `dev_id` names on this node, or None (absent, or wrong id type)."""
        k = dev_id.kind
        if k == "gpu-uuid":
            if self.id_type != "uid":
                return None
            return self._by_uuid.get(dev_id.gpu_uuid or "")
        if k == "gpu-name":
            if self.id_type != "device-name":
                return None
            return self._by_name.get(dev_id.device_name or "")
        if k == "dra-gpu":  # DRA names GPUs by minor whatever the device plugin's id type
            return self._by_name.get(dev_id.device_name or "")
        if k == "dra-mig":
            # parent minor + profile; several instances of one profile on a GPU are ambiguous
            # without the driver's ResourceSlice (placement -> GI id), so they match nothing
            same = self._by_name_profile.get((dev_id.device_name or "", dev_id.profile or ""), [])
            return same[0] if len(same) == 1 else None
        if k == "mig-uuid":
            return self._by_mig_uuid.get(dev_id.mig_uuid or "")
        if k == "mig-legacy":
            return self._by_uuid_gi.get((dev_id.gpu_uuid or "", dev_id.gi or 0))
        return self._by_name_gi.get((dev_id.device_name or "", dev_id.gi or 0))

    def why_unmatched(self, dev_id: DeviceId) -> str:
        """A one-line reason for logs when `match` returned None."""
        if dev_id.kind == "gpu-uuid" and self.id_type != "uid" and dev_id.gpu_uuid in self._by_uuid:
            return "it is a UUID id but --kubernetes-gpu-id-type=device-name; use uid"
        if (
            dev_id.kind == "gpu-name"
            and self.id_type != "device-name"
            and dev_id.device_name in self._by_name
        ):
            return "it is a device-name id (GKE) but --kubernetes-gpu-id-type=uid; use device-name"
        if dev_id.kind == "dra-mig" and len(self._by_name_profile.get(
                (dev_id.device_name or "", dev_id.profile or ""), [])) > 1:
            return "several MIG instances of that profile on the GPU; DRA placement is not mapped"
        return "no such GPU or MIG instance on this node"


def index_for(
    devices: tuple[Device, ...], id_type: GpuIdType, cache: dict[tuple[Device, ...], DeviceIndex]
) -> DeviceIndex:
    """A `DeviceIndex` for `devices`, reused while the device set stays the same."""
    idx = cache.get(devices)
    if idx is None:
        cache.clear()
        idx = cache[devices] = DeviceIndex(devices, id_type)
    return idx

