"""The sender's queue: encoded events in time order, bounded in bytes, optionally spooled to disk.

A segment is one interval's events (they share one timestamp). Nothing is dropped while the bound
holds; past it the oldest events go first and each one is counted. With a spool directory every
segment is also a file (`<timestamp_ms>-<seq>.jsonl`, written atomically) that is deleted once its
last event is acknowledged, so a restarted pod (spool on a hostPath) sends what it had not sent.
A crash between a send and the file's deletion resends that segment: delivery is at least once,
as EMF itself promises (reference/cloudwatch.md §4).
"""

from __future__ import annotations

import logging
import os
import threading
from collections import deque
from dataclasses import dataclass, field

log = logging.getLogger(__name__)

EVENT_OVERHEAD = 26  # PutLogEvents counts 26 bytes per event on top of the message


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
        if spool_dir:
            os.makedirs(spool_dir, exist_ok=True)
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
            return self._trim()

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
        """The oldest events that fit one request: (timestamp ms, message, counted size)."""
        out: list[tuple[int, str, int]] = []
        total = 0
        with self._lock:
            first_ts: int | None = None
            for seg in self._segments:
                if first_ts is None:
                    first_ts = seg.timestamp_ms
                if seg.timestamp_ms - first_ts > max_span_ms:
                    return out
                for i in range(seg.sent, len(seg.events)):
                    size = seg.sizes[i]
                    if len(out) >= max_events or total + size > max_bytes:
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
        name = f"{timestamp_ms:015d}-{os.getpid()}-{self._seq:06d}.jsonl"
        path = os.path.join(self._spool, name)
        tmp = path + ".tmp"
        try:
            with open(tmp, "w", encoding="utf-8") as fh:
                fh.write("\n".join(events) + "\n")
            os.replace(tmp, path)
            return path
        except OSError as exc:  # a full or read-only disk must not stop the in-memory queue
            log.warning("EMF spool: cannot write %s: %s", path, exc)
            return None

    def _unlink(self, seg: Segment) -> None:
        if seg.path:
            try:
                os.unlink(seg.path)
            except OSError as exc:
                log.warning("EMF spool: cannot remove %s: %s", seg.path, exc)

    def _load_spool(self) -> None:
        assert self._spool is not None
        names = sorted(n for n in os.listdir(self._spool) if n.endswith(".jsonl"))
        loaded = 0
        for name in names:
            path = os.path.join(self._spool, name)
            try:
                ts = int(name.split("-", 1)[0])
                with open(path, encoding="utf-8") as fh:
                    events = [line for line in fh.read().split("\n") if line]
            except (OSError, ValueError, UnicodeDecodeError) as exc:
                log.warning("EMF spool: skipping unreadable %s: %s", path, exc)
                continue
            if not events:
                self._unlink(Segment(ts, [], [], path))
                continue
            sizes = [len(e.encode()) + EVENT_OVERHEAD for e in events]
            self._segments.append(Segment(ts, events, sizes, path))
            self._bytes += sum(sizes)
            loaded += len(events)
        self._segments = deque(sorted(self._segments, key=lambda s: s.timestamp_ms))
        if loaded:
            log.info("EMF spool: %d unsent event(s) from %s", loaded, self._spool)
        self._trim()
