"""What the NVML backend keeps about one physical GPU between cycles.

Its own module, below both `nvml` (the backend) and `nvml_read` (the per-cycle reads), so the two
do not import each other.
"""

from __future__ import annotations

from typing import Any

from podgpu.backends.derived import ClockEventCounter
from podgpu.backends.nvml_gpm import GpmStream
from podgpu.backends.nvml_mig import MigInstance
from podgpu.model import Device


class GpuState:
    """Everything podgpu keeps about one physical GPU between cycles.

    Owned by that GPU's worker thread (backends/nvml_gpu.py): discovery, rediscovery, MIG
    re-enumeration, reads and its P2P row all run there, and the collect thread only ever sees
    the immutable `GpuView` the worker hands back. No lock is needed because
    no other thread touches it. A plain class, not a dataclass: made before the first answer,
    when a dataclass's generated methods would be compiled (docs/design.md)."""

    __slots__ = ("clock_events", "device", "gpm", "gpm_reason", "handle", "index",
                 "instance_gpm", "instances", "label_missing", "labels", "lost", "lost_xid",
                 "mig_dirty", "p2p_key", "p2p_row", "proc_timestamp", "rate_prev",
                 "registered", "retry_at", "uuid")

    def __init__(self, index: int) -> None:
        self.index = index
        self.uuid = ""
        self.handle: Any = None
        self.device: Device | None = None
        self.instances: tuple[MigInstance, ...] = ()
        self.gpm: GpmStream | None = None
        self.gpm_reason: str | None = None
        self.instance_gpm: dict[int, GpmStream] = {}
        self.labels: dict[str, Any] | None = None
        self.label_missing: dict[str, str] = {}
        self.rate_prev: dict[str, tuple[float, int]] = {}
        self.clock_events: ClockEventCounter | None = None
        self.proc_timestamp = 0
        self.lost: str | None = None
        self.lost_xid = 0
        """79 when NVML said GpuIsLost (fallen off the bus), else 0."""
        self.retry_at = 0.0
        self.mig_dirty = False
        """An instance handle went stale: re-enumerate on this GPU's next cycle."""
        self.registered = False
        """Registered with the XID event thread since the last (re)discovery."""
        self.p2p_key: tuple[str, ...] = ()
        self.p2p_row: dict[int, int] = {}
        """Peer GPU index -> nvmlGpuP2PStatus_t, asked once per set of live peers (`p2p_key`)."""

    @property
    def name(self) -> str:
        return self.device.device_name if self.device is not None else f"gpu{self.index}"

    def gpm_held_until(self) -> float | None:
        """When the GPU's last FIRST_WINDOW ends (its clock): the latest `window_ends` of its
        streams; None when no stream is still in its first 100 ms."""
        ends = [s.window_ends for s in (self.gpm, *self.instance_gpm.values()) if s is not None]
        return max((e for e in ends if e is not None), default=None)

    def free_gpm(self) -> None:
        for stream in (self.gpm, *self.instance_gpm.values()):
            if stream is not None:
                stream.close()
        self.gpm = None
        self.instance_gpm = {}
