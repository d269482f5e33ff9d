from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence

import pytest

from podgpu.attribution.base import Attribution
from podgpu.backends.base import Reading
from podgpu.collect import CollectLoop, Collector
from podgpu.fields import load_default
from podgpu.fields.catalog import Field
from podgpu.model import Allocation, ContainerRef, Device, GpuProcess
from podgpu.model.status import StageStatus
from podgpu.sim.backend import MODELS, SimulatedBackend

FIELDS = load_default().fields


class FlakyBackend:
    """Fails every other cycle, as a backend bug would."""

    name = "flaky"

    def __init__(self) -> None:
        self.inner = SimulatedBackend(2, MODELS["H100"])
        self.calls = 0

    def open(self) -> None: ...
    def devices(self) -> tuple[Device, ...]:
        return self.inner.devices()
    def info(self) -> dict[str, str]:
        return {}
    def unavailable_fields(self) -> dict[str, str]:
        return {}
    def close(self) -> None: ...

    def read(self, fields: Sequence[Field], *, processes: bool = False) -> Reading:
        self.calls += 1
        if self.calls % 2 == 0:
            raise RuntimeError("driver hiccup")
        r = self.inner.read(fields)
        return Reading(samples=r.samples[:1], lost=(("gpu 1", "GPU is lost"),), errors=1)


def test_a_failing_backend_yields_an_empty_snapshot_and_counts_errors() -> None:
    c = Collector(FlakyBackend(), FIELDS)
    first = c.cycle()
    assert len(first.samples) == 1 and first.lost_devices == (("gpu 1", "GPU is lost"),)
    assert dict(first.errors_total) == {"flaky": 1}  # the lost GPU is the reading's one error
    assert first.stage("backend").ok is False  # type: ignore[union-attr]
    second = c.cycle()
    assert second.samples == () and second.cycle == 2
    assert dict(second.errors_total) == {"flaky": 2}
    assert "driver hiccup" in second.stage("backend").error  # type: ignore[union-attr]


class HoldingBackend(FlakyBackend):
    """Holds values back on its first read (as GPM's first 100 ms do), never after."""

    def read(self, fields: Sequence[Field], *, processes: bool = False) -> Reading:
        self.calls += 1
        return self.inner.read(fields)._replace(held_for=0.2 if self.calls == 1 else None)


def test_the_collector_keeps_when_held_back_values_can_be_read() -> None:
    c = Collector(HoldingBackend(), FIELDS)
    before = time.monotonic()
    c.cycle()
    after = time.monotonic()
    assert c.held_until is not None and before + 0.2 <= c.held_until <= after + 0.2
    c.cycle()
    assert c.held_until is None


class StaticAttributor:
    def __init__(self, fail: bool = False) -> None:
        self.fail = fail
        self.seen: tuple[GpuProcess, ...] | None = None

    def start(self) -> None: ...
    def close(self) -> None: ...
    def health_parts(self) -> dict[str, Callable[[], dict[str, object]]]:
        return {}

    def attribute(self, devices: tuple[Device, ...], processes: tuple[GpuProcess, ...]
                  ) -> Attribution:
        if self.fail:
            raise ValueError("bad state")
        self.seen = processes
        ref = ContainerRef("ns", "p", "c")
        return Attribution(allocations=(Allocation(devices[0].key, ref, "nvidia.com/gpu", "x"),),
                           status=StageStatus.failed("kubelet down"), errors=(("kubelet", 1),))


def test_attribution_results_and_errors_reach_the_snapshot() -> None:
    c = Collector(SimulatedBackend(2, MODELS["H100"]), FIELDS, attributor=StaticAttributor())
    s = c.cycle()
    assert s.allocations[0].container.pod == "p"
    assert str(s.attribution_status) == "unavailable: kubelet down"
    assert dict(s.errors_total)["kubelet"] == 1
    assert s.stage("attribution").ok is False  # type: ignore[union-attr]
    assert len(s.samples) == 2  # GPU metrics keep flowing


def test_a_raising_attributor_does_not_stop_collection() -> None:
    c = Collector(SimulatedBackend(1, MODELS["H100"]), FIELDS,
                  attributor=StaticAttributor(fail=True))
    s = c.cycle()
    assert len(s.samples) == 1 and s.allocations == ()
    assert s.attribution_status.unavailable
    assert dict(s.errors_total)["attribution"] == 1


class _Cycles:
    """A collector whose cycles log the thread they ran on; `error` makes them raise it."""

    def __init__(self, error: BaseException | None = None, held_for: float | None = None) -> None:
        self.threads: list[str] = []
        self.error = error
        self.held_for = held_for
        self.held_until: float | None = None  # the last cycle's, as Collector keeps it

    def cycle(self) -> str:
        self.threads.append(threading.current_thread().name)
        if self.held_for is not None and len(self.threads) == 1:
            self.held_until = time.monotonic() + self.held_for
        if self.error is not None:
            raise self.error
        return f"snapshot {len(self.threads)}"


def test_the_first_cycle_runs_at_once_on_the_loops_thread_and_is_waited_for() -> None:
    cycles = _Cycles()
    published: list[object] = []
    loop = CollectLoop(cycles, 3600, lambda snap, _s: published.append(snap))  # type: ignore[arg-type]
    loop.start(first_now=True)
    loop.wait_first()
    try:
        assert published == ["snapshot 1"]  # published before the wait returns
        assert cycles.threads == ["podgpu-collect"]  # not the caller's: it imports meanwhile
    finally:
        loop.stop()
    assert published == ["snapshot 1"]  # the next tick was an interval away


def test_values_the_first_cycle_held_back_come_with_the_grids_first_tick() -> None:
    """GPM's first 100 ms not over at the first cycle: the next cycle comes once they are,
    not an interval (here an hour) later; the grid goes on from there."""
    cycles = _Cycles(held_for=0.05)
    second = threading.Event()
    published: list[object] = []

    def publish(snap: object, _seconds: float) -> None:
        published.append(snap)
        if len(published) == 2:
            second.set()

    loop = CollectLoop(cycles, 3600, publish)  # type: ignore[arg-type]
    loop.start(first_now=True)
    try:
        assert second.wait(30)
    finally:
        loop.stop()
    assert published == ["snapshot 1", "snapshot 2"]


def test_a_first_cycle_that_raises_fails_the_start_and_ends_the_loop() -> None:
    cycles = _Cycles(error=RuntimeError("the metric list names a field the backend lacks"))
    loop = CollectLoop(cycles, 0.001, lambda snap, _s: None)  # type: ignore[arg-type]
    loop.start(first_now=True)
    with pytest.raises(RuntimeError, match="lacks"):
        loop.wait_first()
    loop.stop()
    assert cycles.threads == ["podgpu-collect"]  # no tick ran after it
