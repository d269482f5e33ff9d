"""http/guard.py's pure parts: the rate-limited log that keeps an attack from filling a disk
(~7,000 "socket.accept() out of system resource" lines a second before), the event
loop's error reports routed through it, and the connection cap kept below the descriptor limit."""

from __future__ import annotations

import asyncio
import errno
import logging

import pytest

from podgpu.http.guard import (
    ACCEPT_IN_FLIGHT,
    FD_RESERVE,
    RateLimitedLog,
    effective_cap,
    quiet_accept_errors,
    short,
)
from tests.conftest import FakeClock


def test_a_recurring_condition_is_one_line_a_minute_with_the_count_held_back(
        caplog: pytest.LogCaptureFixture, clock: FakeClock) -> None:
    rl = RateLimitedLog(logging.getLogger("t"), every=60.0, clock=clock)
    caplog.set_level(logging.INFO)
    logged = [rl("k", logging.WARNING, "cap reached") for _ in range(1000)]
    assert logged.count(True) == 1 and len(caplog.records) == 1
    clock.advance(61)
    assert rl("k", logging.WARNING, "cap reached")
    assert caplog.records[-1].getMessage() == "cap reached (999 more like this in the last 61 s)"
    assert rl("other", logging.WARNING, "x")  # keys are independent


def test_accept_errors_from_the_event_loop_are_rate_limited(
        caplog: pytest.LogCaptureFixture, clock: FakeClock) -> None:
    loop = asyncio.new_event_loop()
    try:
        quiet_accept_errors(loop, RateLimitedLog(logging.getLogger("t"), clock=clock))
        caplog.set_level(logging.INFO)
        for _ in range(7000):  # a second's worth, as measured before the fix
            loop.call_exception_handler({"message": "socket.accept() out of system resource",
                                         "exception": OSError(errno.EMFILE, "Too many open files")})
    finally:
        loop.close()
    assert len(caplog.records) == 1
    assert caplog.records[0].getMessage() == (
        "socket.accept() out of system resource: OSError: [Errno 24] Too many open files")


def test_a_loop_error_keeps_its_traceback(caplog: pytest.LogCaptureFixture,
                                          clock: FakeClock) -> None:
    """A bug of podgpu's inside a callback must show where it is, not only its message."""
    def callback() -> None:
        raise AttributeError("'NoneType' object has no attribute 'close'")

    loop = asyncio.new_event_loop()
    try:
        quiet_accept_errors(loop, RateLimitedLog(logging.getLogger("t"), clock=clock))
        caplog.set_level(logging.INFO)
        loop.call_soon(callback)
        loop.call_soon(loop.stop)
        loop.run_forever()
    finally:
        loop.close()
    (record,) = caplog.records
    assert record.exc_info is not None and record.exc_info[0] is AttributeError
    assert "in callback" in caplog.text and 'raise AttributeError("' in caplog.text


@pytest.mark.parametrize(("requested", "nofile", "cap"), [
    (2048, 1_048_576, 2048),
    (2048, 20_000, 2048),
    (2048, 1024, 1024 - FD_RESERVE - ACCEPT_IN_FLIGHT),
    (2048, 100, 16),
])
def test_the_cap_stays_below_the_descriptor_limit(requested: int, nofile: int, cap: int) -> None:
    assert effective_cap(requested, nofile) == cap


def test_peer_strings_are_escaped_and_truncated_for_the_log() -> None:
    assert short("a\nb\x1b[31m") == "a\\nb\\x1b[31m"
    assert short("x" * 500) == "x" * 120 + "..."
