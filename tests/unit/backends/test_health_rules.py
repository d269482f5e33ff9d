"""DCGM_EXP_GPU_HEALTH_STATUS against DCGM's own rules, restated here from DCGM 4.5.3 (the DCGM
that dcgm-exporter 4.5.3-4.8.2 ships), github.com/NVIDIA/DCGM `modules/health/DcgmHealthWatch.cpp`
(`BuildXidMappings`, `MonitorMem*`) and `common/DcgmGPUHardwareLimits.h`, with each code spelled as
dcgm-exporter d5e5f51 spells it (`internal/pkg/collector/gpu_health_collector.go`,
`healthCheckErrorToStringMap`, over go-dcgm ec245c09: code 10 is `DCGM_FR_CLOCK_THROTTLE_THERMAL`,
code 12 `DCGM_FR_CLOCK_THROTTLE_POWER`)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import pytest

from podgpu.backends.derived import health
from podgpu.fields.metriclist import DERIVED_FROM
from podgpu.model import LabeledValue
from podgpu.model.device import Value

# DCGM 4.5.3 BuildXidMappings: XID -> (watch, DCGM_HEALTH_RESULT_*, error code)
DCGM_453_XIDS = {
    48: ("ALL", 20, "DCGM_FR_XID_ERROR"),  # Double Bit ECC Error
    74: ("ALL", 20, "DCGM_FR_XID_ERROR"),  # NVLink Critical Error
    79: ("ALL", 20, "DCGM_FR_FALLEN_OFF_BUS"),
    94: ("ALL", 20, "DCGM_FR_XID_ERROR"),  # Contained Error
    95: ("ALL", 20, "DCGM_FR_UNCONTAINED_ERROR"),
    119: ("ALL", 20, "DCGM_FR_XID_ERROR"),  # GSP RPC Timeout
    120: ("ALL", 20, "DCGM_FR_XID_ERROR"),  # GSP Error
    140: ("ALL", 20, "DCGM_FR_XID_ERROR"),  # ECC unrecovered error
    31: ("MEM", 10, "DCGM_FR_XID_ERROR"),
    32: ("MEM", 10, "DCGM_FR_XID_ERROR"),
    43: ("MEM", 10, "DCGM_FR_XID_ERROR"),
    63: ("MEM", 10, "DCGM_FR_PENDING_PAGE_RETIREMENTS"),
    64: ("MEM", 10, "DCGM_FR_ROW_REMAP_FAILURE"),
    38: ("PCIE", 10, "DCGM_FR_XID_ERROR"),
    39: ("PCIE", 10, "DCGM_FR_XID_ERROR"),
    42: ("PCIE", 10, "DCGM_FR_PCI_REPLAY_RATE"),
    60: ("THERMAL", 10, "DCGM_FR_CLOCK_THROTTLE_THERMAL"),  # DCGM_FR_CLOCKS_EVENT_THERMAL
    61: ("THERMAL", 10, "DCGM_FR_XID_ERROR"),
    62: ("THERMAL", 10, "DCGM_FR_THERMAL_VIOLATIONS"),
    54: ("POWER", 10, "DCGM_FR_XID_ERROR"),
    56: ("POWER", 10, "DCGM_FR_XID_ERROR"),
    57: ("POWER", 10, "DCGM_FR_CLOCK_THROTTLE_POWER"),  # DCGM_FR_CLOCKS_EVENT_POWER
    58: ("POWER", 10, "DCGM_FR_XID_ERROR"),
    78: ("POWER", 10, "DCGM_FR_XID_ERROR"),
    67: ("NVLINK", 10, "DCGM_FR_NVLINK_ERROR_THRESHOLD"),
    73: ("NVLINK", 10, "DCGM_FR_XID_ERROR"),
    121: ("NVLINK", 10, "DCGM_FR_XID_ERROR"),
    137: ("NVLINK", 10, "DCGM_FR_XID_ERROR"),
    93: ("INFOROM", 10, "DCGM_FR_CORRUPT_INFOROM"),
}
WATCHES = {"PCIE", "NVLINK", "PMU", "MCU", "MEM", "SM", "INFOROM", "THERMAL", "POWER", "DRIVER",
           "ALL"}  # dcgm-exporter's 11 health_watch values


def xid_window(*xids: int) -> list[LabeledValue]:
    return [LabeledValue("DCGM_EXP_XID_ERRORS_COUNT",
                         (("window_size_in_ms", "300000"), ("xid", str(x))), 1) for x in xids]


def failing(table: dict[str, tuple[int, str]]) -> dict[str, tuple[int, str]]:
    return {w: v for w, v in table.items() if v != (0, "DCGM_FR_OK")}


@pytest.mark.parametrize("xid", sorted(DCGM_453_XIDS))
def test_each_xid_lands_on_dcgms_watch_with_its_level_and_code(xid: int) -> None:
    watch, level, code = DCGM_453_XIDS[xid]
    table = health({}, xid_window(xid))
    assert set(table) == WATCHES
    assert failing(table) == {watch: (level, code)}


@pytest.mark.parametrize("xid", [13, 45, 68, 92, 999])
def test_an_xid_dcgm_does_not_map_changes_nothing(xid: int) -> None:
    # application XIDs such as 13 and 45, and any code absent from BuildXidMappings: "Ignored XID"
    assert failing(health({}, xid_window(xid))) == {}
    assert failing(health({"DCGM_FI_DEV_XID_ERRORS": xid}, [])) == {}  # the last XID alone


def test_the_last_xid_counts_when_no_window_is_read() -> None:
    assert failing(health({"DCGM_FI_DEV_XID_ERRORS": 79}, [])) == {
        "ALL": (20, "DCGM_FR_FALLEN_OFF_BUS")}


def test_memory_fields_by_dcgms_monitor_mem() -> None:
    # MonitorMemVolatileDbes: any volatile DBE fails
    assert failing(health({"DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": 1}, [])) == {
        "MEM": (20, "DCGM_FR_VOLATILE_DBE_DETECTED")}
    # MonitorMemRetiredPending: a page pending retirement warns
    assert failing(health({"DCGM_FI_DEV_RETIRED_PENDING": 1}, [])) == {
        "MEM": (10, "DCGM_FR_PENDING_PAGE_RETIREMENTS")}
    # MonitorMemSbeDbeRetiredPages: SBE + DBE retired pages >= DCGM_LIMIT_MAX_RETIRED_PAGES (63)
    at = {"DCGM_FI_DEV_RETIRED_SBE": 40, "DCGM_FI_DEV_RETIRED_DBE": 23}
    assert failing(health(at, [])) == {"MEM": (20, "DCGM_FR_RETIRED_PAGES_LIMIT")}
    assert failing(health({**at, "DCGM_FI_DEV_RETIRED_DBE": 22}, [])) == {}
    # MonitorMemRowRemapFailures: the field fails (its XID 64 only warns)
    assert failing(health({"DCGM_FI_DEV_ROW_REMAP_FAILURE": 1}, [])) == {
        "MEM": (20, "DCGM_FR_ROW_REMAP_FAILURE")}


def test_the_worse_condition_on_a_watch_is_shown() -> None:
    table = health({"DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": 2}, xid_window(63, 31))
    assert table["MEM"] == (20, "DCGM_FR_VOLATILE_DBE_DETECTED")
    # of equals the first, XIDs in ascending order (DCGM's own order is an unordered_map's)
    assert health({}, xid_window(79, 48))["ALL"] == (20, "DCGM_FR_XID_ERROR")
    assert health({}, xid_window(79, 119))["ALL"] == (20, "DCGM_FR_FALLEN_OFF_BUS")


class Reads(Mapping[str, Value]):
    """A values mapping that records every name asked of it (`get` and `[]` both ask)."""

    def __init__(self, values: dict[str, Value]) -> None:
        self._values = values
        self.asked: set[str] = set()

    def __getitem__(self, key: str) -> Value:
        self.asked.add(key)
        return self._values[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)


def test_the_fields_read_for_health_are_exactly_those_it_asks_for() -> None:
    # a slowdown temperature: the GPU's is read too
    values = Reads({"DCGM_FI_DEV_SLOWDOWN_TEMP": 90})
    health(values, [])
    read_anyway = set(DERIVED_FROM["DCGM_EXP_GPU_HEALTH_STATUS"]) - {"DCGM_EXP_XID_ERRORS_COUNT"}
    assert values.asked == read_anyway
