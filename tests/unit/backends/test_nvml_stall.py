"""A hang at discovery, rediscovery, MIG enumeration or the P2P matrix stalls one
GPU, never the collect loop. The hang is injected in the fake binding (FakeGpu.hold/hold_only: the
named NVML functions block on that GPU as a call into a wedged driver does); the loop is the real
CollectLoop at a 0.2 s interval. "Keeps its interval" is a ratio measured in the same run: cycles
published while the hang is held against cycles published over an equal window without it (a
stalled loop publishes none)."""

from __future__ import annotations

import inspect
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from types import SimpleNamespace

import pytest

from podgpu.backends.nvml import NvmlBackend
from podgpu.collect import CollectLoop, Collector
from podgpu.fields.catalog import BY_NAME, CATALOG, Field
from podgpu.model import Snapshot
from tests.fakes.fake_pynvml import FakeGpu, FakeMig, FakeNvml

pytestmark = pytest.mark.slow  # each test waits through real read deadlines

INTERVAL = 0.2
DEADLINE = 0.1
WINDOW = 1.6
FIELDS = tuple(BY_NAME[n] for n in ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_XID_ERRORS",
                                    "DCGM_EXP_GPU_HEALTH_STATUS", "DCGM_EXP_P2P_STATUS",
                                    "DCGM_FI_DEV_FB_USED"))


def gpus(n: int) -> list[FakeGpu]:
    return [FakeGpu(f"GPU-0000000{i}-aaaa-bbbb-cccc-dddddddddddd", minor=i,
                    bus_id=f"00000000:{0x18 + i:02X}:00.0") for i in range(n)]


class Loop:
    """A real collect loop over the NVML backend, counting the snapshots it publishes."""

    def __init__(self, backend: NvmlBackend, fields: tuple[Field, ...] = FIELDS) -> None:
        self.snaps: list[Snapshot] = []
        self._lock = threading.Lock()
        self.loop = CollectLoop(Collector(backend, fields, want_processes=True), INTERVAL,
                                self._publish)

    def _publish(self, snap: Snapshot, _seconds: float) -> None:
        with self._lock:
            self.snaps.append(snap)

    def cycles_in(self, seconds: float) -> int:
        with self._lock:
            before = len(self.snaps)
        time.sleep(seconds)
        with self._lock:
            return len(self.snaps) - before

    def last(self) -> Snapshot:
        with self._lock:
            return self.snaps[-1]


@contextmanager
def running(nv: FakeNvml, fields: tuple[Field, ...] = FIELDS, **kw: float
            ) -> Iterator[tuple[NvmlBackend, Loop]]:
    b = NvmlBackend(pynvml_module=nv, read_timeout_seconds=DEADLINE, **kw)  # type: ignore[arg-type]
    b.open()
    loop = Loop(b, fields)
    loop.loop.start()
    try:
        yield b, loop
    finally:
        for g in nv.gpus:
            if g.hold is not None:
                g.hold.set()
        loop.loop.stop()
        b.close()


def hang(gpu: FakeGpu, *names: str) -> threading.Event:
    gpu.hold, gpu.hold_only = threading.Event(), frozenset(names)
    return gpu.hold


def release(gpu: FakeGpu) -> None:
    assert gpu.hold is not None
    hold, gpu.hold, gpu.hold_only = gpu.hold, None, frozenset()
    hold.set()


def assert_keeps_interval(held: int, free: int) -> None:
    assert free > 0
    assert held / free >= 0.5, f"{held} cycles while a GPU hung vs {free} without"


def indexes(snap: Snapshot) -> list[int]:
    return sorted(s.device.index for s in snap.samples if s.lost is None and not s.device.is_mig)


def test_hang_at_discovery_stalls_one_gpu_not_open_nor_the_loop() -> None:
    nv = FakeNvml(gpus(3))
    hold = hang(nv.gpus[1], "nvmlDeviceGetHandleByIndex")
    with running(nv) as (_b, loop):
        held = loop.cycles_in(WINDOW)
        snap = loop.last()
        assert indexes(snap) == [0, 2]
        assert [d for d, _ in snap.lost_devices] == ["gpu1"]
        assert hold is nv.gpus[1].hold
        release(nv.gpus[1])
        free = loop.cycles_in(WINDOW)
        assert indexes(loop.last()) == [0, 1, 2]  # discovered once its call returned
    assert_keeps_interval(held, free)


def test_hang_at_rediscovery_keeps_the_lost_gpu_series_and_the_loop() -> None:
    nv = FakeNvml(gpus(2))
    with running(nv, retry_seconds=0.05) as (_b, loop):
        free = loop.cycles_in(WINDOW)
        nv.gpus[1].lost = True
        time.sleep(3 * INTERVAL)
        hang(nv.gpus[1], "nvmlDeviceGetHandleByUUID")  # it comes back, and the first call hangs
        nv.gpus[1].lost = False
        held = loop.cycles_in(WINDOW)
        snap = loop.last()
        assert indexes(snap) == [0]
        (gone,) = [s for s in snap.samples if s.lost is not None]
        assert gone.device.uuid == nv.gpus[1].uuid
        assert gone.values["DCGM_FI_DEV_XID_ERRORS"] == 79  # still alerting while it hangs
        release(nv.gpus[1])
        time.sleep(4 * INTERVAL)
        assert indexes(loop.last()) == [0, 1]
    assert_keeps_interval(held, free)


def test_hang_at_mig_enumeration_stalls_one_gpu_not_the_loop() -> None:
    mig_gpu = FakeGpu("GPU-0000000m-aaaa-bbbb-cccc-dddddddddddd", minor=1, mig_enabled=True,
                      bus_id="00000000:19:00.0",
                      mig_slots=[FakeMig(1, "MIG-00010000-1111-2222-3333-444444444444",
                                         "NVIDIA H200 MIG 3g.71gb",
                                         SimpleNamespace(total=71 * 2**30, used=0,
                                                         free=71 * 2**30, reserved=0))])
    nv = FakeNvml([gpus(1)[0], mig_gpu])
    with running(nv) as (b, loop):
        free = loop.cycles_in(WINDOW)
        hang(mig_gpu, "nvmlDeviceGetMigMode", "nvmlDeviceGetMaxMigDeviceCount")
        b._mark_mig_dirty()  # what the event thread does on nvmlEventMigConfigChange
        held = loop.cycles_in(WINDOW)
        assert indexes(loop.last()) == [0]
        release(mig_gpu)
        time.sleep(4 * INTERVAL)
        assert indexes(loop.last()) == [0, 1]
    assert_keeps_interval(held, free)


def test_hang_in_the_p2p_matrix_stalls_one_gpu_not_the_loop() -> None:
    nv = FakeNvml(gpus(3))
    with running(nv, retry_seconds=0.05) as (_b, loop):
        free = loop.cycles_in(WINDOW)
        hang(nv.gpus[0], "nvmlDeviceGetP2PStatus")
        nv.gpus[2].lost = True  # the set of live peers changes: every GPU asks its row again
        held = loop.cycles_in(WINDOW)
        assert indexes(loop.last()) == [1]
        release(nv.gpus[0])
        time.sleep(4 * INTERVAL)
        assert indexes(loop.last()) == [0, 1]
        p2p = [lv for s in loop.last().samples if s.device.index == 0 for lv in s.labeled
               if lv.field == "DCGM_EXP_P2P_STATUS"]
        assert [dict(lv.labels)["peer_gpu"] for lv in p2p] == ["1"]
    assert_keeps_interval(held, free)


def _per_gpu_functions() -> list[str]:
    """Every NVML function of the fake that works on one GPU: those taking a device handle,
    the handle lookups, and nvmlGpmMetricsGet (its samples belong to one GPU)."""
    out = ["nvmlDeviceGetHandleByIndex", "nvmlGpmMetricsGet"]
    for name, fn in inspect.getmembers(FakeNvml, inspect.isfunction):
        params = list(inspect.signature(fn).parameters)
        if name.startswith("nvml") and len(params) > 1 and params[1] == "h":
            out.append(name)
    return sorted(out)


def _mig_gpu(i: int) -> FakeGpu:
    return FakeGpu(f"GPU-0000000{i}-aaaa-bbbb-cccc-mmmmmmmmmmmm", minor=i, mig_enabled=True,
                   bus_id=f"00000000:{0x18 + i:02X}:00.0",
                   mig_slots=[FakeMig(1, f"MIG-0001000{i}-1111-2222-3333-444444444444",
                                      "NVIDIA H200 MIG 3g.71gb",
                                      SimpleNamespace(total=71 * 2**30, used=0,
                                                      free=71 * 2**30, reserved=0),
                                      processes=[(4300 + i, 1 << 20)])])


FUNCTIONS = _per_gpu_functions()
GROUPS = [FUNCTIONS[i:i + 5] for i in range(0, len(FUNCTIONS), 5)]


@pytest.mark.parametrize("functions", GROUPS, ids=[g[0] for g in GROUPS])
def test_a_hang_in_any_per_gpu_nvml_function_stalls_one_gpu_never_the_loop(
        functions: list[str]) -> None:
    """Every entry point: GPUs 1..5 (MIG-enabled, so the MIG calls are made
    too) each hang in one NVML function from before open(); every catalog field is read, with
    processes; the loop keeps publishing and GPU 0 keeps its series meanwhile."""
    gpu0 = gpus(1)[0]
    gpu0.processes = [(4242, 1 << 30)]
    gpu0.proc_samples = [(4242, 1, 50)]
    hung = [_mig_gpu(i + 1) for i in range(len(functions))]
    nv = FakeNvml([gpu0, *hung])
    for gpu, function in zip(hung, functions, strict=True):
        hang(gpu, function)
    with running(nv, tuple(CATALOG), retry_seconds=0.05) as (_b, loop):
        held = loop.cycles_in(WINDOW / 2)
        assert 0 in indexes(loop.last())
        for gpu in hung:
            release(gpu)
        free = loop.cycles_in(WINDOW / 2)
    assert_keeps_interval(held, free)
