"""One collection cycle: backend -> attribution -> Snapshot. Times every stage; never raises.

`Collector.cycle()` is called by `CollectLoop` on its own thread at the collect interval; the loop
hands every snapshot to `publish` (which renders the exposition once and swaps it in). Nothing on
the scrape path calls the backend or the kubelet.

Decision record: docs/decisions/0002-collect-loop-prerendered-scrape.md.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping

from podgpu.attribution.base import Attribution, Attributor
from podgpu.backends.base import Backend, Reading
from podgpu.fields.catalog import Field
from podgpu.model import Snapshot, StageResult
from podgpu.model.status import DISABLED, StageStatus

log = logging.getLogger(__name__)


class Collector:
    """Builds one immutable Snapshot per call, keeping only cumulative error counts between calls."""

    def __init__(
        self,
        backend: Backend,
        fields: tuple[Field, ...],
        *,
        attributor: Attributor | None = None,
        want_processes: bool = False,
        hpc_jobs: Callable[[], Mapping[str, tuple[str, ...]]] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """`hpc_jobs`: reads the HPC job mapping once per cycle (--hpc-job-mapping-dir)."""
        self._backend = backend
        self._fields = fields
        self._attributor = attributor
        self._want_processes = want_processes
        self._hpc_jobs = hpc_jobs
        self._clock = clock
        self._errors: Counter[str] = Counter({backend.name: 0})
        if attributor is not None:
            self._errors["kubelet"] = 0
        self._cycle = 0
        self.held_until: float | None = None
        """When (time.monotonic) values the last cycle held back can be read (its reading's
        `held_for` from when the reading returned); None when it held none back."""

    def use_fields(self, fields: tuple[Field, ...]) -> None:
        """Read these fields from the next cycle on (a metric list reloaded on SIGHUP); call on
        the collect thread, between cycles."""
        self._fields = fields

    def cycle(self) -> Snapshot:
        self._cycle += 1
        stages: list[StageResult] = []
        t0 = time.perf_counter()
        try:
            reading = self._backend.read(self._fields, processes=self._want_processes)
            ok, err = reading.errors == 0 and not reading.lost, ""
            if reading.lost:
                err = "; ".join(f"{d}: {why}" for d, why in reading.lost)
        except Exception as exc:  # a backend bug must not stop the loop
            log.exception("backend %s failed", self._backend.name)
            reading, ok, err = Reading(samples=()), False, f"{type(exc).__name__}: {exc}"
            self._errors[self._backend.name] += 1
        self.held_until = (None if reading.held_for is None
                           else time.monotonic() + reading.held_for)
        self._errors[self._backend.name] += reading.errors  # a lost device is one of them
        stages.append(StageResult("backend", time.perf_counter() - t0, ok, err))

        attribution = Attribution(processes=reading.processes, status=DISABLED)
        if self._attributor is not None:
            t1 = time.perf_counter()
            devices = tuple(s.device for s in reading.samples)
            try:
                attribution = self._attributor.attribute(devices, reading.processes)
                a_ok = attribution.status.ok
            except Exception as exc:
                log.exception("attribution failed")
                attribution = Attribution(status=StageStatus.failed(str(exc)))
                self._errors["attribution"] += 1
                a_ok = False
            for source, n in attribution.errors:
                self._errors[source] += n
            stages.append(StageResult("attribution", time.perf_counter() - t1, a_ok,
                                      "" if a_ok else str(attribution.status)))

        return Snapshot(
            taken_at=self._clock(),
            samples=reading.samples,
            stages=tuple(stages),
            allocations=attribution.allocations,
            processes=attribution.processes,
            lost_devices=reading.lost,
            attribution_status=attribution.status,
            errors_total=tuple(sorted(self._errors.items())),
            cycle=self._cycle,
            hpc_jobs=tuple(sorted(self._hpc_jobs().items())) if self._hpc_jobs else (),
        )


class CollectLoop:
    """Runs `collector.cycle()` every `interval` seconds on a daemon thread and publishes results.

    Ticks are scheduled on a fixed grid (start + k*interval); a cycle that overruns skips the
    missed ticks instead of queueing them, so a slow GPU never builds a backlog. When the first
    cycle (`first_now`) held values back (GPM's first 100 ms, backends/nvml_gpm.py), the grid's
    first tick comes as soon as they can be read instead of one interval later.
    """

    def __init__(
        self,
        collector: Collector,
        interval: float,
        publish: Callable[[Snapshot, float], None],
        *,
        on_death: Callable[[BaseException], None] | None = None,
    ) -> None:
        """`on_death` is called (on the loop's thread) if the loop ever stops by itself."""
        self._collector = collector
        self._interval = interval
        self._publish = publish
        self._on_death = on_death
        self.died: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="podgpu-collect", daemon=True)
        self._first_now = False
        self._first_done = threading.Event()
        self._first_error: BaseException | None = None

    def run_once(self) -> Snapshot:
        """One cycle on the caller's thread."""
        t0 = time.perf_counter()
        snap = self._collector.cycle()
        self._publish(snap, time.perf_counter() - t0)
        return snap

    def start(self, *, first_now: bool = False) -> None:
        """The loop's thread: its first cycle one interval from now, or with `first_now` at
        once, published before the grid's ticks begin (`wait_first` waits for it)."""
        self._first_now = first_now
        self._thread.start()

    def wait_first(self) -> None:
        """The first cycle of `start(first_now=True)` published; what it raised is raised
        here (and the loop has stopped)."""
        self._first_done.wait()
        if self._first_error is not None:
            raise self._first_error

    def _run(self) -> None:
        """A loop that dies (anything escaping the per-cycle guard, e.g. a timer that
        overflows) must not leave the server answering the last snapshot forever."""
        if self._first_now:
            try:
                self.run_once()
            except BaseException as exc:  # the caller's to raise: the start fails
                self._first_error = exc
                return
            finally:
                self._first_done.set()
        try:
            self._ticks()
        except BaseException as exc:
            self.died = exc
            log.critical("the collect loop stopped: %s: %s; podgpu exits so that it is "
                         "restarted rather than serving stale data", type(exc).__name__, exc,
                         exc_info=exc)
            if self._on_death is not None:
                self._on_death(exc)

    def _ticks(self) -> None:
        next_tick = time.monotonic() + self._interval
        held = self._collector.held_until if self._first_now else None
        if held is not None:  # not after the publish: from when the reading returned
            next_tick = min(held, next_tick)
        while not self._stop.wait(max(0.0, next_tick - time.monotonic())):
            try:
                self.run_once()
            except Exception:  # publish bugs must not kill the loop either
                log.exception("publishing a snapshot failed")
            now = time.monotonic()
            next_tick += self._interval
            if next_tick < now:  # overran: skip to the next future tick on the grid
                missed = int((now - next_tick) // self._interval) + 1
                next_tick += missed * self._interval

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout)
