"""NVML's open on a thread of its own ("podgpu-open"), started before `podgpu serve` parses its
flags (serve.py says why).

The thread, in order:
1. inits NVML through its C library and asks for each GPU's handle (backends/nvml_c.py), while
   the main thread imports pynvml;
2. once pynvml is handed over (`give`), inits it too (quick: NVML is up and counts its inits)
   and starts each GPU's first GPM sample on that GPU's worker (backends/nvml_ahead.py
   `Warmup`), while the main thread parses the flags;
3. once the backend the flags make is handed over (`begin`), opens it; the backend adopts the
   workers and the samples;
4. frees what no discovery took and shuts its own inits down, so NVML ends initialised exactly
   as often as the backend inited it.
With --simulate nothing starts ahead and no pynvml is loaded; without NVML's library or pynvml
each step that needs them is skipped, and the backend's open says what is wrong.
"""

from __future__ import annotations

import contextlib
import threading
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from podgpu.backends.base import Backend
    from podgpu.backends.nvml_ahead import Warmup
    from podgpu.settings import ServeSettings

SIMULATE_FLAG = "simulate"
"""--simulate without its dashes, as config/serve.py's table has it (a test keeps the two equal):
read before that table is loaded, by `asks_simulation`."""


def asks_simulation(argv: Sequence[str]) -> bool:
    """Whether the command line asks for a simulated node, read before the flags are parsed, in
    every spelling the parser takes (`--simulate`, Go's `-simulate`, with or without `=`); a
    simulated start then loads no pynvml (~1 MiB) and touches no GPU. PODGPU_SIMULATE is not
    read here: the option table is the environment's one reader, and a start it simulates only
    loads pynvml for nothing. No answer is ever wrong for what opens: the parsed flags decide."""
    for arg in argv:
        if arg == "--":
            break
        name = arg.partition("=")[0]
        if name.startswith("-") and not name.startswith("---") and name.lstrip("-") == SIMULATE_FLAG:
            return True
    return False


class OpenAhead:
    """The open's thread and what it is handed (see the module's docstring). Without a thread
    (`ahead=False`: --simulate) `wait` opens the agent's backend on the caller's thread."""

    ABANDON_WAIT_SECONDS = 5.0
    """How long `abandon` waits for an open in flight before leaving it to the exiting process."""

    def __init__(self, *, ahead: bool = False,
                 c_init: Callable[[], Callable[[], object] | None] | None = None,
                 warmup: Warmup | None = None) -> None:
        """`ahead`: start the thread now; `c_init`: NVML's init without pynvml, returning its
        shutdown (None: not available); `warmup`: the GPUs' first GPM samples to start."""
        self.backend: Backend | None = None
        """The backend `begin` made for the flags (None with --simulate): opening ahead when
        there is a thread, else opened by `wait`."""
        self.warmup = warmup
        self._c_init = c_init
        self._module: Any = None
        self._error: BaseException | None = None
        self._given = threading.Event()
        self._handed = threading.Event()
        self._thread: threading.Thread | None = None
        if ahead:
            self._thread = threading.Thread(target=self._run, name="podgpu-open", daemon=True)
            self._thread.start()

    @classmethod
    def early(cls, argv: Sequence[str]) -> OpenAhead:
        """The thread started with NVML's C init, then pynvml imported on this thread (so that
        the binding's memory stays in the main thread's malloc arena: 0.4-0.5 MiB more RSS
        otherwise, bench/RESULTS.md) and given to it with the GPUs' warm-up; nothing ahead when
        the flags ask for a simulated node (`asks_simulation`: no pynvml, ~1 MiB, is loaded
        then)."""
        if asks_simulation(argv):
            return cls()
        from podgpu.backends.nvml_c import c_init  # ctypes only: the thread starts at once

        ahead = cls(ahead=True, c_init=c_init)
        try:
            from podgpu.backends.nvml_ahead import Warmup
            from podgpu.backends.nvml_lib import load
            from podgpu.errors import BackendError

            ahead.warmup = Warmup()
            ahead.give(load(None))
        except BackendError:  # no pynvml: the backend's open says so
            ahead.give(None)
        except BaseException:
            ahead.abandon()
            raise
        return ahead

    def give(self, module: Any) -> None:
        """pynvml (None: not installed) for the thread's init and the GPUs' first samples."""
        self._module = module
        self._given.set()

    def begin(self, settings: ServeSettings) -> None:
        """The flags are parsed: the NVML backend made and handed to the thread to open; with
        --simulate none (the agent makes the simulated one for its scenario) and the thread
        shuts its inits down."""
        from podgpu.parts import make_backend

        self.hand(make_backend(settings, warmup=self.warmup)
                  if settings.simulation is None else None)

    def hand(self, backend: Backend | None) -> None:
        """`backend` to the thread to open (None: nothing to open; the thread shuts down its
        inits)."""
        self.backend = backend
        self._handed.set()

    def _run(self) -> None:
        shutdown = self._c_init() if self._c_init is not None else None
        self._given.wait()
        module, inited = self._module, False
        if module is not None:
            with contextlib.suppress(Exception):  # not there yet: the backend's open says why
                module.nvmlInit()
                inited = True
        if inited and self.warmup is not None:
            with contextlib.suppress(Exception):  # the backend's open reads the GPUs anyway
                self.warmup.start(module)
        self._handed.wait()
        try:
            if self.backend is not None:
                self.backend.open()
        except BaseException as exc:  # raised on the caller's thread by `wait`
            self._error = exc
        finally:
            if self.warmup is not None:
                self.warmup.release()
            if inited:
                with contextlib.suppress(Exception):
                    module.nvmlShutdown()
            if shutdown is not None:
                with contextlib.suppress(Exception):
                    shutdown()

    def wait(self, backend: Backend) -> None:
        """`backend.open()` done: waited for when it runs ahead (raising what it raised), else
        called now."""
        if self.backend is None or self._thread is None:
            backend.open()
            return
        self._thread.join()
        if self._error is not None:
            raise self._error

    def abandon(self) -> None:
        """The agent was not built (bad input, --help): close what the open opened and let
        the thread shut its inits down."""
        self._given.set()
        self._handed.set()
        if self._thread is None:
            return
        self._thread.join(self.ABANDON_WAIT_SECONDS)
        if self.backend is not None and not self._thread.is_alive() and self._error is None:
            self.backend.close()
