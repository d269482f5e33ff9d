"""Fakes for the listener's unit tests: a timer wheel on a fake clock, connections the guard
can close, and an asyncio transport without a socket (fakes, not mocks: each keeps the state
the code under test changes, and the tests assert on that state)."""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import Callable
from typing import Any

from podgpu.http.guard import Cancellable


class Timer:
    def __init__(self) -> None:
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class Scheduler:
    """`call_later` on a fake clock; `advance` fires what falls due, in order."""

    def __init__(self) -> None:
        self.now = 0.0
        self._heap: list[tuple[float, int, Timer, Callable[[Any], None], Any]] = []
        self._seq = itertools.count()

    def call_later(self, seconds: float, fn: Callable[[Any], None], arg: Any) -> Cancellable:
        timer = Timer()
        heapq.heappush(self._heap, (self.now + seconds, next(self._seq), timer, fn, arg))
        return timer

    def time(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        until = self.now + seconds
        while self._heap and self._heap[0][0] <= until:
            at, _, timer, fn, arg = heapq.heappop(self._heap)
            self.now = at
            if not timer.cancelled:
                fn(arg)
        self.now = until

    @property
    def pending(self) -> int:
        return sum(not t.cancelled for _, _, t, _, _ in self._heap)


class FakeConn:
    """What the guard sees of a connection."""

    def __init__(self, name: str) -> None:
        self.peer = name
        self.pipelined = False
        self.aborted = False
        self.closed = False

    def queued(self) -> bool:
        return self.pipelined

    def abort(self) -> None:
        self.aborted = True

    def close(self) -> None:
        self.closed = True

    def __repr__(self) -> str:
        return self.peer


class FakeTransport(asyncio.Transport):
    """A transport whose peer takes `room` bytes and then nothing (until `drain`): what is
    written beyond is buffered here, and the protocol is paused as asyncio would with a
    high-water mark of 0."""

    def __init__(self, protocol: Any, room: int = 1 << 30) -> None:
        super().__init__()
        self.protocol = protocol
        self.room = room
        self.sent = bytearray()     # what the peer got
        self.buffered = bytearray()  # what podgpu still holds
        self.reading = True
        self.pauses = 0
        self.closed = False
        self.aborted = False
        self.eof_written = False
        self.gone = False  # the peer has closed: shutting our side down fails (ENOTCONN)
        self._writing_paused = False

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": ("192.0.2.7", 40000)}.get(name, default)

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass

    def get_write_buffer_size(self) -> int:
        return len(self.buffered)

    def write(self, data: Any) -> None:
        data = bytes(data)
        take = min(self.room, len(data)) if not self.buffered else 0
        self.sent += data[:take]
        self.room -= take
        self.buffered += data[take:]
        if self.buffered and not self._writing_paused:
            self._writing_paused = True
            self.protocol.pause_writing()

    def writelines(self, list_of_data: Any) -> None:
        self.write(b"".join(bytes(d) for d in list_of_data))

    def drain(self, room: int = 1 << 30) -> None:
        """The peer reads: the buffer goes out, and it takes `room` more."""
        self.room = room
        self.sent += self.buffered
        self.buffered.clear()
        if self._writing_paused:
            self._writing_paused = False
            self.protocol.resume_writing()

    def pause_reading(self) -> None:
        self.reading = False
        self.pauses += 1

    def resume_reading(self) -> None:
        self.reading = True

    def is_reading(self) -> bool:
        return self.reading

    def write_eof(self) -> None:
        if self.gone:
            raise OSError(107, "Transport endpoint is not connected")
        self.eof_written = True

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.aborted = True

    def is_closing(self) -> bool:
        return self.closed or self.aborted
