"""`-d/--devices`: which GPUs and MIG GPU instances get series."""

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
    assert keys("f") == [(0, None), (1, 1), (1, 2)]  # MIG GPU 1: its instances, not the parent
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


def test_flex_on_a_mixed_node_has_no_parent_series_for_mig_gpus_and_sums_match() -> None:
    """Through the fake NVML binding and the real renderer: GPU 0 whole, GPU 1
    split into three MIG GPU instances. `-d f` (dcgm-exporter's default) shows GPU 0 and the
    instances only, so summing FB over every series counts each byte once; `-d g+i` asks for the
    parent beside its instances."""
    from types import SimpleNamespace

    from prometheus_client.parser import text_string_to_metric_families

    from podgpu.backends.nvml import NvmlBackend
    from podgpu.model import Snapshot
    from tests.conftest import FakeClock
    from tests.fakes.fake_pynvml import FakeGpu, FakeMig, FakeNvml
    from tests.unit.sinks.golden import render_default

    mib = 2**20

    def inst(gi: int, total: int, used: int) -> FakeMig:
        return FakeMig(gi, f"MIG-{gi:08d}-1111-2222-3333-444444444444",
                       f"NVIDIA H200 MIG {total // 1024}g.{total // 1024}gb",
                       SimpleNamespace(total=total * mib, used=used * mib,
                                       free=(total - used) * mib, reserved=0))

    whole = FakeGpu("GPU-00000000-aaaa-bbbb-cccc-dddddddddddd", minor=0)
    whole.values["nvmlDeviceGetMemoryInfo"] = SimpleNamespace(
        total=143771 * mib, used=1000 * mib, free=142771 * mib, reserved=0)
    split = FakeGpu("GPU-11111111-aaaa-bbbb-cccc-dddddddddddd", minor=1, mig_enabled=True,
                    bus_id="00000000:2A:00.0",
                    mig_slots=[inst(1, 71000, 300), None, inst(5, 35000, 20), inst(9, 35000, 7)])
    split.values["nvmlDeviceGetMemoryInfo"] = SimpleNamespace(  # the parent sees all of it
        total=141000 * mib, used=327 * mib, free=140673 * mib, reserved=0)
    wanted = [BY_NAME[n] for n in ("DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE",
                                   "DCGM_FI_DEV_POWER_USAGE")]

    def exported(spec: str) -> dict[str, list[tuple[dict[str, str], float]]]:
        b = SelectedBackend(NvmlBackend(pynvml_module=FakeNvml([whole, split]),  # type: ignore[arg-type]
                                        clock=FakeClock()), parse_device_selection(spec))
        b.open()
        try:
            r = b.read(wanted)
        finally:
            b.close()
        text = render_default(Snapshot(taken_at=0.0, samples=r.samples)).decode()
        return {f.name: [(s.labels, s.value) for s in f.samples]
                for f in text_string_to_metric_families(text)}

    flex = exported("f")
    fb = flex["DCGM_FI_DEV_FB_USED"]
    assert sorted((lb["gpu"], lb.get("GPU_I_ID", "")) for lb, _ in fb) == [
        ("0", ""), ("1", "1"), ("1", "5"), ("1", "9")]  # no parent series for GPU 1
    assert sum(v for _, v in fb) == 1000 + 300 + 20 + 7
    assert sum(v for _, v in flex["DCGM_FI_DEV_FB_FREE"]) == 142771 + 70700 + 34980 + 34993
    # GPU-level fields ride on the instances (as DCGM reports them on GPU-instance entities)
    assert {lb.get("GPU_I_ID") for lb, _ in flex["DCGM_FI_DEV_POWER_USAGE"]} == {
        None, "1", "5", "9"}
    both = exported("g+i")
    assert sorted((lb["gpu"], lb.get("GPU_I_ID", "")) for lb, _ in both["DCGM_FI_DEV_FB_USED"]) == [
        ("0", ""), ("1", ""), ("1", "1"), ("1", "5"), ("1", "9")]  # asked for: the parent too
