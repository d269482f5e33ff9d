"""backends/nvml_ahead.Warmup: each GPU's first GPM sample is taken on that GPU's worker before
the backend exists; the backend's open adopts the workers and each GPU's first discovery the
stream, so the first cycle's GPM pair starts at the sample taken ahead. A GPU that hangs during
the warm-up stalls only its own discovery, and every sample nobody took is freed.

NVML is the fake binding (tests/fakes/fake_pynvml.py) on a fake clock; hangs are injected with
test_nvml_stall's Hang, and the read deadline is counted, not waited for (its ReadWait)."""

from __future__ import annotations

import threading

from podgpu.backends.deadline import Workers
from podgpu.backends.nvml import NvmlBackend
from podgpu.backends.nvml_ahead import Warmup
from podgpu.fields.catalog import BY_NAME
from tests.conftest import FakeClock
from tests.fakes.fake_pynvml import FakeNvml
from tests.harness import wait_for
from tests.unit.backends.test_nvml_stall import DEADLINE, ReadWait, gpus, hang

GR_ENGINE_ACTIVE = BY_NAME["DCGM_FI_PROF_GR_ENGINE_ACTIVE"]


def nvml_up(n: int) -> tuple[FakeNvml, FakeClock]:
    """A fake NVML of `n` GPUs (GPM supported, as on Hopper), inited as the open's thread has
    it when the warm-up starts."""
    nv = FakeNvml(gpus(n))
    clock = FakeClock()
    nv.clock = clock
    nv.nvmlInit()
    return nv, clock


def backend(nv: FakeNvml, clock: FakeClock, warmup: Warmup, wait: ReadWait) -> NvmlBackend:
    return NvmlBackend(pynvml_module=nv, read_timeout_seconds=DEADLINE, read_wait=wait,
                       clock=clock, warmup=warmup)


def test_each_gpus_first_sample_is_taken_ahead_and_its_discovery_adopts_it() -> None:
    nv, clock = nvml_up(2)
    wait = ReadWait(nv)
    warmup = Warmup(clock=clock)
    warmup.start(nv)
    wait_for(lambda: nv.calls["nvmlGpmSampleGet"] == 2, what="both GPUs' first samples")
    taken_ahead = clock()
    clock.advance(0.05)  # the flags parsed meanwhile; the backend opens now
    b = backend(nv, clock, warmup, wait)
    b.open()
    warmup.release()
    try:
        # two samples a stream, one stream a GPU: none made again at discovery, none freed
        assert (nv.calls["nvmlGpmSampleAlloc"], nv.calls["nvmlGpmSampleGet"],
                nv.calls["nvmlGpmSampleFree"]) == (4, 2, 0)
        clock.advance(0.2)
        reading = b.read([GR_ENGINE_ACTIVE])
        values = [s.values.get("DCGM_FI_PROF_GR_ENGINE_ACTIVE") for s in reading.samples]
        assert values == [0.99, 0.99]
        assert [first for first, _ in nv.gpm_pairs] == [taken_ahead, taken_ahead]
    finally:
        b.close()
    assert nv.calls["nvmlGpmSampleFree"] == 4  # the adopted streams are the backend's to free


def test_a_gpu_hung_in_its_warmup_stalls_only_its_own_discovery() -> None:
    nv, clock = nvml_up(2)
    hold = hang(nv.gpus[1])  # every NVML call on GPU 1 blocks, its handle lookup first
    wait = ReadWait(nv)
    warmup = Warmup(clock=clock)
    warmup.start(nv)
    b = backend(nv, clock, warmup, wait)
    b.open()  # waits for GPU 0, and for GPU 1 only until its worker is parked in the hang
    warmup.release()
    try:
        assert [d.uuid for d in b.devices()] == [nv.gpus[0].uuid]
        assert nv.calls["nvmlGpmSampleGet"] == 1  # GPU 0's, taken ahead and adopted
        hold.set()  # the driver answers: the warm-up's sample comes too late to be taken
        wait.last[1].result(timeout=30)  # then GPU 1's discovery, queued behind it, ends
        # GPU 1: a stream made ahead and freed at once (2 samples), then its discovery's own
        assert (nv.calls["nvmlGpmSampleAlloc"], nv.calls["nvmlGpmSampleFree"]) == (6, 2)
    finally:
        b.close()
    assert nv.calls["nvmlGpmSampleFree"] == nv.calls["nvmlGpmSampleAlloc"]


def test_release_frees_every_sample_nobody_took_and_stops_the_workers() -> None:
    nv, clock = nvml_up(3)
    warmup = Warmup(clock=clock)
    before = set(threading.enumerate())
    warmup.start(nv)
    wait_for(lambda: nv.calls["nvmlGpmSampleGet"] == 3, what="three first samples")
    workers = set(threading.enumerate()) - before
    assert {t.name for t in workers} == {"podgpu-nvml-0", "podgpu-nvml-1", "podgpu-nvml-2"}
    warmup.release()  # bad flags, --simulate from the environment, or a failed open
    assert nv.calls["nvmlGpmSampleFree"] == nv.calls["nvmlGpmSampleAlloc"] == 6
    for thread in workers:
        thread.join(30)
        assert not thread.is_alive()
    assert warmup.take(0) is None


def test_a_gpu_without_gpm_gets_no_stream_ahead_and_says_why_at_discovery() -> None:
    nv, clock = nvml_up(1)
    nv.gpus[0].gpm_supported = False  # pre-Hopper
    wait = ReadWait(nv)
    warmup = Warmup(clock=clock)
    warmup.start(nv)
    b = backend(nv, clock, warmup, wait)
    b.open()
    warmup.release()
    try:
        assert nv.calls["nvmlGpmSampleAlloc"] == 0
        assert "DCGM_FI_PROF_GR_ENGINE_ACTIVE" in b.unavailable_fields()
    finally:
        b.close()


def test_nothing_starts_while_nvml_is_down() -> None:
    nv = FakeNvml(gpus(1))  # never inited: NVML says "uninitialized"
    warmup = Warmup()
    warmup.start(nv)
    assert warmup.workers() is None
    assert nv.calls["nvmlDeviceGetHandleByIndex"] == 0


def test_a_posted_job_runs_on_its_keys_worker_before_what_is_queued_after_it() -> None:
    workers = Workers()
    ran: list[tuple[str, str]] = []

    def job(what: str, error: bool = False) -> str:
        ran.append((what, threading.current_thread().name))
        if error:
            raise SystemExit("the warm-up's own problem")  # even this: the worker lives on
        return what

    workers.post(3, lambda: job("posted, raises", error=True))
    workers.post(3, lambda: job("posted"))
    try:
        futures = workers.run([(3, lambda: job("waited for"))], 30)
        assert futures[3].result() == "waited for"
    finally:
        workers.close()
    assert ran == [("posted, raises", "podgpu-nvml-3"), ("posted", "podgpu-nvml-3"),
                   ("waited for", "podgpu-nvml-3")]  # the error was dropped, the worker lives
