"""The NVML backend: a GPU that falls off the bus keeps its identity labels,
DCGM_FI_DEV_XID_ERRORS 79 (when NVML says GpuIsLost, else the last XID), the windowed XID count
and DCGM_EXP_GPU_HEALTH_STATUS FAIL until it comes back. The loss is injected in the fake binding
(FakeGpu.lost / errors)."""

from __future__ import annotations

from podgpu.backends.nvml import NvmlBackend
from podgpu.fields.catalog import BY_NAME
from podgpu.model import Sample
from tests.conftest import FakeClock
from tests.fakes.fake_pynvml import UNKNOWN, FakeGpu, FakeNvml
from tests.integration.kubelet_fake import wait_for

WANTED = [BY_NAME[n] for n in (
    "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_XID_ERRORS", "DCGM_EXP_XID_ERRORS_COUNT",
    "DCGM_EXP_GPU_HEALTH_STATUS", "DCGM_FI_DEV_SERIAL", "DCGM_FI_DRIVER_VERSION")]


def gpus(n: int) -> list[FakeGpu]:
    return [FakeGpu(f"GPU-{i:08d}-0000-0000-0000-000000000000", minor=i,
                    bus_id=f"00000000:{0x18 + i:02X}:00.0") for i in range(n)]


def health(s: Sample) -> dict[str, tuple[int | float, str]]:
    out = {}
    for lv in s.labeled:
        if lv.field == "DCGM_EXP_GPU_HEALTH_STATUS":
            labels = dict(lv.labels)
            out[labels["health_watch"]] = (lv.value, labels["health_error_code"])
    return out


def xid_counts(s: Sample) -> dict[str, int | float]:
    return {dict(lv.labels).get("xid", ""): lv.value for lv in s.labeled
            if lv.field == "DCGM_EXP_XID_ERRORS_COUNT"}


def test_fallen_off_the_bus_keeps_identity_xid_79_and_health_fail_until_it_returns() -> None:
    nv = FakeNvml(gpus(2))
    clock = FakeClock()
    b = NvmlBackend(pynvml_module=nv, clock=clock, retry_seconds=5.0)
    b.open()
    try:
        before = {s.device.index: s for s in b.read(WANTED).samples}
        assert before[1].values["DCGM_FI_DEV_XID_ERRORS"] == 0
        nv.gpus[1].lost = True
        for _ in range(3):  # every cycle while it is lost, not only the first
            r = b.read(WANTED)
            by = {s.device.index: s for s in r.samples}
            gone = by[1]
            assert gone.lost is not None and by[0].lost is None
            assert gone.device == before[1].device  # gpu, UUID, pci_bus_id, device, modelName
            assert gone.values == {"DCGM_FI_DEV_XID_ERRORS": 79,
                                   "DCGM_FI_DEV_SERIAL": before[1].values["DCGM_FI_DEV_SERIAL"],
                                   "DCGM_FI_DRIVER_VERSION": "580.159.04"}
            assert xid_counts(gone) == {"79": 1}
            h = health(gone)
            assert h["ALL"] == (20, "DCGM_FR_FALLEN_OFF_BUS")
            # DCGM 4.5.3 puts XID 79 on ALL only (DcgmHealthWatch.cpp, BuildXidMappings)
            assert h["PCIE"] == (0, "DCGM_FR_OK") and h["SM"][0] == 0
            assert health(by[0])["ALL"][0] == 0  # the other GPU is fine
            assert r.lost[0][0] == "nvidia1"
            clock.advance(1.0)
        nv.gpus[1].lost = False
        clock.advance(5.0)
        back = {s.device.index: s for s in b.read(WANTED).samples}[1]
        assert back.lost is None and "DCGM_FI_DEV_GPU_UTIL" in back.values
    finally:
        b.close()


def test_a_gpu_lost_with_another_error_shows_its_last_xid_and_fails_health() -> None:
    nv = FakeNvml(gpus(1))
    b = NvmlBackend(pynvml_module=nv, clock=FakeClock())
    b.open()
    try:
        b.read(WANTED)
        nv.emit_xid(0, 48)
        assert b._events is not None
        events = b._events
        wait_for(lambda: events.last_xid(nv.gpus[0].uuid) == 48)
        nv.gpus[0].errors["nvmlDeviceGetUtilizationRates"] = UNKNOWN  # lost, but not 79
        r = b.read(WANTED)
    finally:
        b.close()
    (gone,) = r.samples
    assert gone.lost is not None and gone.values["DCGM_FI_DEV_XID_ERRORS"] == 48
    assert xid_counts(gone) == {"48": 1}
    h = health(gone)
    # DCGM 4.5.3: XID 48 is a "devastating" XID, FAIL on ALL only; MEM fails on the DBE count
    assert h["ALL"] == (20, "DCGM_FR_XID_ERROR") and h["MEM"] == (0, "DCGM_FR_OK")
    assert h["PCIE"][0] == 0
