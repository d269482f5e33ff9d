"""A lost MIG GPU keeps its last known GPU instances (identity with GPU_I_PROFILE/GPU_I_ID, the
XID, the XID count, health FAIL) under `-d f` and `-d i`, and only its parent under `-d g`; a
hung GPU (an NVML call that has not returned) keeps its health series, `ALL` FAIL with
DCGM_FR_NVML_API, while the hang lasts. The loss and the hang are injected in the fake binding."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest

from podgpu.backends.nvml import NvmlBackend
from podgpu.backends.select import SelectedBackend
from podgpu.fields.catalog import BY_NAME
from podgpu.model.selection import parse_device_selection
from tests.conftest import FakeClock
from tests.fakes.fake_pynvml import FakeGpu, FakeMig, FakeNvml
from tests.unit.backends.test_nvml_lost import health, xid_counts

WANTED = [BY_NAME[n] for n in (
    "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_XID_ERRORS", "DCGM_EXP_XID_ERRORS_COUNT",
    "DCGM_EXP_GPU_HEALTH_STATUS", "DCGM_FI_DEV_SERIAL")]
MIB = 2**20


def mig_gpu() -> FakeGpu:
    def inst(gi: int) -> FakeMig:
        return FakeMig(gi, f"MIG-{gi:08d}-1111-2222-3333-444444444444",
                       "NVIDIA H200 MIG 3g.71gb",
                       SimpleNamespace(total=71000 * MIB, used=300 * MIB,
                                       free=70700 * MIB, reserved=0))
    return FakeGpu("GPU-11111111-aaaa-bbbb-cccc-dddddddddddd", minor=0, mig_enabled=True,
                   mig_slots=[inst(1), inst(2)])


@pytest.mark.parametrize(("spec", "parent", "instances"), [
    ("f", False, [1, 2]), ("i", False, [1, 2]), ("i:1", False, [2]), ("g", True, []),
    ("g+i", True, [1, 2])])
def test_a_lost_mig_gpu_keeps_its_last_known_instances(
        spec: str, parent: bool, instances: list[int]) -> None:
    nv = FakeNvml([mig_gpu()])
    b = SelectedBackend(NvmlBackend(pynvml_module=nv, clock=FakeClock(),
                                    retry_seconds=60.0), parse_device_selection(spec))
    b.open()
    try:
        before = b.read(WANTED).samples
        assert [s.device.mig_gi_id for s in before if s.device.is_mig] == instances
        nv.gpus[0].lost = True
        for _ in range(2):  # every cycle while it is lost
            r = b.read(WANTED)
            assert [d for d, _ in r.lost] == ["nvidia0"]
            assert any(not s.device.is_mig for s in r.samples) is parent
            got = [s for s in r.samples if s.device.is_mig]
            assert [s.device for s in got] == [s.device for s in before if s.device.is_mig]
            for s in r.samples:
                assert s.lost is not None
                assert s.values["DCGM_FI_DEV_XID_ERRORS"] == 79
                assert s.values["DCGM_FI_DEV_SERIAL"] == "1653724050116"  # known before
                assert "DCGM_FI_DEV_FB_USED" not in s.values  # nothing is read on a lost GPU
                assert xid_counts(s) == {"79": 1}
                assert health(s)["ALL"] == (20, "DCGM_FR_FALLEN_OFF_BUS")
        for s in got:  # the instance identity DCGM would label: profile and GPU instance id
            assert (s.device.mig_profile, s.device.mig_uuid) == (
                "3g.71gb", f"MIG-{s.device.mig_gi_id:08d}-1111-2222-3333-444444444444")
    finally:
        b.close()


def test_a_hung_gpu_keeps_its_health_series_failing_while_the_hang_lasts() -> None:
    nv = FakeNvml([FakeGpu("GPU-00000000-aaaa-bbbb-cccc-dddddddddddd", minor=0),
                   mig_gpu()])
    nv.gpus[1].minor, nv.gpus[1].bus_id = 1, "00000000:19:00.0"
    b = NvmlBackend(pynvml_module=nv, read_timeout_seconds=0.1)
    b.open()
    hold = threading.Event()
    try:
        before = b.read(WANTED)
        assert before.lost == ()
        nv.gpus[1].hold = hold  # every NVML call on GPU 1 blocks, as in a wedged driver
        for _ in range(2):  # the call times out, then the GPU's worker is stuck
            r = b.read(WANTED)
            assert [d for d, _ in r.lost] == ["nvidia1"]
            hung = [s for s in r.samples if s.device.index == 1]
            assert [s.device.mig_gi_id for s in hung] == [None, 1, 2]
            for s in hung:
                assert s.lost is not None
                assert s.values["DCGM_FI_DEV_XID_ERRORS"] == 0  # no XID: it is not lost
                h = health(s)
                assert h["ALL"] == (20, "DCGM_FR_NVML_API") and h["PCIE"][0] == 0
            assert [s.lost for s in r.samples if s.device.index == 0] == [None]
    finally:
        hold.set()
        b.close()
