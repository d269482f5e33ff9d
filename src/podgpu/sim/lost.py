"""Simulated GPUs falling off the bus: the scenario's `lost_gpus`.

    lost_gpus:
      - {gpu: 0, at: 30}                          # lost 30 s after start, for good, XID 79
      - {gpu: 2, at: 60, xid: 79, back_at: 120}   # back two minutes after start

`gpu` is a simulated GPU index, `at` and `back_at` are seconds after start (`back_at` optional:
never back; it must be after `at`), `xid` is the XID the loss shows (optional, default 79, the
XID of a GPU that fell off the bus). While lost, the GPU exports what the NVML backend exports for
a lost GPU (backends/lost.py): identity, label fields, the XID, the windowed XID count and health
FAIL; its processes are gone, its kubelet allocation stays. The loss counts as one XID event at
`at`, so DCGM_FI_DEV_XID_ERRORS keeps that XID after the GPU returns, as DCGM's last-XID does.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from podgpu.backends.lost import lost_sample
from podgpu.errors import ConfigError
from podgpu.fields.catalog import Field
from podgpu.model import Device, LabeledValue, Sample
from podgpu.model.device import Value

MAX_LOST = 1024
FALLEN_OFF_BUS = 79


@dataclass(frozen=True, slots=True)
class LostGpu:
    gpu: int
    at: float
    xid: int = FALLEN_OFF_BUS
    back_at: float | None = None

    def lost(self, elapsed: float) -> bool:
        """Whether the GPU is lost `elapsed` seconds after start."""
        return elapsed >= self.at and (self.back_at is None or elapsed < self.back_at)

    # the loss is one XID event at `at`: the same interface as scenario.ScenarioXid
    @property
    def offset(self) -> float:
        return self.at

    @property
    def every(self) -> float:
        return 1e30  # once (finite: the backend computes offset + (n - 1) * every)

    def times(self, elapsed: float) -> int:
        return 1 if elapsed >= self.at else 0


def lost_gpu_sample(dev: Device, fields: Sequence[Field], table: Mapping[str, Value | None],
                    xid_series: Iterable[LabeledValue], xid: int, window_seconds: float
                    ) -> Sample:
    """What the NVML backend exports for a GPU that fell off the bus (backends/lost.py), from the
    simulated GPU's value table and its XID count series."""
    labels = {f.name: v for f in fields if f.is_label and (v := table.get(f.name)) is not None}
    counts = {int(dict(lv.labels)["xid"]): int(lv.value) for lv in xid_series if lv.value}
    return lost_sample(dev, (f.name for f in fields), xid=xid, xid_counts=counts,
                       reason=f"GPU lost (simulated, XID {xid})", labels=labels,
                       xid_window_seconds=window_seconds)


def parse_lost_gpus(value: Any, source: str, *, max_gpu: int, max_seconds: float
                    ) -> tuple[LostGpu, ...]:
    """Validate the `lost_gpus` list; ConfigError naming the file and the field."""
    if value is None:
        return ()
    if not isinstance(value, list):
        raise ConfigError(f"{source}: lost_gpus: expected a list, got {type(value).__name__}")
    if len(value) > MAX_LOST:
        raise ConfigError(f"{source}: lost_gpus: {len(value)} entries; at most {MAX_LOST}")
    out: list[LostGpu] = []
    for i, entry in enumerate(value):
        where = f"{source}: lost_gpus[{i}]"
        if not isinstance(entry, Mapping):
            raise ConfigError(f"{where}: expected a mapping, got {type(entry).__name__}")
        unknown = set(entry) - {"gpu", "at", "xid", "back_at"}
        if unknown:
            raise ConfigError(f"{where}: unknown field(s) {sorted(map(str, unknown))}; "
                              "allowed: gpu, at, xid, back_at")
        for key in ("gpu", "at"):
            if key not in entry:
                raise ConfigError(f"{where}: missing field {key!r}")
        gpu = _integer(entry["gpu"], f"{where}.gpu", 0, max_gpu)
        xid = _integer(entry.get("xid", FALLEN_OFF_BUS), f"{where}.xid", 1, 999)
        at = _seconds(entry["at"], f"{where}.at", max_seconds)
        back = entry.get("back_at")
        back_at = None if back is None else _seconds(back, f"{where}.back_at", max_seconds)
        if back_at is not None and back_at <= at:
            raise ConfigError(f"{where}.back_at: {back_at:g} is not after at ({at:g}); "
                              "leave back_at out for a GPU that never comes back")
        out.append(LostGpu(gpu, at, xid, back_at))
    return tuple(out)


def check_lost_gpu_count(lost: tuple[LostGpu, ...], count: int, source: str) -> None:
    for i, x in enumerate(lost):
        if x.gpu >= count:
            raise ConfigError(f"{source}: lost_gpus[{i}].gpu: gpu {x.gpu} does not exist; "
                              f"the simulated node has {count} GPU(s), 0..{count - 1}")


def _integer(value: Any, where: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ConfigError(f"{where}: expected an integer in {low}..{high}, got {value!r:.60}")
    return value


def _seconds(value: Any, where: str, most: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= most:
        raise ConfigError(f"{where}: expected seconds in 0..{most:g}, got {value!r:.60}")
    return float(value)
