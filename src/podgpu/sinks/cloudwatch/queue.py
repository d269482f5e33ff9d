"""The sender's queue: encoded events in time order, bounded in bytes, optionally spooled to disk.

A segment is one interval's events (they share one timestamp). Nothing is dropped while the bound
holds; past it the oldest events go first and each one is counted. With a spool directory every
segment is also a file (`podgpu-emf-<timestamp_ms>-<pid>-<seq>.jsonl`, written atomically) that
is deleted once its last event is acknowledged, so a restarted pod (spool on a hostPath) sends
what it had not sent. A crash between a send and the file's deletion resends that segment:
delivery is at least once,
as EMF itself promises (the CloudWatch documentation). What the spool directory may hold, and how it
is read back within the bound, is spool.py's.

`Handoff` is the bounded hand-off of closed windows from the collect side to the sink's thread:
past its bound the oldest window goes, counted as dropped, so windows cannot
pile up behind a stuck encode or send.

Every event is accounted for: `accepted` (put, or loaded from the spool) = sent + rejected +
dropped + still queued (`Sender` keeps the first three).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from podgpu.sinks.cloudwatch import spool
from podgpu.sinks.cloudwatch.destinations import is_insights_event
from podgpu.sinks.cloudwatch.spool import EVENT_OVERHEAD

if TYPE_CHECKING:
    from podgpu.sinks.cloudwatch.window import ClosedWindow

log = logging.getLogger(__name__)

__all__ = ["DEFAULT_HANDOFF_WINDOWS", "EVENT_OVERHEAD", "EventQueue", "Handoff", "Segment"]
DEFAULT_HANDOFF_WINDOWS = 64
"""Closed windows waiting for the sink's thread: a minute of 1 s windows behind a send that
takes its whole deadline; at 60 s windows, an hour."""


@dataclass(slots=True)
class Segment:
    timestamp_ms: int
    events: list[str]
    sizes: list[int]
    path: str | None = None
    sent: int = 0
    """Events at the front already acknowledged (or dropped)."""
    bytes_left: int = field(default=0)

    def __post_init__(self) -> None:
        self.bytes_left = sum(self.sizes[self.sent:])


class EventQueue:
    """Thread-safe FIFO of segments with a byte bound (message bytes + 26 per event)."""

    def __init__(self, max_bytes: int, spool_dir: str | None = None) -> None:
        self._max = max_bytes
        self._spool = spool_dir
        self._segments: deque[Segment] = deque()
        self._bytes = 0
        self._seq = 0
        self._lock = threading.Lock()
        self.dropped = 0
        """Events given up without a send: the bound, the hand-off's bound, spool leftovers over
        the bound or not valid, and what is left at a shutdown without a spool."""
        self.accepted = 0
        """Events put or loaded from the spool."""
        if spool_dir:
            spool.prepare(spool_dir)  # ConfigError: a bad --emf-spool-dir is exit 2
            self._load_spool()

    @property
    def spool_dir(self) -> str | None:
        return self._spool

    @property
    def bytes(self) -> int:
        return self._bytes

    def __len__(self) -> int:
        with self._lock:
            return sum(len(s.events) - s.sent for s in self._segments)

    def put(self, timestamp_ms: int, events: list[str]) -> int:
        """Append one interval's events; returns how many old events were dropped for room."""
        if not events:
            return 0
        sizes = [len(e.encode()) + EVENT_OVERHEAD for e in events]
        path = self._write(timestamp_ms, events) if self._spool else None
        with self._lock:
            self._segments.append(Segment(timestamp_ms, events, sizes, path))
            self._bytes += sum(sizes)
            self.accepted += len(events)
            return self._trim()

    def count_dropped(self, n: int) -> None:
        """Events given up before they reached the queue (the hand-off's bound)."""
        with self._lock:
            self.accepted += n
            self.dropped += n

    def drop_unspooled(self) -> int:
        """At shutdown: give up, counted, every queued event that is not in a spool file (all of
        them without a spool; those whose write failed with one). Returns how many."""
        with self._lock:
            gone = [s for s in self._segments if s.path is None]
            n = sum(len(s.events) - s.sent for s in gone)
            self._segments = deque(s for s in self._segments if s.path is not None)
            self._bytes = sum(s.bytes_left for s in self._segments)
            self.dropped += n
            return n

    def oldest_ms(self) -> int | None:
        """The timestamp of the oldest unsent event (ms), None when the queue is empty."""
        with self._lock:
            return self._segments[0].timestamp_ms if self._segments else None

    def _trim(self) -> int:
        dropped = 0
        while self._bytes > self._max and self._segments:
            seg = self._segments[0]
            self._bytes -= seg.sizes[seg.sent]
            seg.bytes_left -= seg.sizes[seg.sent]
            seg.sent += 1
            dropped += 1
            if seg.sent == len(seg.events):
                self._segments.popleft()
                self._unlink(seg)
        self.dropped += dropped
        return dropped

    def peek(self, max_events: int, max_bytes: int, max_span_ms: int
             ) -> list[tuple[int, str, int]]:
        """The oldest events that fit one request: (timestamp ms, message, counted size). One
        request holds events of one log group: Container Insights events or the others, never
        both (destinations.is_insights_event)."""
        out: list[tuple[int, str, int]] = []
        total = 0
        with self._lock:
            first_ts: int | None = None
            insights: bool | None = None
            for seg in self._segments:
                if first_ts is None:
                    first_ts = seg.timestamp_ms
                if seg.timestamp_ms - first_ts > max_span_ms:
                    return out
                for i in range(seg.sent, len(seg.events)):
                    size = seg.sizes[i]
                    if len(out) >= max_events or total + size > max_bytes:
                        return out
                    kind = is_insights_event(seg.events[i])
                    if insights is None:
                        insights = kind
                    elif kind != insights:
                        return out
                    out.append((seg.timestamp_ms, seg.events[i], size))
                    total += size
        return out

    def ack(self, count: int) -> None:
        """The first `count` queued events are done (sent, or rejected for good)."""
        with self._lock:
            while count > 0 and self._segments:
                seg = self._segments[0]
                n = min(count, len(seg.events) - seg.sent)
                done = sum(seg.sizes[seg.sent:seg.sent + n])
                seg.sent += n
                seg.bytes_left -= done
                self._bytes -= done
                count -= n
                if seg.sent == len(seg.events):
                    self._segments.popleft()
                    self._unlink(seg)

    # --- spool -------------------------------------------------------------------------------

    def _write(self, timestamp_ms: int, events: list[str]) -> str | None:
        assert self._spool is not None
        self._seq += 1
        name = spool.segment_name(timestamp_ms, os.getpid(), self._seq)
        return spool.write(self._spool, name, events)

    def _unlink(self, seg: Segment) -> None:
        if seg.path:
            spool.remove(seg.path)

    def _load_spool(self) -> None:
        assert self._spool is not None
        t0 = time.monotonic()
        found = spool.load(self._spool, self._max)
        loaded = 0
        for ts, events, path in found.segments:
            sizes = [len(e.encode()) + EVENT_OVERHEAD for e in events]
            self._segments.append(Segment(ts, events, sizes, path))
            self._bytes += sum(sizes)
            loaded += len(events)
        gone = found.over_bound + found.invalid
        self.accepted += loaded + gone
        self.dropped += gone
        if found.foreign:
            log.info("EMF spool: %d entr%s of %s not named as podgpu names its files: left "
                     "alone (never read, sent or deleted)", found.foreign,
                     "y" if found.foreign == 1 else "ies", self._spool)
        for what in found.skipped[:10]:
            log.warning("EMF spool: skipped %s", what)
        if len(found.skipped) > 10:
            log.warning("EMF spool: skipped %d more entries", len(found.skipped) - 10)
        if loaded or gone or found.temp_removed:
            log.info("EMF spool: %d unsent event(s) loaded from %s in %.1f s; dropped %d over "
                     "--emf-queue-bytes (oldest first) and %d invalid line(s); removed %d "
                     "temporary file(s)", loaded, self._spool, time.monotonic() - t0,
                     found.over_bound, found.invalid, found.temp_removed)
        self._trim()


class Handoff:
    """Closed windows from the collect side to the sink's thread, at most `max_windows`; past
    that the oldest is dropped and its label sets (one event each, at least) counted in the
    queue's `dropped`. Thread-safe; `append` never blocks."""

    def __init__(self, queue: EventQueue, max_windows: int = DEFAULT_HANDOFF_WINDOWS) -> None:
        self._queue = queue
        self._max = max_windows
        self._windows: deque[ClosedWindow] = deque()
        self._lock = threading.Lock()
        self._warned = 0.0

    def append(self, window: ClosedWindow) -> None:
        with self._lock:
            self._windows.append(window)
            if len(self._windows) <= self._max:
                return
            old = self._windows.popleft()
        self._queue.count_dropped(len(old.groups))
        now = time.monotonic()
        if now - self._warned > 60:
            self._warned = now
            log.warning("EMF: %d closed windows wait for the sender; dropped the oldest (%d "
                        "event(s)); is the destination stuck?", self._max, len(old.groups))

    def popleft(self) -> ClosedWindow:
        with self._lock:
            return self._windows.popleft()

    def clear(self) -> None:
        with self._lock:
            self._windows.clear()

    def __len__(self) -> int:
        return len(self._windows)

    def __bool__(self) -> bool:
        return bool(self._windows)
