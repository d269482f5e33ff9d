"""Connection limits for the HTTP listener: a request deadline, a connection cap that evicts the
oldest connection that never completed a request, and the bounds each connection lives within.

Why: a listener that trusts its peers keeps a connection that stopped partway through its head
for as long as it likes, and at the file-descriptor limit every scrape fails (bench/RESULTS.md,
"Hostile clients, faults and the soak").

`ConnectionGuard` is a state machine over the connections http.conn reports to it; it touches a
connection only through the `Guarded` protocol below and schedules its timers through one
`call_later` function on one clock (`now`), so tests drive it with fake connections and a fake
clock (tests/unit/http/test_guard_states.py):

- a connection is counted from the moment it is accepted, TLS ones before their handshake, and
  must complete each request (TLS handshake, head read, response handed to the kernel) within
  `request_timeout` of connecting or of its first byte after the previous response; requests
  pipelined behind it share that deadline (all answered and the connection idle in time).
  Otherwise it is closed with a reset. This covers slowloris heads, slow bodies, silent or stalled
  TLS handshakes and clients that do not read the answer;
- an idle keep-alive connection is closed after `keepalive_timeout`;
- a connection whose last answer is written lingers (http.states LINGER: our side shut, what the
  peer still sends dropped) for at most `LINGER_SECONDS`, then is reset;
- at `max_connections`, a lingering connection is closed first, then the oldest connection that
  has not yet completed a request (a well-behaved scraper sends its request at once, so it is
  never the oldest); when every connection has completed one, the one idle longest goes; then
  the one whose current request has waited longest; failing that, the newcomer;
- the cap stays below the process's file-descriptor limit, so accept() does not run out of
  descriptors in the first place.

What connections hold in memory is bounded by http.budget, not here.
"""

from __future__ import annotations

import asyncio
import logging
import resource
from collections import OrderedDict
from collections.abc import Callable
from typing import NamedTuple, Protocol

from podgpu.http.budget import DEFAULT_MEMORY_BUDGET, MemoryBudget
from podgpu.http.ratelog import LOG_EVERY_SECONDS, RateLimitedLog, quiet_accept_errors, short

__all__ = ["ACCEPT_BACKLOG", "ACCEPT_IN_FLIGHT", "ACCEPT_PER_TURN", "FD_RESERVE",
           "LOG_EVERY_SECONDS", "ConnectionGuard", "Guarded", "Limits",
           "RateLimitedLog", "effective_cap", "quiet_accept_errors", "short"]

log = logging.getLogger(__name__)

DEFAULT_MAX_CONNECTIONS = 2048
"""Concurrent connections (bench/RESULTS.md "HTTP load")."""
DEFAULT_REQUEST_TIMEOUT = 15.0
"""Seconds to read a request head and write the response. /metrics is a memory copy, so only a
slow or hostile client takes this long."""
DEFAULT_KEEPALIVE_TIMEOUT = 75.0
"""Idle seconds before a keep-alive connection is closed: longer than a 60 s scrape interval, so
Prometheus keeps reusing its connection."""
FD_RESERVE = 128
"""Descriptors kept free below RLIMIT_NOFILE for files, the kubelet socket, NVML and logs."""
ACCEPT_BACKLOG = 128
"""The kernel's listen backlog: connections completed by the kernel and waiting for accept()."""
ACCEPT_PER_TURN = 32
"""Connections asyncio accepts per event-loop turn (its `backlog` argument sets both this and the
listen backlog; server.py raises the kernel's back to ACCEPT_BACKLOG). A connection accepted in
one turn gets its protocol in the next, is counted (and makes room) in the one after, and the
connection closed for it releases its descriptor one turn later still: up to three turns of
accepts hold descriptors beyond the cap. At 128 per turn a loaded 2-core box saw cap + 263."""
ACCEPT_IN_FLIGHT = 3 * ACCEPT_PER_TURN
"""Descriptors beyond the cap that accepts in flight can hold; the cap keeps them free too."""
MAX_HEAD_SIZE = 16 * 1024
"""Bytes of one request head (request line and headers); past it (checked once per read, so
at most one read more gets in) the answer is 400."""
MAX_HEADERS = 64
LINGER_SECONDS = 2.0
"""How long a connection whose last answer is written waits for the peer to close before it is
reset (the answer had that long to be read; a scraper closes at once)."""


class Limits(NamedTuple):
    """The listener's limits; the defaults are documented in docs/limits.md."""

    max_connections: int = DEFAULT_MAX_CONNECTIONS
    request_timeout: float = DEFAULT_REQUEST_TIMEOUT
    keepalive_timeout: float = DEFAULT_KEEPALIVE_TIMEOUT
    max_head_size: int = MAX_HEAD_SIZE
    max_headers: int = MAX_HEADERS
    memory_budget: int = DEFAULT_MEMORY_BUDGET


def effective_cap(requested: int, nofile_soft: int | None = None) -> int:
    """`requested`, lowered to stay FD_RESERVE + ACCEPT_IN_FLIGHT below the soft RLIMIT_NOFILE
    (at least 16)."""
    if nofile_soft is None:
        nofile_soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if nofile_soft == resource.RLIM_INFINITY or nofile_soft <= 0:
        return requested
    return max(16, min(requested, nofile_soft - FD_RESERVE - ACCEPT_IN_FLIGHT))


class Cancellable(Protocol):
    def cancel(self) -> None: ...


class Guarded(Protocol):
    """What the guard needs of a connection (http.conn.Connection; fakes in the unit tests)."""

    peer: str

    def queued(self) -> bool:
        """Bytes of a further request are waiting (pipelined)."""
        ...

    def abort(self) -> None:
        """Close now, with a reset."""
        ...

    def close(self) -> None:
        """Close politely (an idle keep-alive connection)."""
        ...


CallLater = Callable[[float, Callable[[Guarded], None], Guarded], Cancellable]
_Armed = tuple[float, float, Callable[[Guarded], None], Cancellable]
"""A connection's timer: when it fires, when the deadline is, what runs then, its handle."""


class ConnectionGuard:
    """The book-keeping of every open connection of one listener.

    Counters (plain ints, exported by http.stats): `evicted` (closed at the cap to make room),
    `refused` (the newcomer closed: nothing to evict), `timed_out` (past the request deadline)."""

    def __init__(self, limits: Limits | None = None, *, call_later: CallLater | None = None,
                 now: Callable[[], float] | None = None, cap: int | None = None) -> None:
        """`call_later(seconds, fn, conn)` schedules `fn(conn)` and `now()` is its clock (the
        event loop's by default; a test gives both); `cap` overrides the descriptor-limited cap
        (tests)."""
        if (call_later is None) != (now is None):
            raise ValueError("call_later and now come together")
        self.limits = limits or Limits()
        self.cap = cap if cap is not None else effective_cap(self.limits.max_connections)
        self._call_later = call_later
        self._now = now
        self._due: dict[Guarded, _Armed] = {}
        """Per connection with a timer: when its timer fires, when its deadline is, what runs
        then, and the timer's handle (see `_arm`)."""
        self._fresh: OrderedDict[Guarded, None] = OrderedDict()  # no request completed yet
        self._idle: OrderedDict[Guarded, None] = OrderedDict()   # between requests
        self._busy: OrderedDict[Guarded, None] = OrderedDict()   # a later request
        self._closing: OrderedDict[Guarded, None] = OrderedDict()  # lingering after its last
        self.rate_log = RateLimitedLog(log)
        self.budget = MemoryBudget(self.limits.memory_budget, rate_log=self.rate_log)
        """What the connections hold for their peers (http.budget; charged by http.conn)."""
        self.evicted = 0
        self.timed_out = 0
        self.refused = 0

    @property
    def open_connections(self) -> int:
        return len(self._fresh) + len(self._idle) + len(self._busy) + len(self._closing)

    def state(self, conn: Guarded) -> str | None:
        """"fresh", "idle", "busy", "closing", or None when not open (tests, debugging)."""
        for name, group in (("fresh", self._fresh), ("idle", self._idle), ("busy", self._busy),
                            ("closing", self._closing)):
            if conn in group:
                return name
        return None

    # --- events from the connections

    def opened(self, conn: Guarded) -> None:
        """Accepted (TLS: before the handshake). May close `conn` itself at once (the cap)."""
        self._fresh[conn] = None
        self._arm(conn, self.limits.request_timeout, self.expired)
        if self.open_connections > self.cap:
            self._make_room(conn)

    def started(self, conn: Guarded) -> None:
        """First bytes of a new request on an idle connection: the deadline starts."""
        if conn in self._idle:
            del self._idle[conn]
            self._busy[conn] = None
            self._arm(conn, self.limits.request_timeout, self.expired)

    def completed(self, conn: Guarded) -> None:
        """An answer was handed to the kernel whole. With a pipelined request waiting, the
        connection stays on the deadline it has (all it was sent must be answered within
        `request_timeout` of its first unanswered byte); otherwise it is idle."""
        if self.state(conn) in (None, "closing"):
            return
        self._fresh.pop(conn, None)
        self._idle.pop(conn, None)
        self._busy.pop(conn, None)
        if conn.queued():
            self._busy[conn] = None
        else:
            self._idle[conn] = None
            self._arm(conn, self.limits.keepalive_timeout, self._idle_expired)

    def closing(self, conn: Guarded) -> None:
        """Its last answer is written: it lingers at most LINGER_SECONDS, then is reset."""
        if self.state(conn) is None:
            return
        self._fresh.pop(conn, None)
        self._idle.pop(conn, None)
        self._busy.pop(conn, None)
        self._closing[conn] = None
        self._arm(conn, LINGER_SECONDS, self._linger_expired)

    def lost(self, conn: Guarded) -> None:
        """Closed (by either side); forgotten."""
        self._fresh.pop(conn, None)
        self._idle.pop(conn, None)
        self._busy.pop(conn, None)
        self._closing.pop(conn, None)
        self._disarm(conn)

    def expired(self, conn: Guarded) -> None:
        if self.state(conn) in (None, "idle", "closing"):
            return
        self.timed_out += 1
        self.rate_log("timeout", logging.WARNING,
                      "closed a connection from %s that did not complete a request within %g s",
                      conn.peer, self.limits.request_timeout)
        self._drop(conn)

    def _idle_expired(self, conn: Guarded) -> None:
        if conn in self._idle:
            self.lost(conn)
            conn.close()

    def _linger_expired(self, conn: Guarded) -> None:
        if conn in self._closing:
            self._drop(conn)

    def close_all(self) -> None:
        """Close every connection politely (the listener stops)."""
        for conn in [*self._fresh, *self._idle, *self._busy, *self._closing]:
            self.lost(conn)
            conn.close()

    # --- internals

    def _arm(self, conn: Guarded, seconds: float, fn: Callable[[Guarded], None]) -> None:
        """`fn(conn)` in `seconds`, replacing what was armed. A timer that fires no later is
        kept (it finds the new deadline and waits on), so a scraper's requests, which move its
        deadline twice each, schedule nothing: a timer fires at most `request_timeout` after it
        is set."""
        now = self._now() if self._now is not None else asyncio.get_running_loop().time()
        due = now + seconds
        armed = self._due.get(conn)
        if armed is not None and armed[0] <= due:
            self._due[conn] = (armed[0], due, fn, armed[3])
            return
        self._disarm(conn)
        self._schedule(conn, now, due, fn)

    def _schedule(self, conn: Guarded, now: float, due: float,
                  fn: Callable[[Guarded], None]) -> None:
        wait = min(due - now, self.limits.request_timeout)
        call_later = self._call_later or asyncio.get_running_loop().call_later
        handle = call_later(wait, self._fire, conn)
        self._due[conn] = (now + wait, due, fn, handle)

    def _fire(self, conn: Guarded) -> None:
        armed = self._due.pop(conn, None)
        if armed is None:
            return
        now = self._now() if self._now is not None else asyncio.get_running_loop().time()
        _, due, fn, _ = armed
        if due > now:
            self._schedule(conn, now, due, fn)
        else:
            fn(conn)

    def _disarm(self, conn: Guarded) -> None:
        armed = self._due.pop(conn, None)
        if armed is not None:
            armed[3].cancel()

    def _make_room(self, newcomer: Guarded) -> None:
        victim = next(iter(self._closing), None)
        if victim is None:
            victim = next((c for c in self._fresh if c is not newcomer), None)
        if victim is None:
            victim = next(iter(self._idle), None)
        if victim is None:
            victim = next(iter(self._busy), None)
        if victim is None:
            victim = newcomer
            self.refused += 1
        else:
            self.evicted += 1
        self.rate_log("cap", logging.WARNING,
                      "connection cap %d reached: closing the oldest connection that has not "
                      "completed a request (from %s)", self.cap, victim.peer)
        self._drop(victim)

    def _drop(self, conn: Guarded) -> None:
        self.lost(conn)
        conn.abort()
