"""The NVML backend: real GPUs through nvidia-ml-py, without the DCGM daemon (issue 3).

Per cycle and per GPU: one `nvmlDeviceGetFieldValues` batch for every batchable field, one call per
distinct (function, argument) for the rest, one GPM metrics call over a rolling sample pair for the
DCGM_FI_PROF_* ratios, XIDs from an event thread. GPUs are read concurrently, one worker thread
each (ctypes releases the GIL during NVML calls), so a cycle costs about one GPU's time, not the
sum. The cycle waits for them up to `read_timeout_seconds`: a GPU whose NVML call hangs is reported
as not answering, and skipped until that call returns, while the others keep reporting
(backends/deadline.py, issue 13).
A GPU that fails with GpuIsLost/Unknown goes into `Reading.lost`, the others keep reporting, and it
is looked for again every `retry_seconds`. See docs/nvml.md.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import partial
from types import ModuleType

from podgpu.backends import derived, nvml_lib
from podgpu.backends.base import Reading
from podgpu.backends.deadline import Workers
from podgpu.backends.nvml_events import EventWatcher, WindowCounter
from podgpu.backends.nvml_gpm import GpmStream, gpm_support
from podgpu.backends.nvml_lib import Lib, text
from podgpu.backends.nvml_mig import enumerate_instances
from podgpu.backends.nvml_plan import Plan, build_plan
from podgpu.backends.nvml_read import read_gpu, read_instance, read_processes
from podgpu.backends.nvml_state import GpuState
from podgpu.errors import BackendError
from podgpu.fields.catalog import CATALOG, Field
from podgpu.model import Device, GpuProcess, Sample

log = logging.getLogger("podgpu.backends.nvml")


@dataclass(frozen=True, slots=True)
class GpuResult:
    samples: tuple[Sample, ...] = ()
    processes: tuple[GpuProcess, ...] = ()
    errors: int = 0
    lost: str | None = None


DEFAULT_READ_TIMEOUT = 5.0
"""Seconds a cycle waits for a GPU's reads (the CLI passes one below the collect interval)."""


class NvmlBackend:
    """Reads NVIDIA GPUs through NVML. Construct, `open()`, then `read()` once per cycle."""

    name = "nvml"

    def __init__(
        self,
        *,
        xid_window_seconds: float = 300.0,
        clock_events_window_seconds: float = 300.0,
        pynvml_module: ModuleType | None = None,
        retry_seconds: float = 2.0,
        read_timeout_seconds: float = DEFAULT_READ_TIMEOUT,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._module = pynvml_module
        self._xid_window = xid_window_seconds
        self._clock_window = clock_events_window_seconds
        self._retry_seconds = retry_seconds
        self._clock = clock
        self._lib: Lib | None = None
        self._gpus: list[GpuState] = []
        self._info: dict[str, str] = {}
        self._events: EventWatcher | None = None
        self._read_timeout = read_timeout_seconds
        self._workers = Workers()
        self._plans: dict[tuple[str, ...], Plan] = {}
        self._p2p_key: tuple[str, ...] = ()
        self._p2p: dict[tuple[int, int], int] = {}
        self._unknown: dict[str, str] = {}
        self._mig_dirty = False

    # --- lifecycle
    def open(self) -> None:
        lib = Lib(nvml_lib.load(self._module))
        m = lib.m
        try:
            m.nvmlInit()
        except lib.error as exc:
            code = lib.code(exc)
            cause = nvml_lib.INIT_CAUSES.get(code, f"nvmlInit failed: {exc} (NVML error {code})")
            raise BackendError(cause) from exc
        self._lib = lib
        try:
            self._info = {"driver_version": text(m.nvmlSystemGetDriverVersion())}
            self._info.update(self._optional_info(lib))
            count = int(m.nvmlDeviceGetCount())
        except lib.error as exc:
            self.close()
            raise BackendError(f"NVML works but cannot list GPUs: {exc}") from exc
        if count == 0:
            self.close()
            raise BackendError("NVML found no NVIDIA GPU on this node")
        self._gpus = [GpuState(i) for i in range(count)]
        for gpu in self._gpus:
            try:
                self._discover(gpu)
            except lib.error as exc:
                gpu.lost = f"unreachable at start: {exc}"
                gpu.retry_at = self._clock() + self._retry_seconds
                log.warning("%s: %s", gpu.name, gpu.lost)
        self._log_capabilities()
        reachable = [(g.uuid, g.handle) for g in self._gpus if g.lost is None]
        self._events = EventWatcher(lib, reachable, xid_window=self._xid_window,
                                    on_mig_change=self._mark_mig_dirty, clock=self._clock)
        self._events.start()

    @staticmethod
    def _optional_info(lib: Lib) -> dict[str, str]:
        info: dict[str, str] = {}
        try:
            info["nvml_version"] = text(lib.m.nvmlSystemGetNVMLVersion())
            cuda = int(lib.m.nvmlSystemGetCudaDriverVersion())
            info["cuda_driver_version"] = f"{cuda // 1000}.{cuda % 1000 // 10}"
        except (lib.error, AttributeError):
            pass
        return info

    def _discover(self, gpu: GpuState) -> None:
        """(Re)build a GPU's identity, MIG instances and GPM streams from a fresh handle."""
        lib = self._require()
        m = lib.m
        handle = (m.nvmlDeviceGetHandleByUUID(gpu.uuid) if gpu.uuid
                  else m.nvmlDeviceGetHandleByIndex(gpu.index))
        uuid = text(m.nvmlDeviceGetUUID(handle))
        try:
            bus_id = text(m.nvmlDeviceGetPciInfo(handle).busId)
        except lib.error as exc:
            if lib.is_lost(exc):
                raise
            bus_id = ""
        try:
            minor = int(m.nvmlDeviceGetMinorNumber(handle))
        except lib.error as exc:
            if lib.is_lost(exc):
                raise
            minor = gpu.index
        model = text(m.nvmlDeviceGetName(handle))
        device = Device(gpu.index, uuid, bus_id, f"nvidia{minor}", model)
        instances = enumerate_instances(lib, handle, device)
        gpu.free_gpm()
        gpu.uuid, gpu.handle, gpu.device, gpu.instances = uuid, handle, device, instances
        if gpu.clock_events is None:
            gpu.clock_events = WindowCounter(self._clock_window, self._clock)
        gpu.proc_timestamp = 0
        gpu.rate_prev = {}
        gpu.gpm_reason = gpm_support(lib, handle)
        if gpu.gpm_reason is None:
            gpu.gpm, why = self._gpm_stream(gpu, None)
            gpu.instance_gpm = self._instance_streams(gpu)
            if gpu.gpm is None:
                gpu.gpm_reason = why

    def _gpm_stream(self, gpu: GpuState, gi_id: int | None) -> tuple[GpmStream | None, str]:
        """A GPM stream for the whole GPU or one GPU instance; None and why when NVML refuses
        (e.g. whole-GPU GPM on a MIG-enabled GPU, while per-instance GPM works)."""
        lib = self._require()
        try:
            return GpmStream(lib, gpu.handle, gi_id, clock=self._clock), ""
        except lib.error as exc:
            if lib.is_lost(exc):
                raise
            return None, f"GPM sampling failed: {lib.reason(lib.code(exc))}"

    def _instance_streams(self, gpu: GpuState) -> dict[int, GpmStream]:
        streams: dict[int, GpmStream] = {}
        for inst in gpu.instances:
            stream, why = self._gpm_stream(gpu, inst.gi_id)
            if stream is None:
                log.warning("%s/gi%d: %s", gpu.name, inst.gi_id, why)
            else:
                streams[inst.gi_id] = stream
        return streams

    def _log_capabilities(self) -> None:
        for gpu in self._gpus:
            if gpu.device is None:
                continue
            mig = f", MIG with {len(gpu.instances)} GPU instances" if gpu.instances else ""
            log.info("%s: %s %s%s", gpu.name, gpu.device.model, gpu.uuid, mig)
            if gpu.gpm_reason is not None:
                log.warning("%s (%s): %s; DCGM_FI_PROF_* (DCP) fields will be absent for it",
                            gpu.name, gpu.device.model, gpu.gpm_reason)

    def close(self) -> None:
        if self._events is not None:
            self._events.stop()
            self._events = None
        self._workers.close()
        self._workers = Workers()
        for gpu in self._gpus:
            gpu.free_gpm()
        if self._lib is not None:
            with contextlib.suppress(Exception):
                self._lib.m.nvmlShutdown()
            self._lib = None

    # --- facts
    def devices(self) -> tuple[Device, ...]:
        out: list[Device] = []
        for gpu in self._gpus:
            if gpu.device is not None and gpu.lost is None:
                out.append(gpu.device)
                out.extend(i.device for i in gpu.instances)
        return tuple(out)

    def info(self) -> dict[str, str]:
        return dict(self._info)

    def unavailable_fields(self) -> dict[str, str]:
        out = dict(self._unknown)
        known = [g for g in self._gpus if g.device is not None]
        if known and all(g.gpm_reason is not None and not g.instance_gpm for g in known):
            why = "; ".join(sorted({g.gpm_reason or "" for g in known}))
            out.update({f.name: why for f in CATALOG if f.source.kind == "gpm"})
        if self._events is not None and known:
            reasons = [self._events.unsupported(g.uuid) for g in known]
            if all(reasons):
                why = "; ".join(sorted({r or "" for r in reasons}))
                out.update({f.name: why for f in CATALOG if f.source.kind == "event"
                            or f.source.ref == "DCGM_FI_DEV_XID_ERRORS"})
        return out

    # --- the cycle
    def read(self, fields: Sequence[Field], *, processes: bool = False) -> Reading:
        lib = self._require()
        plan = self._plan(lib, fields)
        self._retry_lost()
        if self._mig_dirty:
            self._rediscover_mig()
        live = [g for g in self._gpus if g.lost is None]
        by_gpu: dict[int, GpuResult] = {}
        ready = []
        for g in live:
            age = self._workers.stuck(g.index)
            if age is None:
                ready.append(g)
            else:  # counted once, when it timed out; reported every cycle until it returns
                by_gpu[g.index] = GpuResult(lost=f"an NVML call has not returned for {age:.0f} s")
        futures = self._workers.run(
            ((g.index, partial(self._read_one, g, plan, processes)) for g in ready),
            self._read_timeout)
        for index, fut in futures.items():
            if fut.done():
                by_gpu[index] = fut.result()
                continue
            why = f"NVML did not answer within {self._read_timeout:g} s"
            by_gpu[index] = GpuResult(errors=1, lost=why)
            log.error("nvidia%s: %s; the other GPUs keep reporting, this one is skipped until "
                      "the call returns", index, why)
        samples: list[Sample] = []
        procs: list[GpuProcess] = []
        lost: list[tuple[str, str]] = []
        errors = 0
        for gpu in self._gpus:
            result = by_gpu.get(gpu.index)
            if result is None:
                lost.append((gpu.name, gpu.lost or "unreachable"))
                continue
            samples.extend(result.samples)
            procs.extend(result.processes)
            errors += result.errors
            if result.lost is not None:
                lost.append((gpu.name, result.lost))
        if plan.p2p is not None:
            samples = self._with_p2p(lib, plan.p2p, samples)
        return Reading(samples=tuple(samples), lost=tuple(lost), errors=errors,
                       processes=tuple(procs))

    def _with_p2p(self, lib: Lib, f: Field, samples: list[Sample]) -> list[Sample]:
        """DCGM_EXP_P2P_STATUS on each whole-GPU sample: nvmlDeviceGetP2PStatus(NVLINK) to every
        other live GPU. Topology is static, so pairs are asked once and kept (until a GPU is
        lost and comes back, which rebuilds the cache)."""
        live = [g for g in self._gpus if g.lost is None and g.device is not None]
        key = tuple(g.uuid for g in live)
        if self._p2p_key != key:
            self._p2p_key, self._p2p = key, {}
            index = lib.const(f.source.arg)
            for a in live:
                for b in live:
                    if a is b:
                        continue
                    try:
                        status = int(getattr(lib.m, f.source.ref)(a.handle, b.handle, index))
                    except lib.error as exc:
                        if lib.is_lost(exc):
                            continue
                        status = 6  # Unknown, as dcgm-exporter maps anything else
                    self._p2p[(a.index, b.index)] = status
        out = []
        for s in samples:
            if s.device.is_mig:
                out.append(s)
                continue
            peers = sorted((b, st) for (a, b), st in self._p2p.items() if a == s.device.index)
            if not peers:  # a single-GPU node (or every other GPU lost): say so, don't vanish
                out.append(replace(s, missing={**s.missing, f.name: "no peer GPU on this node"}))
                continue
            out.append(replace(s, labeled=s.labeled + derived.p2p_series(peers)))
        return out

    def _read_one(self, gpu: GpuState, plan: Plan, processes: bool) -> GpuResult:
        lib = self._require()
        try:
            sample, errors = read_gpu(lib, gpu, plan, self._info, self._events)
            samples = [sample]
            for inst in gpu.instances:
                inst_sample, inst_errors = read_instance(lib, gpu, inst, plan, sample)
                samples.append(inst_sample)
                errors += inst_errors
                if inst_errors:
                    self._mig_dirty = True  # an instance handle went stale: re-enumerate
            procs = read_processes(lib, gpu) if processes else ()
            return GpuResult(tuple(samples), procs, errors)
        except lib.error as exc:
            if not lib.is_lost(exc):
                log.warning("%s: NVML error: %s", gpu.name, exc)
                return GpuResult(errors=1, lost=f"NVML error: {exc}")
            gpu.lost = f"GPU lost: {exc} (NVML error {lib.code(exc)})"
            gpu.retry_at = self._clock() + self._retry_seconds
            gpu.free_gpm()
            log.error("%s (%s): %s; other GPUs keep reporting", gpu.name, gpu.uuid, gpu.lost)
            return GpuResult(errors=1, lost=gpu.lost)
        except Exception as exc:  # a bug for one GPU must not stop the others (STYLE rule 4)
            log.exception("%s: reading failed", gpu.name)
            return GpuResult(errors=1, lost=f"read failed: {type(exc).__name__}: {exc}")

    def _retry_lost(self) -> None:
        lib = self._require()
        now = self._clock()
        for gpu in self._gpus:
            if gpu.lost is None or now < gpu.retry_at:
                continue
            try:
                self._discover(gpu)
            except lib.error:
                gpu.retry_at = now + self._retry_seconds
                continue
            log.warning("%s (%s) is back after: %s", gpu.name, gpu.uuid, gpu.lost)
            gpu.lost = None
            if self._events is not None:
                self._events.reregister(gpu.uuid, gpu.handle)

    def _mark_mig_dirty(self) -> None:
        self._mig_dirty = True

    def _rediscover_mig(self) -> None:
        lib = self._require()
        self._mig_dirty = False
        for gpu in self._gpus:
            if gpu.lost is not None or gpu.device is None:
                continue
            try:
                instances = enumerate_instances(lib, gpu.handle, gpu.device)
            except lib.error as exc:
                log.warning("%s: MIG re-enumeration failed: %s", gpu.name, exc)
                continue
            for stream in gpu.instance_gpm.values():
                stream.close()
            gpu.instances = instances
            gpu.instance_gpm = {}
            if gpm_support(lib, gpu.handle) is None:
                try:
                    gpu.instance_gpm = self._instance_streams(gpu)
                except lib.error as exc:
                    log.warning("%s: GPM on MIG instances failed: %s", gpu.name, exc)

    def _plan(self, lib: Lib, fields: Sequence[Field]) -> Plan:
        key = tuple(f.name for f in fields)
        plan = self._plans.get(key)
        if plan is None:
            plan = build_plan(lib, fields)
            self._plans[key] = plan
            self._unknown.update(plan.unknown)
            for name, why in plan.unknown.items():
                log.warning("%s unavailable on this node: %s", name, why)
        return plan

    def _require(self) -> Lib:
        if self._lib is None:
            raise BackendError("NvmlBackend used before open() or after close()")
        return self._lib


__all__ = ["GpuState", "NvmlBackend"]
