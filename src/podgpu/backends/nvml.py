"""The NVML backend: real GPUs through nvidia-ml-py, without the DCGM daemon.

Per cycle and per GPU: one `nvmlDeviceGetFieldValues` batch for every batchable field, one call per
distinct (function, argument) for the rest, one GPM metrics call over a rolling sample pair for the
DCGM_FI_PROF_* ratios, XIDs from an event thread. Every per-GPU NVML call (discovery, rediscovery,
MIG enumeration, reads, P2P) runs on that GPU's own worker thread (backends/nvml_gpu.py; ctypes
releases the GIL during NVML calls), so a cycle costs about one GPU's time, not the sum. The cycle
waits for them up to `read_timeout_seconds`: a GPU whose NVML call hangs is reported as not
answering, and skipped until that call returns, while the others keep reporting.
A GPU that fails with GpuIsLost/Unknown goes into `Reading.lost` and keeps a sample with its
identity, XID and health FAIL (backends/lost.py); it is looked for again every `retry_seconds`.
See docs/nvml.md.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Sequence
from functools import partial
from types import MappingProxyType, ModuleType
from typing import TYPE_CHECKING

from podgpu.backends import nvml_lib
from podgpu.backends.base import Reading
from podgpu.backends.deadline import Wait, Workers, wait_all
from podgpu.backends.derived import DCGM_EXPORTER_INTERVAL
from podgpu.backends.lost import HUNG_CODE, lost_sample, with_instances
from podgpu.backends.nvml_events import EventWatcher
from podgpu.backends.nvml_gpu import CycleJob, GpuResult, GpuRunner, GpuView
from podgpu.backends.nvml_lib import LOGGER, Lib, text
from podgpu.errors import BackendError
from podgpu.model import Device, GpuProcess, Sample

if TYPE_CHECKING:
    from podgpu.backends.nvml_ahead import Warmup
    from podgpu.backends.nvml_plan import Plan
    from podgpu.fields.catalog import Field

log = logging.getLogger(LOGGER)

_SYSTEM_INFO = {"nvmlSystemGetDriverVersion": "driver_version",
                "nvmlSystemGetNVMLVersion": "nvml_version"}

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
        clock_events_sample_seconds: float = DCGM_EXPORTER_INTERVAL,
        pynvml_module: ModuleType | None = None,
        retry_seconds: float = 2.0,
        read_timeout_seconds: float = DEFAULT_READ_TIMEOUT,
        clock: Callable[[], float] = time.monotonic,
        read_wait: Wait = wait_all,
        warmup: Warmup | None = None,
    ) -> None:
        """`read_wait`: how a cycle waits for the GPUs' workers up to `read_timeout_seconds`
        (backends/deadline.py; tests pass one that needs no real time). `warmup`: the GPUs'
        workers and first GPM samples started before this backend was made
        (backends/nvml_ahead.py), adopted by the first `open`."""
        self._module = pynvml_module
        self._xid_window = xid_window_seconds
        self._clock_window = clock_events_window_seconds
        self._clock_period = clock_events_sample_seconds
        self._retry_seconds = retry_seconds
        self._clock = clock
        self._lib: Lib | None = None
        self._runners: dict[int, GpuRunner] = {}
        self._views: dict[int, GpuView] = {}
        self._info: dict[str, str] = {}
        self._events: EventWatcher | None = None
        self._read_timeout = read_timeout_seconds
        self._read_wait = read_wait
        self._workers = Workers(wait=read_wait)
        self._warmup = warmup
        self._plans: dict[tuple[str, ...], Plan] = {}
        self._unknown: dict[str, str] = {}
        self._mig_dirty = False
        self._remig: set[int] = set()

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
        warmup, self._warmup = self._warmup, None
        adopted = warmup.workers() if warmup is not None else None
        if adopted is not None:
            adopted.wait = self._read_wait  # a cycle waits on them as on the backend's own
            self._workers = adopted
        self._discover_all(lib, count, warmup)
        self._log_capabilities()
        reachable = [(v.uuid, v.handle) for v in self._views.values()
                     if v.lost is None and v.device is not None]
        self._events = EventWatcher(lib, reachable, xid_window=self._xid_window,
                                    on_mig_change=self._mark_mig_dirty, clock=self._clock)
        self._events.start(ready_timeout=self._read_timeout)

    def _discover_all(self, lib: Lib, count: int, warmup: Warmup | None = None) -> None:
        """Discovery on each GPU's worker under the read deadline: a GPU whose discovery hangs
        is left undiscovered (reported as not answering) and picked up when its call returns.
        With a `warmup`, each GPU adopts the GPM stream its worker started ahead."""
        info = MappingProxyType(dict(self._info))
        self._views = {}
        self._runners = {i: GpuRunner(lib, i, info=info, retry_seconds=self._retry_seconds,
                                      clock_window=self._clock_window,
                                      clock_period=self._clock_period, clock=self._clock,
                                      first_stream=None if warmup is None
                                      else partial(warmup.take, i))
                         for i in range(count)}
        futures = self._workers.run(((i, r.start) for i, r in self._runners.items()),
                                    self._read_timeout)
        for i, fut in futures.items():
            result = fut.result() if fut.done() and fut.exception() is None else None
            if result is not None and result.view is not None:
                self._views[i] = result.view
            else:
                self._views[i] = GpuView(i)
                log.error("gpu%d: NVML discovery did not answer within %g s; the other GPUs "
                          "are served, this one when its call returns", i, self._read_timeout)

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

    def _log_capabilities(self) -> None:
        for v in self._views.values():
            if v.device is None:
                continue
            mig = f", MIG with {len(v.instances)} GPU instances" if v.instances else ""
            log.info("%s: %s %s%s", v.name, v.device.model, v.uuid, mig)
            if v.gpm_reason is not None:
                log.warning("%s (%s): %s; DCGM_FI_PROF_* (DCP) fields will be absent for it",
                            v.name, v.device.model, v.gpm_reason)

    def close(self) -> None:
        if self._events is not None:
            self._events.stop()
            self._events = None
        # GPM buffers are freed on each GPU's own worker (briefly: a stuck one is left alone)
        self._workers.run(((i, r.close) for i, r in self._runners.items()
                           if self._workers.stuck(i) is None), 1.0)
        self._workers.close()
        self._workers = Workers(wait=self._read_wait)
        if self._lib is not None:
            with contextlib.suppress(Exception):
                self._lib.m.nvmlShutdown()
            self._lib = None

    # --- facts
    def devices(self) -> tuple[Device, ...]:
        out: list[Device] = []
        for v in self._views.values():
            if v.device is not None and v.lost is None:
                out.append(v.device)
                out.extend(v.instances)
        return tuple(out)

    def info(self) -> dict[str, str]:
        return dict(self._info)

    def unavailable_fields(self) -> dict[str, str]:
        from podgpu.fields.catalog import CATALOG  # loaded beside the open, not before it (serve.py)

        out = dict(self._unknown)
        known = [v for v in self._views.values() if v.device is not None]
        if known and all(v.gpm_reason is not None and not v.instance_gpm for v in known):
            why = "; ".join(sorted({v.gpm_reason or "" for v in known}))
            out.update({f.name: why for f in CATALOG if f.source.kind == "gpm"})
        if self._events is not None and known:
            reasons = [self._events.unsupported(v.uuid) for v in known]
            if all(reasons):
                why = "; ".join(sorted({r or "" for r in reasons}))
                out.update({f.name: why for f in CATALOG if f.source.kind == "event"
                            or f.source.ref == "DCGM_FI_DEV_XID_ERRORS"})
        return out

    # --- the cycle
    def read(self, fields: Sequence[Field], *, processes: bool = False) -> Reading:
        """One job per GPU on its worker, waited for up to the read deadline; the collect thread
        itself makes no NVML call here."""
        lib = self._require()
        plan = self._plan(lib, fields)
        if self._mig_dirty:  # set by the event thread: every GPU re-enumerates on its next job
            self._mig_dirty = False
            self._remig.update(self._runners)
        live = [(v.index, v.uuid, v.handle) for v in self._views.values()
                if v.lost is None and v.device is not None]
        by_gpu: dict[int, GpuResult] = {}
        jobs = []
        for i, runner in self._runners.items():
            age = self._workers.stuck(i)
            if age is not None:  # counted once, when it timed out; reported until it returns
                by_gpu[i] = GpuResult(lost=f"an NVML call has not returned for {age:.0f} s")
                continue
            job = CycleJob(plan, processes, i in self._remig,
                           tuple(p for p in live if p[0] != i), self._events)
            self._remig.discard(i)
            jobs.append((i, partial(runner.cycle, job)))
        for i, fut in self._workers.run(jobs, self._read_timeout).items():
            if fut.done() and fut.exception() is None:
                by_gpu[i] = fut.result()
                continue
            why = f"NVML did not answer within {self._read_timeout:g} s"
            by_gpu[i] = GpuResult(errors=1, lost=why)
            log.error("nvidia%s: %s; the other GPUs keep reporting, this one is skipped until "
                      "the call returns", i, why)
        return self._assemble(plan, fields, by_gpu)

    def _assemble(self, plan: Plan, fields: Sequence[Field], by_gpu: dict[int, GpuResult]
                  ) -> Reading:
        samples: list[Sample] = []
        procs: list[GpuProcess] = []
        lost: list[tuple[str, str]] = []
        errors = 0
        held = [r.held_for for r in by_gpu.values() if r.held_for is not None]
        for i in sorted(self._runners):
            result = by_gpu[i]
            if result.view is not None:
                self._views[i] = result.view
            view = self._views[i]
            errors += result.errors
            if view.lost is not None and view.device is not None:
                samples.extend(with_instances(self._lost_sample(view, plan, fields),
                                              view.instances))
                lost.append((view.name, view.lost))
                continue
            samples.extend(result.samples)
            procs.extend(result.processes)
            if result.lost is not None:
                lost.append((view.name, result.lost))
                if not result.samples and view.device is not None:  # hung: health stays
                    samples.extend(with_instances(self._lost_sample(
                        view, plan, fields, result.lost, HUNG_CODE), view.instances))
        return Reading(samples=tuple(samples), lost=tuple(lost), errors=errors,
                       processes=tuple(procs), held_for=max(held, default=None))

    def _lost_sample(self, view: GpuView, plan: Plan, fields: Sequence[Field],
                     reason: str | None = None, fail_code: str | None = None) -> Sample:
        """A lost (or hung) GPU's identity, XID (79 when NVML said GpuIsLost) and health
        FAIL."""
        assert view.device is not None
        ev = self._events
        counted = ev is not None and ev.unsupported(view.uuid) is None
        xid = view.lost_xid or (ev.last_xid(view.uuid) if ev is not None else 0)
        labels = {**view.labels, **{f.name: self._info[k] for f in plan.system
                                    if (k := _SYSTEM_INFO.get(f.source.ref)) in self._info}}
        return lost_sample(view.device, (f.name for f in fields),
                           reason=reason or view.lost or "lost", fail_code=fail_code,
                           xid=xid, xid_counts=ev.xid_counts(view.uuid) if counted and ev else None,
                           xid_window_seconds=self._xid_window, labels=labels)

    def _mark_mig_dirty(self) -> None:
        self._mig_dirty = True

    def _plan(self, lib: Lib, fields: Sequence[Field]) -> Plan:
        key = tuple(f.name for f in fields)
        plan = self._plans.get(key)
        if plan is None:
            from podgpu.backends.nvml_plan import build_plan  # loaded beside the open

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


__all__ = ["NvmlBackend"]
