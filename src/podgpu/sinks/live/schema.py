"""The live view's document (`podgpu.snapshot/v1`, docs/live.md) as types: the
page, `/api/v1/snapshot` and `podgpu top` read the same keys, and mypy checks they agree with
what `build_view` writes. `top` gets it over the network, so it validates the shape first
(topdoc.py) and then reads it through these types."""

from __future__ import annotations

from typing import Any, TypedDict


class MigView(TypedDict):
    profile: str | None
    gi_id: int | None
    uuid: str | None


class HolderView(TypedDict):
    namespace: str
    pod: str
    container: str
    replica: int | None


class DeviceView(TypedDict):
    key: str
    gpu: str
    index: int
    uuid: str
    pci_bus_id: str
    device: str
    model: str
    mig: MigView | None
    utilization_ratio: float | None
    memory_used_bytes: int | None
    memory_total_bytes: int | None
    power_watts: float | None
    temperature_celsius: float | None
    sharing: str
    """free, exclusive or shared."""
    holders: list[HolderView]
    values: dict[str, Any]
    missing: dict[str, str]


class PodView(TypedDict):
    namespace: str
    pod: str
    container: str
    pod_uid: str
    labels: dict[str, str]
    gpus: list[str]
    devices: list[str]
    sources: list[str]
    """Where the usage numbers come from: processes, device or unknown."""
    memory_used_bytes: int | None
    utilization_ratio: float | None
    idle: bool


class StageView(TypedDict):
    name: str
    ok: bool
    seconds: float
    error: str


class LostView(TypedDict):
    device: str
    reason: str


class HealthView(TypedDict):
    status: str
    reasons: list[str]
    attribution: str
    lost_devices: list[LostView]
    stages: list[StageView]


class SnapshotView(TypedDict):
    schema: str
    node: str
    backend: str
    version: str
    interval_seconds: float
    taken_at: float
    cycle: int
    health: HealthView
    devices: list[DeviceView]
    pods: list[PodView]
