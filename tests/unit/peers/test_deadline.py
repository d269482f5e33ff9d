"""The one deadline of an outbound call: its timer is fired by hand, so nothing here waits on
the clock; a read blocked on a real socket is woken by the shutdown it makes."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable

from podgpu.peers.deadline import Deadline, thread_timer
from tests.harness import wait_for


class HandTimer:
    """A StartTimer the test fires."""

    def __init__(self) -> None:
        self.seconds: list[float] = []
        self.fire: Callable[[], None] = lambda: None
        self.cancelled = 0

    def __call__(self, seconds: float, fire: Callable[[], None]) -> Callable[[], None]:
        self.seconds.append(seconds)
        self.fire = fire

        def cancel() -> None:
            self.cancelled += 1
        return cancel


def test_a_read_blocked_on_the_socket_wakes_when_the_deadline_passes() -> None:
    timer = HandTimer()
    a, b = socket.socketpair()
    got: list[bytes] = []
    with a, b, Deadline(2.5, start_timer=timer) as deadline:
        deadline.watch(a)
        reader = threading.Thread(target=lambda: got.append(a.recv(10)))
        reader.start()
        assert not deadline.expired
        timer.fire()
        reader.join(10)
        assert not reader.is_alive()
        assert got == [b""]  # looks like a clean end: the caller asks `expired`
        assert deadline.expired and deadline.left() == 0.0
    assert timer.seconds == [2.5] and timer.cancelled == 1
    assert deadline.message == "no complete answer within 2.5 s"


def test_what_is_watched_after_the_deadline_passed_is_stopped_at_once() -> None:
    timer = HandTimer()
    deadline = Deadline(1.0, start_timer=timer)
    stopped: list[str] = []
    deadline.watch(lambda: stopped.append("first"))
    timer.fire()
    deadline.watch(lambda: stopped.append("second"))
    deadline.watch(None)
    assert stopped == ["first", "second"]


def test_nothing_is_stopped_after_the_call_ended() -> None:
    timer = HandTimer()
    stopped: list[str] = []
    with Deadline(1.0, start_timer=timer) as deadline:
        deadline.watch(lambda: stopped.append("call"))
    timer.fire()  # a timer that fires anyway, racing the cancel
    assert stopped == [] and timer.cancelled == 1


def test_left_counts_down_on_the_injected_clock() -> None:
    now = [100.0]
    deadline = Deadline(3.0, start_timer=HandTimer(), clock=lambda: now[0])
    assert deadline.left() == 3.0
    now[0] = 102.5
    assert deadline.left() == 0.5
    now[0] = 104.0
    assert deadline.left() == 0.0


def test_the_thread_timer_fires_on_a_daemon_thread() -> None:
    fired: list[bool] = []
    thread_timer(0.01, lambda: fired.append(threading.current_thread().daemon))
    wait_for(lambda: fired)
    assert fired == [True]  # a timer left running never holds the process at exit
