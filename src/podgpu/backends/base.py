"""The one interface every GPU backend implements (NVML, simulated, test fakes)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, NamedTuple, Protocol

from podgpu.model import Device, GpuProcess, Sample

if TYPE_CHECKING:
    from podgpu.fields.catalog import Field


class Reading(NamedTuple):
    """What one `Backend.read` returns.

    `lost` names devices that could not be read at all this cycle, with the reason (a lost GPU
    keeps a sample with `Sample.lost` set); `errors` counts failed calls this cycle, one
    for each lost device included (fields merely unsupported are not errors). `held_for`: the
    seconds after this read until values it held back can be read (NVML GPM's first 100 ms),
    None when it held none back.
    """

    samples: tuple[Sample, ...]
    lost: tuple[tuple[str, str], ...] = ()
    errors: int = 0
    processes: tuple[GpuProcess, ...] = ()
    held_for: float | None = None


class Backend(Protocol):
    """A source of GPU samples. `read` is called from one thread, once per cycle."""

    name: str
    """Short name for logs, `podgpu_build_info{backend}` and `podgpu_collect_errors_total{source}`."""

    def open(self) -> None:
        """Connect (e.g. nvmlInit) and discover devices. Raises BackendError if unusable."""

    def devices(self) -> tuple[Device, ...]:
        """Devices found at open (or at the last re-discovery)."""
        ...

    def info(self) -> dict[str, str]:
        """Node facts for podgpu_build_info, e.g. {'driver_version': '580.159.04'}."""
        ...

    def read(self, fields: Sequence[Field], *, processes: bool = False) -> Reading:
        """One sample per readable device for `fields`; GPU processes when asked. Never raises
        for a single device's failure: that device goes into `Reading.lost`."""
        ...

    def unavailable_fields(self) -> dict[str, str]:
        """Fields no device of this node can supply at all, with why (e.g. DCP without GPM)."""
        ...

    def close(self) -> None:
        """Release everything (nvmlShutdown, GPM buffers, event thread)."""
