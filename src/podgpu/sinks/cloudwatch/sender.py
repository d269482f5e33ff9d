"""Sends queued EMF events in batches within PutLogEvents' limits, retrying until they land.

Limits (the CloudWatch documentation): at most 1,048,576 bytes counting 26 bytes per event, at
most 10,000 events, chronological, at most 24 h between the first and last event; events older
than 14 days are refused by CloudWatch, so they are counted as rejected instead of sent. Failed
sends are retried with capped exponential backoff and jitter (throttling, 5xx, timeouts, broken
connections, and credential errors, which an IRSA token or a fixed policy can cure); the queue
keeps everything meanwhile. Only a request CloudWatch calls invalid is given up, and counted.

Every send has one **deadline** here, whatever the destination: the send runs
on a helper thread and the sender stops waiting when the deadline passes, counts a retryable
failure and backs off. A destination may offer `abort()`: called from the sender's thread when a
send passed its deadline, it promises that `send()` may be called again at once (on a fresh
connection) while the abandoned call finishes or fails on its own, its result ignored; at most
MAX_ABANDONED such calls may be alive. Without `abort()` (or past that number) no send starts
until the stuck one returns, so a destination is never used by two threads at once. The
sink's thread is therefore never held longer than the deadline, and `pump` returns at least every
PUMP_BUDGET seconds so closed windows keep being encoded and queued.

`health()` is the `emf` entry of /health: `stalled` when the oldest unsent event is older than
four intervals plus the deadline (sends stopped succeeding, or succeed too slowly to keep up),
back to `ok` once the backlog is sent. `finish()` accounts for every event at shutdown.

At shutdown `retry_now()` ends a running backoff and `pump(deadline=...)` bounds each send by
what is left of the grace period, so SIGTERM always makes one final attempt, even when the last
failure's backoff (up to 60 s) is longer than the grace (5 s).
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from podgpu.sinks.cloudwatch.destinations import Destination, SendError
from podgpu.sinks.cloudwatch.queue import EventQueue

log = logging.getLogger(__name__)

MAX_SPAN_MS = 24 * 3600 * 1000
MAX_AGE_MS = 14 * 24 * 3600 * 1000 - 3600 * 1000  # an hour inside CloudWatch's 14 days
DEFAULT_BACKOFF_BASE = 0.5
DEFAULT_BACKOFF_CAP = 60.0
DEFAULT_SEND_TIMEOUT = 30.0
"""Seconds one send may take in all (PutLogEvents answers in well under a second)."""
PUMP_BUDGET = 5.0
"""Seconds `pump` sends before it returns to let the sink's thread encode closed windows."""
STALL_INTERVALS = 4
MAX_ABANDONED = 2
"""Sends past their deadline, abandoned after `abort()`, that may still be running."""


@dataclass(frozen=True, slots=True)
class EmfStats:
    """A consistent copy of the sender's counters, for /metrics and /health."""

    destination: str
    sent: int = 0
    retried: int = 0
    rejected: int = 0
    dropped: int = 0
    queue_bytes: int = 0
    queue_events: int = 0
    send_seconds_sum: float = 0.0
    send_count: int = 0
    last_success: float | None = None
    failing: str = ""
    """Why the last attempt failed ('' while it works)."""
    accepted: int = 0
    """Events put in the queue or loaded from the spool (= sent + rejected + dropped + queued)."""
    oldest_unsent_ms: int | None = None


class Sender:
    """Pumps the queue into the destination; owned by the sink's worker thread."""

    def __init__(
        self,
        destination: Destination,
        queue: EventQueue,
        *,
        clock: Callable[[], float] = time.time,
        backoff_base: float = DEFAULT_BACKOFF_BASE,
        backoff_cap: float = DEFAULT_BACKOFF_CAP,
        rng: random.Random | None = None,
        send_timeout: float = DEFAULT_SEND_TIMEOUT,
        interval: float = 60.0,
        wait: Callable[[threading.Event, float], bool] = threading.Event.wait,
    ) -> None:
        self._dest = destination
        self._timeout = send_timeout
        self._wait = wait
        """How a send's deadline is waited for: True when `done` was set within the seconds (tests
        pass one that decides by hand)."""
        self._stall_after = STALL_INTERVALS * interval + send_timeout
        self._stuck: threading.Thread | None = None
        self._finished = False
        """Set by `finish`: nothing is sent after the shutdown line added everything up."""
        self._abandoned: list[threading.Thread] = []
        self._queue = queue
        self._clock = clock
        self._base = backoff_base
        self._cap = backoff_cap
        self._rng = rng or random.Random()
        self._failures = 0
        self._next_attempt = 0.0
        self._lock = threading.Lock()
        self._sent = self._retried = self._rejected = 0
        self._send_sum = 0.0
        self._send_count = 0
        self._last_success: float | None = None
        self._failing = ""

    def stats(self) -> EmfStats:
        with self._lock:
            return EmfStats(
                destination=self._dest.name, sent=self._sent, retried=self._retried,
                rejected=self._rejected, dropped=self._queue.dropped,
                queue_bytes=self._queue.bytes, queue_events=len(self._queue),
                send_seconds_sum=self._send_sum, send_count=self._send_count,
                last_success=self._last_success, failing=self._failing,
                accepted=self._queue.accepted, oldest_unsent_ms=self._queue.oldest_ms())

    def health(self) -> dict[str, Any]:
        """The `emf` entry of /health: status `ok`, `failing: <why>` (the last attempt failed)
        or `stalled: <how old> (<why>)`; it never makes /health fail (GPU metrics are fine)."""
        s = self.stats()
        now = self._clock()
        status = f"failing: {s.failing}" if s.failing else "ok"
        body: dict[str, Any] = {"destination": s.destination, "status": status,
                                "queued_events": s.queue_events}
        if s.oldest_unsent_ms is not None:
            age = max(0.0, now - s.oldest_unsent_ms / 1000)
            body["oldest_unsent_age_seconds"] = round(age, 1)
            if age > self._stall_after:
                why = s.failing or "sends too slow to keep up"
                body["status"] = (f"stalled: the oldest unsent event is {age:.0f} s old, more "
                                  f"than {self._stall_after:g} s ({why})")
        if s.last_success is not None:
            body["last_success_age_seconds"] = round(max(0.0, now - s.last_success), 1)
        return body

    def finish(self, *, spooled: bool) -> int:
        """At shutdown, after the last sends: what is still queued stays in the spool (when its
        file was written), or is counted as dropped; one log line adds everything up. Returns
        the events left unsent. (`spooled` is the caller's view; the queue knows per segment
        whether its file was written.)"""
        del spooled
        self._finished = True
        left = len(self._queue)
        lost = self._queue.drop_unspooled() if left else 0
        kept = left - lost
        s = self.stats()
        parts = [f"{kept} kept in the spool"] if kept else []
        parts += [f"{lost} dropped at shutdown"] if lost else []
        log.log(logging.WARNING if left else logging.INFO,
                "EMF at shutdown: %d event(s) queued in all = %d sent + %d rejected + %d dropped"
                "%s; %d unsent", s.accepted, s.sent, s.rejected, s.dropped - lost,
                "".join(f" + {p}" for p in parts), left)
        return left

    def retry_now(self) -> None:
        """End the backoff: the next `pump` attempts at once (the final attempt at shutdown)."""
        self._next_attempt = 0.0

    def pump(self, deadline: float | None = None) -> float | None:
        """Send due batches until the queue is empty, a send fails, or `deadline` passes.

        Returns how many seconds to wait before the next attempt (None: nothing queued). Without
        a deadline it returns after PUMP_BUDGET seconds with 0.0 (call again)."""
        budget = time.monotonic() + PUMP_BUDGET
        while not self._finished:
            now = self._clock()
            if now < self._next_attempt:
                return self._next_attempt - now
            if (deadline is not None and now >= deadline) or time.monotonic() >= budget:
                return 0.0
            self._expire(now)
            batch = self._queue.peek(self._dest.max_batch_events, self._dest.max_batch_bytes,
                                     MAX_SPAN_MS)
            if not batch:
                return None
            timeout = self._timeout if deadline is None else min(
                self._timeout, max(0.1, deadline - now))  # a final send within the grace
            if not self._send([(ts, m) for ts, m, _ in batch], timeout):
                return max(0.0, self._next_attempt - self._clock())
        return None

    def _call(self, batch: Sequence[tuple[int, str]], timeout: float) -> int:
        """`destination.send(batch)` within `timeout` seconds, on a helper thread."""
        if self._stuck is not None:
            if self._stuck.is_alive():
                raise SendError(f"{self._dest.name}: a send that passed the {self._timeout:g} s "
                                "deadline has not returned yet", retryable=True)
            self._stuck = None
        done = threading.Event()
        box: dict[str, Any] = {}

        def send() -> None:
            try:
                box["rejected"] = self._dest.send(batch)
            except BaseException as exc:  # handed to the waiting thread
                box["error"] = exc
            finally:
                done.set()

        worker = threading.Thread(target=send, name="podgpu-emf-send", daemon=True)
        worker.start()
        if not self._wait(done, timeout):
            self._abandoned = [t for t in self._abandoned if t.is_alive()]
            abort = getattr(self._dest, "abort", None)
            if callable(abort) and len(self._abandoned) < MAX_ABANDONED:
                try:
                    abort()
                    self._abandoned.append(worker)  # the next send may start at once
                except Exception as exc:  # an abort that fails: wait for the send instead
                    log.debug("EMF: abort of %s failed: %s", self._dest.name, exc)
                    self._stuck = worker
            else:
                self._stuck = worker
            raise SendError(f"{self._dest.name}: no complete answer within {timeout:g} s",
                            retryable=True)
        if "error" in box:
            raise box["error"]
        return int(box["rejected"])

    def _send(self, batch: list[tuple[int, str]], timeout: float) -> bool:
        t0 = time.perf_counter()
        try:
            rejected = self._call(batch, timeout)
        except SendError as exc:
            elapsed = time.perf_counter() - t0
            with self._lock:
                self._send_sum += elapsed
                self._send_count += 1
                self._retried += len(batch) if exc.retryable else 0
            if not exc.retryable:
                log.error("EMF: %s; %d event(s) given up", exc, len(batch))
                with self._lock:
                    self._rejected += len(batch)
                    self._failing = str(exc)
                self._queue.ack(len(batch))
                return True
            self._failures += 1
            delay = min(self._cap, self._base * 2 ** min(self._failures - 1, 30))
            delay = delay / 2 + self._rng.uniform(0, delay / 2)
            self._next_attempt = self._clock() + delay
            with self._lock:
                changed = self._failing != str(exc)
                self._failing = str(exc)
            if changed or self._failures in (1, 10, 100) or self._failures % 1000 == 0:
                log.warning("EMF: send to %s failed (%s), attempt %d; %d event(s) queued, "
                            "retrying in %.1f s", self._dest.name, exc, self._failures,
                            len(self._queue), delay)
            return False
        elapsed = time.perf_counter() - t0
        if self._failures:
            log.info("EMF: %s accepts events again after %d failed attempt(s)", self._dest.name,
                     self._failures)
        self._failures = 0
        with self._lock:
            self._send_sum += elapsed
            self._send_count += 1
            self._sent += len(batch) - rejected
            self._rejected += rejected
            self._last_success = self._clock()
            self._failing = ""
        if rejected:
            log.warning("EMF: %s refused %d event(s) as too old or too new", self._dest.name,
                        rejected)
        self._queue.ack(len(batch))
        return True

    def _expire(self, now: float) -> None:
        """Events CloudWatch would refuse for age are counted as rejected, not sent."""
        oldest = now * 1000 - MAX_AGE_MS
        expired = 0
        while True:
            head = self._queue.peek(1, 1 << 30, MAX_SPAN_MS)
            if not head or head[0][0] >= oldest:
                break
            self._queue.ack(1)
            expired += 1
        if expired:
            log.warning("EMF: %d queued event(s) older than 14 days given up", expired)
            with self._lock:
                self._rejected += expired
