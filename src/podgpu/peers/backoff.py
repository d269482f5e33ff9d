"""One background loop that retries a peer with exponential backoff.

The kubelet poll, the wait for the NVIDIA driver and the Kubernetes watches all run the same
loop: try, and after a failure wait `first` seconds, doubling up to `cap`; after a success wait
`every` seconds (or end, when `every` is None) with the backoff reset. Stopping wakes any wait at
once. An attempt that raises counts as a failure and is logged as one line, so the thread never
ends with a traceback.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)


class BackoffLoop:
    """Runs `attempt` (True: it succeeded) on a daemon thread named `name` until `stop()`.

    `after_failure` starts as though an attempt had just failed (the first one waits `first`).
    `wait(seconds)` waits and says whether the loop was stopped meanwhile; by default the stop
    event's wait (tests pass one that records the waits)."""

    def __init__(self, attempt: Callable[[], bool], *, name: str, first: float, cap: float,
                 every: float | None, after_failure: bool = False,
                 wait: Callable[[float], bool] | None = None) -> None:
        self._attempt = attempt
        self.name = name
        self._first = first
        self._cap = max(first, cap)
        self._every = every
        self._after_failure = after_failure
        self._stopped = threading.Event()
        self._wait = wait or self._stopped.wait
        self._thread: threading.Thread | None = None

    @property
    def stopped(self) -> bool:
        return self._stopped.is_set()

    def wait(self, seconds: float) -> bool:
        """Wait `seconds` (an attempt may pause too); whether the loop was stopped meanwhile."""
        return self._wait(seconds)

    def start(self) -> None:
        """Run the loop on its thread (once; later calls do nothing)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self.run, name=self.name, daemon=True)
            self._thread.start()

    def stop(self) -> None:
        """End the loop after the attempt in flight, from any thread (an attempt too)."""
        self._stopped.set()

    def join(self, timeout: float) -> None:
        """Wait up to `timeout` seconds for the thread to end (an attempt in flight ends by its
        own deadline)."""
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    def run(self) -> None:
        """The loop, on the calling thread."""
        backoff = self._first
        wait = 0.0
        if self._after_failure:
            wait, backoff = backoff, min(self._cap, backoff * 2)
        while not self._stopped.is_set() and not self.wait(wait):
            if self._stopped.is_set():
                return
            if self._try():
                if self._every is None:
                    return
                wait, backoff = self._every, self._first
            else:  # first, 2x, 4x ... up to cap
                wait, backoff = backoff, min(self._cap, backoff * 2)

    def _try(self) -> bool:
        try:
            return self._attempt()
        except Exception as exc:  # a bug or an error nobody translated: a failure, not an end
            log.error("%s: unexpected %s: %s; retrying", self.name, type(exc).__name__, exc)
            return False
