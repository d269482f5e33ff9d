"""Log lines a peer can trigger, bounded: a recurring condition at most once a minute per key
with the count held back, peer strings escaped and cut, and the event loop's own error reports
routed the same way."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

LOG_EVERY_SECONDS = 60.0


class RateLimitedLog:
    """Logs a recurring condition at most once per `every` seconds per key, with the count of the
    occurrences it held back, so an attack cannot fill a disk with log lines."""

    def __init__(self, logger: logging.Logger, every: float = LOG_EVERY_SECONDS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._log = logger
        self._every = every
        self._clock = clock
        self._last: dict[str, float] = {}
        self._held: dict[str, int] = {}

    def __call__(self, key: str, level: int, msg: str, *args: object,
                 exc_info: BaseException | None = None) -> bool:
        """Log unless `key` was logged less than `every` seconds ago; True when it logged.
        `exc_info` adds that exception's traceback to the line."""
        now = self._clock()
        last = self._last.get(key)
        if last is not None and now - last < self._every:
            self._held[key] = self._held.get(key, 0) + 1
            return False
        held = self._held.pop(key, 0)
        if len(self._last) > 256:  # bounded key set
            self._last.clear()
        self._last[key] = now
        suffix = f" ({held} more like this in the last {now - last:.0f} s)" if held and last else ""
        self._log.log(level, msg + suffix, *args, exc_info=exc_info)
        return True


def short(text: object, limit: int = 120) -> str:
    """A peer-supplied string made safe for one log line: escaped and truncated."""
    s = ascii(str(text))[1:-1]
    return s if len(s) <= limit else s[:limit] + "..."


def quiet_accept_errors(loop: asyncio.AbstractEventLoop, rate_log: RateLimitedLog) -> None:
    """Route the event loop's error reports (accept() out of descriptors, above all) through a
    rate-limited log, with the exception's traceback (a bug of ours shows where it is). asyncio
    itself pauses accepting for a second after such an error."""

    def handler(_loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        msg = str(context.get("message", "event loop error"))
        exc = context.get("exception")
        detail = f": {type(exc).__name__}: {short(exc)}" if exc is not None else ""
        rate_log(f"loop:{msg[:80]}", logging.ERROR, "%s%s", short(msg), detail,
                 exc_info=exc if isinstance(exc, BaseException) else None)

    loop.set_exception_handler(handler)
