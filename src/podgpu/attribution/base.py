"""The interface between the collector and pod attribution.

The collector calls `attribute` once per cycle with the devices it read and the GPU processes the
backend found. An implementation must answer from state it keeps up to date in the background
(kubelet polling, pod watch): it never blocks on the kubelet or the API server, and never raises.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple, Protocol

from podgpu.model import Allocation, Device, GpuProcess
from podgpu.model.status import OK, StageStatus


class Attribution(NamedTuple):
    """One cycle's attribution result.

    `status` is ok, or unavailable with the reason (shown by /health as `kubelet: ...`);
    `errors` counts new failures since the previous call per source ('kubelet', 'cgroups',
    'podwatch') and feeds podgpu_collect_errors_total{source}.
    """

    allocations: tuple[Allocation, ...] = ()
    processes: tuple[GpuProcess, ...] = ()
    status: StageStatus = OK
    errors: tuple[tuple[str, int], ...] = ()


class Attributor(Protocol):
    def start(self) -> None:
        """Start background polling/watching. Must not block for long or raise."""

    def attribute(
        self, devices: tuple[Device, ...], processes: tuple[GpuProcess, ...]
    ) -> Attribution:
        """Current allocations for `devices`, and `processes` with their containers filled in."""
        ...

    def close(self) -> None:
        """Stop background work."""

    def health_parts(self) -> dict[str, Callable[[], dict[str, object]]]:
        """/health's entries of this attributor by name (e.g. `pod_watch`), each read per
        request; none when it keeps no state of its own worth showing."""
        ...
