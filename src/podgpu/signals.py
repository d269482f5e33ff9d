"""The one module that installs signal handlers: every policy podgpu has is a function here, so
what a signal does at each stage of a process is read in one place.

The stages, in order:

- **Start-up** (`cli.main`'s first line, before any slow import): `ignore_sighup_at_start`
  (a reload signal sent while podgpu starts never kills it), `end_on_sigint_at_start` (SIGINT
  ends start-up as SIGTERM's default does, never a KeyboardInterrupt a start-up step could
  swallow), and for the one-shot commands `end_quietly_on_sigpipe` (`podgpu plan | head`). This
  module imports nothing slow at its top for that reason: asyncio and socket load only when a
  loop takes signals.
- **Serving on an event loop** (`http.server`, `http.sighup`): `on_signal` / `off_signal`.
- **The bridge without a listener** (a plain thread loop): `stop_on_termination`.

`loop.add_signal_handler` has the C-level handler write each signal's number to the loop's wakeup
socket with `warn_on_full_buffer` on, and dispatches by those bytes: a storm faster than the loop
drains them (a SIGHUP loop from a script, a supervisor re-sending SIGTERM) printed one "Exception
ignored when trying to write to the signal wakeup fd" traceback per signal, the number of a signal
that did not fit was lost, and `remove_signal_handler` puts the default action back, so a SIGTERM
arriving during the stop killed the process.

Here a Python-level handler (`signal.signal`: a per-signal flag in the interpreter, so never lost
and coalesced by nature) schedules the callback with `call_soon_threadsafe`, as the asyncio
documentation asks of signal handlers; the wakeup fd is a socket of our own, set without the
warning and drained by the loop, only so that a signal delivered to another thread still wakes
the loop. `off_signal` switches the signal to a Python-level no-op in one step: no window with
the default action, and (unlike SIG_IGN, which makes the interpreter report a signal still pending
as "ignored due to race condition" with a traceback) nothing printed. Callbacks must be
idempotent: a storm may run one several times (set an event, ask for a reload that joins a
pending one).
"""

from __future__ import annotations

import contextlib
import os
import signal
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import asyncio
    import socket
    from collections.abc import Callable
    from types import FrameType

_wakeups: dict[asyncio.AbstractEventLoop, tuple[socket.socket, socket.socket, set[int]]] = {}

TERMINATION = (signal.SIGTERM, signal.SIGINT)
"""The signals that stop a daemon gracefully once it serves."""


# --- start-up -------------------------------------------------------------------------------


def _sighup_at_start(_sig: int, _frame: FrameType | None) -> None:
    # No import and no logging here: the handler can run in the middle of an import (of logging
    # itself: a partially initialised module raised out of the import and killed serve). One
    # write(2) to stderr is safe at any point. docs/decisions/0020-sighup-from-the-first-line.md
    os.write(2, b"podgpu: SIGHUP during start-up: ignored (send it again once serving)\n")


def ignore_sighup_at_start() -> None:
    """SIGHUP writes one line and is otherwise ignored until a server takes it over."""
    signal.signal(signal.SIGHUP, _sighup_at_start)


def end_on_sigint_at_start() -> None:
    """SIGINT gets its default action (the process ends, killed by the signal) until a server's
    graceful handler takes over. Only for a real process: a test calling `main` keeps its own."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def end_quietly_on_sigpipe() -> None:
    """A closed stdout (`podgpu plan | head`) ends the process without a BrokenPipeError
    traceback. Only for a real process, and only where the platform has SIGPIPE."""
    if hasattr(signal, "SIGPIPE"):
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)


# --- a plain thread loop --------------------------------------------------------------------


def stop_on_termination(stop: Callable[[], object]) -> None:
    """SIGTERM and SIGINT call `stop` (from the main thread, between two bytecodes: it must only
    set a flag) for the rest of the process: a storm calls it again, never kills the stop."""

    def handler(_sig: int, _frame: FrameType | None) -> None:
        stop()

    for sig in TERMINATION:
        signal.signal(sig, handler)


# --- an event loop --------------------------------------------------------------------------


def _drain(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while sock.recv(4096):
            pass


def on_signal(loop: asyncio.AbstractEventLoop, sig: int, callback: Callable[[], object]) -> None:
    """Run `callback` on `loop` for `sig` (storms coalesce, never a traceback). Call from the
    main thread while `loop` runs; undo with `off_signal`."""
    if loop not in _wakeups:
        import socket

        r, w = socket.socketpair()
        r.setblocking(False)
        w.setblocking(False)
        loop.add_reader(r.fileno(), _drain, r)
        signal.set_wakeup_fd(w.fileno(), warn_on_full_buffer=False)
        _wakeups[loop] = (r, w, set())
    _wakeups[loop][2].add(sig)

    def handler(_sig: int, _frame: FrameType | None) -> None:
        if not loop.is_closed():  # a signal racing the loop's end has nothing left to do
            loop.call_soon_threadsafe(callback)

    signal.signal(sig, handler)


def _ignore(_sig: int, _frame: FrameType | None) -> None:
    """Signals after a stop began: nothing to do."""


def off_signal(loop: asyncio.AbstractEventLoop, sig: int) -> None:
    """Ignore `sig` from now on (a stop in progress is never killed by another one); the last
    signal off `loop` releases its wakeup socket."""
    signal.signal(sig, _ignore)
    found = _wakeups.get(loop)
    if found is None:
        return
    r, w, sigs = found
    sigs.discard(sig)
    if sigs:
        return
    del _wakeups[loop]
    with contextlib.suppress(ValueError, OSError):
        old = signal.set_wakeup_fd(-1)
        if old not in (-1, w.fileno()):  # someone else's since: put it back
            signal.set_wakeup_fd(old)
    with contextlib.suppress(Exception):
        loop.remove_reader(r.fileno())
    r.close()
    w.close()
