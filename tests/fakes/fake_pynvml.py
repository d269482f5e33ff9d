"""A fake `pynvml` module: GPUs whose behaviour tests set, including what hardware will not do on
demand (NotSupported per field, GpuIsLost mid-run and back, init failures, MIG layouts, no GPM).

It mirrors pynvml's surface that podgpu uses: the same function and constant names, errors that
are `NVMLError` subclasses carrying `.value`, field values with `nvmlReturn`/`valueType`/`value`,
GPM structs with `metrics[i].metricId/nvmlReturn/value`. Every call is counted in `calls`, so tests
can assert how many NVML calls a cycle made. Constant values are pynvml 13.615.71's.
"""

from __future__ import annotations

import collections
import threading
import time
from dataclasses import dataclass, field
from types import ModuleType, SimpleNamespace
from typing import Any

# NVML return codes (nvml.h)
SUCCESS, INVALID_ARGUMENT, NOT_SUPPORTED, NO_PERMISSION, NOT_FOUND = 0, 2, 3, 4, 6
DRIVER_NOT_LOADED, TIMEOUT, LIBRARY_NOT_FOUND, GPU_IS_LOST, UNKNOWN = 9, 10, 12, 15, 999

_ERROR_NAMES = {
    1: "Uninitialized", 2: "InvalidArgument", 3: "NotSupported", 4: "NoPermission",
    6: "NotFound", 9: "DriverNotLoaded", 10: "Timeout", 12: "LibraryNotFound",
    13: "FunctionNotFound", 15: "GpuIsLost", 18: "LibRmVersionMismatch", 999: "Unknown",
}


class NVMLError(Exception):
    """pynvml's error: `NVMLError(code)` returns the subclass for that code, `.value` = code."""

    _classes: dict[int, type[NVMLError]] = {}
    value: int

    def __new__(cls, value: int = UNKNOWN) -> NVMLError:
        if cls is NVMLError:
            cls = NVMLError._classes.get(value, NVMLError)
        obj = Exception.__new__(cls)
        obj.value = value
        return obj

    def __init__(self, value: int = UNKNOWN) -> None:
        super().__init__(value)

    def __str__(self) -> str:
        return _ERROR_NAMES.get(self.value, f"NVML Error with code {self.value}")


for _code, _name in _ERROR_NAMES.items():
    NVMLError._classes[_code] = type(f"NVMLError_{_name}", (NVMLError,), {})

CONSTANTS: dict[str, Any] = {
    "NVML_CLOCK_SM": 1, "NVML_CLOCK_MEM": 2, "NVML_TEMPERATURE_GPU": 0,
    "NVML_P2P_CAPS_INDEX_NVLINK": 2, "NVML_TEMPERATURE_THRESHOLD_SLOWDOWN": 1,
    "NVML_INFOROM_OEM": 0, "NVML_INFOROM_ECC": 1, "NVML_INFOROM_POWER": 2,
    "nvmlMemory_v2": 0x02000028,
    "NVML_DEVICE_MIG_DISABLE": 0, "NVML_DEVICE_MIG_ENABLE": 1,
    "NVML_GPM_METRICS_GET_VERSION": 1, "NVML_GRID_LICENSE_FEATURE_CODE_VGPU": 1,
    "nvmlEventTypeXidCriticalError": 0x8, "nvmlEventTypeClock": 0x10,
    "nvmlEventMigConfigChange": 0x100,
    "NVML_BRAND_UNKNOWN": 0, "NVML_BRAND_TESLA": 2, "NVML_BRAND_NVIDIA": 14,
    "NVML_FI_DEV_ECC_SBE_VOL_TOTAL": 3, "NVML_FI_DEV_ECC_DBE_VOL_TOTAL": 4,
    "NVML_FI_DEV_ECC_SBE_AGG_TOTAL": 5, "NVML_FI_DEV_ECC_DBE_AGG_TOTAL": 6,
    "NVML_FI_DEV_RETIRED_SBE": 29, "NVML_FI_DEV_RETIRED_DBE": 30,
    "NVML_FI_DEV_RETIRED_PENDING": 31,
    "NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL": 38,
    "NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL": 45,
    "NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL": 52,
    "NVML_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL": 59,
    "NVML_FI_DEV_PERF_POLICY_POWER": 74, "NVML_FI_DEV_PERF_POLICY_THERMAL": 75,
    "NVML_FI_DEV_PERF_POLICY_SYNC_BOOST": 76, "NVML_FI_DEV_PERF_POLICY_BOARD_LIMIT": 77,
    "NVML_FI_DEV_PERF_POLICY_LOW_UTILIZATION": 78, "NVML_FI_DEV_PERF_POLICY_RELIABILITY": 79,
    "NVML_FI_DEV_MEMORY_TEMP": 82, "NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION": 83,
    "NVML_FI_DEV_PCIE_REPLAY_COUNTER": 94,
    "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX": 138, "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX": 139,
    "NVML_FI_DEV_REMAPPED_COR": 142, "NVML_FI_DEV_REMAPPED_UNC": 143,
    "NVML_FI_DEV_REMAPPED_PENDING": 144, "NVML_FI_DEV_REMAPPED_FAILURE": 145,
    "NVML_GPM_METRIC_GRAPHICS_UTIL": 1, "NVML_GPM_METRIC_SM_UTIL": 2,
    "NVML_GPM_METRIC_SM_OCCUPANCY": 3, "NVML_GPM_METRIC_ANY_TENSOR_UTIL": 5,
    "NVML_GPM_METRIC_DRAM_BW_UTIL": 10, "NVML_GPM_METRIC_FP64_UTIL": 11,
    "NVML_GPM_METRIC_FP32_UTIL": 12, "NVML_GPM_METRIC_FP16_UTIL": 13,
    "NVML_GPM_METRIC_PCIE_TX_PER_SEC": 20, "NVML_GPM_METRIC_PCIE_RX_PER_SEC": 21,
    "NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC": 60, "NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC": 61,
}
FI_NAMES = {v: k for k, v in CONSTANTS.items() if k.startswith("NVML_FI_")}
GPM_METRIC_MAX = 477


def h200_values() -> dict[str, Any]:
    """What an idle H200 answered (bench/results, driver 580.159.04), keyed by NVML function or
    field-id constant name."""
    return {
        "nvmlDeviceGetClockInfo": {1: 345, 2: 3201},
        "nvmlDeviceGetCurrentClocksEventReasons": 0x1,
        "nvmlDeviceGetPerformanceState": 0,
        "nvmlDeviceGetTemperature": 35,
        "nvmlDeviceGetPowerUsage": 77427,
        "nvmlDeviceGetPowerManagementLimit": 700000,
        "nvmlDeviceGetEnforcedPowerLimit": 700000,
        "nvmlDeviceGetTemperatureThreshold": {1: 90},
        "nvmlDeviceGetP2PStatus": 0,
        "nvmlDeviceGetUtilizationRates": SimpleNamespace(gpu=0, memory=0),
        "nvmlDeviceGetEncoderUtilization": [0, 100000],
        "nvmlDeviceGetDecoderUtilization": [0, 100000],
        "nvmlDeviceGetMemoryInfo": SimpleNamespace(total=143771 * 2**20, free=143155 * 2**20,
                                                   used=0, reserved=615 * 2**20 + 12345),
        "nvmlDeviceGetGridLicensableFeatures": SimpleNamespace(
            isGridLicenseSupported=0, licensableFeaturesCount=0, gridLicensableFeatures=[]),
        "nvmlDeviceGetBrand": 14,
        "nvmlDeviceGetSerial": b"1653724050116",
        "nvmlDeviceGetInforomVersion": {0: "2.1", 1: "7.16"},
        "nvmlDeviceGetInforomImageVersion": "G520.0282.02.02",
        "nvmlDeviceGetVbiosVersion": "96.00.A5.00.1A",
        "NVML_FI_DEV_MEMORY_TEMP": 36,
        "NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION": 3081900,
        "NVML_FI_DEV_PCIE_REPLAY_COUNTER": 1,
        "NVML_FI_DEV_PERF_POLICY_POWER": 0, "NVML_FI_DEV_PERF_POLICY_THERMAL": 0,
        "NVML_FI_DEV_PERF_POLICY_SYNC_BOOST": 0, "NVML_FI_DEV_PERF_POLICY_BOARD_LIMIT": 0,
        "NVML_FI_DEV_PERF_POLICY_LOW_UTILIZATION": 27578541600,
        "NVML_FI_DEV_PERF_POLICY_RELIABILITY": 0,
        "NVML_FI_DEV_ECC_SBE_VOL_TOTAL": 0, "NVML_FI_DEV_ECC_DBE_VOL_TOTAL": 0,
        "NVML_FI_DEV_ECC_SBE_AGG_TOTAL": 0, "NVML_FI_DEV_ECC_DBE_AGG_TOTAL": 0,
        "NVML_FI_DEV_REMAPPED_COR": 0, "NVML_FI_DEV_REMAPPED_UNC": 0,
        "NVML_FI_DEV_REMAPPED_PENDING": 0, "NVML_FI_DEV_REMAPPED_FAILURE": 0,
    }


H200_UNSUPPORTED = frozenset({
    "nvmlDeviceGetFanSpeed", "NVML_FI_DEV_RETIRED_SBE", "NVML_FI_DEV_RETIRED_DBE",
    "NVML_FI_DEV_RETIRED_PENDING", "NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
    "NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL", "NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL",
    "NVML_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL", "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX",
    "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX",
})


@dataclass
class FakeMig:
    """One MIG device (a compute instance inside GPU instance `gi_id`)."""

    gi_id: int
    uuid: str
    name: str
    memory: SimpleNamespace
    ci_id: int = 0
    processes: list[tuple[int, int]] = field(default_factory=list)
    gpm: dict[int, float] = field(default_factory=dict)


@dataclass
class FakeGpu:
    uuid: str
    name: str = "NVIDIA H200"
    minor: int = 0
    bus_id: str = "00000000:18:00.0"
    values: dict[str, Any] = field(default_factory=h200_values)
    unsupported: set[str] = field(default_factory=lambda: set(H200_UNSUPPORTED))
    errors: dict[str, int] = field(default_factory=dict)
    """function or field constant name -> NVML error code it raises / returns."""
    lost: bool = False
    gpm_supported: bool = True
    gpm: dict[int, float] = field(default_factory=lambda: {
        1: 99.0, 2: 97.0, 3: 24.0, 5: 62.0, 10: 36.0, 11: 0.0, 12: 71.0, 13: 0.0,
        20: 463.0, 21: 7691.0, 60: 0.0, 61: 0.0})
    mig_enabled: bool = False
    mig_slots: list[FakeMig | None] = field(default_factory=list)
    processes: list[tuple[int, int | None]] = field(default_factory=list)
    graphics: list[tuple[int, int | None]] = field(default_factory=list)
    proc_samples: list[tuple[int, int, int]] = field(default_factory=list)
    """(pid, timestamp_us, smUtil) as nvmlDeviceGetProcessUtilization reports them."""
    event_types: int = 0xFF9F
    hold: threading.Event | None = None
    """Fault injection: while set to an unset Event, every call on this GPU blocks,
    as a call into a wedged driver does (handle lookups by index or UUID included)."""
    hold_only: frozenset[str] = frozenset()
    """With `hold`: block only in these NVML functions (e.g. discovery, MIG enumeration, P2P),
    not in every call."""


@dataclass(frozen=True)
class Handle:
    gpu: FakeGpu
    mig: FakeMig | None = None


class _Sample:
    def __init__(self) -> None:
        self.handle: Handle | None = None
        self.gi: int | None = None
        self.taken_at = -1.0


class _Metric:
    def __init__(self) -> None:
        self.metricId = 0
        self.nvmlReturn = 0
        self.value = 0.0


class _GpmMetricsGet:  # pynvml's c_nvmlGpmMetricsGet_t (FakeNvml's attribute of that name)
    def __init__(self) -> None:
        self.version = 0
        self.numMetrics = 0
        self.sample1: _Sample | None = None
        self.sample2: _Sample | None = None
        self.metrics = [_Metric() for _ in range(GPM_METRIC_MAX)]


class _EventSet:
    def __init__(self) -> None:
        self.registered: dict[str, int] = {}
        self.queue: collections.deque[SimpleNamespace] = collections.deque()
        self.cond = threading.Condition()


def _hold(gpu: FakeGpu, name: str) -> None:
    if gpu.hold is not None and (not gpu.hold_only or name in gpu.hold_only):
        gpu.hold.wait()


class FakeNvml(ModuleType):
    """Hand an instance to `NvmlBackend(pynvml_module=...)`."""

    NVMLError = NVMLError
    c_nvmlGpmMetricsGet_t = _GpmMetricsGet

    def __init__(self, gpus: list[FakeGpu] | None = None, *, init_error: int | None = None,
                 clock: Any = time.monotonic, driver: str = "580.159.04") -> None:
        super().__init__("fake_pynvml")
        for k, v in CONSTANTS.items():
            setattr(self, k, v)
        self.gpus = gpus if gpus is not None else [FakeGpu("GPU-00000000-0000-0000-0000-000000000000")]
        self.init_error = init_error
        self.clock = clock
        self.driver = driver
        self.calls: collections.Counter[str] = collections.Counter()
        self.gpm_pairs: list[tuple[float, float]] = []
        self.initialized = 0
        self.event_sets: list[_EventSet] = []
        self._lock = threading.Lock()

    # --- test controls
    def emit_xid(self, index: int, xid: int) -> None:
        gpu = self.gpus[index]
        for es in self.event_sets:
            if gpu.uuid in es.registered:
                with es.cond:
                    es.queue.append(SimpleNamespace(device=Handle(gpu), eventType=0x8,
                                                    eventData=xid, gpuInstanceId=0xFFFFFFFF,
                                                    computeInstanceId=0xFFFFFFFF))
                    es.cond.notify_all()

    def without(self, *names: str) -> FakeNvml:
        """Pretend this pynvml has no such constants/functions (an older binding)."""
        for n in names:
            if n in self.__dict__:
                delattr(self, n)
            else:
                setattr(self, n, None)
        return self

    # --- plumbing
    def _tick(self, name: str, handle: Handle | None = None) -> FakeGpu | None:
        with self._lock:
            self.calls[name] += 1
        if not self.initialized:
            raise NVMLError(1)
        if handle is None:
            return None
        gpu = handle.gpu
        _hold(gpu, name)
        if gpu.lost:
            raise NVMLError(GPU_IS_LOST)
        if name in gpu.errors:
            raise NVMLError(gpu.errors[name])
        if name in gpu.unsupported:
            raise NVMLError(NOT_SUPPORTED)
        return gpu

    def _value(self, name: str, handle: Handle, *args: Any) -> Any:
        gpu = self._tick(name, handle)
        assert gpu is not None
        value = gpu.values[name]
        if isinstance(value, dict) and args:
            if args[0] not in value:
                raise NVMLError(NOT_SUPPORTED)
            return value[args[0]]
        return value

    # --- init and system
    def nvmlInit(self) -> None:
        self.calls["nvmlInit"] += 1
        if self.init_error is not None:
            raise NVMLError(self.init_error)
        self.initialized += 1

    def nvmlShutdown(self) -> None:
        self._tick("nvmlShutdown")
        self.initialized -= 1

    def nvmlSystemGetDriverVersion(self) -> str:
        self._tick("nvmlSystemGetDriverVersion")
        return self.driver

    def nvmlSystemGetNVMLVersion(self) -> str:
        self._tick("nvmlSystemGetNVMLVersion")
        return "13." + self.driver

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        self._tick("nvmlSystemGetCudaDriverVersion")
        return 13000

    # --- discovery
    def nvmlDeviceGetCount(self) -> int:
        self._tick("nvmlDeviceGetCount")
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> Handle:
        self._tick("nvmlDeviceGetHandleByIndex")
        gpu = self.gpus[index]
        _hold(gpu, "nvmlDeviceGetHandleByIndex")
        if gpu.lost:
            raise NVMLError(GPU_IS_LOST)
        return Handle(gpu)

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> Handle:
        self._tick("nvmlDeviceGetHandleByUUID")
        for gpu in self.gpus:
            if gpu.uuid == uuid:
                _hold(gpu, "nvmlDeviceGetHandleByUUID")
                if gpu.lost:
                    raise NVMLError(GPU_IS_LOST)
                return Handle(gpu)
        raise NVMLError(NOT_FOUND)

    def nvmlDeviceGetUUID(self, h: Handle) -> str:
        self._tick("nvmlDeviceGetUUID", h)
        return h.mig.uuid if h.mig else h.gpu.uuid

    def nvmlDeviceGetName(self, h: Handle) -> str:
        self._tick("nvmlDeviceGetName", h)
        return h.mig.name if h.mig else h.gpu.name

    def nvmlDeviceGetPciInfo(self, h: Handle) -> SimpleNamespace:
        self._tick("nvmlDeviceGetPciInfo", h)
        return SimpleNamespace(busId=h.gpu.bus_id.encode())

    def nvmlDeviceGetMinorNumber(self, h: Handle) -> int:
        self._tick("nvmlDeviceGetMinorNumber", h)
        return h.gpu.minor

    # --- MIG
    def nvmlDeviceGetMigMode(self, h: Handle) -> list[int]:
        self._tick("nvmlDeviceGetMigMode", h)
        mode = 1 if h.gpu.mig_enabled else 0
        return [mode, mode]

    def nvmlDeviceGetMaxMigDeviceCount(self, h: Handle) -> int:
        self._tick("nvmlDeviceGetMaxMigDeviceCount", h)
        return len(h.gpu.mig_slots) if h.gpu.mig_enabled else 0

    def nvmlDeviceGetMigDeviceHandleByIndex(self, h: Handle, index: int) -> Handle:
        self._tick("nvmlDeviceGetMigDeviceHandleByIndex", h)
        mig = h.gpu.mig_slots[index]
        if mig is None:
            raise NVMLError(NOT_FOUND)
        return Handle(h.gpu, mig)

    def nvmlDeviceGetGpuInstanceId(self, h: Handle) -> int:
        self._tick("nvmlDeviceGetGpuInstanceId", h)
        if h.mig is None:
            raise NVMLError(INVALID_ARGUMENT)
        return h.mig.gi_id

    # --- plain calls
    def nvmlDeviceGetClockInfo(self, h: Handle, clock: int) -> int:
        return int(self._value("nvmlDeviceGetClockInfo", h, clock))

    def nvmlDeviceGetCurrentClocksEventReasons(self, h: Handle) -> int:
        return int(self._value("nvmlDeviceGetCurrentClocksEventReasons", h))

    def nvmlDeviceGetPerformanceState(self, h: Handle) -> int:
        return int(self._value("nvmlDeviceGetPerformanceState", h))

    def nvmlDeviceGetFanSpeed(self, h: Handle) -> int:
        return int(self._value("nvmlDeviceGetFanSpeed", h))

    def nvmlDeviceGetTemperature(self, h: Handle, sensor: int) -> int:
        return int(self._value("nvmlDeviceGetTemperature", h))

    def nvmlDeviceGetPowerUsage(self, h: Handle) -> int:
        return int(self._value("nvmlDeviceGetPowerUsage", h))

    def nvmlDeviceGetPowerManagementLimit(self, h: Handle) -> int:
        return int(self._value("nvmlDeviceGetPowerManagementLimit", h))

    def nvmlDeviceGetEnforcedPowerLimit(self, h: Handle) -> int:
        return int(self._value("nvmlDeviceGetEnforcedPowerLimit", h))

    def nvmlDeviceGetTemperatureThreshold(self, h: Handle, which: int) -> int:
        return int(self._value("nvmlDeviceGetTemperatureThreshold", h, which))

    def nvmlDeviceGetP2PStatus(self, h: Handle, peer: Handle, index: int) -> int:
        """nvmlGpuP2PStatus_t from `h`'s values (one status for every peer)."""
        assert index == CONSTANTS["NVML_P2P_CAPS_INDEX_NVLINK"] and peer.gpu is not h.gpu
        return int(self._value("nvmlDeviceGetP2PStatus", h))

    def nvmlDeviceGetUtilizationRates(self, h: Handle) -> Any:
        if h.mig is not None:
            self._tick("nvmlDeviceGetUtilizationRates", h)
            raise NVMLError(NOT_SUPPORTED)
        return self._value("nvmlDeviceGetUtilizationRates", h)

    def nvmlDeviceGetEncoderUtilization(self, h: Handle) -> Any:
        return self._value("nvmlDeviceGetEncoderUtilization", h)

    def nvmlDeviceGetDecoderUtilization(self, h: Handle) -> Any:
        return self._value("nvmlDeviceGetDecoderUtilization", h)

    def nvmlDeviceGetMemoryInfo(self, h: Handle, version: int | None = None) -> Any:
        value = self._value("nvmlDeviceGetMemoryInfo", h)
        if version != 0x02000028:
            raise AssertionError("podgpu must ask for nvmlMemory_v2")
        return h.mig.memory if h.mig is not None else value

    def nvmlDeviceGetGridLicensableFeatures(self, h: Handle) -> Any:
        return self._value("nvmlDeviceGetGridLicensableFeatures", h)

    def nvmlDeviceGetBrand(self, h: Handle) -> int:
        return int(self._value("nvmlDeviceGetBrand", h))

    def nvmlDeviceGetSerial(self, h: Handle) -> Any:
        return self._value("nvmlDeviceGetSerial", h)

    def nvmlDeviceGetInforomVersion(self, h: Handle, obj: int) -> Any:
        return self._value("nvmlDeviceGetInforomVersion", h, obj)

    def nvmlDeviceGetInforomImageVersion(self, h: Handle) -> Any:
        return self._value("nvmlDeviceGetInforomImageVersion", h)

    def nvmlDeviceGetVbiosVersion(self, h: Handle) -> Any:
        return self._value("nvmlDeviceGetVbiosVersion", h)

    # --- field values
    def nvmlDeviceGetFieldValues(self, h: Handle, ids: list[Any]) -> list[SimpleNamespace]:
        gpu = self._tick("nvmlDeviceGetFieldValues", h)
        assert gpu is not None
        out = []
        now_us = int(self.clock() * 1e6)
        for entry in ids:
            fid, scope = entry if isinstance(entry, tuple) else (entry, 0)
            name = FI_NAMES.get(fid, "")
            fv = SimpleNamespace(fieldId=fid, scopeId=scope, timestamp=now_us, latencyUsec=1,
                                 valueType=3, nvmlReturn=0, value=SimpleNamespace())
            if name in gpu.errors:
                fv.nvmlReturn = gpu.errors[name]
            elif name in gpu.unsupported or name not in gpu.values:
                fv.nvmlReturn = NOT_SUPPORTED
            else:
                v = gpu.values[name]
                fv.valueType = 0 if isinstance(v, float) else 3
                fv.value = SimpleNamespace(dVal=float(v), uiVal=int(v) & 0xFFFFFFFF,
                                           ulVal=int(v), ullVal=int(v), sllVal=int(v),
                                           siVal=int(v), usVal=int(v) & 0xFFFF)
            out.append(fv)
        return out

    # --- GPM
    def nvmlGpmQueryDeviceSupport(self, h: Handle) -> SimpleNamespace:
        self._tick("nvmlGpmQueryDeviceSupport", h)
        return SimpleNamespace(version=1, isSupportedDevice=1 if h.gpu.gpm_supported else 0)

    def nvmlGpmSampleAlloc(self) -> _Sample:
        self._tick("nvmlGpmSampleAlloc")
        return _Sample()

    def nvmlGpmSampleFree(self, s: _Sample) -> None:
        self._tick("nvmlGpmSampleFree")

    def nvmlGpmSampleGet(self, h: Handle, s: _Sample) -> _Sample:
        self._tick("nvmlGpmSampleGet", h)
        s.handle, s.gi, s.taken_at = h, None, self.clock()
        return s

    def nvmlGpmMigSampleGet(self, h: Handle, gi: int, s: _Sample) -> _Sample:
        self._tick("nvmlGpmMigSampleGet", h)
        s.handle, s.gi, s.taken_at = h, gi, self.clock()
        return s

    def nvmlGpmMetricsGet(self, get: _GpmMetricsGet) -> _GpmMetricsGet:
        self._tick("nvmlGpmMetricsGet")
        s1, s2 = get.sample1, get.sample2
        if s1 is not None and s1.handle is not None:  # a per-GPU call without a handle argument
            _hold(s1.handle.gpu, "nvmlGpmMetricsGet")
        if s1 is None or s2 is None or s1 is s2 or s1.handle is None:
            raise NVMLError(INVALID_ARGUMENT)
        self.gpm_pairs.append((s1.taken_at, s2.taken_at))
        gpu = s1.handle.gpu
        table = gpu.gpm
        if s1.gi is not None:
            table = next(m.gpm for m in gpu.mig_slots if m is not None and m.gi_id == s1.gi)
        for i in range(get.numMetrics):
            metric = get.metrics[i]
            if metric.metricId in table:
                metric.nvmlReturn, metric.value = 0, table[metric.metricId]
            else:
                metric.nvmlReturn, metric.value = INVALID_ARGUMENT, 0.0
        return get

    # --- processes
    def nvmlDeviceGetComputeRunningProcesses(self, h: Handle) -> list[SimpleNamespace]:
        self._tick("nvmlDeviceGetComputeRunningProcesses", h)
        procs = h.mig.processes if h.mig is not None else h.gpu.processes
        return [SimpleNamespace(pid=p, usedGpuMemory=m) for p, m in procs]

    def nvmlDeviceGetGraphicsRunningProcesses(self, h: Handle) -> list[SimpleNamespace]:
        self._tick("nvmlDeviceGetGraphicsRunningProcesses", h)
        procs = [] if h.mig is not None else h.gpu.graphics
        return [SimpleNamespace(pid=p, usedGpuMemory=m) for p, m in procs]

    def nvmlDeviceGetProcessUtilization(self, h: Handle, since: int) -> list[SimpleNamespace]:
        self._tick("nvmlDeviceGetProcessUtilization", h)
        if h.gpu.mig_enabled:
            raise NVMLError(NOT_SUPPORTED)
        found = [SimpleNamespace(pid=p, timeStamp=t, smUtil=u, memUtil=0)
                 for p, t, u in h.gpu.proc_samples if t > since]
        if not found:
            raise NVMLError(NOT_FOUND)
        return found

    # --- events
    def nvmlEventSetCreate(self) -> _EventSet:
        self._tick("nvmlEventSetCreate")
        es = _EventSet()
        self.event_sets.append(es)
        return es

    def nvmlDeviceGetSupportedEventTypes(self, h: Handle) -> int:
        self._tick("nvmlDeviceGetSupportedEventTypes", h)
        return h.gpu.event_types

    def nvmlDeviceRegisterEvents(self, h: Handle, types: int, es: _EventSet) -> None:
        self._tick("nvmlDeviceRegisterEvents", h)
        es.registered[h.gpu.uuid] = types

    def nvmlEventSetWait_v2(self, es: _EventSet, timeout_ms: int) -> SimpleNamespace:
        with es.cond:
            if not es.queue:
                es.cond.wait(min(timeout_ms / 1000.0, 0.05))
            if es.queue:
                return es.queue.popleft()
        raise NVMLError(TIMEOUT)

    def nvmlEventSetFree(self, es: _EventSet) -> None:
        self._tick("nvmlEventSetFree")
