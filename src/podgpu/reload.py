"""SIGHUP: reload the metric list and the web config instead of dying.

A process that gets SIGHUP and has no handler is killed silently; dcgm-exporter treats
signals as reload or shutdown. podgpu reloads: the web config (http.websecurity, which also follows
its files by itself) and the metric list given with `-f`, or re-read from the ConfigMap named by
`-m` (the embedded default has nothing to re-read); reading runs on a worker thread, off the
event loop (the signal handler is http.sighup's). A bad new list is refused with one log line and
the list in use stays. The new list takes
effect between two collection cycles, on the collect thread, so one cycle never reads with one list
and renders with another. The CloudWatch EMF sink keeps the list it started with (its
declarations select metrics by name; docs/cloudwatch.md).

Decision record: docs/decisions/0020-sighup-from-the-first-line.md.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Protocol

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
        self.refused: str | None = None
        """Why the last edit was refused, until a later one loads (shown by `/health`)."""

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
            self.refused = str(exc)
            return False
        with self._lock:
            self._pending = fresh
        self.refused = None
        log.info("metric list %s loaded (%d metrics); used from the next cycle",
                 fresh.path, len(fresh.metrics))
        return True

    def health(self) -> dict[str, object]:
        """`/health`'s `metric_list` entry: `ok`, `no metric rows`, or the refused edit."""
        now, refused = self.current, self.refused
        status = ("ok" if now.metrics else "no metric rows") if refused is None else (
            f"edit refused, still exporting the last good list: {refused}")
        return {"status": status, "path": now.path, "metrics": len(now.metrics),
                "labels": len(now.labels)}

    def apply(self, collector: UsesFields) -> None:
        """Switch to a pending list; call on the collect thread after a snapshot is published."""
        with self._lock:
            fresh, self._pending = self._pending, None
        if fresh is not None:
            collector.use_fields(fresh.fields)
            self.current = fresh
