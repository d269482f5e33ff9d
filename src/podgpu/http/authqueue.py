"""The order in which password checks get the one bcrypt worker, so that a flood of guesses from
many addresses cannot keep a legitimate scraper from being checked.

exporter-toolkit runs bcrypt under one mutex: every check waits, none is refused, and the
legitimate one waits behind the whole flood. A plain bounded queue is worse: 64 guessing threads
over 250 addresses kept 32 slots full and a scraper whose password was not cached yet got 429 on
every scrape (0 of 29, bench/RESULTS.md). Here a waiting check has a rank, given by http.authcheck:
-1 when its client address's last check succeeded, 0 for an address not seen, n after n failed
checks since the last success; plus the address's checks already waiting or running. The worker
always takes the lowest rank, the oldest among equals. So a scraper whose password was just
rotated goes first; a new scraper (a restart, a new replica) goes ahead of every address that
has failed, and no address gets a second check ahead of another address's first.

What no address-based order can do: a new scraper's first check ranks with the flood's own new
addresses (0), and waits behind those queued before it: with 64 guessing threads, up to 64
checks. An address ranks 0 once (until 4,096 newer addresses push it out of the record), so the
flood has that power only while it has unused addresses. A check is therefore never withdrawn
when its request goes away: it keeps its place, a retry of the same credentials shares it, and
once it has run the success cache answers the retry (a scraper that timed out waiting is
answered at once on its next scrape).

The line holds MAX_WAITING_CHECKS checks (with bcrypt at cost 10, ~60 ms, a full line is ~8 s of
work, less than Prometheus' default 10 s scrape timeout). A check that arrives at a full line
pushes out the check that would run last (the newest of the worst-ranked), or is refused itself
when it ranks no better; either answer is None (429).
"""

from __future__ import annotations

import asyncio
import functools
import heapq
import itertools
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass, field

MAX_WAITING_CHECKS = 128
"""Checks waiting for the worker, beside the one it runs."""


@dataclass(order=True, slots=True)
class _Entry:
    rank: int
    order: int
    job: Callable[[], bool] = field(compare=False)
    future: asyncio.Future[bool | None] = field(compare=False)


class CheckLine:
    """One worker (`pool`, a single thread) and the ranked line of checks waiting for it."""

    def __init__(self, pool: Executor, max_waiting: int = MAX_WAITING_CHECKS) -> None:
        self._pool = pool
        self._max = max_waiting
        self._waiting: list[_Entry] = []
        self._seq = itertools.count()
        self._running = False
        self._closed = False

    def submit(self, rank: int, job: Callable[[], bool]) -> asyncio.Future[bool | None]:
        """The future of `job()` run on the worker in rank order; its result is None when the
        check was refused or pushed out of a full line."""
        loop = asyncio.get_running_loop()
        entry = _Entry(rank, next(self._seq), job, loop.create_future())
        if self._closed:  # the listener is stopping: answer at once, never hang
            entry.future.set_result(None)
            return entry.future
        if len(self._waiting) >= self._max:
            worst = max(self._waiting)
            if worst < entry:
                entry.future.set_result(None)
                return entry.future
            self._waiting.remove(worst)
            heapq.heapify(self._waiting)
            worst.future.set_result(None)
        heapq.heappush(self._waiting, entry)
        self._next(loop)
        return entry.future

    def close(self) -> None:
        """Cancel every waiting check; nothing more is started."""
        self._closed = True
        for entry in self._waiting:
            entry.future.cancel()
        self._waiting.clear()

    def _next(self, loop: asyncio.AbstractEventLoop) -> None:
        while not self._running and self._waiting and not self._closed:
            entry = heapq.heappop(self._waiting)
            self._running = True
            done = loop.run_in_executor(self._pool, entry.job)
            done.add_done_callback(functools.partial(self._finished, loop, entry))

    def _finished(self, loop: asyncio.AbstractEventLoop, entry: _Entry,
                  done: asyncio.Future[bool]) -> None:
        self._running = False
        if not entry.future.done():
            if done.cancelled():
                entry.future.cancel()
            elif (exc := done.exception()) is not None:
                entry.future.set_exception(exc)
            else:
                entry.future.set_result(done.result())
        self._next(loop)
