"""Frozen data passed between stages: devices, samples, pods, snapshots. No I/O here.

Each record is a `typing.NamedTuple`, which costs a fraction of a frozen dataclass to define at
start and to build per cycle. It is also a tuple: it equals a plain tuple of the same values, so
compare records only with records, and never tell one apart with `isinstance(x, tuple)`.
"""

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
