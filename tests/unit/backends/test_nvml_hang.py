"""An NVML call that hangs (a wedged driver) stalls only its GPU: the cycle waits up to
the read deadline, reports that GPU as not answering, skips it while the call is stuck, and
reads it again once the call returns. The hang is injected in the fake binding (FakeGpu.hold)."""

from __future__ import annotations

import threading

from podgpu.backends.base import Reading
from podgpu.backends.nvml import NvmlBackend
from podgpu.fields.catalog import BY_NAME
from tests.conftest import FakeClock
from tests.fakes.fake_pynvml import FakeGpu, FakeNvml
from tests.integration.kubelet_fake import wait_for

WANTED = [BY_NAME[n] for n in ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_POWER_USAGE")]


def gpus(n: int) -> list[FakeGpu]:
    return [FakeGpu(f"GPU-0000000{i}-aaaa-bbbb-cccc-dddddddddddd", minor=i,
                    bus_id=f"00000000:{0x18 + i:02X}:00.0") for i in range(n)]


def read_gpus(r: Reading) -> list[int]:
    """GPUs whose fields were read this cycle."""
    return sorted(s.device.index for s in r.samples if s.lost is None and s.values)


def hung_gpus(r: Reading) -> list[int]:
    """GPUs reported by identity only (no field read), as a hung or lost GPU is."""
    return sorted(s.device.index for s in r.samples if s.lost is not None and not s.values)


def test_a_hung_call_stalls_only_its_gpu_and_is_read_again_after_it_returns() -> None:
    nv = FakeNvml(gpus(3))
    b = NvmlBackend(pynvml_module=nv, clock=FakeClock(), read_timeout_seconds=0.3)
    b.open()
    hold = threading.Event()
    try:
        assert len(b.read(WANTED).samples) == 3
        nv.gpus[1].hold = hold  # the next call on GPU 1 blocks
        r = b.read(WANTED)
        assert read_gpus(r) == [0, 2]
        assert hung_gpus(r) == [1]  # kept, identity only, while the hang lasts
        assert r.lost == (("nvidia1", "NVML did not answer within 0.3 s"),)
        assert r.errors == 1
        r = b.read(WANTED)  # still stuck: skipped, said so, not counted again
        assert read_gpus(r) == [0, 2] and hung_gpus(r) == [1]
        assert r.lost[0][0] == "nvidia1" and "has not returned for" in r.lost[0][1]
        assert r.errors == 0
        nv.gpus[1].hold = None
        hold.set()  # the driver answers at last
        wait_for(lambda: b._workers.stuck(1) is None)
        r = b.read(WANTED)
        assert read_gpus(r) == [0, 1, 2] and hung_gpus(r) == [] and r.lost == ()
    finally:
        hold.set()
        b.close()


def test_a_single_gpu_node_reports_its_hung_gpu_instead_of_stalling() -> None:
    nv = FakeNvml(gpus(1))
    b = NvmlBackend(pynvml_module=nv, clock=FakeClock(), read_timeout_seconds=0.2)
    b.open()
    hold = threading.Event()
    try:
        nv.gpus[0].hold = hold
        r = b.read(WANTED)
        assert read_gpus(r) == [] and hung_gpus(r) == [0]
        assert r.lost == (("nvidia0", "NVML did not answer within 0.2 s"),)
    finally:
        hold.set()
        b.close()
