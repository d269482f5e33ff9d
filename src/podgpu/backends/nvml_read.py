"""One GPU's reads in one cycle, following a `Plan`: values, reasons for what is missing, processes.

Every NVML error is sorted here: a lost-device code is re-raised for the backend to mark the GPU
lost; an "unsupported" code makes the field absent with its reason (logged once); anything else
also makes it absent and counts as an error for `podgpu_collect_errors_total{source="nvml"}`.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from podgpu.backends import derived
from podgpu.backends.nvml_events import EventWatcher
from podgpu.backends.nvml_gpm import FIRST_WINDOW
from podgpu.backends.nvml_lib import NOT_FOUND, Lib
from podgpu.backends.nvml_mig import MigInstance
from podgpu.backends.nvml_plan import (
    CLOCK_REASONS_CALL,
    Plan,
    call,
    convert,
    fv_raw,
    pick,
)
from podgpu.backends.nvml_state import GpuState
from podgpu.model import GpuProcess, LabeledValue, Sample
from podgpu.model.device import Value

if TYPE_CHECKING:
    from podgpu.fields.catalog import Field

_SYSTEM_INFO = {"nvmlSystemGetDriverVersion": "driver_version",
                "nvmlSystemGetNVMLVersion": "nvml_version"}


class _Acc:
    """Values and reasons for one device in one cycle."""

    def __init__(self, lib: Lib, who: str) -> None:
        self.lib = lib
        self.who = who
        self.values: dict[str, Value] = {}
        self.missing: dict[str, str] = {}
        self.labeled: list[LabeledValue] = []
        self.errors = 0

    def put(self, f: Field, raw: Any) -> None:
        value = convert(f, raw)
        if value is None:
            self.miss(f, f"implausible reading {raw!r}")
        else:
            self.values[f.name] = value

    def miss(self, f: Field, reason: str, *, log: bool = True) -> None:
        self.missing[f.name] = reason
        if log:
            self.lib.log_once(self.who, f.name, reason)

    def fail(self, fields: tuple[Field, ...], exc: BaseException, what: str) -> None:
        """A call failed: its fields are absent. Lost devices propagate."""
        if self.lib.is_lost(exc):
            raise exc
        code = self.lib.code(exc)
        if not self.lib.is_unsupported(code):
            self.errors += 1
        for f in fields:
            self.miss(f, f"{what}: {self.lib.reason(code)}")

    def sample(self, gpu_device: Any) -> Sample:
        return Sample(gpu_device, MappingProxyType(self.values), MappingProxyType(self.missing),
                      tuple(self.labeled))


def read_gpu(
    lib: Lib, gpu: GpuState, plan: Plan, info: Mapping[str, str], events: EventWatcher | None
) -> tuple[Sample, int]:
    """Every planned field of one whole GPU. Raises the pynvml error when the GPU is lost."""
    h = gpu.handle
    acc = _Acc(lib, gpu.name)
    for name, why in plan.unknown.items():
        acc.missing[name] = why
    _field_values(lib, h, gpu, plan, acc)
    results = _calls(lib, h, plan, acc, mig=False)
    _labels(lib, gpu, plan, acc)
    for f in plan.system:
        value = info.get(_SYSTEM_INFO.get(f.source.ref, ""))
        try:
            acc.put(f, value if value is not None else getattr(lib.m, f.source.ref)())
        except lib.error as exc:
            acc.fail((f,), exc, f.source.ref)
    if plan.gpm:
        if gpu.gpm is None:
            for f, _ in plan.gpm:
                acc.miss(f, gpu.gpm_reason or "GPM unavailable")
        else:
            _gpm(lib, gpu.gpm, plan, acc, "whole GPU")
    _events(gpu, plan, acc, events)
    _clock_events(gpu, plan, acc, results.get(CLOCK_REASONS_CALL))
    if plan.health is not None:
        acc.labeled.extend(derived.health_series(acc.values, acc.labeled))
    assert gpu.device is not None
    return acc.sample(gpu.device), acc.errors


def read_instance(
    lib: Lib, gpu: GpuState, inst: MigInstance, plan: Plan, parent: Sample
) -> tuple[Sample, int]:
    """The per-instance (scope 'both') fields of one MIG GPU instance, read on its handle; every
    other value and labelled series (XID, health, clock events; not P2P) is the parent's, as
    DCGM reports GPU-level fields on GPU-instance entities. With `-d f` a MIG GPU has only its
    instances' series, so its temperature, power, XID and health alerts stay."""
    from podgpu.fields.catalog import BY_NAME  # loaded beside the open, not before it (serve.py)

    acc = _Acc(lib, f"{gpu.name}/gi{inst.gi_id}")
    for name, value in parent.values.items():
        f = BY_NAME.get(name)
        if f is None or f.scope != "both":
            acc.values[name] = value
    acc.labeled.extend(lv for lv in parent.labeled if lv.field != derived.P2P)
    _calls(lib, inst.handle, plan, acc, mig=True)
    stream = gpu.instance_gpm.get(inst.gi_id)
    scoped = tuple((f, mid) for f, mid in plan.gpm if f.scope == "both")
    if scoped:
        if stream is None:
            for f, _ in scoped:
                acc.miss(f, gpu.gpm_reason or "GPM unavailable for this GPU instance")
        else:
            _gpm(lib, stream, Plan(gpm=scoped), acc, "GPU instance")
    return acc.sample(inst.device), acc.errors


def _field_values(lib: Lib, h: Any, gpu: GpuState, plan: Plan, acc: _Acc) -> None:
    ids = plan.batch()
    if not ids:
        return
    fields = tuple(e.field for e in plan.fv) + tuple(r.field for r in plan.rates)
    try:
        fvs = lib.m.nvmlDeviceGetFieldValues(h, ids)
    except lib.error as exc:
        acc.fail(fields, exc, "nvmlDeviceGetFieldValues")
        return
    for i, entry in enumerate(plan.fv):
        fv = fvs[i]
        ret = int(fv.nvmlReturn)
        if ret != 0:
            if ret in (15, 999):  # per-field GpuIsLost / Unknown: the device is gone
                raise lib.error(ret)
            acc.miss(entry.field, lib.reason(ret))
            if not lib.is_unsupported(ret):
                acc.errors += 1
            continue
        acc.put(entry.field, fv_raw(fv, entry.field.source.ref))
    offset = len(plan.fv)
    for r in plan.rates:
        parts = fvs[offset:offset + len(r.field_ids)]
        offset += len(r.field_ids)
        bad = [int(p.nvmlReturn) for p in parts if int(p.nvmlReturn) != 0]
        if bad:
            acc.miss(r.field, lib.reason(bad[0]))
            continue
        total = float(sum(fv_raw(p, "") for p in parts))
        stamp = max(int(p.timestamp) for p in parts)
        prev = gpu.rate_prev.get(r.field.name)
        gpu.rate_prev[r.field.name] = (total, stamp)
        if prev is None or stamp <= prev[1] or total < prev[0]:
            acc.miss(r.field, "rate needs two samples", log=False)
            continue
        per_second = (total - prev[0]) / ((stamp - prev[1]) / 1e6)
        acc.put(r.field, per_second)


def _calls(lib: Lib, h: Any, plan: Plan, acc: _Acc, *, mig: bool) -> dict[str, Any]:
    results: dict[str, Any] = {}
    for group in plan.calls:
        fields = tuple(f for f in group.fields if f.scope == "both") if mig else group.fields
        if mig and not fields:
            continue
        try:
            result = call(lib, h, group.ref, group.arg)
        except lib.error as exc:
            if mig and not lib.is_lost(exc) and not lib.is_unsupported(lib.code(exc)):
                acc.errors += 1  # a stale MIG handle: reported, not a lost GPU
                for f in fields:
                    acc.miss(f, f"{group.ref}: {lib.reason(lib.code(exc))}")
                continue
            acc.fail(fields, exc, group.ref)
            continue
        results[group.ref] = result
        for f in fields:
            try:
                acc.put(f, pick(result, f.source.pick))
            except (AttributeError, IndexError, TypeError, ValueError) as exc:
                acc.miss(f, f"unexpected result of {group.ref}: {exc}")
    return results


def _labels(lib: Lib, gpu: GpuState, plan: Plan, acc: _Acc) -> None:
    """Static device facts (serial, VBIOS, ...): read once per device, cached (as nvitop does)."""
    if not plan.labels:
        return
    if gpu.labels is None:
        gpu.labels = {}
    for f in plan.labels:
        if f.name not in gpu.labels and f.name not in gpu.label_missing:
            try:
                raw = call(lib, gpu.handle, f.source.ref, f.source.arg)
                value = convert(f, pick(raw, f.source.pick))
                if value is None or value == "":
                    gpu.label_missing[f.name] = "empty"
                else:
                    gpu.labels[f.name] = value
            except lib.error as exc:
                if lib.is_lost(exc):
                    raise
                gpu.label_missing[f.name] = f"{f.source.ref}: {lib.reason(lib.code(exc))}"
        if f.name in gpu.labels:
            acc.values[f.name] = gpu.labels[f.name]
        else:
            acc.miss(f, gpu.label_missing[f.name])


def _gpm(lib: Lib, stream: Any, plan: Plan, acc: _Acc, what: str) -> None:
    ids = sorted({mid for _, mid in plan.gpm})
    try:
        got = stream.metrics(ids)
    except lib.error as exc:
        acc.fail(tuple(f for f, _ in plan.gpm), exc, f"GPM sample ({what})")
        return
    for f, mid in plan.gpm:
        value = got.get(mid, "no value")
        if isinstance(value, str):
            acc.miss(f, value, log=value != FIRST_WINDOW)
        else:
            acc.put(f, value)


def _window_label(seconds: float) -> tuple[str, str]:
    return ("window_size_in_ms", str(round(seconds * 1000)))


def _events(gpu: GpuState, plan: Plan, acc: _Acc, events: EventWatcher | None) -> None:
    wanted = (*plan.events, *((plan.xid_count,) if plan.xid_count else ()))
    if not wanted:
        return
    why = "event thread not running" if events is None else events.unsupported(gpu.uuid)
    if why is not None or events is None:
        for f in wanted:
            acc.miss(f, why or "event thread not running")
        return
    for f in plan.events:
        acc.values[f.name] = events.last_xid(gpu.uuid)
    if plan.xid_count is not None:
        window = _window_label(events.xid_window)
        counts = events.xid_counts(gpu.uuid)
        name = plan.xid_count.name
        if not counts:
            acc.labeled.append(LabeledValue(name, (window,), 0))
        for xid in sorted(counts):
            acc.labeled.append(LabeledValue(name, (window, ("xid", str(xid))), counts[xid]))


def _clock_events(gpu: GpuState, plan: Plan, acc: _Acc, mask: Any) -> None:
    """DCGM_EXP_CLOCK_EVENTS_COUNT: per reason, the bitmask samples in the window that had it set,
    one sample per dcgm-exporter collect interval (derived.ClockEventCounter)."""
    f = plan.clock_count
    if f is None or gpu.clock_events is None:
        return
    if mask is None:
        acc.miss(f, "clock event reasons unavailable")
        return
    gpu.clock_events.observe(int(mask))
    acc.labeled.extend(gpu.clock_events.series())


def read_processes(lib: Lib, gpu: GpuState) -> tuple[GpuProcess, ...]:
    """PIDs on this GPU (compute + graphics) with memory and SM utilisation.

    Whole GPU: `nvmlDeviceGetProcessUtilization` since the last sample seen (the mean smUtil of
    each pid's samples; a listed pid without samples was idle: 0). MIG: per instance handle,
    memory only (NVML has no per-process utilisation with MIG on).
    """
    if gpu.instances:
        out: list[GpuProcess] = []
        for inst in gpu.instances:
            for pid, mem in _running(lib, inst.handle, f"{gpu.name}/gi{inst.gi_id}").items():
                out.append(GpuProcess(inst.device.key, pid, mem, None))
        return tuple(out)
    running = _running(lib, gpu.handle, gpu.name)
    if not running:
        return ()
    util = _utilization(lib, gpu)
    assert gpu.device is not None
    key = gpu.device.key
    return tuple(
        GpuProcess(key, pid, mem, None if util is None else util.get(pid, 0.0))
        for pid, mem in sorted(running.items())
    )


def _running(lib: Lib, handle: Any, who: str) -> dict[int, int | None]:
    procs: dict[int, int | None] = {}
    for fn_name in ("nvmlDeviceGetComputeRunningProcesses",
                    "nvmlDeviceGetGraphicsRunningProcesses"):
        fn = lib.const(fn_name)
        if fn is None:
            continue
        try:
            listed = fn(handle)
        except lib.error as exc:
            if lib.is_lost(exc):
                raise
            lib.log_once(who, fn_name, lib.reason(lib.code(exc)))
            continue
        for p in listed:
            mem = getattr(p, "usedGpuMemory", None)
            mem = int(mem) if mem is not None else None
            prev = procs.get(int(p.pid))
            procs[int(p.pid)] = mem if prev is None else max(prev, mem or 0)
    return procs


def _utilization(lib: Lib, gpu: GpuState) -> dict[int, float] | None:
    fn = lib.const("nvmlDeviceGetProcessUtilization")
    if fn is None:
        return None
    since = gpu.proc_timestamp or int(time.time() * 1e6) - 1_000_000
    try:
        samples = fn(gpu.handle, since)
    except lib.error as exc:
        if lib.is_lost(exc):
            raise
        if lib.code(exc) == NOT_FOUND:
            return {}  # no process had non-zero utilisation since `since`
        lib.log_once(gpu.name, "per-process utilization", lib.reason(lib.code(exc)))
        return None
    sums: dict[int, list[float]] = {}
    for s in samples:
        sums.setdefault(int(s.pid), []).append(float(s.smUtil))
        gpu.proc_timestamp = max(gpu.proc_timestamp, int(s.timeStamp))
    return {pid: sum(v) / len(v) for pid, v in sums.items()}
