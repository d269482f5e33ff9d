"""`podgpu serve`'s process: start NVML's open on its own thread, parse the flags, build the
agent while it opens, run.

NVML's init (13.5 ms on an H100 with persistence mode on, more without), the first device
handles and the 0.1 s that GPM needs between its first two samples (backends/nvml_gpm.py) are
waits in the driver, during which ctypes releases the GIL; importing pynvml, parsing the flags
and importing the rest of podgpu (the agent, the metric list, the renderers, the listener) are
Python work. The open overlaps the two (podgpu/ahead.py): its thread starts NVML's init through
the C library before anything else, before pynvml is even imported; then takes each GPU's first
GPM sample while the flags are parsed, since neither needs a setting; and opens the backend as
soon as the settings make it. The first cycle does not wait for GPM's 100 ms (its DCP values
come with the cycle after it: docs/decisions/0024-first-answer-before-gpm.md), so the first
valid /metrics comes when the imports end, not after the imports and the waits. This
module therefore starts that thread first; the logs, the flags' tables and the agent come
after. A command line that asks for --simulate starts nothing ahead and loads no pynvml.
Bad input still exits 2: a ConfigError from parsing or building the agent wins over whatever the
open did, and what it opened is closed.
"""

from __future__ import annotations

import gc
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from podgpu.agent import Agent
    from podgpu.ahead import OpenAhead

START_SWITCH_SECONDS = 0.0005
"""The interpreter's thread switch interval until the port is bound (Python's default is 5 ms).
The start overlaps waits in the driver on other threads (NVML's init, each GPU's first GPM
sample, the first cycle's reads) with the main thread's imports, and a thread back from the
driver waits for the GIL for up to one interval before its next call. Measured in
bench/RESULTS.md ("A shorter switch interval while podgpu starts")."""


def starting() -> Callable[[object], None]:
    """The interpreter as a start wants it: START_SWITCH_SECONDS, and the cyclic garbage
    collector off. A start creates ~37,000 objects that live as long as the process (modules,
    classes, tables), and the collector would walk them again and again while they are made
    (bench/RESULTS.md, "The first answer without GPM's first window, the GC off").

    The callable returned puts both back. Called with the agent (the port is bound and the
    first cycle published: `agent.run`'s `ready`), it first freezes what the start made
    (`gc.freeze`), so no later collection walks it, nor collects the little the start left
    unreachable (~0.1 MiB: the flags' parser). Called again (with None, whichever way the start
    ends) it changes nothing more; a caller that had the collector off keeps it off."""
    previous = sys.getswitchinterval()
    collecting = gc.isenabled()
    sys.setswitchinterval(START_SWITCH_SECONDS)
    gc.disable()

    def restore(agent: object) -> None:
        sys.setswitchinterval(previous)
        if collecting and not gc.isenabled():
            if agent is not None:
                gc.freeze()
            gc.enable()

    return restore


def main(argv: Sequence[str]) -> int:
    """`podgpu serve [flags]` (also `podgpu [flags]`): parse, open ahead, build, run."""
    from podgpu.ahead import OpenAhead

    restore = starting()
    try:
        ahead = OpenAhead.early(argv)
        agent = _build(argv, ahead)
        from podgpu.agent import run

        return run(agent, open_backend=ahead.wait, ready=restore)  # back once the port is bound
    finally:
        restore(None)  # and whichever way the start ends


def _build(argv: Sequence[str], ahead: OpenAhead) -> Agent:
    """The flags parsed and the agent built while the open runs ahead; on bad input (exit 2)
    what the open opened is closed."""
    try:
        from podgpu import logs
        from podgpu.config import OPTIONS, serve_parser, settings_from
        from podgpu.options import go_flags

        settings = settings_from(serve_parser().parse_args(go_flags(list(argv), OPTIONS)))
        logs.configure(debug=settings.log.debug, fmt=settings.log.format)  # the process's
        ahead.begin(settings)
        from podgpu.agent import build_agent  # after the hand-over: its imports overlap the open

        return build_agent(settings, backend=ahead.backend)
    except BaseException:
        ahead.abandon()
        raise


__all__ = ["main"]
