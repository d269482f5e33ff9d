"""The guard's state machine (http/guard.py), driven by fake connections and a fake clock: no
sockets, no event loop, no waiting (a connection's own states: test_conn_states.py).

What each test pins down was a real failure mode of a listener: a slowloris head held forever, a
scraper evicted by idle attackers, pipelined requests that ran past the deadline."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from podgpu.http.guard import Cancellable, ConnectionGuard, Limits
from tests.unit.http.fakes import FakeConn, Scheduler

LIMITS = Limits(max_connections=3, request_timeout=15.0, keepalive_timeout=75.0)


def make_guard(cap: int = 3) -> tuple[ConnectionGuard, Scheduler]:
    clock = Scheduler()
    return ConnectionGuard(LIMITS, call_later=clock.call_later, now=clock.time, cap=cap), clock


def open_(guard: ConnectionGuard, *names: str) -> list[FakeConn]:
    out = []
    for name in names:
        c = FakeConn(name)
        guard.opened(c)
        out.append(c)
    return out


# --- deadlines


def test_a_connection_without_a_complete_request_is_reset_at_the_deadline() -> None:
    guard, clock = make_guard()
    (slow,) = open_(guard, "slow")
    clock.advance(14.999)
    assert not slow.aborted and guard.state(slow) == "fresh"
    clock.advance(0.002)
    assert slow.aborted and not slow.closed  # a reset, not a polite close
    assert guard.timed_out == 1 and guard.open_connections == 0


def test_a_completed_request_goes_idle_and_is_closed_politely_after_keepalive() -> None:
    guard, clock = make_guard()
    (scraper,) = open_(guard, "scraper")
    clock.advance(1)
    guard.completed(scraper)
    assert guard.state(scraper) == "idle"
    clock.advance(30)  # past the request deadline: idle is not timed out
    assert not scraper.aborted and guard.timed_out == 0
    clock.advance(75)
    assert scraper.closed and not scraper.aborted and guard.open_connections == 0
    assert guard.timed_out == 0


def test_a_scrapers_requests_schedule_no_timers_and_every_deadline_stays_exact() -> None:
    guard, clock = make_guard()
    scheduled = [0]
    call_later = clock.call_later

    def counted(seconds: float, fn: Callable[[Any], None], arg: Any) -> Cancellable:
        scheduled[0] += 1
        return call_later(seconds, fn, arg)

    guard._call_later = counted
    (scraper,) = open_(guard, "scraper")
    guard.completed(scraper)
    for _ in range(1000):  # 1,000 scrapes in a second: the timer armed first is kept
        clock.advance(0.001)
        guard.started(scraper)
        guard.completed(scraper)
    assert scheduled == [1]  # the one armed at accept
    clock.advance(74.999)  # 75 s idle after its last answer, not before
    assert not scraper.closed
    clock.advance(0.002)
    assert scraper.closed and not scraper.aborted
    (slow,) = open_(guard, "slow")
    guard.completed(slow)
    for _ in range(40):  # a scrape a second, then one whose answer never completes
        clock.advance(1)
        guard.started(slow)
        guard.completed(slow)
    clock.advance(1)
    guard.started(slow)
    clock.advance(14.999)
    assert not slow.aborted
    clock.advance(0.002)
    assert slow.aborted and guard.timed_out == 1


def test_a_new_request_on_an_idle_connection_gets_a_fresh_deadline_from_its_first_byte() -> None:
    guard, clock = make_guard()
    (c,) = open_(guard, "c")
    guard.completed(c)
    clock.advance(60)
    guard.started(c)
    assert guard.state(c) == "busy"
    clock.advance(14)
    assert not c.aborted  # 74 s since connect, 14 since the request began
    clock.advance(2)
    assert c.aborted and guard.timed_out == 1


def test_pipelined_requests_share_the_deadline_of_the_first_unanswered_byte() -> None:
    guard, clock = make_guard()
    (c,) = open_(guard, "pipeliner")
    c.pipelined = True
    for _ in range(5):  # answers go out, more requests wait: the clock is not reset
        clock.advance(2.9)
        guard.completed(c)
        assert guard.state(c) == "busy"
    assert not c.aborted
    clock.advance(0.6)  # 15.1 s after its first byte
    assert c.aborted and guard.timed_out == 1


def test_a_connection_lost_is_forgotten_and_its_timer_cancelled() -> None:
    guard, clock = make_guard()
    (c,) = open_(guard, "c")
    guard.lost(c)
    assert guard.open_connections == 0 and clock.pending == 0
    clock.advance(100)
    assert not c.aborted and guard.timed_out == 0
    guard.completed(c)  # a late event for a closed connection changes nothing
    assert guard.state(c) is None


# --- the cap


def test_at_the_cap_the_oldest_connection_without_a_completed_request_goes_first() -> None:
    guard, _ = make_guard(cap=3)
    a, b, c = open_(guard, "a", "b", "c")
    guard.completed(a)  # a scraper: completed a request, idle now
    (d,) = open_(guard, "d")
    assert b.aborted and not a.aborted and not c.aborted and not d.aborted
    assert guard.evicted == 1 and guard.open_connections == 3


def test_then_the_longest_idle_then_the_longest_busy_then_the_newcomer() -> None:
    guard, clock = make_guard(cap=3)
    a, b, c = open_(guard, "a", "b", "c")
    for conn in (a, b, c):
        clock.advance(1)
        guard.completed(conn)
    guard.started(a)  # a is busy again; b is now the longest idle
    (d,) = open_(guard, "d")  # no fresh one but the newcomer: the longest idle goes
    assert b.aborted and not a.aborted and not c.aborted and not d.aborted
    guard.completed(d)
    guard.started(c)
    guard.started(d)  # all busy: a's request has waited longest
    (e,) = open_(guard, "e")
    assert a.aborted and not c.aborted and not d.aborted and guard.state(e) == "fresh"
    assert guard.evicted == 2 and guard.refused == 0


def test_the_newcomer_is_refused_when_no_one_else_can_go() -> None:
    guard, _ = make_guard(cap=1)
    (a,) = open_(guard, "a")
    guard.completed(a)
    guard.started(a)  # busy: it may be evicted
    (b,) = open_(guard, "b")
    assert a.aborted and not b.aborted
    guard2, _ = make_guard(cap=0)
    (x,) = open_(guard2, "x")
    assert x.aborted and guard2.refused == 1 and guard2.evicted == 0


def test_close_all_closes_every_state_politely() -> None:
    guard, clock = make_guard(cap=10)
    a, b, c = open_(guard, "a", "b", "c")
    guard.completed(b)
    guard.completed(c)
    guard.started(c)
    guard.close_all()
    assert all(x.closed and not x.aborted for x in (a, b, c))
    assert guard.open_connections == 0 and clock.pending == 0


# --- giving memory back (http/budget.py MemoryReturn)


def test_memory_is_handed_back_after_a_wave_of_closes_not_under_steady_churn() -> None:
    from podgpu.http.budget import MemoryReturn

    async def main() -> tuple[bool, bool]:
        steady = MemoryReturn()
        steady.opened(2000)
        for _ in range(5000):  # reconnecting clients: as many open as at the peak
            steady.closed_one(1999)
            steady.opened(2000)
        wave = MemoryReturn()
        wave.opened(2000)
        for i in range(MemoryReturn.TRIM_AFTER):  # an attack ends: the open ones fall away
            wave.closed_one(2000 - 1 - i * 8)
        return steady.pending, wave.pending

    steady_pending, wave_pending = asyncio.run(main())
    assert not steady_pending and wave_pending


def test_a_trim_runs_once_per_wave_and_again_while_connections_keep_closing() -> None:
    from podgpu.http.budget import MemoryReturn

    class Now(MemoryReturn):
        TRIM_SECONDS = 0.0  # the trim's delay is not what this test is about

    async def until(cond: Callable[[], bool]) -> None:
        for _ in range(1000):
            if cond():
                return
            await asyncio.sleep(0)
        raise AssertionError("the scheduled trim never ran")

    async def main() -> list[tuple[int, bool]]:
        m, seen = Now(), []
        m.opened(600)
        for i in range(Now.TRIM_AFTER):  # a wave ends: 256 closes, the open ones under half
            m.closed_one(299 - i)
        await until(lambda: m.trims == 1)
        seen.append((m.trims, m.pending))  # nothing closed since: done, nothing rescheduled
        m.opened(600)
        for i in range(Now.TRIM_AFTER):
            m.closed_one(299 - i)
        m.closed_one(10)  # closes go on after the trim was scheduled: it runs again
        await until(lambda: m.trims == 3)
        seen.append((m.trims, m.pending))
        return seen

    assert asyncio.run(main()) == [(1, False), (3, False)]


def test_a_lingering_connection_is_reset_after_the_linger_and_goes_first_at_the_cap() -> None:
    from podgpu.http.guard import LINGER_SECONDS

    guard, clock = make_guard(cap=2)
    a, b = open_(guard, "a", "b")
    guard.closing(b)  # its last answer is written
    guard.completed(b)  # a late event changes nothing: it stays closing
    assert guard.state(b) == "closing"
    (c,) = open_(guard, "c")  # at the cap: the lingering one goes, not the fresh one
    assert b.aborted and not a.aborted and guard.state(c) == "fresh"
    (d,) = open_(guard, "d")
    guard.closing(d)  # evicted a (fresh) for d; now d lingers
    clock.advance(LINGER_SECONDS + 0.01)
    assert d.aborted and guard.state(d) is None and guard.timed_out == 0
