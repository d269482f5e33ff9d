"""Following the metric list file while running, as dcgm-exporter does.

dcgm-exporter watches its `-f` file and rebuilds its collectors when it changes. podgpu polls it
once a second through podgpu.follow (by content, so a ConfigMap volume's symlink swap and an
in-place rewrite are both seen, and a `touch` is not), with `settle`: a change is acted on once
the file has looked the same for one more poll (an editor writing in two steps is read once,
whole). What happens on a change is the caller's: podgpu loads and validates the new list, and a
bad edit is refused in one log line while the last good list stays in use
(`reload.MetricListSwitch`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from podgpu.fields.metriclist import MAX_LIST_BYTES
from podgpu.follow import DEFAULT_POLL_SECONDS, Follower, poll_every, read_version, unreadable

log = logging.getLogger(__name__)


class ListFollower:
    """Calls `on_change()` on its own thread when the file at `path` has changed and settled.

    `check()` is one poll step (tests drive it directly); `start()` runs it every
    `poll_seconds` on a daemon thread until `stop()`."""

    def __init__(self, path: str, on_change: Callable[[], object], *,
                 poll_seconds: float = DEFAULT_POLL_SECONDS) -> None:
        self.path = path
        self.poll_seconds = poll_seconds
        self._on_change = on_change
        self._follower = Follower([path], settle=True,
                                  look=lambda paths: read_version(paths, limit=MAX_LIST_BYTES))
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.changes = 0
        """How many times `on_change` was called (the unit tests count reloads with it)."""

    def check(self) -> bool:
        """Poll once; True when `on_change` was called."""
        now = self._follower.poll()
        if now is None:
            return False
        if unreadable(now):  # removed: keep the list in use, say so once per removal
            log.warning("metric list %s is gone (%s); still exporting the list loaded last",
                        self.path, now[0][1])
            return False
        self.changes += 1
        log.info("metric list %s changed; reloading", self.path)
        try:
            self._on_change()
        except Exception:  # a reload bug must not stop the following
            log.exception("reloading the metric list %s failed", self.path)
        return True

    def start(self) -> None:
        self._thread = threading.Thread(target=poll_every, name="podgpu-list-follow",
                                        args=(self.check, self.poll_seconds, self._stop.wait),
                                        daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.poll_seconds + 1)
