"""DCGM_EXP_GPU_HEALTH_STATUS and DCGM_EXP_P2P_STATUS from what NVML can tell.

dcgm-exporter reads both from the DCGM host engine (health watches, `GetNvLinkP2PStatus`).
Without DCGM, health is derived per GPU from fields podgpu reads anyway, on every backend the
same way, by the rules of the health module of DCGM 4.5.3 (the DCGM that dcgm-exporter
4.5.3-4.8.2 ships; `modules/health/DcgmHealthWatch.cpp` of github.com/NVIDIA/DCGM) where NVML
gives the same signal; the table, and what differs from DCGM, are in docs/compatibility.md:

- XIDs in the window, by DCGM's XID table (`XID_RULES`): 48, 74, 79, 94, 95, 119, 120, 140 FAIL
  on `ALL`; the others WARN on their watch (MEM 31, 32, 43, 63, 64; PCIE 38, 39, 42; THERMAL
  60-62; POWER 54, 56-58, 78; NVLINK 67, 73, 121, 137; INFOROM 93). An XID not in the table
  changes nothing, as in DCGM.
- MEM: FAIL on volatile DBEs, 63 or more retired pages, or a row-remap failure; WARN on pages
  pending retirement.
- NVLINK: WARN on NVLink CRC-data or recovery errors.
- THERMAL: WARN while a thermal clock event is active or the GPU is at its slowdown temperature.
- POWER: WARN while the hardware power brake is active.
- SM, PMU, MCU, DRIVER: NVML has no signal for them; always PASS.

Values and labels are dcgm-exporter's: 0 PASS, 10 WARN, 20 FAIL; `health_watch` (11 per GPU) and
`health_error_code`, the `DCGM_FR_*` name as dcgm-exporter spells it (its names come from
go-dcgm: `DCGM_FR_CLOCK_THROTTLE_THERMAL` for DCGM's CLOCKS_EVENT_THERMAL, code 10, and
`DCGM_FR_CLOCK_THROTTLE_POWER` for CLOCKS_EVENT_POWER, code 12), DCGM_FR_OK when passing. Of
two conditions on one watch the worse is shown (of equals the first: XIDs in ascending
order, then the fields). A lost GPU keeps its health series with `ALL`
FAIL (backends/lost.py).
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable, Iterable, Mapping

from podgpu.model import LabeledValue
from podgpu.model.device import Value

HEALTH = "DCGM_EXP_GPU_HEALTH_STATUS"
P2P = "DCGM_EXP_P2P_STATUS"
PASS, WARN, FAIL = 0, 10, 20
WATCHES = ("PCIE", "NVLINK", "PMU", "MCU", "MEM", "SM", "INFOROM", "THERMAL", "POWER", "DRIVER",
           "ALL")
XID = "DCGM_FR_XID_ERROR"
XID_RULES: dict[int, tuple[str, int, str]] = {
    **{x: ("ALL", FAIL, XID) for x in (48, 74, 94, 119, 120, 140)},
    79: ("ALL", FAIL, "DCGM_FR_FALLEN_OFF_BUS"),
    95: ("ALL", FAIL, "DCGM_FR_UNCONTAINED_ERROR"),
    **{x: ("MEM", WARN, XID) for x in (31, 32, 43)},
    63: ("MEM", WARN, "DCGM_FR_PENDING_PAGE_RETIREMENTS"),
    64: ("MEM", WARN, "DCGM_FR_ROW_REMAP_FAILURE"),
    **{x: ("PCIE", WARN, XID) for x in (38, 39)},
    42: ("PCIE", WARN, "DCGM_FR_PCI_REPLAY_RATE"),
    60: ("THERMAL", WARN, "DCGM_FR_CLOCK_THROTTLE_THERMAL"),
    61: ("THERMAL", WARN, XID),
    62: ("THERMAL", WARN, "DCGM_FR_THERMAL_VIOLATIONS"),
    **{x: ("POWER", WARN, XID) for x in (54, 56, 58, 78)},
    57: ("POWER", WARN, "DCGM_FR_CLOCK_THROTTLE_POWER"),
    67: ("NVLINK", WARN, "DCGM_FR_NVLINK_ERROR_THRESHOLD"),
    **{x: ("NVLINK", WARN, XID) for x in (73, 121, 137)},
    93: ("INFOROM", WARN, "DCGM_FR_CORRUPT_INFOROM"),
}
"""XID -> (health_watch, level, health_error_code): DCGM 4.5.3's `BuildXidMappings`."""
RETIRED_PAGES_LIMIT = 63
"""DCGM_LIMIT_MAX_RETIRED_PAGES (DCGM's common/DcgmGPUHardwareLimits.h): SBE + DBE retired pages."""
_THERMAL_BITS = 0x20 | 0x40  # sw_thermal, hw_thermal
_POWER_BRAKE_BIT = 0x80
# nvmlGpuP2PStatus_t order, which dcgm-exporter's link_status strings follow
P2P_STATUS = ("OK", "ChipsetNotSupported", "GPUNotSupported", "TopologyNotSupported",
              "DisabledByRegKey", "NotSupported", "Unknown")


def _num(values: Mapping[str, Value], name: str) -> float:
    v = values.get(name)
    return float(v) if isinstance(v, int | float) else 0.0


def recent_xids(values: Mapping[str, Value], labeled: Iterable[LabeledValue]) -> set[int]:
    """XID codes seen in the count window (or the last XID when no window is read)."""
    out = {int(v) for lv in labeled if lv.field == "DCGM_EXP_XID_ERRORS_COUNT" and lv.value > 0
           for k, v in lv.labels if k == "xid"}
    if not out and _num(values, "DCGM_FI_DEV_XID_ERRORS") > 0:
        out.add(int(_num(values, "DCGM_FI_DEV_XID_ERRORS")))
    return out


def health(values: Mapping[str, Value], labeled: Iterable[LabeledValue]
           ) -> dict[str, tuple[int, str]]:
    """health_watch -> (value, health_error_code) for one GPU."""
    out = {w: (PASS, "DCGM_FR_OK") for w in WATCHES}

    def worse(watch: str, level: int, code: str) -> None:
        if level > out[watch][0]:
            out[watch] = (level, code)

    for xid in sorted(recent_xids(values, labeled)):  # among equals the first stays
        if xid in XID_RULES:
            worse(*XID_RULES[xid])
    if _num(values, "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL") > 0:
        worse("MEM", FAIL, "DCGM_FR_VOLATILE_DBE_DETECTED")
    if _num(values, "DCGM_FI_DEV_RETIRED_PENDING") > 0:
        worse("MEM", WARN, "DCGM_FR_PENDING_PAGE_RETIREMENTS")
    if (_num(values, "DCGM_FI_DEV_RETIRED_SBE") + _num(values, "DCGM_FI_DEV_RETIRED_DBE")
            >= RETIRED_PAGES_LIMIT):
        worse("MEM", FAIL, "DCGM_FR_RETIRED_PAGES_LIMIT")
    if _num(values, "DCGM_FI_DEV_ROW_REMAP_FAILURE") > 0:
        worse("MEM", FAIL, "DCGM_FR_ROW_REMAP_FAILURE")
    if (_num(values, "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL") > 0
            or _num(values, "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL") > 0):
        worse("NVLINK", WARN, "DCGM_FR_NVLINK_ERROR_THRESHOLD")
    reasons = int(_num(values, "DCGM_FI_DEV_CLOCKS_EVENT_REASONS"))
    slowdown = _num(values, "DCGM_FI_DEV_SLOWDOWN_TEMP")
    if reasons & _THERMAL_BITS or (slowdown > 0 and _num(values, "DCGM_FI_DEV_GPU_TEMP")
                                   >= slowdown):
        worse("THERMAL", WARN, "DCGM_FR_CLOCK_THROTTLE_THERMAL")
    if reasons & _POWER_BRAKE_BIT:
        worse("POWER", WARN, "DCGM_FR_CLOCK_THROTTLE_POWER")
    return out


def health_series(values: Mapping[str, Value], labeled: Iterable[LabeledValue]
                  ) -> tuple[LabeledValue, ...]:
    return tuple(
        LabeledValue(HEALTH, (("health_error_code", code), ("health_watch", watch)), level)
        for watch, (level, code) in health(values, labeled).items()
    )


def p2p_series(peers: Iterable[tuple[int, int]]) -> tuple[LabeledValue, ...]:
    """(peer GPU index, nvmlGpuP2PStatus_t) -> DCGM_EXP_P2P_STATUS{peer_gpu, link_status}."""
    out = []
    for peer, status in peers:
        text = P2P_STATUS[status] if 0 <= status < len(P2P_STATUS) else "Unknown"
        out.append(LabeledValue(P2P, (("link_status", text), ("peer_gpu", str(peer))), status))
    return tuple(out)


CLOCK_COUNT = "DCGM_EXP_CLOCK_EVENTS_COUNT"
DCGM_EXPORTER_INTERVAL = 30.0
"""dcgm-exporter's default collect interval (-c 30000): how often DCGM samples the bitmask."""
CLOCK_EVENTS: tuple[tuple[int, str], ...] = (
    (0x1, "gpu_idle"), (0x2, "clocks_setting"), (0x4, "power_cap"), (0x8, "hw_slowdown"),
    (0x10, "sync_boost"), (0x20, "sw_thermal"), (0x40, "hw_thermal"), (0x80, "hw_power_brake"),
    (0x100, "display_clocks"),
)
"""dcgm-exporter's clock_event label value per bit of the clock-event reasons bitmask."""


class ClockEventCounter:
    """DCGM_EXP_CLOCK_EVENTS_COUNT with dcgm-exporter's meaning at any collect interval.

    dcgm-exporter counts, per reason, the DCGM samples of the clock-event bitmask inside the
    window that have its bit set, and DCGM samples the bitmask once per dcgm-exporter collect
    interval (30 s by default). podgpu reads the bitmask every cycle (1 s by default), so counting
    every read would give ~30 times dcgm-exporter's counts and fire thresholds written for it.
    So one read per `period` seconds is kept (the first read in each period-long slot of the
    clock): the count is "samples at dcgm-exporter's interval", whatever podgpu's interval is.
    `period` is dcgm-exporter's interval (30 s unless -c is set); with a collect interval at or
    above it, every read counts. One instance per GPU, used from one thread.
    """

    def __init__(self, window: float, period: float = DCGM_EXPORTER_INTERVAL,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.window = window
        self.period = period
        self._clock = clock
        self._slot: int | None = None
        self._seen: collections.deque[tuple[float, int]] = collections.deque()

    def observe(self, mask: int) -> None:
        now = self._clock()
        slot = int(now // self.period) if self.period > 0 else None
        if slot is None or slot != self._slot:
            self._slot = slot
            self._seen.append((now, int(mask)))
        horizon = now - self.window
        while self._seen and self._seen[0][0] < horizon:
            self._seen.popleft()

    def series(self) -> list[LabeledValue]:
        """One series per reason seen in the window, or one `0` series without `clock_event`."""
        window = ("window_size_in_ms", str(round(self.window * 1000)))
        out = [LabeledValue(CLOCK_COUNT, (window, ("clock_event", label)), n)
               for bit, label in CLOCK_EVENTS
               if (n := sum(1 for _, mask in self._seen if mask & bit))]
        return out or [LabeledValue(CLOCK_COUNT, (window,), 0)]
