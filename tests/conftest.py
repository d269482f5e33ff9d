"""Shared test helpers: a controllable clock, the one free-port and wait helpers, and a way to run
`podgpu serve` as a real process."""

from __future__ import annotations

import collections
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import TypeVar

import pytest
from hypothesis import settings as hypothesis_settings

# the one copy of each, re-exported for the tests
from tests.harness import free_port as free_port
from tests.harness import http_get as http_get
from tests.harness import wait_for as wait_for

# Property tests: the suite draws the same examples every run (a red CI run is a change's doing,
# not the dice's) and has no per-example wall-clock deadline (pytest-timeout bounds a hang).
# PODGPU_HYPOTHESIS=explore draws new examples each run, to look for new failures.
hypothesis_settings.register_profile("suite", derandomize=True, deadline=None)
hypothesis_settings.register_profile("explore", deadline=None)
hypothesis_settings.load_profile(os.environ.get("PODGPU_HYPOTHESIS", "suite"))

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"


class FakeClock:
    """A clock tests move by hand (fakes, not mocks)."""

    def __init__(self, start: float = 1_800_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


INTEGRATION_DIRS = ("integration", "deploy", "core")
"""Every test under these folders of tests/ is marked `integration`: they start real processes or
peers. The fast tier leaves them out: `pytest -m "not integration and not slow"`."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    tests = ROOT / "tests"
    for item in items:
        parts = item.path.relative_to(tests).parts if item.path.is_relative_to(tests) else ()
        if parts and parts[0] in INTEGRATION_DIRS:
            item.add_marker(pytest.mark.integration)


class InProcessAgent:
    """`podgpu serve ARGS` as an agent in this process (podgpu.agent), on a port the OS picks:
    the parts are the real ones, only the process around them is the test's. Use for tests that
    need the agent to serve, not the process (exit codes, signals, stderr: ServeProcess)."""

    def __init__(self, *args: str, env: dict[str, str] | None = None) -> None:
        from podgpu.agent import build_agent, run
        from podgpu.config import parse_serve_args

        settings = parse_serve_args(["--address", "127.0.0.1:0", *args],
                                    {"NODE_NAME": "test-node", **(env or {})})
        self.agent = build_agent(settings)
        self._ready = threading.Event()
        self.exit_code: int | None = None
        self.error: BaseException | None = None

        def serve() -> None:
            try:
                self.exit_code = run(self.agent, ready=lambda _a: self._ready.set())
            except BaseException as exc:  # reported by wait_ready
                self.error = exc
            finally:
                self._ready.set()

        self._thread = threading.Thread(target=serve, name="test-agent", daemon=True)
        self._thread.start()
        self.url = ""

    def wait_ready(self, timeout: float = 30.0) -> None:
        if not self._ready.wait(timeout):
            raise AssertionError("the agent did not listen in time")
        if self.error is not None or not self.agent.addresses:
            raise AssertionError(f"the agent stopped: {self.error!r} (exit {self.exit_code})")
        self.url = self.agent.url
        self.port = self.agent.addresses[0][1]

    def get(self, path: str, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
        return http_get(self.url + path, headers)

    @property
    def running(self) -> bool:
        """Still serving (what `proc.poll() is None` says of a process)."""
        return self._thread.is_alive()

    def stop(self) -> int | None:
        self.agent.stop("test done")
        self._thread.join(30)
        assert not self._thread.is_alive(), "the agent did not stop"
        return self.exit_code


@pytest.fixture
def agent() -> Iterator[type[InProcessAgent]]:
    """Start in-process agents; each is stopped at the end of the test."""
    yield from _stopped_after(InProcessAgent)


class ServeProcess:
    """`python -m podgpu serve ...` on a free loopback port, stopped with SIGTERM. Its stdout is
    drained and its stderr kept line by line on their own threads, so a test can wait for a log
    line (`wait_log`) while the process runs."""

    def __init__(self, *args: str, env: dict[str, str] | None = None) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        full_env = {**os.environ, "NODE_NAME": "test-node", **(env or {})}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "podgpu", "serve", "--address", f"127.0.0.1:{self.port}", *args],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=full_env, text=True,
        )
        self.lines: list[str] = []  # stderr so far
        out, err = self.proc.stdout, self.proc.stderr
        assert out is not None and err is not None
        self._readers = [
            threading.Thread(target=lambda: collections.deque(out, maxlen=0), daemon=True),
            threading.Thread(target=lambda: self.lines.extend(err), daemon=True)]
        for t in self._readers:
            t.start()

    @property
    def stderr(self) -> str:
        return "".join(self.lines)

    def wait_log(self, text: str, *, count: int = 1, timeout: float = 10.0) -> None:
        """Until stderr holds `text` `count` times (an AssertionError naming it otherwise)."""
        wait_for(lambda: self.stderr.count(text) >= count, timeout, f"{text!r} in the log")

    def wait_ready(self, timeout: float = 10.0) -> None:
        def serving() -> bool:
            if self.proc.poll() is not None:
                raise AssertionError(f"podgpu exited {self.proc.returncode}: {self.stderr}")
            try:
                return http_get(self.url + "/metrics", timeout=1)[0] == 200
            except OSError:
                return False

        wait_for(serving, timeout, "podgpu to serve /metrics", interval=0.05)

    def get(self, path: str, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
        return http_get(self.url + path, headers)

    def wait_exit(self, timeout: float) -> tuple[int, str]:
        """The exit status and all of stderr once the process has ended by itself."""
        self.proc.wait(timeout)
        for t in self._readers:
            t.join(10)
        return self.proc.returncode, self.stderr

    def stop(self) -> tuple[int, str]:
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            return self.wait_exit(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.wait_exit(30)


@pytest.fixture
def serve() -> Iterator[type[ServeProcess]]:
    """Start `podgpu serve` processes; each is stopped at the end of the test."""
    yield from _stopped_after(ServeProcess)


S = TypeVar("S", InProcessAgent, ServeProcess)


def _stopped_after(cls: type[S]) -> Iterator[type[S]]:
    """`cls` for the test to start with `(*args, env=...)`; everything started is stopped after."""
    started: list[S] = []

    class _Tracked(cls):  # type: ignore[valid-type,misc]
        def __init__(self, *args: str, env: dict[str, str] | None = None) -> None:
            super().__init__(*args, env=env)
            started.append(self)

    yield _Tracked
    for s in started:
        s.stop()
