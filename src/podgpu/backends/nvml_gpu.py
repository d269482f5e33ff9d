"""One GPU's NVML work, all of it on that GPU's own worker thread.

Discovery, rediscovery of a lost GPU, MIG re-enumeration, the cycle's reads and the GPU's row of
the P2P matrix are NVML calls, and any NVML call can hang in a wedged driver. So every one of
them runs in `GpuRunner` methods that the backend submits to the GPU's worker
(backends/deadline.py) under the cycle's deadline: a hang at any of those points stalls that GPU,
never the collect loop. The runner owns its `GpuState`; what the collect thread needs to know
about the GPU comes back as an immutable `GpuView` inside each `GpuResult`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, NamedTuple

from podgpu.backends import derived
from podgpu.backends.derived import ClockEventCounter
from podgpu.backends.nvml_events import EventWatcher
from podgpu.backends.nvml_gpm import GpmStream, gpm_support
from podgpu.backends.nvml_lib import GPU_IS_LOST, LOGGER, Lib, text
from podgpu.backends.nvml_mig import enumerate_instances
from podgpu.backends.nvml_state import GpuState
from podgpu.model import Device, GpuProcess, Sample
from podgpu.model.device import EMPTY, Value

if TYPE_CHECKING:
    from podgpu.backends.nvml_plan import Plan
    from podgpu.fields.catalog import Field

log = logging.getLogger(LOGGER)


Peer = tuple[int, str, Any]
"""(index, UUID, NVML handle) of another live GPU, for this GPU's P2P row."""


class GpuView(NamedTuple):
    """What the collect thread knows about one GPU: a frozen copy its worker hands back."""

    index: int  # type: ignore[assignment]  # the field hides tuple.index, which nothing calls
    uuid: str = ""
    handle: Any = None
    """Opaque NVML handle, only passed back to other GPUs' workers for P2P calls."""
    device: Device | None = None
    instances: tuple[Device, ...] = ()
    labels: Mapping[str, Value] = EMPTY
    """Label-typed field values read so far (static facts), for a lost GPU's sample."""
    gpm_reason: str | None = None
    instance_gpm: bool = False
    lost: str | None = None
    lost_xid: int = 0

    @property
    def name(self) -> str:
        return self.device.device_name if self.device is not None else f"gpu{self.index}"


class GpuResult(NamedTuple):
    samples: tuple[Sample, ...] = ()
    processes: tuple[GpuProcess, ...] = ()
    errors: int = 0
    lost: str | None = None
    view: GpuView | None = None
    """The GPU as its worker left it; None when the worker did not answer in time."""
    held_for: float | None = None
    """Seconds from the end of this cycle until GPM values it held back can be read (its
    first 100 ms not over); None when it held none back."""


class CycleJob(NamedTuple):
    """One cycle's instructions for one GPU (immutable, handed to its worker)."""

    plan: Plan
    processes: bool
    remig: bool
    """A MIG configuration change was signalled: re-enumerate before reading."""
    peers: tuple[Peer, ...]
    events: EventWatcher | None


class GpuRunner:
    """Owns one GPU's `GpuState`. Every method runs on that GPU's worker thread only."""

    def __init__(self, lib: Lib, index: int, *, info: Mapping[str, str], retry_seconds: float,
                 clock_window: float, clock_period: float = derived.DCGM_EXPORTER_INTERVAL,
                 clock: Callable[[], float] = time.monotonic,
                 first_stream: Callable[[], GpmStream | None] | None = None) -> None:
        """`first_stream`: the whole GPU's GPM stream started ahead (backends/nvml_ahead.py),
        asked for once, by the first discovery."""
        self._lib = lib
        self._first_stream = first_stream
        self._info = info
        self._retry = retry_seconds
        self._clock_window = clock_window
        self._clock_period = clock_period
        self._clock = clock
        self._gpu = GpuState(index)
        self._view: GpuView | None = None

    # --- the worker's entry points
    def start(self) -> GpuResult:
        """Discovery at open()."""
        g, lib = self._gpu, self._lib
        try:
            self._discover()
        except lib.error as exc:
            g.lost = f"unreachable at start: {exc}"
            g.retry_at = self._clock() + self._retry
            log.warning("%s: %s", g.name, g.lost)
        except Exception as exc:  # a bug for one GPU must not stop the others
            log.exception("%s: discovery failed", g.name)
            g.lost = f"discovery failed: {type(exc).__name__}: {exc}"
            g.retry_at = self._clock() + self._retry
        return GpuResult(lost=g.lost, view=self.view())

    def cycle(self, job: CycleJob) -> GpuResult:
        # the reading modules load beside the open (serve.py), not before it
        from podgpu.backends.nvml_read import read_gpu, read_instance, read_processes

        g, lib = self._gpu, self._lib
        try:
            if g.lost is not None and not self._come_back(job.events):
                return GpuResult(lost=g.lost, view=self.view())
            if job.events is not None and not g.registered:
                job.events.ensure(g.uuid, g.handle)
                g.registered = True
            if job.remig or g.mig_dirty:
                self._rediscover_mig()
            sample, errors = read_gpu(lib, g, job.plan, self._info, job.events)
            if job.plan.p2p is not None:
                sample = self._with_p2p(job.plan.p2p, sample, job.peers)
            samples = [sample]
            for inst in g.instances:
                inst_sample, inst_errors = read_instance(lib, g, inst, job.plan, sample)
                samples.append(inst_sample)
                errors += inst_errors
                if inst_errors:
                    g.mig_dirty = True  # an instance handle went stale: re-enumerate
            procs = read_processes(lib, g) if job.processes else ()
            held = g.gpm_held_until() if job.plan.gpm else None
            return GpuResult(tuple(samples), procs, errors, view=self.view(),
                             held_for=None if held is None else max(0.0, held - self._clock()))
        except lib.error as exc:
            if not lib.is_lost(exc):
                log.warning("%s: NVML error: %s", g.name, exc)
                return GpuResult(errors=1, lost=f"NVML error: {exc}", view=self.view())
            self._mark_lost(exc, job.events)
            return GpuResult(errors=1, lost=g.lost, view=self.view())
        except Exception as exc:  # a bug for one GPU must not stop the others
            log.exception("%s: reading failed", g.name)
            return GpuResult(errors=1, lost=f"read failed: {type(exc).__name__}: {exc}",
                             view=self.view())

    def close(self) -> None:
        self._gpu.free_gpm()

    # --- the frozen copy
    def view(self) -> GpuView:
        """The GPU's current view; rebuilt only when something in it changed."""
        g = self._gpu
        v = self._view
        labels = g.labels or {}
        if (v is None or v.lost != g.lost or v.device is not g.device or v.handle is not g.handle
                or len(v.labels) != len(labels) or len(v.instances) != len(g.instances)
                or v.gpm_reason != g.gpm_reason):
            v = GpuView(g.index, g.uuid, g.handle, g.device,
                        tuple(i.device for i in g.instances), MappingProxyType(dict(labels)),
                        g.gpm_reason, bool(g.instance_gpm), g.lost, g.lost_xid)
            self._view = v
        return v

    # --- discovery
    def _discover(self) -> None:
        """(Re)build the GPU's identity, MIG instances and GPM streams from a fresh handle."""
        lib, g = self._lib, self._gpu
        m = lib.m
        handle = (m.nvmlDeviceGetHandleByUUID(g.uuid) if g.uuid
                  else m.nvmlDeviceGetHandleByIndex(g.index))
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
            minor = g.index
        model = text(m.nvmlDeviceGetName(handle))
        device = Device(g.index, uuid, bus_id, f"nvidia{minor}", model)
        instances = enumerate_instances(lib, handle, device)
        g.free_gpm()
        g.uuid, g.handle, g.device, g.instances = uuid, handle, device, instances
        if g.clock_events is None:
            g.clock_events = ClockEventCounter(self._clock_window, self._clock_period,
                                               self._clock)
        g.proc_timestamp = 0
        g.rate_prev = {}
        g.mig_dirty = False
        g.registered = False
        g.p2p_key, g.p2p_row = (), {}
        g.gpm_reason = gpm_support(lib, handle)
        if g.gpm_reason is None:
            g.gpm, why = self._whole_gpu_stream()
            g.instance_gpm = self._instance_streams()
            if g.gpm is None:
                g.gpm_reason = why

    def _whole_gpu_stream(self) -> tuple[GpmStream | None, str]:
        """The stream started ahead for the first discovery, its first sample already taken (so
        GPM's first 100 ms end sooner), else a new one."""
        first, self._first_stream = self._first_stream, None
        stream = first() if first is not None else None
        return (stream, "") if stream is not None else self._gpm_stream(None)

    def _gpm_stream(self, gi_id: int | None) -> tuple[GpmStream | None, str]:
        """A GPM stream for the whole GPU or one GPU instance; None and why when NVML refuses
        (e.g. whole-GPU GPM on a MIG-enabled GPU, while per-instance GPM works)."""
        lib = self._lib
        try:
            return GpmStream(lib, self._gpu.handle, gi_id, clock=self._clock), ""
        except lib.error as exc:
            if lib.is_lost(exc):
                raise
            return None, f"GPM sampling failed: {lib.reason(lib.code(exc))}"

    def _instance_streams(self) -> dict[int, GpmStream]:
        streams: dict[int, GpmStream] = {}
        for inst in self._gpu.instances:
            stream, why = self._gpm_stream(inst.gi_id)
            if stream is None:
                log.warning("%s/gi%d: %s", self._gpu.name, inst.gi_id, why)
            else:
                streams[inst.gi_id] = stream
        return streams

    def _rediscover_mig(self) -> None:
        lib, g = self._lib, self._gpu
        g.mig_dirty = False
        if g.device is None:
            return
        try:
            instances = enumerate_instances(lib, g.handle, g.device)
        except lib.error as exc:
            if lib.is_lost(exc):
                raise
            log.warning("%s: MIG re-enumeration failed: %s", g.name, exc)
            return
        for stream in g.instance_gpm.values():
            stream.close()
        g.instances = instances
        g.instance_gpm = {}
        if gpm_support(lib, g.handle) is None:
            try:
                g.instance_gpm = self._instance_streams()
            except lib.error as exc:
                if lib.is_lost(exc):
                    raise
                log.warning("%s: GPM on MIG instances failed: %s", g.name, exc)

    # --- lost and back
    def _mark_lost(self, exc: BaseException, events: EventWatcher | None) -> None:
        lib, g = self._lib, self._gpu
        code = lib.code(exc)
        g.lost = f"GPU lost: {exc} (NVML error {code})"
        g.lost_xid = 79 if code == GPU_IS_LOST else 0
        g.retry_at = self._clock() + self._retry
        g.free_gpm()
        if events is not None and g.lost_xid and events.last_xid(g.uuid) != g.lost_xid:
            events.record(g.uuid, g.lost_xid)  # NVML said "fallen off the bus": that is XID 79
        log.error("%s (%s): %s; other GPUs keep reporting", g.name, g.uuid, g.lost)

    def _come_back(self, events: EventWatcher | None) -> bool:
        """Rediscovery, every `retry_seconds` while lost; True when the GPU answers again."""
        lib, g = self._lib, self._gpu
        now = self._clock()
        if now < g.retry_at:
            return False
        try:
            self._discover()
        except lib.error:
            g.retry_at = now + self._retry
            return False
        log.warning("%s (%s) is back after: %s", g.name, g.uuid, g.lost)
        g.lost, g.lost_xid = None, 0
        if events is not None:  # a new handle: register it again
            events.reregister(g.uuid, g.handle)
            g.registered = True
        return True

    # --- P2P
    def _with_p2p(self, f: Field, sample: Sample, peers: tuple[Peer, ...]) -> Sample:
        """DCGM_EXP_P2P_STATUS: nvmlDeviceGetP2PStatus(NVLINK) to every other live GPU. Topology
        is static, so the row is asked once per set of live peers and kept."""
        lib, g = self._lib, self._gpu
        key = tuple(uuid for _, uuid, _ in peers)
        if g.p2p_key != key or (not g.p2p_row and peers):
            row: dict[int, int] = {}
            index = lib.const(f.source.arg)
            for peer, _uuid, handle in peers:
                try:
                    row[peer] = int(getattr(lib.m, f.source.ref)(g.handle, handle, index))
                except lib.error as exc:
                    if lib.is_lost(exc):
                        continue  # the peer (or this GPU) is going: asked again next time
                    row[peer] = 6  # Unknown, as dcgm-exporter maps anything else
            g.p2p_key, g.p2p_row = key, row
        if not g.p2p_row:  # a single-GPU node (or every other GPU lost): say so, don't vanish
            return sample._replace(missing={**sample.missing, f.name: "no peer GPU on this node"})
        return sample._replace(labeled=sample.labeled + derived.p2p_series(sorted(g.p2p_row.items())))
