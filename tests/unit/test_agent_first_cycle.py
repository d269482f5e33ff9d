"""A start whose first cycle fails: the port was listening (serve binds before that cycle ends,
http.server's `before_accept`), so the failure must close it, and the EMF sink, started before
the cycle, must send nothing (`abort`, never `stop`, whose final send would hold the cycle)."""

from __future__ import annotations

import socket
import threading
from typing import TYPE_CHECKING, cast

import pytest

from podgpu.agent import build_agent, run
from podgpu.config import parse_serve_args
from tests.harness import free_port

if TYPE_CHECKING:
    from podgpu.model import Snapshot
    from podgpu.sinks.cloudwatch import EmfSink


class _FailingSink:
    """The first snapshot offered raises, as a broken sink would in the first cycle."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def start(self) -> None:
        self.calls.append("start")

    def offer(self, _snapshot: Snapshot) -> None:
        self.calls.append("offer")
        raise RuntimeError("the first cycle failed")

    def health(self) -> dict[str, str]:
        return {"status": "ok"}

    def abort(self) -> None:
        self.calls.append("abort")

    def stop(self, grace: float = 0.0) -> None:
        self.calls.append("stop")


def test_a_first_cycle_that_fails_fails_the_start_closes_the_port_and_sends_nothing() -> None:
    port = free_port()
    agent = build_agent(parse_serve_args(
        ["--simulate", "1", "--address", f"127.0.0.1:{port}", "--accounting=false"],
        {"NODE_NAME": "test-node"}))
    sink = _FailingSink()
    agent.emf = cast("EmfSink", sink)
    errors: list[BaseException] = []

    def serve() -> None:  # off the main thread, as the suite's in-process agents run
        try:
            run(agent)
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=serve)
    thread.start()
    thread.join(30)
    assert not thread.is_alive()
    assert [str(e) for e in errors] == ["the first cycle failed"]
    assert sink.calls == ["start", "offer", "abort"]
    assert agent.addresses == []  # never served
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=10).close()
