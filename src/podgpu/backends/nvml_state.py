"""What the NVML backend keeps about one physical GPU between cycles.

Its own module, below both `nvml` (the backend) and `nvml_read` (the per-cycle reads), so the two
do not import each other.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from podgpu.backends.derived import ClockEventCounter
from podgpu.backends.nvml_gpm import GpmStream
from podgpu.backends.nvml_mig import MigInstance
from podgpu.model import Device


@dataclass
class GpuState:
    """Everything podgpu keeps about one physical GPU between cycles.

    Owned by that GPU's worker thread (backends/nvml_gpu.py): discovery, rediscovery, MIG
    re-enumeration, reads and its P2P row all run there, and the collect thread only ever sees
    the immutable `GpuView` the worker hands back. No lock is needed because
    no other thread touches it."""

    index: int
    uuid: str = ""
    handle: Any = None
    device: Device | None = None
    instances: tuple[MigInstance, ...] = ()
    gpm: GpmStream | None = None
    gpm_reason: str | None = None
    instance_gpm: dict[int, GpmStream] = field(default_factory=dict)
    labels: dict[str, Any] | None = None
    label_missing: dict[str, str] = field(default_factory=dict)
    rate_prev: dict[str, tuple[float, int]] = field(default_factory=dict)
    clock_events: ClockEventCounter | None = None
    proc_timestamp: int = 0
    lost: str | None = None
    lost_xid: int = 0
    """79 when NVML said GpuIsLost (fallen off the bus), else 0."""
    retry_at: float = 0.0
    mig_dirty: bool = False
    """An instance handle went stale: re-enumerate on this GPU's next cycle."""
    registered: bool = False
    """Registered with the XID event thread since the last (re)discovery."""
    p2p_key: tuple[str, ...] = ()
    p2p_row: dict[int, int] = field(default_factory=dict)
    """Peer GPU index -> nvmlGpuP2PStatus_t, asked once per set of live peers (`p2p_key`)."""

    @property
    def name(self) -> str:
        return self.device.device_name if self.device is not None else f"gpu{self.index}"

    def free_gpm(self) -> None:
        for stream in (self.gpm, *self.instance_gpm.values()):
            if stream is not None:
                stream.close()
        self.gpm = None
        self.instance_gpm = {}
