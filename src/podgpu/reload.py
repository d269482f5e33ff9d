"""SIGHUP: reload the metric list and the web config instead of dying.

A process that gets SIGHUP and has no handler is killed silently (issue 13); dcgm-exporter treats
signals as reload or shutdown. podgpu reloads: the web config (http.websecurity, which also follows
its files by itself) and the metric list given with `-f`, or re-read from the ConfigMap named by
`-m` (the embedded default has nothing to re-read); reading runs on a worker thread, off the
event loop. A bad new list is refused with one log line and the list in use stays. The new list takes
effect between two collection cycles, on the collect thread, so one cycle never reads with one list
and renders with another. The CloudWatch EMF sink keeps the list it started with (its
declarations select metrics by name; docs/cloudwatch.md).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import signal
import threading
from collections.abc import Callable, Sequence
from typing import Protocol

from aiohttp import web

from podgpu.errors import ConfigError, PodgpuError
from podgpu.fields.catalog import Field
from podgpu.fields.metriclist import MetricList

log = logging.getLogger(__name__)


class UsesFields(Protocol):
    def use_fields(self, fields: tuple[Field, ...]) -> None: ...


class MetricListSwitch:
    """The metric list in use; `request()` loads a new one, `apply()` switches to it."""

    def __init__(self, current: MetricList, load: Callable[[], MetricList] | None) -> None:
        """`load` re-reads and validates the list (raising ConfigError), or None when the list
        is the embedded default."""
        self.current = current
        self._load = load
        self._pending: MetricList | None = None
        self._lock = threading.Lock()

    def request(self) -> bool:
        """Load the list now (on the caller's thread); True when a new list is pending."""
        if self._load is None:
            log.info("the metric list is the embedded default; nothing to reload")
            return False
        try:
            fresh = self._load()
            if not fresh.metrics:
                raise ConfigError(f"{fresh.path}: the metric list has no metric rows")
        except PodgpuError as exc:  # a bad list, or the API unreachable (-m)
            log.error("metric list not reloaded, still exporting the %d metrics of %s: %s",
                      len(self.current.metrics), self.current.path, exc)
            return False
        with self._lock:
            self._pending = fresh
        log.info("metric list %s loaded (%d metrics); used from the next cycle",
                 fresh.path, len(fresh.metrics))
        return True

    def apply(self, collector: UsesFields) -> None:
        """Switch to a pending list; call on the collect thread after a snapshot is published."""
        with self._lock:
            fresh, self._pending = self._pending, None
        if fresh is not None:
            collector.use_fields(fresh.fields)
            self.current = fresh


def install_sighup(app: web.Application, *, blocking: Sequence[Callable[[], object]] = (),
                   on_loop: Sequence[Callable[[], object]] = ()) -> None:
    """On every SIGHUP once `app` serves: `on_loop` callables run on the event loop (they only
    set flags, e.g. the web config's reload request), `blocking` ones (a list file, the
    ConfigMap through the API) on one worker thread, in order, so a slow read never stalls a
    scrape (issue 16 item 5). Only a process's main thread can own signals; elsewhere (an agent
    started by a test) nothing is installed."""
    worker = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="podgpu-hup")

    def guarded(reload: Callable[[], object]) -> None:
        try:
            reload()
        except Exception:  # a reload bug must not take the server down
            log.exception("SIGHUP reload failed")

    def on_hup() -> None:
        log.info("SIGHUP received: reloading")
        for reload in on_loop:
            guarded(reload)
        for reload in blocking:
            worker.submit(guarded, reload)

    async def register(_app: web.Application) -> None:
        if threading.current_thread() is threading.main_thread():
            asyncio.get_running_loop().add_signal_handler(signal.SIGHUP, on_hup)

    async def unregister(_app: web.Application) -> None:
        if threading.current_thread() is threading.main_thread():
            asyncio.get_running_loop().remove_signal_handler(signal.SIGHUP)
            signal.signal(signal.SIGHUP, signal.SIG_IGN)  # shutting down: never killed by it
        worker.shutdown(wait=False, cancel_futures=True)

    app.on_startup.append(register)
    app.on_cleanup.append(unregister)
