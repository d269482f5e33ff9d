"""The immutable result of one collection cycle; everything downstream reads only this."""

from __future__ import annotations

from dataclasses import dataclass

from podgpu.model.device import Sample
from podgpu.model.pods import Allocation, GpuProcess


@dataclass(frozen=True, slots=True)
class StageResult:
    """How one stage of a cycle went: its wall time and, on failure, why."""

    name: str
    duration_seconds: float
    ok: bool
    error: str = ""


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Everything known about the node at the end of one cycle.

    `taken_at` is Unix time in seconds. `lost_devices` lists devices that failed this cycle
    (e.g. fell off the bus) by label, with the reason; their series are absent.
    """

    taken_at: float
    samples: tuple[Sample, ...]
    stages: tuple[StageResult, ...] = ()
    allocations: tuple[Allocation, ...] = ()
    processes: tuple[GpuProcess, ...] = ()
    lost_devices: tuple[tuple[str, str], ...] = ()
    attribution_status: str = "disabled"
    """'disabled', 'ok', or 'unavailable: <why>' for the kubelet PodResources source."""
    errors_total: tuple[tuple[str, int], ...] = ()
    """Cumulative collection errors per source since start (podgpu_collect_errors_total)."""
    cycle: int = 0
    """Number of this cycle since start, from 1."""

    def stage(self, name: str) -> StageResult | None:
        for s in self.stages:
            if s.name == name:
                return s
        return None
