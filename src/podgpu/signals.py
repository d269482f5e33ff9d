"""Signals on an asyncio loop that a storm of them cannot turn into tracebacks or lose.

`loop.add_signal_handler` has the C-level handler write each signal's number to the loop's wakeup
socket with `warn_on_full_buffer` on: a storm faster than the loop drains it (a SIGHUP loop from a
script, a supervisor re-sending SIGTERM) printed one "Exception ignored when trying to write to the
signal wakeup fd" traceback per signal, and the number of a signal that did not fit was lost.
`on_signal` keeps asyncio's handler, sets the same wakeup socket without the warning, and adds a
Python-level handler (a per-signal flag in the interpreter, so never lost and coalesced by
nature) that schedules the callback with `call_soon_threadsafe`, as the asyncio documentation
asks of signal handlers. A callback may so run twice for one signal: callbacks are idempotent
(set an event, ask for a reload that coalesces with a pending one).
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable
from types import FrameType


def quiet_wakeup_fd() -> None:
    """Keep the current wakeup fd, without a warning when its buffer is full (main thread)."""
    fd = signal.set_wakeup_fd(-1)
    if fd != -1:
        signal.set_wakeup_fd(fd, warn_on_full_buffer=False)


def on_signal(loop: asyncio.AbstractEventLoop, sig: int, callback: Callable[[], object]) -> None:
    """Run `callback` on `loop` for every `sig` (storms coalesce, never a traceback). Call from
    the main thread while `loop` runs; undo with `loop.remove_signal_handler(sig)`."""
    loop.add_signal_handler(sig, callback)
    quiet_wakeup_fd()

    def handler(_sig: int, _frame: FrameType | None) -> None:
        if not loop.is_closed():  # a signal racing the loop's end has nothing left to do
            loop.call_soon_threadsafe(callback)

    signal.signal(sig, handler)
