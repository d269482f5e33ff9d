"""MIG enumeration and per-instance reads, on layouts like those in NVML's MIG documentation."""

from __future__ import annotations

from collections.abc import Sequence
from types import SimpleNamespace

import pytest

from podgpu.backends.nvml import NvmlBackend
from podgpu.backends.nvml_mig import profile_from_name
from podgpu.fields.catalog import BY_NAME, Field
from tests.conftest import FakeClock
from tests.fakes.fake_pynvml import FakeGpu, FakeMig, FakeNvml

MIB = 2**20
PARENT = "GPU-aaaaaaaa-0000-0000-0000-000000000000"


def mem(total_mib: int, used_mib: int) -> SimpleNamespace:
    return SimpleNamespace(total=total_mib * MIB, used=used_mib * MIB,
                           free=(total_mib - used_mib) * MIB, reserved=0)


def mig(gi: int, profile: str, total_mib: int, used_mib: int = 0, ci: int = 0,
        model: str = "NVIDIA H100 80GB HBM3") -> FakeMig:
    return FakeMig(gi_id=gi, ci_id=ci, uuid=f"MIG-{gi:04d}{ci:04d}-1111-2222-3333-444444444444",
                   name=f"{model} MIG {profile}", memory=mem(total_mib, used_mib),
                   gpm={1: 50.0 + gi, 2: 40.0})


def mig_gpu(slots: Sequence[FakeMig | None], model: str = "NVIDIA H100 80GB HBM3") -> FakeGpu:
    gpu = FakeGpu(PARENT, name=model, mig_enabled=True, mig_slots=list(slots))
    gpu.values["nvmlDeviceGetUtilizationRates"] = SimpleNamespace(gpu=0, memory=0)
    gpu.unsupported.add("nvmlDeviceGetUtilizationRates")  # "not supported on MIG-enabled GPUs"
    return gpu


def fields(*names: str) -> list[Field]:
    return [BY_NAME[n] for n in names]


def open_backend(nv: FakeNvml) -> NvmlBackend:
    """Opened, and the clock moved past GPM's first 100 ms (a read sooner has no DCP values)."""
    clock = FakeClock()
    b = NvmlBackend(pynvml_module=nv, clock=clock)
    b.open()
    clock.advance(0.25)
    return b


@pytest.mark.parametrize(("name", "profile"), [
    ("NVIDIA H100 80GB HBM3 MIG 1g.10gb", "1g.10gb"),
    ("NVIDIA A100-SXM4-40GB MIG 3g.20gb", "3g.20gb"),
    ("NVIDIA H100 NVL MIG 1g.12gb", "1g.12gb"),
    ("NVIDIA H200 MIG 1g.18gb+me", "1g.18gb+me"),
    ("NVIDIA H200 MIG 7g.141gb", "7g.141gb"),
    ("Something MIG weird", "weird"),
])
def test_profile_from_mig_device_name(name: str, profile: str) -> None:
    assert profile_from_name(name) == profile


def test_one_device_per_gpu_instance_with_parent_identity() -> None:
    # 7 slots, H100: 3g.40gb (GI 1, two compute instances), 2g.20gb (GI 5), 1g.10gb (GI 13),
    # the rest empty (NotFound), as a mixed layout looks to nvmlDeviceGetMigDeviceHandleByIndex
    layout = [mig(1, "3g.40gb", 40192, 1000, ci=0), mig(1, "3g.40gb", 40192, 1000, ci=1),
              mig(5, "2g.20gb", 20096), None, mig(13, "1g.10gb", 9856, 512), None, None]
    nv = FakeNvml([mig_gpu(layout)])
    b = open_backend(nv)
    try:
        devices = b.devices()
        reading = b.read(fields("DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_POWER_USAGE",
                                "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
                                "DCGM_FI_DRIVER_VERSION"))
    finally:
        b.close()
    parent, *instances = devices
    assert not parent.is_mig
    assert [(d.mig_gi_id, d.mig_profile) for d in instances] == [
        (1, "3g.40gb"), (5, "2g.20gb"), (13, "1g.10gb")]
    for d in instances:
        assert (d.index, d.uuid, d.device_name, d.model) == (
            parent.index, parent.uuid, parent.device_name, parent.model)
        assert d.mig_uuid and d.mig_uuid.startswith("MIG-") and d.key == d.mig_uuid
    samples = {s.device.mig_gi_id: s for s in reading.samples}
    # whole-GPU fields are read on the parent and repeated on each instance, as DCGM reports
    # GPU-level fields on GPU-instance entities; FB and GPM ('both') are per instance
    assert samples[13].values["DCGM_FI_DEV_POWER_USAGE"] == \
        samples[None].values["DCGM_FI_DEV_POWER_USAGE"]
    assert "DCGM_FI_DEV_POWER_USAGE" not in samples[13].missing
    assert samples[13].values["DCGM_FI_DEV_FB_USED"] == 512
    assert samples[1].values["DCGM_FI_DEV_FB_USED"] == 1000
    assert samples[5].values["DCGM_FI_PROF_GR_ENGINE_ACTIVE"] == pytest.approx(0.55)
    assert samples[13].values["DCGM_FI_PROF_GR_ENGINE_ACTIVE"] == pytest.approx(0.63)
    assert samples[13].values["DCGM_FI_DRIVER_VERSION"] == "580.159.04"  # labels on every series
    assert "not supported" in samples[None].missing["DCGM_FI_DEV_GPU_UTIL"]
    assert reading.errors == 0
    assert nv.calls["nvmlGpmMigSampleGet"] >= 3  # one GPM stream per GPU instance


def test_mig_off_or_not_capable_gives_whole_gpus_only() -> None:
    plain = FakeGpu(PARENT)
    incapable = FakeGpu("GPU-bbbbbbbb-0000-0000-0000-000000000000", minor=1,
                        name="NVIDIA A10G", gpm_supported=False)
    incapable.unsupported.add("nvmlDeviceGetMigMode")
    b = open_backend(FakeNvml([plain, incapable]))
    try:
        assert [d.is_mig for d in b.devices()] == [False, False]
    finally:
        b.close()


def test_mig_processes_per_instance_memory_only() -> None:
    layout = [mig(2, "1g.10gb", 9856), mig(3, "1g.10gb", 9856)]
    layout[0].processes = [(777, 300 * MIB)]
    layout[1].processes = [(888, 600 * MIB)]
    b = open_backend(FakeNvml([mig_gpu(layout)]))
    try:
        r = b.read(fields("DCGM_FI_DEV_FB_USED"), processes=True)
    finally:
        b.close()
    procs = {p.pid: p for p in r.processes}
    assert procs[777].device_key == layout[0].uuid and procs[888].device_key == layout[1].uuid
    assert procs[888].used_memory_bytes == 600 * MIB
    assert procs[777].sm_util_percent is None  # NVML has no per-process util with MIG on


def test_mig_reconfiguration_is_picked_up() -> None:
    gpu = mig_gpu([mig(1, "7g.80gb", 80000)])
    nv = FakeNvml([gpu])
    b = open_backend(nv)
    try:
        assert [d.mig_profile for d in b.devices()][1:] == ["7g.80gb"]
        gpu.mig_slots = [mig(2, "3g.40gb", 40192), mig(3, "3g.40gb", 40192)]
        b._mark_mig_dirty()  # what the event thread does on nvmlEventMigConfigChange
        r = b.read(fields("DCGM_FI_DEV_FB_TOTAL"))
    finally:
        b.close()
    assert [s.device.mig_gi_id for s in r.samples] == [None, 2, 3]


def test_instances_keep_gpm_when_whole_gpu_gpm_is_refused() -> None:
    gpu = mig_gpu([mig(1, "3g.40gb", 40192), mig(2, "3g.40gb", 40192)])
    gpu.errors["nvmlGpmSampleGet"] = 3  # NotSupported for the whole GPU with MIG on
    b = open_backend(FakeNvml([gpu]))
    try:
        r = b.read(fields("DCGM_FI_PROF_GR_ENGINE_ACTIVE"))
        unavailable = b.unavailable_fields()
    finally:
        b.close()
    parent, gi1, gi2 = r.samples
    assert "GPM sampling failed" in parent.missing["DCGM_FI_PROF_GR_ENGINE_ACTIVE"]
    assert gi1.values["DCGM_FI_PROF_GR_ENGINE_ACTIVE"] == pytest.approx(0.51)
    assert gi2.values["DCGM_FI_PROF_GR_ENGINE_ACTIVE"] == pytest.approx(0.52)
    assert "DCGM_FI_PROF_GR_ENGINE_ACTIVE" not in unavailable
