"""One deadline for a whole outbound call: connect, request and every read of the answer.

A socket timeout bounds each read only, so a peer trickling one byte a second holds a reader
forever. Here a timer shuts the call's socket down when the deadline passes, which wakes a read
blocked on it (under TLS too: OpenSSL then reads EOF); the caller then asks `expired`, because
the shutdown can look like the clean end of a short answer. Name resolution is not covered: the
peers are addresses on the node or names the user typed.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable

StartTimer = Callable[[float, Callable[[], None]], Callable[[], None]]
"""Calls the function after that many seconds; returns what cancels the call."""


def thread_timer(seconds: float, fire: Callable[[], None]) -> Callable[[], None]:
    """The deadline's timer: a daemon `threading.Timer`."""
    timer = threading.Timer(seconds, fire)
    timer.daemon = True
    timer.start()
    return timer.cancel


def shut_down(sock: socket.socket) -> None:
    """Shut both directions of `sock` down, which wakes a thread blocked reading it; an error
    (the socket already closed) is ignored. The plain socket's shutdown, also for an SSLSocket,
    whose own would first try to send a TLS close."""
    with contextlib.suppress(OSError):
        socket.socket.shutdown(sock, socket.SHUT_RDWR)


class Deadline:
    """`seconds` from now, for one call. `watch` names what to stop when it passes: a socket
    (shut down) or a function (such as urllib3's `shutdown`); once it has passed, what is
    watched next is stopped at once. Use it as a context manager, or `cancel()` it: the timer
    goes when the call ends. `start_timer` runs the deadline (tests pass one they fire by hand);
    `clock` (monotonic seconds) only answers `left()`."""

    def __init__(self, seconds: float, *, start_timer: StartTimer = thread_timer,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.seconds = seconds
        self._clock = clock
        self._end = clock() + seconds
        self._fired = False
        self._stop: Callable[[], None] | None = None
        self._lock = threading.Lock()
        self._cancel = start_timer(seconds, self._fire)

    @property
    def expired(self) -> bool:
        """Whether the deadline has passed (its timer fired)."""
        return self._fired

    @property
    def message(self) -> str:
        """What a call that ran past it says: `no complete answer within 1.5 s`."""
        return f"no complete answer within {self.seconds:g} s"

    def left(self) -> float:
        """Seconds until the deadline, 0 once past: a bound for one blocking step."""
        return 0.0 if self._fired else max(0.0, self._end - self._clock())

    def watch(self, what: socket.socket | Callable[[], None] | None) -> None:
        """What the deadline stops from now on (None: nothing)."""
        stop = (lambda: shut_down(what)) if isinstance(what, socket.socket) else what
        with self._lock:
            self._stop = stop
            if self._fired and stop is not None:
                stop()

    def _fire(self) -> None:
        with self._lock:
            self._fired = True
            if self._stop is not None:
                self._stop()

    def cancel(self) -> None:
        """The call is over: the timer goes (nothing is stopped after this)."""
        self._cancel()
        with self._lock:
            self._stop = None

    def __enter__(self) -> Deadline:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.cancel()
