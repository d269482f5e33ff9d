"""A simulated GPU node: deterministic devices and values that move like a gpu-burn workload.

Busy GPUs follow the seed post's pattern (100 % for `on` seconds, idle for `off` seconds, repeat);
GPU_UTIL, power, SM clock, FB_USED, temperatures and the profiling ratios move together. The other
GPUs stay idle. Every value is a pure function of (model, index, time), so tests can pin the clock.
Profiling (DCP) fields exist only on models where podgpu's NVML backend would have them (GPM:
Hopper and newer), so the simulated node shows what a real node of that model would show.
"""

from __future__ import annotations

import math
import time
import uuid
import zlib
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from podgpu.backends import derived
from podgpu.backends.base import Reading
from podgpu.fields.catalog import CATALOG, Field
from podgpu.model import Device, LabeledValue, Sample
from podgpu.model.device import Value
from podgpu.sim.lost import LostGpu, lost_gpu_sample
from podgpu.sim.mig import MigLayout
from podgpu.sim.models import DEFAULT_MODEL, MODELS, ModelSpec, parse_simulate

if TYPE_CHECKING:
    from podgpu.sim.scenario import Scenario, ScenarioXid

SIM_DRIVER_VERSION = "580.159.04"
SIM_NVML_VERSION = "13.580.159.04"
_UUID_NS = uuid.UUID("6f1c7a52-1d0e-4c55-9c3f-5d1e0a9b7e21")
# Bus ids of the GPUs in an 8-GPU HGX node, in NVML index order.
_BUS_IDS = (0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB)


def _jitter(seed: str, spread: float) -> float:
    """Deterministic noise in [-spread, +spread] from a string seed."""
    return (zlib.crc32(seed.encode()) / 0xFFFFFFFF * 2.0 - 1.0) * spread


class SimulatedBackend:
    """`count` GPUs of one model; GPUs 0..ceil(count/2)-1 run the burn pattern, the rest idle."""

    name = "simulated"

    def __init__(
        self,
        count: int,
        model: ModelSpec,
        *,
        on_seconds: float = 20.0,
        off_seconds: float = 20.0,
        clock: Callable[[], float] = time.time,
        busy: Sequence[int] | None = None,
        scenario: Scenario | None = None,
        xid_window_seconds: float = 300.0,
        clock_events_window_seconds: float = 300.0,
        clock_events_sample_seconds: float = derived.DCGM_EXPORTER_INTERVAL,
    ) -> None:
        self._model = model
        self._count = count
        self._on = on_seconds
        self._off = off_seconds
        self._clock = clock
        self._busy = set(busy) if busy is not None else set(range(math.ceil(count / 2)))
        # --- simulated pods: the scenario's GPUs are the busy ones, so per-pod
        # usage follows the device series; `read(processes=True)` returns its processes.
        self._scenario = scenario
        if scenario is not None:
            scenario.check_gpu_count(count)
            if busy is None:
                self._busy = scenario.busy_gpus()
        self._epoch = clock()  # start of the first busy phase
        # DCGM_EXP_* windows: XIDs come from the scenario's schedule (a pure function
        # of time); clock events are counted per read, as dcgm-exporter counts samples.
        # GPUs falling off the bus (sim/lost.py): each loss is one XID event too
        self._lost = scenario.lost_gpus if scenario is not None else ()
        self._xids: tuple[ScenarioXid | LostGpu, ...] = (
            (*scenario.xids, *self._lost) if scenario is not None else ())
        self._xid_window = xid_window_seconds
        self._clock_window = clock_events_window_seconds
        self._clock_period = clock_events_sample_seconds
        self._clock_seen: dict[int, derived.ClockEventCounter] = {}
        self._devices = tuple(self._make_device(i) for i in range(count))
        self._mig = MigLayout(scenario.mig if scenario else (), self._devices, model=model.name,
                              supported=model.gpm or model.name.startswith("NVIDIA A100"),
                              source=scenario.source if scenario else "",
                              memory_mib=model.fb_total_mib)  # sim/mig.py

    def _make_device(self, i: int) -> Device:
        gpu_uuid = f"GPU-{uuid.uuid5(_UUID_NS, f'{self._model.name}/{i}')}"
        bus = _BUS_IDS[i] if i < len(_BUS_IDS) else 0x100 + i
        return Device(
            index=i,
            uuid=gpu_uuid,
            pci_bus_id=f"00000000:{bus:02X}:00.0",
            device_name=f"nvidia{i}",
            model=self._model.name,
        )

    # --- Backend interface
    def open(self) -> None:
        return None

    def devices(self) -> tuple[Device, ...]:
        return self._mig.devices(self._devices)

    def info(self) -> dict[str, str]:
        return {"driver_version": SIM_DRIVER_VERSION}

    def unavailable_fields(self) -> dict[str, str]:
        if self._model.gpm:
            return {}
        return {
            f.name: f"{self._model.name} has no GPM (Hopper and newer only)"
            for f in CATALOG if f.source.kind == "gpm"
        }

    def read(self, fields: Sequence[Field], *, processes: bool = False) -> Reading:
        now = self._clock()
        gone = {x.gpu: x.xid for x in self._lost if x.lost(now - self._epoch)}
        samples = tuple(lost_gpu_sample(d, fields, self._values(d, now),
                                        self._xid_counts(d.index, now), gone[d.index],
                                        self._xid_window) if d.index in gone
                        else self._sample(d, fields, now) for d in self._devices)
        lost = tuple((s.device.device_name, s.lost) for s in samples if s.lost is not None)
        samples = self._mig.expand(samples, lambda d: self._values(d, now),
                                   lambda d: self._held_busy(d, now))
        if not processes or self._scenario is None:
            return Reading(samples=samples, lost=lost, errors=len(lost))
        live = tuple(d for d in self.devices() if d.index not in gone)
        return Reading(samples=samples, lost=lost, errors=len(lost),
                       processes=self._scenario.processes(live, lambda d: self._usage(d, now)))

    def _usage(self, dev: Device, now: float) -> tuple[float, int]:
        """(GPU_UTIL %, FB_USED bytes) of `dev` at `now`, for the scenario's processes."""
        values = self._values(dev, now)
        if dev.is_mig:
            return self._mig.usage(dev, values, self._held_busy(dev, now))
        util, fb_mib = values["DCGM_FI_DEV_GPU_UTIL"], values["DCGM_FI_DEV_FB_USED"]
        assert isinstance(util, int | float) and isinstance(fb_mib, int)
        return float(util), fb_mib * 1024 * 1024

    def close(self) -> None:
        return None

    # --- the workload
    def is_busy(self, index: int, now: float) -> bool:
        """True while GPU `index` is in a busy phase at Unix time `now`."""
        if index not in self._busy:
            return False
        return (now - self._epoch) % (self._on + self._off) < self._on

    def _held_busy(self, dev: Device, now: float) -> bool:
        """A MIG instance is busy in its GPU's busy phase while a scenario container uses it."""
        held = self._scenario.busy_instances() if self._scenario is not None else set()
        return self.is_busy(dev.index, now) and (dev.index, dev.mig_gi_id) in held

    def _busy_seconds(self, index: int, elapsed: float) -> float:
        """Seconds spent busy in the first `elapsed` seconds (closed form of the square wave)."""
        if index not in self._busy or elapsed <= 0:
            return 0.0
        period = self._on + self._off
        whole, part = divmod(elapsed, period)
        return whole * self._on + min(part, self._on)

    def _sample(self, dev: Device, fields: Sequence[Field], now: float) -> Sample:
        values: dict[str, Value] = {}
        missing: dict[str, str] = {}
        table = self._values(dev, now)
        exp = set()
        for f in fields:
            if f.group == "EXP":
                exp.add(f.name)  # computed below from other fields, as the exporter does
                continue
            v = table.get(f.name)
            if v is None:
                missing[f.name] = f"not supported on {self._model.name}"
            else:
                values[f.name] = v
        labeled: list[LabeledValue] = []
        if "DCGM_EXP_XID_ERRORS_COUNT" in exp:
            labeled.extend(self._xid_counts(dev.index, now))
        if "DCGM_EXP_CLOCK_EVENTS_COUNT" in exp:
            reasons = table["DCGM_FI_DEV_CLOCKS_EVENT_REASONS"]
            assert isinstance(reasons, int)
            labeled.extend(self._clock_counts(dev.index, now, reasons))
        if derived.HEALTH in exp:
            labeled.extend(derived.health_series(values, labeled))
        if derived.P2P in exp:
            status = 0 if self._model.nvlink else 5  # OK, or NotSupported without NVLink
            peers = [(d.index, status) for d in self._devices if d.index != dev.index]
            if peers:
                labeled.extend(derived.p2p_series(peers))
            else:  # a one-GPU node: say so rather than vanish (as the NVML backend does)
                missing[derived.P2P] = "no peer GPU on this node"
        return Sample(dev, values, missing, tuple(labeled))

    def _window(self, seconds: float) -> tuple[str, str]:
        return ("window_size_in_ms", str(round(seconds * 1000)))

    def _xid_counts(self, index: int, now: float) -> list[LabeledValue]:
        """Scheduled XIDs inside the window ending now; one `0` series without `xid` if none."""
        elapsed, window = now - self._epoch, self._window(self._xid_window)
        counts: dict[int, int] = {}
        for x in self._xids:
            if x.gpu == index:
                n = x.times(elapsed) - x.times(elapsed - self._xid_window)
                if n:
                    counts[x.xid] = counts.get(x.xid, 0) + n
        if not counts:
            return [LabeledValue("DCGM_EXP_XID_ERRORS_COUNT", (window,), 0)]
        return [LabeledValue("DCGM_EXP_XID_ERRORS_COUNT", (window, ("xid", str(k))), n)
                for k, n in sorted(counts.items())]

    def _clock_counts(self, index: int, now: float, reasons: int) -> list[LabeledValue]:
        counter = self._clock_seen.get(index)
        if counter is None:  # one bitmask sample per dcgm-exporter interval
            counter = self._clock_seen[index] = derived.ClockEventCounter(
                self._clock_window, self._clock_period, self._clock)
        counter.observe(reasons)
        return counter.series()

    def _last_xid(self, index: int, elapsed: float) -> int:
        """The most recent scheduled XID on GPU `index`, 0 before any (DCGM_FI_DEV_XID_ERRORS)."""
        last, code = -1.0, 0
        for x in self._xids:
            if x.gpu == index and (n := x.times(elapsed)):
                at = x.offset + (n - 1) * x.every
                if at >= last:
                    last, code = at, x.xid
        return code

    def _values(self, dev: Device, now: float) -> dict[str, Value | None]:
        m = self._model
        i = dev.index
        busy = self.is_busy(i, now)
        tick = f"{i}/{int(now)}"
        elapsed = now - self._epoch
        uptime = elapsed + 3600.0 * (i + 1)  # the driver loaded before podgpu started
        busy_s = self._busy_seconds(i, elapsed)
        energy_mj = int(1000.0 * (m.idle_w * uptime + (m.busy_w - m.idle_w) * busy_s))
        power = (m.busy_w if busy else m.idle_w) + _jitter("p" + tick, 4.0 if busy else 1.5)
        fb_reserved = m.fb_reserved_mib
        fb_used = int((m.fb_total_mib - fb_reserved) * 0.9) if busy else 0
        temp = m.temp[1] if busy else m.temp[0]
        m_links = (18 if m.gpm else 12) if m.nvlink else 0  # NVLink4 on Hopper, NVLink3 on A100
        util = 100 if busy else 0

        def prof(busy_value: float) -> float | None:
            if not m.gpm:
                return None
            return round(max(0.0, busy_value + _jitter(f"r{busy_value}" + tick, 0.01)), 6) if busy \
                else 0.0

        def prof_bytes(busy_value: float) -> int | None:
            if not m.gpm:
                return None
            return int(busy_value * (1 + _jitter("b" + tick, 0.05))) if busy else 0

        return {
            "DCGM_FI_DRIVER_VERSION": SIM_DRIVER_VERSION,
            "DCGM_FI_NVML_VERSION": SIM_NVML_VERSION,
            "DCGM_FI_DEV_BRAND": "NVIDIA",
            "DCGM_FI_DEV_SERIAL": f"{1650923000000 + i:013d}",
            "DCGM_FI_DEV_OEM_INFOROM_VER": "1.0",
            "DCGM_FI_DEV_ECC_INFOROM_VER": "7.0",
            "DCGM_FI_DEV_POWER_INFOROM_VER": None,
            "DCGM_FI_DEV_INFOROM_IMAGE_VER": "G520.0200.00.05",
            "DCGM_FI_DEV_VBIOS_VERSION": m.vbios,
            "DCGM_FI_DEV_SM_CLOCK": m.sm_clock[1] if busy else m.sm_clock[0],
            "DCGM_FI_DEV_MEM_CLOCK": m.mem_clock,
            "DCGM_FI_DEV_CLOCKS_EVENT_REASONS": 0x4 if busy and power > m.busy_w else
            (0x0 if busy else 0x1),
            "DCGM_FI_DEV_PSTATE": 0,
            "DCGM_FI_DEV_FAN_SPEED": (60 if busy else 30) if m.fan else None,
            "DCGM_FI_DEV_MEMORY_TEMP": (temp + 6) if m.mem_temp else None,
            "DCGM_FI_DEV_GPU_TEMP": temp + int(_jitter("t" + tick, 1.0)),
            "DCGM_FI_DEV_POWER_USAGE": round(power, 3),
            "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": energy_mj,
            "DCGM_FI_DEV_POWER_MGMT_LIMIT": m.power_limit_w,
            "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": 0,
            "DCGM_FI_DEV_GPU_UTIL": util,
            "DCGM_FI_DEV_MEM_COPY_UTIL": (38 + int(_jitter("m" + tick, 3.0))) if busy else 0,
            "DCGM_FI_DEV_ENC_UTIL": 0,
            "DCGM_FI_DEV_DEC_UTIL": 0,
            "DCGM_FI_DEV_XID_ERRORS": self._last_xid(i, elapsed),
            "DCGM_FI_DEV_POWER_VIOLATION": int(1e9 * 0.02 * busy_s),
            "DCGM_FI_DEV_THERMAL_VIOLATION": 0,
            "DCGM_FI_DEV_SYNC_BOOST_VIOLATION": 0,
            "DCGM_FI_DEV_BOARD_LIMIT_VIOLATION": 0,
            "DCGM_FI_DEV_LOW_UTIL_VIOLATION": 0,
            "DCGM_FI_DEV_RELIABILITY_VIOLATION": 0,
            "DCGM_FI_DEV_FB_TOTAL": m.fb_total_mib,
            "DCGM_FI_DEV_FB_FREE": m.fb_total_mib - fb_reserved - fb_used,
            "DCGM_FI_DEV_FB_USED": fb_used,
            "DCGM_FI_DEV_FB_RESERVED": fb_reserved,
            "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": 0,
            "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": 0,
            "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL": 0,
            "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL": 0,
            "DCGM_FI_DEV_RETIRED_SBE": 0 if m.retired_pages else None,
            "DCGM_FI_DEV_RETIRED_DBE": 0 if m.retired_pages else None,
            "DCGM_FI_DEV_RETIRED_PENDING": 0 if m.retired_pages else None,
            "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": 0,
            "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": 0,
            "DCGM_FI_DEV_ROW_REMAP_FAILURE": 0,
            "DCGM_FI_DEV_ROW_REMAP_PENDING": 0,
            "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL": 0 if m.nvlink else None,
            "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL": 0 if m.nvlink else None,
            "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL": 0 if m.nvlink else None,
            "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL": 0 if m.nvlink else None,
            "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL": 0 if m.nvlink else None,
            "DCGM_FI_DEV_VGPU_LICENSE_STATUS": 0,
            "DCGM_FI_PROF_GR_ENGINE_ACTIVE": prof(0.99),
            "DCGM_FI_PROF_SM_ACTIVE": prof(0.97),
            "DCGM_FI_PROF_SM_OCCUPANCY": prof(0.24),
            "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": prof(0.62),
            "DCGM_FI_PROF_DRAM_ACTIVE": prof(0.36),
            "DCGM_FI_PROF_PIPE_FP64_ACTIVE": prof(0.0),
            "DCGM_FI_PROF_PIPE_FP32_ACTIVE": prof(0.71),
            "DCGM_FI_PROF_PIPE_FP16_ACTIVE": prof(0.0),
            "DCGM_FI_PROF_PCIE_TX_BYTES": prof_bytes(485_000_000),
            "DCGM_FI_PROF_PCIE_RX_BYTES": prof_bytes(1_210_000_000),
            "DCGM_FI_PROF_NVLINK_TX_BYTES": prof_bytes(0) if m.nvlink else None,
            "DCGM_FI_PROF_NVLINK_RX_BYTES": prof_bytes(0) if m.nvlink else None,
            # static facts and the GPM pipes podgpu reads too
            "DCGM_FI_CUDA_DRIVER_VERSION": 13000,
            "DCGM_FI_DEV_NAME": m.name,
            "DCGM_FI_DEV_NVML_INDEX": i,
            "DCGM_FI_DEV_UUID": dev.uuid,
            "DCGM_FI_DEV_MINOR_NUMBER": i,
            "DCGM_FI_DEV_COMPUTE_MODE": 0,
            "DCGM_FI_DEV_PERSISTENCE_MODE": 1,
            "DCGM_FI_DEV_MIG_MODE": 0 if m.gpm or m.name.startswith("NVIDIA A100") else None,
            "DCGM_FI_DEV_VIDEO_CLOCK": 1755 if busy else 765,
            "DCGM_FI_DEV_MAX_SM_CLOCK": m.sm_clock[1],
            "DCGM_FI_DEV_MAX_MEM_CLOCK": m.mem_clock,
            "DCGM_FI_DEV_MAX_VIDEO_CLOCK": 1755,
            "DCGM_FI_DEV_MEM_MAX_OP_TEMP": 95 if m.mem_temp else None,
            "DCGM_FI_DEV_GPU_MAX_OP_TEMP": 87,
            "DCGM_FI_DEV_SLOWDOWN_TEMP": 90,
            "DCGM_FI_DEV_SHUTDOWN_TEMP": 92,
            "DCGM_FI_DEV_POWER_MGMT_LIMIT_MIN": round(m.power_limit_w * 0.29, 3),
            "DCGM_FI_DEV_POWER_MGMT_LIMIT_MAX": m.power_limit_w,
            "DCGM_FI_DEV_POWER_MGMT_LIMIT_DEF": m.power_limit_w,
            "DCGM_FI_DEV_ENFORCED_POWER_LIMIT": m.power_limit_w,
            "DCGM_FI_DEV_PCIE_TX_THROUGHPUT": (473_000 if busy else 900),
            "DCGM_FI_DEV_PCIE_RX_THROUGHPUT": (1_181_000 if busy else 1_200),
            "DCGM_FI_DEV_PCIE_MAX_LINK_GEN": 5 if m.gpm else 4,
            "DCGM_FI_DEV_PCIE_MAX_LINK_WIDTH": 16,
            "DCGM_FI_DEV_PCIE_LINK_GEN": (5 if m.gpm else 4) if busy else 1,
            "DCGM_FI_DEV_PCIE_LINK_WIDTH": 16,
            "DCGM_FI_PROF_PIPE_TENSOR_IMMA_ACTIVE": prof(0.0),
            "DCGM_FI_PROF_PIPE_TENSOR_HMMA_ACTIVE": prof(0.62),
            "DCGM_FI_PROF_PIPE_TENSOR_DFMA_ACTIVE": prof(0.0),
            "DCGM_FI_PROF_PIPE_INT_ACTIVE": prof(0.03),
            **{f"DCGM_FI_DEV_NVLINK_BANDWIDTH_L{n}": (0 if n < m_links else None)
               for n in range(18)},
        }


__all__ = ["DEFAULT_MODEL", "MODELS", "SIM_DRIVER_VERSION", "ModelSpec", "SimulatedBackend",
           "parse_simulate"]
