"""Turn a field list into the fewest NVML calls per GPU (NVML's API reference).

A `Plan` is built once per field list and reused every cycle: every `fv` field goes into one
`nvmlDeviceGetFieldValues` batch; `call` fields that share a function and argument share one call
(GPU_UTIL and MEM_COPY_UTIL: one utilization call; FB free/used/reserved/total: one memory v2
call); label fields are read once per device; GPM fields are one `nvmlGpmMetricsGet`.
NVML constants named in the catalog are resolved here with getattr on pynvml; a name this pynvml
lacks makes that field unavailable (with the reason), not an error.
"""

from __future__ import annotations

import ctypes
import math
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, NamedTuple

from podgpu.backends import derived
from podgpu.backends.nvml_lib import Lib, text
from podgpu.model.device import EMPTY, Value

if TYPE_CHECKING:
    from podgpu.fields.catalog import Field

ALL_LINKS = 0xFFFFFFFF
CLOCK_REASONS_CALL = "nvmlDeviceGetCurrentClocksEventReasons"

CLOCK_EVENTS = derived.CLOCK_EVENTS  # dcgm-exporter's clock_event label values per bit


_VALUE_MEMBER = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal",
                 6: "usVal"}


class FvEntry(NamedTuple):
    field: Field
    field_id: int
    scope: int | None


class CallGroup(NamedTuple):
    """One NVML call `ref(handle[, arg])` whose result feeds `fields` (possibly none: a call
    made only for the exporter's clock-event count)."""

    ref: str
    arg: str
    fields: tuple[Field, ...]


class RateEntry(NamedTuple):
    field: Field
    field_ids: tuple[int, ...]
    """Cumulative NVML field ids summed over all links (scope 0xFFFFFFFF) or one link."""
    scope: int = ALL_LINKS


class Plan(NamedTuple):
    fv: tuple[FvEntry, ...] = ()
    rates: tuple[RateEntry, ...] = ()
    calls: tuple[CallGroup, ...] = ()
    labels: tuple[Field, ...] = ()
    system: tuple[Field, ...] = ()
    gpm: tuple[tuple[Field, int], ...] = ()
    events: tuple[Field, ...] = ()
    xid_count: Field | None = None
    clock_count: Field | None = None
    health: Field | None = None
    """DCGM_EXP_GPU_HEALTH_STATUS, derived per GPU after its reads (backends/derived.py)."""
    p2p: Field | None = None
    """DCGM_EXP_P2P_STATUS, from nvmlDeviceGetP2PStatus for each GPU pair."""
    unknown: Mapping[str, str] = EMPTY
    """Fields this pynvml cannot read at all (missing constant), with why."""

    def batch(self) -> list[int | tuple[int, int]]:
        """The ids for the one nvmlDeviceGetFieldValues call: fv fields, then rate counters."""
        ids: list[int | tuple[int, int]] = [
            e.field_id if e.scope is None else (e.field_id, e.scope) for e in self.fv
        ]
        for r in self.rates:
            ids.extend((fid, r.scope) for fid in r.field_ids)
        return ids


def build_plan(lib: Lib, fields: Sequence[Field]) -> Plan:
    fv: list[FvEntry] = []
    rates: list[RateEntry] = []
    calls: dict[tuple[str, str], list[Field]] = {}
    labels: list[Field] = []
    system: list[Field] = []
    gpm: list[tuple[Field, int]] = []
    events: list[Field] = []
    xid_count: Field | None = None
    clock_count: Field | None = None
    health: Field | None = None
    p2p: Field | None = None
    unknown: dict[str, str] = {}

    def resolve(name: str, f: Field) -> Any:
        value = lib.const(name)
        if value is None:
            unknown[f.name] = f"this nvidia-ml-py has no {name}"
        return value

    for f in fields:
        src = f.source
        if src.kind == "fv":
            fid = resolve(src.ref, f)
            scope = int(src.arg, 0) if src.arg else None
            if fid is not None:
                fv.append(FvEntry(f, int(fid), scope))
        elif src.kind == "rate":
            ids = [resolve(r, f) for r in (src.ref, src.arg) if r]
            if all(i is not None for i in ids):
                link = int(src.pick) if src.pick else ALL_LINKS  # one link or all
                rates.append(RateEntry(f, tuple(int(i) for i in ids), link))
        elif src.kind == "call":
            if resolve(src.ref, f) is None or (src.arg and not src.arg.isdigit()
                                                   and resolve(src.arg, f) is None):
                continue
            if f.is_label:
                labels.append(f)
            else:
                calls.setdefault((src.ref, src.arg), []).append(f)
        elif src.kind == "system":
            if resolve(src.ref, f) is not None:
                system.append(f)
        elif src.kind == "gpm":
            mid = resolve(src.ref, f)
            if mid is not None:
                gpm.append((f, int(mid)))
        elif src.kind == "event":
            events.append(f)
        elif src.kind == "exporter":
            if src.ref == "DCGM_FI_DEV_XID_ERRORS":
                xid_count = f
            elif src.ref == "DCGM_FI_DEV_CLOCKS_EVENT_REASONS":
                clock_count = f
                if lib.const(CLOCK_REASONS_CALL) is None:
                    unknown[f.name] = f"this nvidia-ml-py has no {CLOCK_REASONS_CALL}"
                    clock_count = None
                else:
                    calls.setdefault((CLOCK_REASONS_CALL, ""), [])
            elif src.ref == "health":
                health = f
            elif resolve(src.ref, f) is not None and resolve(src.arg, f) is not None:
                p2p = f
    return Plan(
        fv=tuple(fv),
        rates=tuple(rates),
        calls=tuple(CallGroup(ref, arg, tuple(fs)) for (ref, arg), fs in calls.items()),
        labels=tuple(labels),
        system=tuple(system),
        gpm=tuple(gpm),
        events=tuple(events),
        xid_count=xid_count,
        clock_count=clock_count,
        health=health,
        p2p=p2p,
        unknown=MappingProxyType(unknown),
    )


def fv_raw(fv: Any, ref: str) -> Any:
    """The value of one nvmlFieldValue_t, by its valueType. MEMORY_TEMP is read as uiVal whatever
    valueType says, as DCGM does (nvbugs/4300930)."""
    if ref == "NVML_FI_DEV_MEMORY_TEMP":
        return fv.value.uiVal
    return getattr(fv.value, _VALUE_MEMBER.get(int(fv.valueType), "ullVal"))


def convert(f: Field, raw: Any) -> Value | None:
    """NVML value -> DCGM unit and type (the catalog's scale); None when it is not a sane
    reading (NaN, or a temperature above 200 C, which DCGM also drops)."""
    if f.value_type == "str":
        return text(raw)
    scale = f.source.scale
    value = float(raw) * scale if scale != 1.0 else raw
    if isinstance(value, float) and math.isnan(value):
        return None
    if f.unit == "C" and float(value) > 200:
        return None
    if f.value_type == "int":
        return int(value)
    return float(value)


def pick(result: Any, how: str) -> Any:
    """Select one value from a call's result: a tuple index ('0') or an attribute ('gpu')."""
    if not how:
        return result
    if how.isdigit():
        return result[int(how)]
    return getattr(result, how)


def _memory_info(lib: Lib, handle: Any, arg: str) -> Any:
    return lib.m.nvmlDeviceGetMemoryInfo(handle, version=lib.const(arg) if arg else None)


def _memory_affinity(lib: Lib, handle: Any, arg: str) -> Any:
    """DCGM asks for the NUMA-node scope (0 in nvml.h)."""
    return lib.m.nvmlDeviceGetMemoryAffinity(handle, int(arg),
                                             lib.const("NVML_AFFINITY_SCOPE_NODE") or 0)


def _compute_capability(lib: Lib, handle: Any, arg: str) -> int:
    """DCGM packs (major, minor) in one int."""
    major, minor = lib.m.nvmlDeviceGetCudaComputeCapability(handle)
    return int(major) << 16 | int(minor)


def _sram_ecc_status(lib: Lib, handle: Any, arg: str) -> Any:
    """The caller passes a versioned struct; a binding without the struct answers as
    NotSupported."""
    struct, version = (lib.const("c_nvmlEccSramErrorStatus_v1_t"),
                       lib.const("nvmlEccSramErrorStatus_v1"))
    if struct is None or version is None:
        raise lib.error(lib.const("NVML_ERROR_NOT_SUPPORTED") or 3)
    status = struct()
    status.version = version
    lib.m.nvmlDeviceGetSramEccErrorStatus(handle, ctypes.byref(status))
    return status


def _license_status(lib: Lib, handle: Any, arg: str) -> int:
    """DCGM_FI_DEV_VGPU_LICENSE_STATUS as DCGM computes it (NVML's API reference)."""
    features = lib.m.nvmlDeviceGetGridLicensableFeatures(handle)
    if not getattr(features, "isGridLicenseSupported", 0):
        return 0
    vgpu = int(getattr(lib.m, "NVML_GRID_LICENSE_FEATURE_CODE_VGPU", 1))
    count = int(getattr(features, "licensableFeaturesCount", 0))
    for feature in list(features.gridLicensableFeatures)[:count]:
        if int(feature.featureCode) == vgpu:
            return 1 if int(feature.featureState) > 0 else 0
    return 0


def _brand_name(lib: Lib, handle: Any, arg: str) -> str:
    """NVML brand enum -> its name ('NVIDIA', 'TESLA', ...)."""
    brand = lib.m.nvmlDeviceGetBrand(handle)
    for name in dir(lib.m):
        if (name.startswith("NVML_BRAND_") and name != "NVML_BRAND_COUNT"
                and getattr(lib.m, name) == brand):
            return name.removeprefix("NVML_BRAND_")
    return str(brand)


_ADAPTED: dict[str, Callable[[Lib, Any, str], Any]] = {
    "nvmlDeviceGetMemoryInfo": _memory_info,
    "nvmlDeviceGetGridLicensableFeatures": _license_status,
    "nvmlDeviceGetBrand": _brand_name,
    "nvmlDeviceGetMemoryAffinity": _memory_affinity,
    "nvmlDeviceGetCudaComputeCapability": _compute_capability,
    "nvmlDeviceGetSramEccErrorStatus": _sram_ecc_status,
}
"""The calls that need adapting, each with the function that makes it: (lib, handle, the
catalog's arg) -> the value."""


def call(lib: Lib, handle: Any, ref: str, arg: str) -> Any:
    """Make one NVML call as the catalog names it, through its adapter if it needs one."""
    adapted = _ADAPTED.get(ref)
    if adapted is not None:
        return adapted(lib, handle, arg)
    fn = getattr(lib.m, ref)
    if arg.isdigit():  # a count, not a constant: nvmlDeviceGetCpuAffinity's cpuSetSize
        return fn(handle, int(arg))
    if arg:
        return fn(handle, lib.const(arg))
    return fn(handle)
