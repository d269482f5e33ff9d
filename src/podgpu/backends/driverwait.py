"""Waiting for the NVIDIA driver: a backend wrapper that keeps podgpu up until NVML answers.

Why: a new GPU node is labelled (and podgpu scheduled) before the GPU Operator's driver and
container toolkit are ready, and on EKS before the driver's user-space library is mounted. A
process that exits 1 there crash-loops for minutes (KubePodCrashLooping alerts) and backs off, so
it starts late once the driver is there. Instead, in Kubernetes, the first failed `open()` starts
a background thread that retries with backoff (1 s doubling to `max_delay`), while the collect
loop and the HTTP server run: readiness (`/health/ready`) answers 503 with the reason, while
`/health` (the liveness and start-up probes' path) stays 200 (`degraded`, no GPU series) so the
kubelet does not restart the pod; the log says why once a minute, not once a cycle.

What counts as "not there yet": any BackendError from opening NVML (library not found, driver not
loaded, version mismatch while the driver is being replaced, no GPU visible yet) except a missing
Python binding (nvidia-ml-py), which no wait can fix. Outside Kubernetes the CLI keeps exit 1 (a
person at a terminal wants the error now); `--wait-for-driver` chooses (docs/deploy.md).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from podgpu.backends.base import Backend, Reading
from podgpu.errors import BackendError
from podgpu.model import Device
from podgpu.peers.backoff import BackoffLoop

if TYPE_CHECKING:
    from podgpu.fields.catalog import Field

log = logging.getLogger("podgpu.backends.driverwait")

DEFAULT_FIRST_DELAY = 1.0
"""Seconds before the first retry; doubled after each failure up to DEFAULT_MAX_DELAY."""
DEFAULT_MAX_DELAY = 10.0
"""Seconds between retries at most: a driver that arrives is in use within this long."""
DEFAULT_LOG_EVERY = 60.0
"""Seconds between two 'still waiting' log lines."""


def waitable(exc: BaseException) -> bool:
    """Whether waiting can fix this `open()` failure: an NVML error, not a missing binding."""
    return isinstance(exc, BackendError) and not isinstance(exc.__cause__, ImportError)


class DriverWait:
    """Wraps a backend whose `open()` may fail until the driver is installed.

    `open()` tries once; if that fails with a waitable error it returns anyway and retries on a
    daemon thread. Until a retry succeeds, `devices()` is empty, `read()` returns no samples
    (the snapshot then has no devices) and `waiting()` gives the reason for /health. A failure
    that waiting cannot fix, in the background, goes to `on_fatal` (the CLI stops serving)."""

    def __init__(self, inner: Backend, *, first_delay: float = DEFAULT_FIRST_DELAY,
                 max_delay: float = DEFAULT_MAX_DELAY, log_every: float = DEFAULT_LOG_EVERY,
                 on_fatal: Callable[[BaseException], None] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._inner = inner
        self.name = inner.name
        self._log_every = log_every
        self._on_fatal = on_fatal
        self._clock = clock
        self._ready = threading.Event()
        self._lock = threading.Lock()
        self._reason: str | None = None
        self._since = 0.0
        self._attempts = 0
        self._last_log = 0.0
        # the first retry `first_delay` after the failed open, doubling up to `max_delay`; ends
        # once NVML opens
        self._loop = BackoffLoop(self._retry, name="podgpu-driver-wait", first=first_delay,
                                 cap=max_delay, every=None, after_failure=True)
        self._when_ready: list[Callable[[], None]] = []

    # --- lifecycle
    def open(self) -> None:
        """Open now, or start waiting: raises only what waiting cannot fix."""
        try:
            self._inner.open()
        except Exception as exc:
            if not waitable(exc):
                raise
            with self._lock:
                self._reason, self._since, self._attempts = str(exc), self._clock(), 1
            self._last_log = self._since
            log.warning("waiting for the NVIDIA driver: %s. Retrying in the background; "
                        "/health/ready is 503 (not ready) and /health 200 (alive) until NVML "
                        "answers", exc)
            self._loop.start()
            return
        self._ready.set()

    def _retry(self) -> bool:
        """One retry on the loop's thread: True once NVML is open (or the wait is over)."""
        try:
            self._inner.open()
        except Exception as exc:
            if not waitable(exc):
                log.error("NVML cannot start: %s", exc)
                with self._lock:
                    self._reason = f"NVML cannot start: {exc}"
                if self._on_fatal is not None:
                    self._on_fatal(exc)
                return True
            now = self._clock()
            with self._lock:
                self._reason, self._attempts = str(exc), self._attempts + 1
                waited, attempts = now - self._since, self._attempts
            if now - self._last_log >= self._log_every:
                self._last_log = now
                log.warning("still waiting for the NVIDIA driver after %.0f s (%d attempts): "
                            "%s", waited, attempts, exc)
            return False
        if self._loop.stopped:  # closed while this attempt was opening
            self._inner.close()
            return True
        with self._lock:
            waited = self._clock() - self._since
            self._reason = None
            self._ready.set()
            then, self._when_ready = self._when_ready, []
        devices = self._inner.devices()
        log.warning("the NVIDIA driver is ready after %.0f s: NVML %d device(s), driver %s",
                    waited, len(devices), self._inner.info().get("driver_version", "?"))
        for fn in then:
            try:
                fn()
            except Exception:  # a report that failed must not end the wait's thread badly
                log.exception("after the NVIDIA driver became ready")
        return True

    def when_ready(self, fn: Callable[[], None]) -> None:
        """Run `fn` once NVML is open: now (on this thread) if it is, else on the waiting
        thread when it opens."""
        with self._lock:
            if not self._ready.is_set():
                self._when_ready.append(fn)
                return
        fn()

    def waiting(self) -> str | None:
        """Why there are no GPUs yet (for /health), or None once NVML is open."""
        if self._ready.is_set():
            return None
        with self._lock:
            if self._reason is None:
                return None
            return (f"waiting for the NVIDIA driver for {self._clock() - self._since:.0f} s "
                    f"({self._attempts} attempts): {self._reason}")

    def close(self) -> None:
        self._loop.stop()
        self._loop.join(5.0)  # an open() in flight finishes and closes itself
        if self._ready.is_set():
            self._inner.close()

    # --- Backend
    def devices(self) -> tuple[Device, ...]:
        return self._inner.devices() if self._ready.is_set() else ()

    def info(self) -> dict[str, str]:
        return self._inner.info() if self._ready.is_set() else {}

    def read(self, fields: Sequence[Field], *, processes: bool = False) -> Reading:
        if not self._ready.is_set():
            return Reading(samples=())
        return self._inner.read(fields, processes=processes)

    def unavailable_fields(self) -> dict[str, str]:
        return self._inner.unavailable_fields() if self._ready.is_set() else {}
