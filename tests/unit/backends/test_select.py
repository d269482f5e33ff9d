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
    b = SelectedBackend(MigNode(), parse_device_selection(spec))
    b.open()
    got = [(s.device.index, s.device.mig_gi_id) for s in b.read(FIELDS).samples]
    assert got == [(d.index, d.mig_gi_id) for d in b.devices()]
    return got


def test_gpu_instance_and_combined_selections() -> None:
    assert keys("f") == [(0, None), (1, 1), (1, 2)]  # MIG GPU 1: its instances, not the parent
    assert keys("g") == [(0, None), (1, None)]
    assert keys("g:1") == [(1, None)]
    assert keys("i") == [(1, 1), (1, 2)]
    assert keys("i:8") == [(1, 2)]  # DCGM entity ids: GPU 1's instances are 7 and 8
    assert keys("g:0+i:7") == [(0, None), (1, 1)]


def test_selection_on_the_simulated_node() -> None:
    sim = SimulatedBackend(4, MODELS["H100"])
    b = SelectedBackend(sim, DeviceSelection(False, (1, 3), None))
    b.open()
    assert [s.device.index for s in b.read(FIELDS).samples] == [1, 3]


def test_i_ranges_follow_a_new_mig_layout() -> None:
    """The entity ids are kept between reads; a new layout (an instance destroyed, another
    created) renumbers them, as DCGM numbers the instances it finds."""
    node = MigNode()
    b = SelectedBackend(node, parse_device_selection("i:8"))
    b.open()
    assert [s.device.mig_uuid for s in b.read(FIELDS).samples] == ["MIG-b"]
    assert [s.device.mig_uuid for s in b.read(FIELDS).samples] == ["MIG-b"]
    g0, g1, i1, _ = node.devs
    i3 = Device(1, "GPU-1", "00000000:2A:00.0", "nvidia1", "NVIDIA A100", "1g.10gb", 3, "MIG-c")
    node.devs = (g0, g1, i1, i3)  # two 1-slice instances: GPU instance 1 is 7, 3 is 8
    assert [s.device.mig_uuid for s in b.read(FIELDS).samples] == ["MIG-c"]
    assert [d.mig_uuid for d in b.devices()] == ["MIG-c"]


@pytest.mark.parametrize(("spec", "needle"), [("g:7", "no GPU 7 on this node (present: 0, 1)"),
                                              ("i:2", "no MIG GPU instance (DCGM entity id) 2 "
                                                       "on this node (present: 7, 8)")])
def test_absent_devices_are_refused_at_open(spec: str, needle: str) -> None:
    b = SelectedBackend(MigNode(), parse_device_selection(spec))
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
        b = SelectedBackend(NvmlBackend(pynvml_module=FakeNvml([whole, split]),
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


def mig(gpu: int, gi: int, profile: str, model: str = "NVIDIA H100 80GB HBM3") -> Device:
    return Device(gpu, f"GPU-{gpu}", "0000:18:00.0", f"nvidia{gpu}", model, profile, gi,
                  f"MIG-{gpu}-{gi}")


def test_instance_ranges_are_dcgms_entity_ids() -> None:
    """DCGM numbers a GPU's instances gpuId x nvmlDeviceGetMaxMigDeviceCount + their position
    as it enumerates them: by GPU-instance profile id, then (within one profile) in NVML's order
    (NVIDIA/DCGM dcgmlib/src/DcgmCacheManager.cpp: `gpuInfo.gpuId * gpuInfo.maxGpcs +
    gpuInfo.instances.size()` inside the loop over GpuInstanceProfiles, profile index 0, 1, ...;
    NVML_GPU_INSTANCE_PROFILE_* ids from nvml.h). dcgm-exporter's `-d i:N` names that id
    (internal/pkg/deviceinfo/device_info.go gpuInstanceIDExists compares EntityId)."""
    from podgpu.backends.select import entity_ids

    # GPU 0 with GPU instances 1 and 2 of one profile: entity ids 0 and 1, so `-d i:0`, which
    # dcgm-exporter starts with, is instance 1
    two = [mig(0, 1, "3g.40gb"), mig(0, 2, "3g.40gb")]
    assert entity_ids(two) == {"MIG-0-1": 0, "MIG-0-2": 1}
    # mixed profiles on GPU 1 (7 instances at most per GPU: ids from 7): 1-slice (profile id 0)
    # before 2-slice (1) before 3-slice (2), whatever their GPU-instance ids
    mixed = [mig(1, 1, "3g.40gb"), mig(1, 2, "1g.10gb"), mig(1, 5, "1g.10gb"),
             mig(1, 3, "2g.20gb")]
    assert entity_ids(mixed) == {"MIG-1-2": 7, "MIG-1-5": 8, "MIG-1-3": 9, "MIG-1-1": 10}
    # variants after the plain profiles: 1g.10gb (0), 1g.10gb+me (REV1, 7), 1g.20gb (REV2, 9)
    variants = [mig(0, 3, "1g.20gb"), mig(0, 4, "1g.10gb+me"), mig(0, 9, "1g.10gb")]
    assert entity_ids(variants) == {"MIG-0-9": 0, "MIG-0-4": 1, "MIG-0-3": 2}
    # an A30 has 4 instances at most: GPU 2's first is 8
    assert entity_ids([mig(2, 1, "1g.6gb", "NVIDIA A30")]) == {"MIG-2-1": 8}


def test_i_0_starts_where_dcgm_exporter_starts() -> None:
    """The simulated node of docs/attribution.md: GPU 0 with GPU instances 1 and 2."""
    from podgpu.sim.scenario import parse_scenario

    s = parse_scenario({"mig": [{"gpu": 0, "instances": ["3g.40gb", "3g.40gb"]}], "pods": []})
    b = SelectedBackend(SimulatedBackend(1, MODELS["A100"], scenario=s),
                        parse_device_selection("i:0"))
    b.open()
    assert [s.device.mig_gi_id for s in b.read(FIELDS).samples] == [1]
