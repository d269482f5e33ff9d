"""Every DCGM field podgpu can export: id, Prometheus type, value type, unit, help, how it is read.

Names and numeric ids are DCGM's (dcgm_fields.h; the pre-4.6 spellings, which are the metric names
dcgm-exporter emits). Units are DCGM's, and each `Source` says which NVML call yields the value and
the factor that converts NVML's unit into DCGM's (NVML's API reference) — the one place units
are converted.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from podgpu.fields import names
from podgpu.fields.catalog_more import MORE_CALLS, MORE_FIELD_VALUES
from podgpu.fields.catalog_nvlink import NVLINK_FIELD_VALUES
from podgpu.fields.field import (  # noqa: F401  (re-exported: the catalog's types)
    _ALL_LINKS,
    _PCT,
    MIB,
    NVLINK_LINK_IDS,
    Field,
    PromType,
    Scope,
    Source,
    SourceKind,
    ValueType,
    _call,
    _f,
    _fv,
    _gpm,
)


def _nvlink_links() -> tuple[Field, ...]:
    """DCGM_FI_DEV_NVLINK_BANDWIDTH_L0..L17: the total's arithmetic on one link's counters."""
    return tuple(
        _f(f"DCGM_FI_DEV_NVLINK_BANDWIDTH_L{n}", fid, "counter", "int", "MB/s",
           f"NVLink bandwidth of link {n}, tx plus rx.",
           Source("rate", "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX",
                  arg="NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX", pick=str(n), scale=0.001))
        for n, fid in enumerate(NVLINK_LINK_IDS)
    )


CATALOG: tuple[Field, ...] = (
    # --- static labels (DCGM_FT_STRING; exported as labels when the list types them `label`)
    _f("DCGM_FI_DRIVER_VERSION", 1, "label", "str", "", "Driver Version",
       Source("system", "nvmlSystemGetDriverVersion")),
    _f("DCGM_FI_NVML_VERSION", 2, "label", "str", "", "NVML Version",
       Source("system", "nvmlSystemGetNVMLVersion")),
    _f("DCGM_FI_DEV_BRAND", 51, "label", "str", "", "Device Brand",
       _call("nvmlDeviceGetBrand")),
    _f("DCGM_FI_DEV_SERIAL", 53, "label", "str", "", "Device Serial Number",
       _call("nvmlDeviceGetSerial")),
    _f("DCGM_FI_DEV_OEM_INFOROM_VER", 56, "label", "str", "", "OEM inforom version",
       _call("nvmlDeviceGetInforomVersion", "NVML_INFOROM_OEM")),
    _f("DCGM_FI_DEV_ECC_INFOROM_VER", 80, "label", "str", "", "ECC inforom version",
       _call("nvmlDeviceGetInforomVersion", "NVML_INFOROM_ECC")),
    _f("DCGM_FI_DEV_POWER_INFOROM_VER", 81, "label", "str", "",
       "Power management object inforom version",
       _call("nvmlDeviceGetInforomVersion", "NVML_INFOROM_POWER")),
    _f("DCGM_FI_DEV_INFOROM_IMAGE_VER", 82, "label", "str", "", "Inforom image version",
       _call("nvmlDeviceGetInforomImageVersion")),
    _f("DCGM_FI_DEV_VBIOS_VERSION", 85, "label", "str", "", "VBIOS version of the device",
       _call("nvmlDeviceGetVbiosVersion")),
    # --- clocks, clock events, P-state
    _f("DCGM_FI_DEV_SM_CLOCK", 100, "gauge", "int", "MHz", "SM clock frequency (in MHz).",
       _call("nvmlDeviceGetClockInfo", "NVML_CLOCK_SM")),
    _f("DCGM_FI_DEV_MEM_CLOCK", 101, "gauge", "int", "MHz", "Memory clock frequency (in MHz).",
       _call("nvmlDeviceGetClockInfo", "NVML_CLOCK_MEM")),
    _f("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", 112, "gauge", "int", "bitmask",
       "Current clock event reasons (bitmask of NVML clocks event reasons).",
       _call("nvmlDeviceGetCurrentClocksEventReasons")),
    _f("DCGM_FI_DEV_PSTATE", 190, "gauge", "int", "P-state",
       "Performance state (P-State) 0-15. 0=highest.",
       _call("nvmlDeviceGetPerformanceState")),
    _f("DCGM_FI_DEV_FAN_SPEED", 191, "gauge", "int", "%", "Fan speed (in 0-100%).",
       _call("nvmlDeviceGetFanSpeed")),
    # --- temperature and power
    _f("DCGM_FI_DEV_MEMORY_TEMP", 140, "gauge", "int", "C", "Memory temperature (in C).",
       _fv("NVML_FI_DEV_MEMORY_TEMP")),
    _f("DCGM_FI_DEV_GPU_TEMP", 150, "gauge", "int", "C", "GPU temperature (in C).",
       _call("nvmlDeviceGetTemperature", "NVML_TEMPERATURE_GPU")),
    _f("DCGM_FI_DEV_POWER_USAGE", 155, "gauge", "float", "W", "Power draw (in W).",
       _call("nvmlDeviceGetPowerUsage", scale=0.001)),
    _f("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", 156, "counter", "int", "mJ",
       "Total energy consumption since boot (in mJ).",
       _fv("NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION")),
    _f("DCGM_FI_DEV_POWER_MGMT_LIMIT", 160, "gauge", "float", "W",
       "Power management limit (in W).",
       _call("nvmlDeviceGetPowerManagementLimit", scale=0.001)),
    # --- PCIe
    _f("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", 202, "counter", "int", "count",
       "Total number of PCIe retries.", _fv("NVML_FI_DEV_PCIE_REPLAY_COUNTER")),
    # --- utilization
    _f("DCGM_FI_DEV_GPU_UTIL", 203, "gauge", "int", "%", "GPU utilization (in %).",
       _call("nvmlDeviceGetUtilizationRates", pick="gpu")),
    _f("DCGM_FI_DEV_MEM_COPY_UTIL", 204, "gauge", "int", "%", "Memory utilization (in %).",
       _call("nvmlDeviceGetUtilizationRates", pick="memory")),
    _f("DCGM_FI_DEV_ENC_UTIL", 206, "gauge", "int", "%", "Encoder utilization (in %).",
       _call("nvmlDeviceGetEncoderUtilization", pick="0")),
    _f("DCGM_FI_DEV_DEC_UTIL", 207, "gauge", "int", "%", "Decoder utilization (in %).",
       _call("nvmlDeviceGetDecoderUtilization", pick="0")),
    # --- errors and violations
    _f("DCGM_FI_DEV_XID_ERRORS", 230, "gauge", "int", "XID",
       "Value of the last XID error encountered.", Source("event", "nvmlEventTypeXidCriticalError")),
    _f("DCGM_FI_DEV_POWER_VIOLATION", 240, "counter", "int", "ns",
       "Throttling duration due to power constraints (in ns).",
       _fv("NVML_FI_DEV_PERF_POLICY_POWER")),
    _f("DCGM_FI_DEV_THERMAL_VIOLATION", 241, "counter", "int", "ns",
       "Throttling duration due to thermal constraints (in ns).",
       _fv("NVML_FI_DEV_PERF_POLICY_THERMAL")),
    _f("DCGM_FI_DEV_SYNC_BOOST_VIOLATION", 242, "counter", "int", "ns",
       "Throttling duration due to sync-boost constraints (in ns).",
       _fv("NVML_FI_DEV_PERF_POLICY_SYNC_BOOST")),
    _f("DCGM_FI_DEV_BOARD_LIMIT_VIOLATION", 243, "counter", "int", "ns",
       "Throttling duration due to board limit constraints (in ns).",
       _fv("NVML_FI_DEV_PERF_POLICY_BOARD_LIMIT")),
    _f("DCGM_FI_DEV_LOW_UTIL_VIOLATION", 244, "counter", "int", "ns",
       "Throttling duration due to low utilization (in ns).",
       _fv("NVML_FI_DEV_PERF_POLICY_LOW_UTILIZATION")),
    _f("DCGM_FI_DEV_RELIABILITY_VIOLATION", 245, "counter", "int", "ns",
       "Throttling duration due to reliability constraints (in ns).",
       _fv("NVML_FI_DEV_PERF_POLICY_RELIABILITY")),
    # --- framebuffer (one nvmlDeviceGetMemoryInfo v2 call; per MIG instance too)
    _f("DCGM_FI_DEV_FB_TOTAL", 250, "gauge", "int", "MiB", "Framebuffer memory total (in MiB).",
       _call("nvmlDeviceGetMemoryInfo", "nvmlMemory_v2", "total", 1 / MIB), "both"),
    _f("DCGM_FI_DEV_FB_FREE", 251, "gauge", "int", "MiB", "Framebuffer memory free (in MiB).",
       _call("nvmlDeviceGetMemoryInfo", "nvmlMemory_v2", "free", 1 / MIB), "both"),
    _f("DCGM_FI_DEV_FB_USED", 252, "gauge", "int", "MiB", "Framebuffer memory used (in MiB).",
       _call("nvmlDeviceGetMemoryInfo", "nvmlMemory_v2", "used", 1 / MIB), "both"),
    _f("DCGM_FI_DEV_FB_RESERVED", 253, "gauge", "int", "MiB",
       "Framebuffer memory reserved (in MiB).",
       _call("nvmlDeviceGetMemoryInfo", "nvmlMemory_v2", "reserved", 1 / MIB), "both"),
    # --- ECC and retired pages
    _f("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", 310, "counter", "int", "count",
       "Total number of single-bit volatile ECC errors.", _fv("NVML_FI_DEV_ECC_SBE_VOL_TOTAL")),
    _f("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", 311, "counter", "int", "count",
       "Total number of double-bit volatile ECC errors.", _fv("NVML_FI_DEV_ECC_DBE_VOL_TOTAL")),
    _f("DCGM_FI_DEV_ECC_SBE_AGG_TOTAL", 312, "counter", "int", "count",
       "Total number of single-bit persistent ECC errors.", _fv("NVML_FI_DEV_ECC_SBE_AGG_TOTAL")),
    _f("DCGM_FI_DEV_ECC_DBE_AGG_TOTAL", 313, "counter", "int", "count",
       "Total number of double-bit persistent ECC errors.", _fv("NVML_FI_DEV_ECC_DBE_AGG_TOTAL")),
    _f("DCGM_FI_DEV_RETIRED_SBE", 390, "counter", "int", "pages",
       "Total number of retired pages due to single-bit errors.", _fv("NVML_FI_DEV_RETIRED_SBE")),
    _f("DCGM_FI_DEV_RETIRED_DBE", 391, "counter", "int", "pages",
       "Total number of retired pages due to double-bit errors.", _fv("NVML_FI_DEV_RETIRED_DBE")),
    _f("DCGM_FI_DEV_RETIRED_PENDING", 392, "counter", "int", "pages",
       "Total number of pages pending retirement.", _fv("NVML_FI_DEV_RETIRED_PENDING")),
    # --- row remapping
    _f("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", 393, "counter", "int", "rows",
       "Number of remapped rows for uncorrectable errors", _fv("NVML_FI_DEV_REMAPPED_UNC")),
    _f("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", 394, "counter", "int", "rows",
       "Number of remapped rows for correctable errors", _fv("NVML_FI_DEV_REMAPPED_COR")),
    _f("DCGM_FI_DEV_ROW_REMAP_FAILURE", 395, "gauge", "int", "bool",
       "Whether remapping of rows has failed", _fv("NVML_FI_DEV_REMAPPED_FAILURE")),
    _f("DCGM_FI_DEV_ROW_REMAP_PENDING", 396, "gauge", "int", "bool",
       "Whether remapping of rows is pending", _fv("NVML_FI_DEV_REMAPPED_PENDING")),
    # --- NVLink
    _f("DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", 409, "counter", "int", "count",
       "Total number of NVLink flow-control CRC errors.",
       _fv("NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL")),
    _f("DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL", 419, "counter", "int", "count",
       "Total number of NVLink data CRC errors.",
       _fv("NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL")),
    _f("DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL", 429, "counter", "int", "count",
       "Total number of NVLink retries.", _fv("NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL")),
    _f("DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL", 439, "counter", "int", "count",
       "Total number of NVLink recovery errors.",
       _fv("NVML_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL")),
    # DCGM publishes (TX+RX KiB now - before) / seconds / 1000 in "MB/s" (NVML's API reference);
    # the same arithmetic keeps the numbers comparable with dcgm-exporter's.
    _f("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", 449, "counter", "int", "MB/s",
       "Total number of NVLink bandwidth counters for all lanes.",
       Source("rate", "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX",
              arg="NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX", scale=0.001)),
    # --- vGPU
    _f("DCGM_FI_DEV_VGPU_LICENSE_STATUS", 526, "gauge", "int", "bool", "vGPU License status",
       _call("nvmlDeviceGetGridLicensableFeatures")),
    # --- profiling (DCP) through NVML GPM, Hopper and newer; per MIG instance too
    _f("DCGM_FI_PROF_GR_ENGINE_ACTIVE", 1001, "gauge", "float", "ratio",
       "Ratio of time the graphics engine is active.",
       _gpm("NVML_GPM_METRIC_GRAPHICS_UTIL", _PCT), "both"),
    _f("DCGM_FI_PROF_SM_ACTIVE", 1002, "gauge", "float", "ratio",
       "The ratio of cycles an SM has at least 1 warp assigned.",
       _gpm("NVML_GPM_METRIC_SM_UTIL", _PCT), "both"),
    _f("DCGM_FI_PROF_SM_OCCUPANCY", 1003, "gauge", "float", "ratio",
       "The ratio of number of warps resident on an SM.",
       _gpm("NVML_GPM_METRIC_SM_OCCUPANCY", _PCT), "both"),
    _f("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", 1004, "gauge", "float", "ratio",
       "Ratio of cycles the tensor (HMMA) pipe is active.",
       _gpm("NVML_GPM_METRIC_ANY_TENSOR_UTIL", _PCT), "both"),
    _f("DCGM_FI_PROF_DRAM_ACTIVE", 1005, "gauge", "float", "ratio",
       "Ratio of cycles the device memory interface is active sending or receiving data.",
       _gpm("NVML_GPM_METRIC_DRAM_BW_UTIL", _PCT), "both"),
    _f("DCGM_FI_PROF_PIPE_FP64_ACTIVE", 1006, "gauge", "float", "ratio",
       "Ratio of cycles the fp64 pipes are active.",
       _gpm("NVML_GPM_METRIC_FP64_UTIL", _PCT), "both"),
    _f("DCGM_FI_PROF_PIPE_FP32_ACTIVE", 1007, "gauge", "float", "ratio",
       "Ratio of cycles the fp32 pipes are active.",
       _gpm("NVML_GPM_METRIC_FP32_UTIL", _PCT), "both"),
    _f("DCGM_FI_PROF_PIPE_FP16_ACTIVE", 1008, "gauge", "float", "ratio",
       "Ratio of cycles the fp16 pipes are active.",
       _gpm("NVML_GPM_METRIC_FP16_UTIL", _PCT), "both"),
    _f("DCGM_FI_PROF_PCIE_TX_BYTES", 1009, "gauge", "int", "B/s",
       "The rate of data transmitted over the PCIe bus - including both protocol headers and "
       "data payloads - in bytes per second.",
       _gpm("NVML_GPM_METRIC_PCIE_TX_PER_SEC", MIB), "both"),
    _f("DCGM_FI_PROF_PCIE_RX_BYTES", 1010, "gauge", "int", "B/s",
       "The rate of data received over the PCIe bus - including both protocol headers and "
       "data payloads - in bytes per second.",
       _gpm("NVML_GPM_METRIC_PCIE_RX_PER_SEC", MIB), "both"),
    _f("DCGM_FI_PROF_NVLINK_TX_BYTES", 1011, "gauge", "int", "B/s",
       "The rate of data transmitted over NVLink, not including protocol headers, in bytes "
       "per second.", _gpm("NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC", MIB), "both"),
    _f("DCGM_FI_PROF_NVLINK_RX_BYTES", 1012, "gauge", "int", "B/s",
       "The rate of data received over NVLink, not including protocol headers, in bytes per "
       "second.", _gpm("NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC", MIB), "both"),
    # --- more of what NVML can read (ids and names: dcgm-field-names.csv)
    _f("DCGM_FI_CUDA_DRIVER_VERSION", 5, "gauge", "int", "version",
       "CUDA driver version (e.g. 12040 for 12.4).",
       Source("system", "nvmlSystemGetCudaDriverVersion")),
    _f("DCGM_FI_DEV_NAME", 50, "label", "str", "", "Name of the GPU device",
       _call("nvmlDeviceGetName")),
    _f("DCGM_FI_DEV_NVML_INDEX", 52, "gauge", "int", "index", "NVML index of this GPU.",
       _call("nvmlDeviceGetIndex")),
    _f("DCGM_FI_DEV_UUID", 54, "label", "str", "", "UUID corresponding to the device",
       _call("nvmlDeviceGetUUID")),
    _f("DCGM_FI_DEV_MINOR_NUMBER", 55, "gauge", "int", "minor",
       "Device node minor number /dev/nvidia#.", _call("nvmlDeviceGetMinorNumber")),
    _f("DCGM_FI_DEV_COMPUTE_MODE", 65, "gauge", "int", "enum",
       "Compute mode (0 default, 2 exclusive process, 3 prohibited).",
       _call("nvmlDeviceGetComputeMode")),
    _f("DCGM_FI_DEV_PERSISTENCE_MODE", 66, "gauge", "int", "bool",
       "Persistence mode (1 enabled).", _call("nvmlDeviceGetPersistenceMode")),
    _f("DCGM_FI_DEV_MIG_MODE", 67, "gauge", "int", "bool", "MIG mode (1 enabled, current).",
       _call("nvmlDeviceGetMigMode", pick="0")),
    _f("DCGM_FI_DEV_VIDEO_CLOCK", 102, "gauge", "int", "MHz", "Video clock (in MHz).",
       _call("nvmlDeviceGetClockInfo", "NVML_CLOCK_VIDEO")),
    _f("DCGM_FI_DEV_MAX_SM_CLOCK", 113, "gauge", "int", "MHz", "Maximum SM clock (in MHz).",
       _call("nvmlDeviceGetMaxClockInfo", "NVML_CLOCK_SM")),
    _f("DCGM_FI_DEV_MAX_MEM_CLOCK", 114, "gauge", "int", "MHz",
       "Maximum memory clock (in MHz).", _call("nvmlDeviceGetMaxClockInfo", "NVML_CLOCK_MEM")),
    _f("DCGM_FI_DEV_MAX_VIDEO_CLOCK", 115, "gauge", "int", "MHz",
       "Maximum video clock (in MHz).", _call("nvmlDeviceGetMaxClockInfo", "NVML_CLOCK_VIDEO")),
    _f("DCGM_FI_DEV_MEM_MAX_OP_TEMP", 151, "gauge", "int", "C",
       "Maximum operating temperature for the memory of this GPU (in C).",
       _call("nvmlDeviceGetTemperatureThreshold", "NVML_TEMPERATURE_THRESHOLD_MEM_MAX")),
    _f("DCGM_FI_DEV_GPU_MAX_OP_TEMP", 152, "gauge", "int", "C",
       "Maximum operating temperature for this GPU (in C).",
       _call("nvmlDeviceGetTemperatureThreshold", "NVML_TEMPERATURE_THRESHOLD_GPU_MAX")),
    _f("DCGM_FI_DEV_SLOWDOWN_TEMP", 158, "gauge", "int", "C", "Slowdown temperature (in C).",
       _call("nvmlDeviceGetTemperatureThreshold", "NVML_TEMPERATURE_THRESHOLD_SLOWDOWN")),
    _f("DCGM_FI_DEV_SHUTDOWN_TEMP", 159, "gauge", "int", "C", "Shutdown temperature (in C).",
       _call("nvmlDeviceGetTemperatureThreshold", "NVML_TEMPERATURE_THRESHOLD_SHUTDOWN")),
    _f("DCGM_FI_DEV_POWER_MGMT_LIMIT_MIN", 161, "gauge", "float", "W",
       "Minimum power management limit (in W).",
       _call("nvmlDeviceGetPowerManagementLimitConstraints", pick="0", scale=0.001)),
    _f("DCGM_FI_DEV_POWER_MGMT_LIMIT_MAX", 162, "gauge", "float", "W",
       "Maximum power management limit (in W).",
       _call("nvmlDeviceGetPowerManagementLimitConstraints", pick="1", scale=0.001)),
    _f("DCGM_FI_DEV_POWER_MGMT_LIMIT_DEF", 163, "gauge", "float", "W",
       "Default power management limit (in W).",
       _call("nvmlDeviceGetPowerManagementDefaultLimit", scale=0.001)),
    _f("DCGM_FI_DEV_ENFORCED_POWER_LIMIT", 164, "gauge", "float", "W",
       "Effective power limit that the driver enforces (in W).",
       _call("nvmlDeviceGetEnforcedPowerLimit", scale=0.001)),
    # nvmlDeviceGetPcieThroughput samples a byte counter over 20 ms inside the call (each
    # direction costs ~20 ms per GPU per cycle, NVML's API reference): only read when listed.
    _f("DCGM_FI_DEV_PCIE_TX_THROUGHPUT", 200, "gauge", "int", "KB/s",
       "PCIe Tx utilization information (in KB/s).",
       _call("nvmlDeviceGetPcieThroughput", "NVML_PCIE_UTIL_TX_BYTES")),
    _f("DCGM_FI_DEV_PCIE_RX_THROUGHPUT", 201, "gauge", "int", "KB/s",
       "PCIe Rx utilization information (in KB/s).",
       _call("nvmlDeviceGetPcieThroughput", "NVML_PCIE_UTIL_RX_BYTES")),
    _f("DCGM_FI_DEV_PCIE_MAX_LINK_GEN", 235, "gauge", "int", "gen", "PCIe max link generation.",
       _call("nvmlDeviceGetMaxPcieLinkGeneration")),
    _f("DCGM_FI_DEV_PCIE_MAX_LINK_WIDTH", 236, "gauge", "int", "lanes", "PCIe max link width.",
       _call("nvmlDeviceGetMaxPcieLinkWidth")),
    _f("DCGM_FI_DEV_PCIE_LINK_GEN", 237, "gauge", "int", "gen", "PCIe current link generation.",
       _call("nvmlDeviceGetCurrPcieLinkGeneration")),
    _f("DCGM_FI_DEV_PCIE_LINK_WIDTH", 238, "gauge", "int", "lanes", "PCIe current link width.",
       _call("nvmlDeviceGetCurrPcieLinkWidth")),
    *_nvlink_links(),
    _f("DCGM_FI_PROF_PIPE_TENSOR_IMMA_ACTIVE", 1013, "gauge", "float", "ratio",
       "Ratio of cycles the tensor (IMMA) pipe is active.",
       _gpm("NVML_GPM_METRIC_IMMA_TENSOR_UTIL", _PCT), "both"),
    _f("DCGM_FI_PROF_PIPE_TENSOR_HMMA_ACTIVE", 1014, "gauge", "float", "ratio",
       "Ratio of cycles the tensor (HMMA) pipe is active.",
       _gpm("NVML_GPM_METRIC_HMMA_TENSOR_UTIL", _PCT), "both"),
    _f("DCGM_FI_PROF_PIPE_TENSOR_DFMA_ACTIVE", 1015, "gauge", "float", "ratio",
       "Ratio of cycles the tensor (DFMA) pipe is active.",
       _gpm("NVML_GPM_METRIC_DFMA_TENSOR_UTIL", _PCT), "both"),
    _f("DCGM_FI_PROF_PIPE_INT_ACTIVE", 1016, "gauge", "float", "ratio",
       "Ratio of cycles the integer pipe is active.",
       _gpm("NVML_GPM_METRIC_INTEGER_UTIL", _PCT), "both"),
    # --- computed by the exporter (dcgm-exporter's DCGM_EXP_* ids)
    _f("DCGM_EXP_XID_ERRORS_COUNT", 9001, "counter", "int", "count",
       "reported XIDs during last window", Source("exporter", "DCGM_FI_DEV_XID_ERRORS")),
    _f("DCGM_EXP_CLOCK_EVENTS_COUNT", 9002, "counter", "int", "count",
       "reported clock events", Source("exporter", "DCGM_FI_DEV_CLOCKS_EVENT_REASONS")),
    _f("DCGM_EXP_GPU_HEALTH_STATUS", 9003, "gauge", "int", "enum",
       "GPU health per subsystem from NVML (0 pass, 10 warn, 20 fail)",
       Source("exporter", "health")),
    _f("DCGM_EXP_P2P_STATUS", 9004, "gauge", "int", "enum",
       "P2P NvLink status to each peer GPU (nvmlGpuP2PStatus_t)",
       Source("exporter", "nvmlDeviceGetP2PStatus", arg="NVML_P2P_CAPS_INDEX_NVLINK")),
    *MORE_FIELD_VALUES,
    *MORE_CALLS,
    *NVLINK_FIELD_VALUES,
)

# DCGM 4.6 renamed many macros; the old spelling is the metric name (NVML's API reference).
# A metric list may use either; the old one is what podgpu emits.
ALIASES: Mapping[str, str] = MappingProxyType({
    "DCGM_FI_DEV_MEMORY_TEMP_CELSIUS": "DCGM_FI_DEV_MEMORY_TEMP",
    "DCGM_FI_DEV_GPU_TEMP_CELSIUS": "DCGM_FI_DEV_GPU_TEMP",
    "DCGM_FI_DEV_BOARD_POWER_WATTS": "DCGM_FI_DEV_POWER_USAGE",
    "DCGM_FI_DEV_BOARD_POWER_LIMIT_REQUESTED_WATTS": "DCGM_FI_DEV_POWER_MGMT_LIMIT",
    "DCGM_FI_DEV_GPU_PSTATE": "DCGM_FI_DEV_PSTATE",
    "DCGM_FI_DEV_PCIE_REPLAY_TOTAL": "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
    "DCGM_FI_DEV_GPU_UTIL_RATIO": "DCGM_FI_DEV_GPU_UTIL",
    "DCGM_FI_DEV_XID_ERROR": "DCGM_FI_DEV_XID_ERRORS",
    "DCGM_FI_DEV_ROW_REMAP_UNCORRECTABLE_TOTAL": "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
    "DCGM_FI_DEV_ROW_REMAP_CORRECTABLE_TOTAL": "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
    "DCGM_FI_DEV_ROW_REMAP_FAILED": "DCGM_FI_DEV_ROW_REMAP_FAILURE",
    "DCGM_FI_DEV_NVLINK_THROUGHPUT_TOTAL": "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
    "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": "DCGM_FI_DEV_CLOCKS_EVENT_REASONS",
    "DCGM_FI_PROF_GR_ENGINE_UTIL_RATIO": "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
    "DCGM_FI_PROF_SM_UTIL_RATIO": "DCGM_FI_PROF_SM_ACTIVE",
    "DCGM_FI_PROF_SM_OCCUPANCY_RATIO": "DCGM_FI_PROF_SM_OCCUPANCY",
    "DCGM_FI_PROF_TENSOR_UTIL_RATIO": "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
    "DCGM_FI_PROF_DRAM_UTIL_RATIO": "DCGM_FI_PROF_DRAM_ACTIVE",
})

BY_NAME: Mapping[str, Field] = MappingProxyType({f.name: f for f in CATALOG})
BY_ID: Mapping[int, Field] = MappingProxyType({f.id: f for f in CATALOG})


def dcgm_id(name: str) -> int | None:
    """The DCGM field id of any spelling dcgm-exporter accepts (current, legacy, 1.x `dcgm_*`,
    a newer DCGM's rename, or a DCGM_EXP_* name); None for a name that is no DCGM field."""
    f = BY_NAME.get(ALIASES.get(name, name))
    if f is not None:
        return f.id
    return names.ids().get(name)


def lookup(name: str) -> Field | None:
    """The catalog entry (a field podgpu can read) for any spelling of a DCGM field; None when
    podgpu cannot read it or it is no DCGM field (tell the two apart with `dcgm_id`)."""
    f = BY_NAME.get(ALIASES.get(name, name))
    if f is not None:
        return f
    fid = names.ids().get(name)
    return BY_ID.get(fid) if fid is not None else None


def closest(name: str, n: int = 3) -> list[str]:
    """Known field names closest to `name`, for 'unknown field' messages."""
    import difflib  # loaded on first use: only a bad list asks, never the start path

    pool = set(BY_NAME) | set(ALIASES) | set(names.ids())
    return difflib.get_close_matches(name, sorted(pool), n=n, cutoff=0.5)


__all__ = ["ALIASES", "BY_ID", "BY_NAME", "CATALOG", "MIB", "NVLINK_LINK_IDS", "Field", "PromType",
           "Scope", "Source", "SourceKind", "ValueType", "closest", "dcgm_id", "lookup"]
