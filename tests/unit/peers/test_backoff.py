"""The one retry loop with backoff: the waits it asks for are recorded (no clock), and the loop
is ended by the attempts themselves."""

from __future__ import annotations

import logging
import threading

import pytest

from podgpu.peers.backoff import BackoffLoop
from tests.harness import wait_for


class Script:
    """Attempts that answer from a list, recording the loop's waits; stops the loop at the end."""

    def __init__(self, answers: list[bool | Exception]) -> None:
        self.answers = answers
        self.waits: list[float] = []
        self.loop: BackoffLoop | None = None

    def attempt(self) -> bool:
        answer = self.answers.pop(0)
        if not self.answers and self.loop is not None:
            self.loop.stop()
        if isinstance(answer, Exception):
            raise answer
        return answer

    def wait(self, seconds: float) -> bool:
        self.waits.append(seconds)
        return False


def run(script: Script, *, first: float, cap: float, every: float | None,
        after_failure: bool = False) -> list[float]:
    loop = BackoffLoop(script.attempt, name="test-loop", wait=script.wait, first=first, cap=cap,
                       every=every, after_failure=after_failure)
    script.loop = loop
    loop.run()
    return script.waits


def test_failures_double_the_wait_up_to_the_cap_and_a_success_resets_it() -> None:
    script = Script([False, False, False, False, True, False, True])
    waits = run(script, first=1.0, cap=5.0, every=0.5)
    assert waits == [0.0, 1.0, 2.0, 4.0, 5.0, 0.5, 1.0]
    assert script.answers == []


def test_a_loop_that_ends_at_its_first_success() -> None:
    script = Script([False, False, True, False])
    waits = run(script, first=1.0, cap=10.0, every=None, after_failure=True)
    assert waits == [1.0, 2.0, 4.0]  # after a failure already: first, 2x, 4x
    assert script.answers == [False]  # never tried again


def test_an_attempt_that_raises_is_a_failure_logged_in_one_line(
        caplog: pytest.LogCaptureFixture) -> None:
    script = Script([RuntimeError("boom\nsecond line"), True, True])
    with caplog.at_level(logging.ERROR, logger="podgpu.peers.backoff"):
        waits = run(script, first=2.0, cap=8.0, every=1.0)
    assert waits == [0.0, 2.0, 1.0]
    assert [r.getMessage() for r in caplog.records] == [
        "test-loop: unexpected RuntimeError: boom\nsecond line; retrying"]
    assert all(r.exc_info is None for r in caplog.records)  # no traceback


def test_stop_wakes_the_wait_and_ends_the_thread() -> None:
    tries: list[int] = []

    def attempt() -> bool:
        tries.append(1)
        return True
    loop = BackoffLoop(attempt, name="podgpu-test-loop", first=1.0, cap=1.0, every=3600.0)
    loop.start()
    wait_for(lambda: tries)
    (thread,) = [t for t in threading.enumerate() if t.name == "podgpu-test-loop"]
    assert thread.daemon
    loop.stop()
    loop.join(10.0)
    assert not thread.is_alive() and loop.stopped and tries == [1]
