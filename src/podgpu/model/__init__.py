"""Frozen data passed between stages: devices, samples, pods, snapshots. No I/O here."""

from podgpu.model.device import Device, LabeledValue, Sample
from podgpu.model.pods import Allocation, ContainerRef, GpuProcess
from podgpu.model.snapshot import Snapshot, StageResult
from podgpu.model.status import StageStatus

__all__ = [
    "Allocation",
    "ContainerRef",
    "Device",
    "GpuProcess",
    "LabeledValue",
    "Sample",
    "Snapshot",
    "StageResult",
    "StageStatus",
]
