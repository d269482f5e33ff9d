"""Following the metric list file while running, as dcgm-exporter does.

dcgm-exporter watches its `-f` file and rebuilds its collectors when it changes. A ConfigMap
mounted as a volume changes by swapping a symlink (`..data`), so the file's own inode, size and
mtime change together and a plain `stat()` through the path sees it; no inotify is needed and a
poll every second costs one syscall. A change is acted on once the file has looked the same for
one more poll (an editor writing in two steps is read once, whole). What happens on a change is
the caller's: podgpu loads and validates the new list, and a bad edit is refused in one log line
while the last good list stays in use (`reload.MetricListSwitch`).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)

DEFAULT_POLL_SECONDS = 1.0

Signature = tuple[str, int, int, int, int] | None
"""(resolved path, device, inode, size, mtime ns), or None when the file cannot be stat'ed."""


def signature(path: str) -> Signature:
    """What identifies one version of the file at `path` (symlinks followed)."""
    try:
        st = os.stat(path)
        real = os.path.realpath(path)
    except OSError:
        return None
    return (real, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


class ListFollower:
    """Calls `on_change()` on its own thread when the file at `path` has changed and settled.

    `check()` is one poll step (tests drive it directly); `start()` runs it every
    `poll_seconds` on a daemon thread until `stop()`."""

    def __init__(self, path: str, on_change: Callable[[], object], *,
                 poll_seconds: float = DEFAULT_POLL_SECONDS) -> None:
        self.path = path
        self.poll_seconds = poll_seconds
        self._on_change = on_change
        self._applied = signature(path)
        self._seen = self._applied
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.changes = 0
        """How many times `on_change` was called (self-metric and tests)."""

    def check(self) -> bool:
        """Poll once; True when `on_change` was called."""
        now = signature(self.path)
        settled = now == self._seen
        self._seen = now
        if not settled or now == self._applied:
            return False
        self._applied = now
        if now is None:  # removed: keep the list in use, say so once per removal
            log.warning("metric list %s is gone; still exporting the list loaded last", self.path)
            return False
        self.changes += 1
        log.info("metric list %s changed; reloading", self.path)
        try:
            self._on_change()
        except Exception:  # a reload bug must not stop the following
            log.exception("reloading the metric list %s failed", self.path)
        return True

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="podgpu-list-follow", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.poll_seconds + 1)

    def _run(self) -> None:
        while not self._stop.wait(self.poll_seconds):
            self.check()
