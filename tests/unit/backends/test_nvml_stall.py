"""A hang at discovery, rediscovery, MIG enumeration or the P2P matrix stalls one
GPU, never the collect loop. The hang is injected in the fake binding (FakeGpu.hold/hold_only: the
named NVML functions block on that GPU as a call into a wedged driver does), and the read
deadline is counted, not waited for: the backend's `read_wait` returns as soon as every GPU's
worker has answered or is parked in a hang, as the real one does when the deadline passes.
Cycles are the real Collector's, run one by one on the test thread, a fake clock moved by the
collect interval before each. "Never the loop" is checked
three ways: every cycle returns while the hung worker is still parked, each cycle waited with
the read deadline, and no hung function was ever called on the cycle's own thread."""

from __future__ import annotations

import concurrent.futures
import inspect
import threading
from collections.abc import Iterator, Mapping
from concurrent.futures import Future
from contextlib import contextmanager
from types import SimpleNamespace
from typing import Any

import pytest

from podgpu.backends.nvml import NvmlBackend
from podgpu.collect import Collector
from podgpu.fields.catalog import BY_NAME, CATALOG, Field
from podgpu.model import Snapshot
from tests.conftest import FakeClock
from tests.fakes.fake_pynvml import FakeGpu, FakeMig, FakeNvml

INTERVAL = 0.2
"""Seconds the fake clock moves per cycle, as the collect loop's interval would (GPM sample
pairs need 0.1 s between them: with a clock that stood still each cycle would sleep for it)."""
DEADLINE = 0.1
"""The read deadline handed to the backend; the fake wait checks it is what each cycle waits."""
CYCLES = 4
"""Cycles run while a hang is held: enough for a loss to be noticed and the peers to change."""
SAFETY = 30.0
"""Real seconds after which a wait that should end at once fails the test instead of hanging."""
FIELDS = tuple(BY_NAME[n] for n in ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_XID_ERRORS",
                                    "DCGM_EXP_GPU_HEALTH_STATUS", "DCGM_EXP_P2P_STATUS",
                                    "DCGM_FI_DEV_FB_USED"))

_parked = threading.Condition()  # guards every Hang.parked; notified on park and on a job's end


def gpus(n: int) -> list[FakeGpu]:
    return [FakeGpu(f"GPU-0000000{i}-aaaa-bbbb-cccc-dddddddddddd", minor=i,
                    bus_id=f"00000000:{0x18 + i:02X}:00.0") for i in range(n)]


class Hang(threading.Event):
    """A wedged driver call: blocks the calling thread until set, and says which threads are
    parked in it. A call from the cycle's own thread is recorded (it would stall the loop) and
    not blocked, so the test fails instead of hanging."""

    def __init__(self, cycle_thread: int) -> None:
        super().__init__()
        self.cycle_thread = cycle_thread
        self.parked: set[str] = set()
        self.on_cycle_thread: list[str] = []

    def wait(self, timeout: float | None = None) -> bool:
        me = threading.current_thread()
        if me.ident == self.cycle_thread:
            self.on_cycle_thread.append(me.name)
            return True
        with _parked:
            self.parked.add(me.name)
            _parked.notify_all()
        try:
            return super().wait(timeout)
        finally:
            with _parked:
                self.parked.discard(me.name)


class ReadWait:
    """The backend's `read_wait`: returns once each GPU's future is done or its worker is
    parked in that GPU's Hang (the deadline passing, without the waiting). Keeps each key's last
    future, so a released GPU's abandoned job can be waited for."""

    def __init__(self, nv: FakeNvml) -> None:
        self._nv = nv
        self.deadlines: list[float] = []
        self.last: dict[int, Future[Any]] = {}

    def __call__(self, futures: Mapping[Any, Future[Any]], seconds: float) -> None:
        self.deadlines.append(seconds)
        self.last.update(futures)
        for fut in futures.values():
            fut.add_done_callback(_notify)
        with _parked:
            ok = _parked.wait_for(lambda: all(f.done() or self._parked(k)
                                              for k, f in futures.items()), SAFETY)
        assert ok, "a GPU's worker neither answered nor parked in a hang"

    def _parked(self, key: int) -> bool:
        hold = self._nv.gpus[key].hold
        return (isinstance(hold, Hang) and not hold.is_set()
                and f"podgpu-nvml-{key}" in hold.parked)


def _notify(_fut: Future[Any]) -> None:
    with _parked:
        _parked.notify_all()


class Loop:
    """The real Collector over the NVML backend, one cycle per call, on the test thread."""

    def __init__(self, backend: NvmlBackend, wait: ReadWait, clock: FakeClock,
                 fields: tuple[Field, ...] = FIELDS) -> None:
        self.snaps: list[Snapshot] = []
        self.wait = wait
        self._clock = clock
        self._collector = Collector(backend, fields, want_processes=True)

    def cycles(self, n: int = CYCLES) -> int:
        """Run n cycles; how many published a snapshot (all of them, unless one stalled)."""
        before = len(self.snaps)
        for _ in range(n):
            self._clock.advance(INTERVAL)
            self.snaps.append(self._collector.cycle())
        return len(self.snaps) - before

    def last(self) -> Snapshot:
        return self.snaps[-1]


@contextmanager
def running(nv: FakeNvml, fields: tuple[Field, ...] = FIELDS, **kw: Any
            ) -> Iterator[tuple[NvmlBackend, Loop]]:
    wait = ReadWait(nv)
    clock = FakeClock()
    nv.clock = clock
    b = NvmlBackend(pynvml_module=nv, read_timeout_seconds=DEADLINE,
                    read_wait=wait, clock=clock, **kw)
    b.open()
    try:
        yield b, Loop(b, wait, clock, fields)
    finally:
        for g in nv.gpus:
            if g.hold is not None:
                g.hold.set()
        b.close()
    assert wait.deadlines and set(wait.deadlines) <= {DEADLINE, 1.0}  # 1.0: close()'s


def hang(gpu: FakeGpu, *names: str) -> Hang:
    hold = Hang(threading.get_ident())
    gpu.hold, gpu.hold_only = hold, frozenset(names)
    return hold


def release(loop: Loop, gpu: FakeGpu) -> None:
    """Let the hung call return, and wait for the job it held to end (the worker is free)."""
    assert isinstance(gpu.hold, Hang)
    hold, gpu.hold, gpu.hold_only = gpu.hold, None, frozenset()
    assert not hold.on_cycle_thread, f"hung on the cycle's thread: {hold.on_cycle_thread}"
    hold.set()
    fut = loop.wait.last.get(gpu.minor)
    if fut is not None:
        done, _ = concurrent.futures.wait([fut], SAFETY)
        assert done, f"gpu{gpu.minor}'s job did not end after its hang was released"


def assert_keeps_cycling(loop: Loop, hold: Hang, key: int) -> None:
    """CYCLES cycles publish while the GPU's worker stays parked in its hang."""
    assert loop.cycles() == CYCLES
    assert f"podgpu-nvml-{key}" in hold.parked
    assert not hold.on_cycle_thread


def indexes(snap: Snapshot) -> list[int]:
    return sorted(s.device.index for s in snap.samples if s.lost is None and not s.device.is_mig)


def test_hang_at_discovery_stalls_one_gpu_not_open_nor_the_loop() -> None:
    nv = FakeNvml(gpus(3))
    hold = hang(nv.gpus[1], "nvmlDeviceGetHandleByIndex")
    with running(nv) as (_b, loop):
        assert_keeps_cycling(loop, hold, 1)
        snap = loop.last()
        assert indexes(snap) == [0, 2]
        assert [d for d, _ in snap.lost_devices] == ["gpu1"]
        release(loop, nv.gpus[1])
        loop.cycles(1)
        assert indexes(loop.last()) == [0, 1, 2]  # discovered once its call returned


def test_hang_at_rediscovery_keeps_the_lost_gpu_series_and_the_loop() -> None:
    nv = FakeNvml(gpus(2))
    with running(nv, retry_seconds=0.0) as (_b, loop):
        loop.cycles(1)
        nv.gpus[1].lost = True
        loop.cycles(1)
        hold = hang(nv.gpus[1], "nvmlDeviceGetHandleByUUID")  # it comes back; the call hangs
        nv.gpus[1].lost = False
        assert_keeps_cycling(loop, hold, 1)
        snap = loop.last()
        assert indexes(snap) == [0]
        (gone,) = [s for s in snap.samples if s.lost is not None]
        assert gone.device.uuid == nv.gpus[1].uuid
        assert gone.values["DCGM_FI_DEV_XID_ERRORS"] == 79  # still alerting while it hangs
        release(loop, nv.gpus[1])
        loop.cycles(1)
        assert indexes(loop.last()) == [0, 1]


def test_hang_at_mig_enumeration_stalls_one_gpu_not_the_loop() -> None:
    mig_gpu = FakeGpu("GPU-0000000m-aaaa-bbbb-cccc-dddddddddddd", minor=1, mig_enabled=True,
                      bus_id="00000000:19:00.0",
                      mig_slots=[FakeMig(1, "MIG-00010000-1111-2222-3333-444444444444",
                                         "NVIDIA H200 MIG 3g.71gb",
                                         SimpleNamespace(total=71 * 2**30, used=0,
                                                         free=71 * 2**30, reserved=0))])
    nv = FakeNvml([gpus(1)[0], mig_gpu])
    with running(nv) as (b, loop):
        loop.cycles(1)
        assert indexes(loop.last()) == [0, 1]
        hold = hang(mig_gpu, "nvmlDeviceGetMigMode", "nvmlDeviceGetMaxMigDeviceCount")
        b._mark_mig_dirty()  # what the event thread does on nvmlEventMigConfigChange
        assert_keeps_cycling(loop, hold, 1)
        assert indexes(loop.last()) == [0]
        release(loop, mig_gpu)
        loop.cycles(1)
        assert indexes(loop.last()) == [0, 1]


def test_hang_in_the_p2p_matrix_stalls_one_gpu_not_the_loop() -> None:
    nv = FakeNvml(gpus(3))
    with running(nv, retry_seconds=0.0) as (_b, loop):
        loop.cycles(1)
        assert indexes(loop.last()) == [0, 1, 2]
        hold = hang(nv.gpus[0], "nvmlDeviceGetP2PStatus")
        nv.gpus[2].lost = True  # the set of live peers changes: every GPU asks its row again
        assert_keeps_cycling(loop, hold, 0)
        assert indexes(loop.last()) == [1]
        release(loop, nv.gpus[0])
        loop.cycles(1)
        assert indexes(loop.last()) == [0, 1]
        p2p = [lv for s in loop.last().samples if s.device.index == 0 for lv in s.labeled
               if lv.field == "DCGM_EXP_P2P_STATUS"]
        assert [dict(lv.labels)["peer_gpu"] for lv in p2p] == ["1"]


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
    holds = [hang(gpu, function) for gpu, function in zip(hung, functions, strict=True)]
    with running(nv, tuple(CATALOG), retry_seconds=0.0) as (_b, loop):
        assert loop.cycles() == CYCLES
        assert 0 in indexes(loop.last())
        assert not [h.on_cycle_thread for h in holds if h.on_cycle_thread]
        for gpu in hung:
            release(loop, gpu)
        assert loop.cycles() == CYCLES
        assert 0 in indexes(loop.last())
