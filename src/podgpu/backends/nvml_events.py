"""XID errors from NVML events, and the sliding windows behind DCGM_EXP_*_COUNT.

One daemon thread owns one NVML event set (nvml.h: "Operations on set are not thread safe"):
it registers every GPU for XID critical errors (and MIG configuration changes), then waits in
`nvmlEventSetWait_v2` with a finite timeout so it notices shutdown (NVML's API reference).
ctypes releases the GIL while it waits, so the collector is not slowed by it.

`DCGM_FI_DEV_XID_ERRORS` is the last XID seen on a GPU (0 before any); `DCGM_EXP_XID_ERRORS_COUNT`
counts XIDs per code over a window, like dcgm-exporter (dcgm-exporter's source).
"""

from __future__ import annotations

import collections
import contextlib
import logging
import threading
import time
from collections.abc import Callable, Hashable, Sequence
from typing import Any

from podgpu.backends.nvml_lib import LOGGER, Lib

log = logging.getLogger(LOGGER)

WAIT_MS = 1000
"""Longest one wait blocks; bounds how long close() waits for the thread."""
MAX_CONSECUTIVE_ERRORS = 1000  # as DCGM's event thread: give up rather than spin


class WindowCounter:
    """Occurrences of keys over the last `window` seconds. Thread-safe; memory bounded by the
    number of events inside one window."""

    def __init__(self, window: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.window = window
        self._clock = clock
        self._events: collections.deque[tuple[float, Hashable]] = collections.deque()
        self._lock = threading.Lock()

    def add(self, key: Hashable, at: float | None = None) -> None:
        with self._lock:
            self._events.append((self._clock() if at is None else at, key))

    def counts(self) -> dict[Hashable, int]:
        """key -> occurrences inside the window ending now (older ones are dropped)."""
        horizon = self._clock() - self.window
        with self._lock:
            while self._events and self._events[0][0] < horizon:
                self._events.popleft()
            return dict(collections.Counter(k for _, k in self._events))


class EventWatcher:
    """The NVML event thread. `gpus` are (uuid, handle) pairs of whole GPUs."""

    def __init__(
        self,
        lib: Lib,
        gpus: Sequence[tuple[str, Any]],
        *,
        xid_window: float,
        on_mig_change: Callable[[], None] = lambda: None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._lib = lib
        self._gpus = list(gpus)
        self._on_mig_change = on_mig_change
        self._clock = clock
        self._xid_window = xid_window
        self._last_xid: dict[str, int] = {}
        self._xids: dict[str, WindowCounter] = {
            uuid: WindowCounter(xid_window, clock) for uuid, _ in gpus
        }
        self._unsupported: dict[str, str] = {}
        self._known: set[str] = {uuid for uuid, _ in gpus}
        self._pending: collections.deque[tuple[str, Any]] = collections.deque()
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="podgpu-nvml-events", daemon=True)

    # --- read side (collector thread)
    @property
    def xid_window(self) -> float:
        return self._xid_window

    def start(self, ready_timeout: float = 5.0) -> None:
        """Start the thread and wait until every GPU is registered (or failed to be)."""
        self._thread.start()
        self._ready.wait(ready_timeout)

    def unsupported(self, uuid: str) -> str | None:
        """Why XIDs cannot be watched on this GPU, or None when they are."""
        with self._lock:
            return self._unsupported.get(uuid)

    def last_xid(self, uuid: str) -> int:
        with self._lock:
            return self._last_xid.get(uuid, 0)

    def xid_counts(self, uuid: str) -> dict[int, int]:
        with self._lock:
            counter = self._xids.get(uuid)
        if counter is None:
            return {}
        return {int(k): n for k, n in counter.counts().items() if isinstance(k, int)}

    def reregister(self, uuid: str, handle: Any) -> None:
        """A GPU came back with a new handle: register it again, from the event thread."""
        with self._lock:
            self._known.add(uuid)
        self._pending.append((uuid, handle))

    def ensure(self, uuid: str, handle: Any) -> None:
        """Register a GPU not registered yet (one whose discovery finished after open())."""
        with self._lock:
            if uuid in self._known:
                return
        self.reregister(uuid, handle)

    def record(self, uuid: str, xid: int) -> None:
        """Record one XID for a GPU (the event thread calls this; tests may too)."""
        with self._lock:
            self._last_xid[uuid] = xid
            counter = self._xids.setdefault(uuid, WindowCounter(self._xid_window, self._clock))
        counter.add(xid)

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(WAIT_MS / 1000.0 + 2.0)

    # --- the event thread
    def _register(self, event_set: Any, uuid: str, handle: Any) -> None:
        m = self._lib.m
        wanted = int(getattr(m, "nvmlEventTypeXidCriticalError", 0x8))
        mig_change = int(getattr(m, "nvmlEventMigConfigChange", 0x100))
        try:
            supported = int(m.nvmlDeviceGetSupportedEventTypes(handle))
        except self._lib.error as exc:
            why = f"event types unavailable: {self._lib.reason(self._lib.code(exc))}"
            with self._lock:
                self._unsupported[uuid] = why
            return
        if not supported & wanted:
            with self._lock:
                self._unsupported[uuid] = "XID events not supported on this GPU"
            return
        try:
            m.nvmlDeviceRegisterEvents(handle, (wanted | mig_change) & supported, event_set)
        except self._lib.error as exc:
            with self._lock:
                self._unsupported[uuid] = (
                    f"registering XID events failed: {self._lib.reason(self._lib.code(exc))}"
                )
            return
        with self._lock:
            self._unsupported.pop(uuid, None)

    def _run(self) -> None:
        m = self._lib.m
        try:
            event_set = m.nvmlEventSetCreate()
        except self._lib.error as exc:
            why = f"nvmlEventSetCreate failed: {self._lib.reason(self._lib.code(exc))}"
            with self._lock:
                for uuid, _ in self._gpus:
                    self._unsupported[uuid] = why
            self._ready.set()
            return
        try:
            for uuid, handle in self._gpus:
                self._register(event_set, uuid, handle)
            self._ready.set()
            self._loop(event_set)
        finally:
            self._ready.set()
            with contextlib.suppress(Exception):
                m.nvmlEventSetFree(event_set)

    def _loop(self, event_set: Any) -> None:
        m = self._lib.m
        wait = getattr(m, "nvmlEventSetWait_v2", None) or m.nvmlEventSetWait
        xid_type = int(getattr(m, "nvmlEventTypeXidCriticalError", 0x8))
        mig_change = int(getattr(m, "nvmlEventMigConfigChange", 0x100))
        errors = 0
        while not self._stop.is_set():
            while self._pending:
                uuid, handle = self._pending.popleft()
                self._register(event_set, uuid, handle)
            try:
                data = wait(event_set, WAIT_MS)
            except self._lib.error as exc:
                code = self._lib.code(exc)
                if code == 10:  # NVML_ERROR_TIMEOUT: no event, or an interrupt
                    errors = 0
                    continue
                errors += 1
                if errors >= MAX_CONSECUTIVE_ERRORS:
                    log.error("NVML event thread: %d consecutive errors, stopping", errors)
                    return
                self._stop.wait(0.1)  # e.g. a GPU lost: don't spin
                continue
            errors = 0
            self._handle_event(data, xid_type, mig_change)

    def _handle_event(self, data: Any, xid_type: int, mig_change: int) -> None:
        event_type = int(getattr(data, "eventType", 0))
        if event_type & mig_change:
            self._on_mig_change()
        if not event_type & xid_type:
            return
        try:
            uuid = self._lib.m.nvmlDeviceGetUUID(data.device)
        except self._lib.error:
            return
        uuid = uuid.decode() if isinstance(uuid, bytes) else str(uuid)
        xid = int(getattr(data, "eventData", 999))
        log.warning("XID %d on GPU %s", xid, uuid)
        self.record(uuid, xid)
