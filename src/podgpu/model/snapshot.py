"""The immutable result of one collection cycle; everything downstream reads only this."""

from __future__ import annotations

from typing import NamedTuple

from podgpu.model.device import Device, Sample
from podgpu.model.pods import Allocation, GpuProcess
from podgpu.model.status import DISABLED, StageStatus


class StageResult(NamedTuple):
    """How one stage of a cycle went: its wall time and, on failure, why."""

    name: str
    duration_seconds: float
    ok: bool
    error: str = ""


class Snapshot(NamedTuple):
    """Everything known about the node at the end of one cycle.

    `taken_at` is Unix time in seconds. `lost_devices` lists devices that failed this cycle
    (e.g. fell off the bus) by label, with the reason; a lost GPU keeps a sample with `lost` set
    (identity, XID, health FAIL only), a GPU that does not answer has none.
    """

    taken_at: float
    samples: tuple[Sample, ...]
    stages: tuple[StageResult, ...] = ()
    allocations: tuple[Allocation, ...] = ()
    processes: tuple[GpuProcess, ...] = ()
    lost_devices: tuple[tuple[str, str], ...] = ()
    attribution_status: StageStatus = DISABLED
    """The kubelet PodResources source: ok, disabled (no -k, no scenario) or unavailable."""
    errors_total: tuple[tuple[str, int], ...] = ()
    """Cumulative collection errors per source since start (podgpu_collect_errors_total)."""
    cycle: int = 0
    """Number of this cycle since start, from 1."""
    hpc_jobs: tuple[tuple[str, tuple[str, ...]], ...] = ()
    """HPC job mapping (--hpc-job-mapping-dir): mapping-file key (`"0"`, or `"2.1"` for GPU 2's
    instance 1) -> job ids; each series of such a device is exported once per job."""

    def jobs_of(self, device: Device) -> tuple[str, ...]:
        """The HPC jobs on `device` (its GPU index, or GPU.instance for a MIG instance)."""
        if not self.hpc_jobs:
            return ()
        key = (f"{device.index}.{device.mig_gi_id}" if device.mig_gi_id is not None
               else str(device.index))
        for k, jobs in self.hpc_jobs:
            if k == key:
                return jobs
        return ()

    def stage(self, name: str) -> StageResult | None:
        for s in self.stages:
            if s.name == name:
                return s
        return None
