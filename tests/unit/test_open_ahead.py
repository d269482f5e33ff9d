"""parts.OpenAhead: the backend's open runs on its own thread; `wait` hands its outcome to the
caller (its error raised there), `abandon` closes only what did open."""

from __future__ import annotations

import threading
from collections.abc import Sequence

import pytest

from podgpu.backends.base import Reading
from podgpu.errors import BackendError
from podgpu.fields.catalog import Field
from podgpu.model import Device
from podgpu.parts import OpenAhead


class Gate:
    """A backend whose open blocks until `release`, then fails with `error` if one is set."""

    name = "gate"

    def __init__(self, error: Exception | None = None) -> None:
        self.error = error
        self.released = threading.Event()
        self.opened_on: str | None = None
        self.closed = 0

    def open(self) -> None:
        self.released.wait(30)
        self.opened_on = threading.current_thread().name
        if self.error is not None:
            raise self.error

    def close(self) -> None:
        self.closed += 1

    def devices(self) -> tuple[Device, ...]:
        return ()

    def info(self) -> dict[str, str]:
        return {}

    def read(self, fields: Sequence[Field], *, processes: bool = False) -> Reading:
        return Reading(samples=())

    def unavailable_fields(self) -> dict[str, str]:
        return {}


def test_wait_returns_once_the_open_on_its_thread_is_done() -> None:
    gate = Gate()
    ahead = OpenAhead(gate)
    assert gate.opened_on is None  # still opening: the caller went on
    gate.released.set()
    ahead.wait(gate)
    assert gate.opened_on == "podgpu-open"


def test_the_opens_error_is_raised_by_wait() -> None:
    gate = Gate(BackendError("NVML found no NVIDIA GPU on this node"))
    ahead = OpenAhead(gate)
    gate.released.set()
    with pytest.raises(BackendError, match="no NVIDIA GPU"):
        ahead.wait(gate)


def test_abandon_closes_what_opened_and_nothing_else() -> None:
    opened, failed = Gate(), Gate(BackendError("driver not loaded"))
    for gate in (opened, failed):
        gate.released.set()
        OpenAhead(gate).abandon()
    assert (opened.closed, failed.closed) == (1, 0)


def test_without_a_backend_wait_opens_the_agents_own_now() -> None:
    gate = Gate()
    gate.released.set()
    OpenAhead(None).wait(gate)
    assert gate.opened_on == threading.current_thread().name
