"""`-d/--devices` (issue 9): which GPUs and MIG GPU instances get series."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from podgpu.backends.base import Reading
from podgpu.backends.select import SelectedBackend
from podgpu.errors import ConfigError
from podgpu.fields.catalog import BY_NAME, Field
from podgpu.model import Device, Sample
from podgpu.model.selection import DeviceSelection, parse_device_selection
from podgpu.sim.backend import MODELS, SimulatedBackend

FIELDS = [BY_NAME["DCGM_FI_DEV_GPU_UTIL"]]


class MigNode:
    """GPU 0 whole; GPU 1 with MIG GPU instances 1 and 2 (a fake backend: the simulated node has
    no MIG)."""

    name = "fake"

    def __init__(self) -> None:
        g0 = Device(0, "GPU-0", "00000000:18:00.0", "nvidia0", "NVIDIA A100")
        g1 = Device(1, "GPU-1", "00000000:2A:00.0", "nvidia1", "NVIDIA A100")
        i1 = Device(1, "GPU-1", "00000000:2A:00.0", "nvidia1", "NVIDIA A100", "1g.10gb", 1, "MIG-a")
        i2 = Device(1, "GPU-1", "00000000:2A:00.0", "nvidia1", "NVIDIA A100", "3g.40gb", 2, "MIG-b")
        self.devs = (g0, g1, i1, i2)

    def open(self) -> None: ...
    def close(self) -> None: ...
    def info(self) -> dict[str, str]:
        return {}

    def devices(self) -> tuple[Device, ...]:
        return self.devs

    def unavailable_fields(self) -> dict[str, str]:
        return {}

    def read(self, fields: Sequence[Field], *, processes: bool = False) -> Reading:
        return Reading(samples=tuple(Sample(d, {"DCGM_FI_DEV_GPU_UTIL": 1}) for d in self.devs))


def keys(spec: str) -> list[tuple[int, int | None]]:
    b = SelectedBackend(MigNode(), parse_device_selection(spec))  # type: ignore[arg-type]
    b.open()
    got = [(s.device.index, s.device.mig_gi_id) for s in b.read(FIELDS).samples]
    assert got == [(d.index, d.mig_gi_id) for d in b.devices()]
    return got


def test_gpu_instance_and_combined_selections() -> None:
    assert keys("g") == [(0, None), (1, None)]
    assert keys("g:1") == [(1, None)]
    assert keys("i") == [(1, 1), (1, 2)]
    assert keys("i:2") == [(1, 2)]
    assert keys("g:0+i:1") == [(0, None), (1, 1)]


def test_selection_on_the_simulated_node() -> None:
    sim = SimulatedBackend(4, MODELS["H100"])
    b = SelectedBackend(sim, DeviceSelection(False, (1, 3), None))
    b.open()
    assert [s.device.index for s in b.read(FIELDS).samples] == [1, 3]


@pytest.mark.parametrize(("spec", "needle"), [("g:7", "no GPU 7 on this node (present: 0, 1)"),
                                              ("i:9", "no MIG GPU instance 9 on this node")])
def test_absent_devices_are_refused_at_open(spec: str, needle: str) -> None:
    b = SelectedBackend(MigNode(), parse_device_selection(spec))  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="^--devices: " + needle.replace("(", r"\(")
                       .replace(")", r"\)")):
        b.open()
