"""ahead.OpenAhead: NVML's C init starts on the open's thread before pynvml is imported, pynvml's
init and the GPUs' warm-up once it is given, the backend handed over later is opened on that
thread; `wait` hands its outcome to the caller (its error raised there), `abandon` closes only
what did open, and the thread's own inits are always shut down, so NVML ends initialised
exactly as often as the backend inited it."""

from __future__ import annotations

import ctypes.util
import threading
from collections.abc import Callable, Sequence
from typing import Any

import pytest

from podgpu.ahead import SIMULATE_FLAG, OpenAhead, asks_simulation
from podgpu.backends.base import Reading
from podgpu.backends.nvml_ahead import Warmup
from podgpu.backends.nvml_c import c_init
from podgpu.config import SERVE_OPTIONS
from podgpu.errors import BackendError
from podgpu.fields.catalog import Field
from podgpu.model import Device
from podgpu.settings import ServeSettings, SimulationSettings


class Nvml:
    """A pynvml whose init blocks until `release` and counts like NVML: each init needs a
    shutdown; `init_error` makes the init fail; `log` (if given) is told of each."""

    def __init__(self, init_error: Exception | None = None, log: list[str] | None = None
                 ) -> None:
        self.release = threading.Event()
        self.init_error = init_error
        self.inits = 0
        self.shutdowns = 0
        self.init_on: str | None = None
        self.log = [] if log is None else log

    def nvmlInit(self) -> None:
        self.release.wait(30)
        self.init_on = threading.current_thread().name
        if self.init_error is not None:
            raise self.init_error
        self.inits += 1
        self.log.append("pynvml init")

    def nvmlShutdown(self) -> None:
        self.shutdowns += 1
        self.log.append("pynvml shutdown")


class Gate:
    """A backend whose open blocks until `release`, inits `nvml` once (as NvmlBackend does),
    then fails with `error` if one is set."""

    name = "gate"

    def __init__(self, nvml: Nvml | None = None, error: Exception | None = None,
                 log: list[str] | None = None) -> None:
        self.nvml = nvml
        self.error = error
        self.released = threading.Event()
        self.opened_on: str | None = None
        self.inits_seen_at_open: int | None = None
        self.closed = 0
        self.log = [] if log is None else log

    def open(self) -> None:
        self.released.wait(30)
        self.opened_on = threading.current_thread().name
        self.log.append("open")
        if self.nvml is not None:
            self.inits_seen_at_open = self.nvml.inits
            self.nvml.nvmlInit()
        if self.error is not None:
            raise self.error

    def close(self) -> None:
        self.closed += 1
        if self.nvml is not None:
            self.nvml.nvmlShutdown()

    def devices(self) -> tuple[Device, ...]:
        return ()

    def info(self) -> dict[str, str]:
        return {}

    def read(self, fields: Sequence[Field], *, processes: bool = False) -> Reading:
        return Reading(samples=())

    def unavailable_fields(self) -> dict[str, str]:
        return {}


def started(nvml: Nvml | None, **kw: Any) -> OpenAhead:
    """An OpenAhead with its thread, `nvml` given (None: pynvml missing)."""
    ahead = OpenAhead(ahead=True, **kw)
    ahead.give(nvml)
    return ahead


def handed(nvml: Nvml | None, gate: Gate) -> OpenAhead:
    """An OpenAhead over `nvml` (None: pynvml missing) with `gate` handed over, neither blocking."""
    if nvml is not None:
        nvml.release.set()
    gate.released.set()
    ahead = started(nvml)
    ahead.hand(gate)
    return ahead


def test_nvml_inits_ahead_and_the_handed_backend_opens_on_the_same_thread() -> None:
    nvml = Nvml()
    gate = Gate(nvml)
    handed(nvml, gate).wait(gate)
    assert nvml.init_on == gate.opened_on == "podgpu-open"
    assert gate.inits_seen_at_open == 1  # the backend's own init found NVML already up
    assert (nvml.inits, nvml.shutdowns) == (2, 1)  # the thread's init is given back
    gate.close()
    assert nvml.inits == nvml.shutdowns


def test_the_caller_goes_on_while_the_thread_waits_in_the_driver() -> None:
    nvml = Nvml()
    ahead = started(nvml)
    gate = Gate(nvml)
    ahead.hand(gate)  # handed over while NVML's init still blocks
    assert gate.opened_on is None
    nvml.release.set()
    gate.released.set()
    ahead.wait(gate)
    assert gate.opened_on == "podgpu-open"


def test_the_opens_error_is_raised_by_wait_and_the_init_still_given_back() -> None:
    nvml = Nvml()
    gate = Gate(error=BackendError("NVML found no NVIDIA GPU on this node"))
    with pytest.raises(BackendError, match="no NVIDIA GPU"):
        handed(nvml, gate).wait(gate)
    assert (nvml.inits, nvml.shutdowns) == (1, 1)


def test_an_init_that_fails_ahead_leaves_the_error_to_the_backends_open() -> None:
    nvml = Nvml(init_error=OSError("libnvidia-ml.so.1: cannot open shared object file"))
    gate = Gate(error=BackendError("the NVIDIA driver is not loaded"))
    with pytest.raises(BackendError, match="driver is not loaded"):
        handed(nvml, gate).wait(gate)
    assert nvml.shutdowns == 0  # nothing was inited ahead, so nothing is shut down


def test_abandon_closes_what_opened_and_nothing_else() -> None:
    opened, failed = Gate(), Gate(error=BackendError("driver not loaded"))
    for gate in (opened, failed):
        nvml = Nvml()
        handed(nvml, gate).abandon()
        assert nvml.inits == nvml.shutdowns == 1
    assert (opened.closed, failed.closed) == (1, 0)


def test_abandon_before_the_flags_are_parsed_gives_the_init_back() -> None:
    nvml = Nvml()
    nvml.release.set()
    started(nvml).abandon()  # --help, or a bad flag
    assert nvml.inits == nvml.shutdowns == 1


def test_simulate_hands_nothing_over_and_wait_opens_the_agents_own_now() -> None:
    nvml = Nvml()
    nvml.release.set()
    ahead = started(nvml)
    ahead.begin(ServeSettings(simulation=SimulationSettings("1")))
    assert ahead.backend is None
    gate = Gate()
    gate.released.set()
    ahead.wait(gate)
    assert gate.opened_on == threading.current_thread().name
    ahead.abandon()  # joins the thread, which has given its init back
    assert nvml.inits == nvml.shutdowns == 1


def test_without_pynvml_the_backend_still_opens_ahead_and_says_so() -> None:
    gate = Gate(error=BackendError("the NVML backend needs nvidia-ml-py"))
    with pytest.raises(BackendError, match="nvidia-ml-py"):
        handed(None, gate).wait(gate)
    assert gate.opened_on == "podgpu-open"


class CInit:
    """NVML's C init: blocks until `release`, logs into `log` on which thread it ran, and
    returns the shutdown (None: the library is not there)."""

    def __init__(self, log: list[str], there: bool = True) -> None:
        self.release = threading.Event()
        self.log = log
        self.there = there

    def __call__(self) -> Callable[[], object] | None:
        self.release.wait(30)
        self.log.append(f"c init on {threading.current_thread().name}")
        return (lambda: self.log.append("c shutdown")) if self.there else None


class LoggedWarmup(Warmup):
    def __init__(self, log: list[str]) -> None:
        super().__init__()
        self.log = log

    def start(self, module: Any) -> None:
        self.log.append(f"warm-up starts on {threading.current_thread().name}")

    def release(self) -> None:
        self.log.append("warm-up released")


def test_the_c_init_runs_before_pynvml_is_given_and_is_shut_down_last() -> None:
    log: list[str] = []
    init = CInit(log)
    ahead = OpenAhead(ahead=True, c_init=init, warmup=LoggedWarmup(log))
    log.append("pynvml imported")  # the main thread's import, while the C init waits
    init.release.set()
    nvml = Nvml(log=log)
    nvml.release.set()
    ahead.give(nvml)
    gate = Gate(log=log)
    gate.released.set()
    ahead.hand(gate)
    ahead.wait(gate)
    assert log == ["pynvml imported", "c init on podgpu-open", "pynvml init",
                   "warm-up starts on podgpu-open", "open", "warm-up released",
                   "pynvml shutdown", "c shutdown"]


def test_without_the_c_library_pynvml_inits_and_the_warm_up_still_starts() -> None:
    log: list[str] = []
    init = CInit(log, there=False)
    init.release.set()
    ahead = OpenAhead(ahead=True, c_init=init, warmup=LoggedWarmup(log))
    nvml = Nvml(log=log)
    nvml.release.set()
    ahead.give(nvml)
    ahead.hand(None)  # --simulate from the environment: nothing to open
    ahead.abandon()
    assert log == ["c init on podgpu-open", "pynvml init", "warm-up starts on podgpu-open",
                   "warm-up released", "pynvml shutdown"]


def test_no_warm_up_while_nvml_is_down() -> None:
    log: list[str] = []
    nvml = Nvml(init_error=OSError("libnvidia-ml.so.1: cannot open shared object file"))
    nvml.release.set()
    ahead = started(nvml, warmup=LoggedWarmup(log))
    ahead.hand(None)
    ahead.abandon()
    assert log == ["warm-up released"]  # released (nothing to free), never started


def test_the_c_init_is_none_without_nvmls_library() -> None:
    assert c_init("libnvidia-ml-not-there.so.1") is None
    libc = ctypes.util.find_library("c") or "libc.so.6"  # find_library needs ldconfig or gcc
    ctypes.CDLL(libc)  # it loads
    assert c_init(libc) is None  # a library, but without nvmlInit_v2



@pytest.mark.parametrize(("argv", "asks"), [
    (["--simulate", "4"], True),
    (["-c", "500", "--simulate=2xH200"], True),
    (["-simulate", "1"], True),  # Go's spelling, which the parser takes too
    (["--simulate-scenario", "none"], False),
    (["-f", "/etc/counters.csv"], False),
    (["--", "--simulate"], False),  # after --, not a flag
])
def test_a_simulated_start_is_told_before_the_flags_are_parsed(argv: list[str], asks: bool
                                                               ) -> None:
    assert asks_simulation(argv) is asks


def test_the_early_reading_knows_the_tables_simulate_flag() -> None:
    (option,) = [o for o in SERVE_OPTIONS if o.dest == "sim.spec"]
    assert option.flags == ("--" + SIMULATE_FLAG,)


def test_a_simulated_start_opens_nothing_ahead() -> None:
    ahead = OpenAhead.early(["--simulate", "1"])
    gate = Gate()
    gate.released.set()
    ahead.hand(gate)
    ahead.wait(gate)
    assert gate.opened_on == threading.current_thread().name  # no open's thread was started
