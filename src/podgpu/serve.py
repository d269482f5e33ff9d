"""`podgpu serve`'s process: parse the flags, open NVML on its own thread, build the agent while
it opens, run.

NVML's init (about 0.04 s on an H200) and the 0.1 s that GPM needs between its first two samples
(backends/nvml_gpm.py) are waits in the driver, during which ctypes releases the GIL; the imports
of the rest of podgpu (the agent, the metric list, the renderers, the listener) are Python work.
Starting the open as soon as the flags are parsed (parts.OpenAhead) overlaps the two, so the first
valid /metrics comes about when the GPM wait ends instead of after the imports and the wait. So
this module imports only what parsing needs; the agent comes after the open has started.
Bad input still exits 2: a ConfigError from building the agent wins over whatever the open did,
and what it opened is closed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from podgpu import logs

if TYPE_CHECKING:
    from collections.abc import Sequence


def main(argv: Sequence[str]) -> int:
    """`podgpu serve [flags]` (also `podgpu [flags]`): parse, open ahead, build, run."""
    from podgpu.config import OPTIONS, serve_parser, settings_from
    from podgpu.options import go_flags
    from podgpu.parts import OpenAhead

    settings = settings_from(serve_parser().parse_args(go_flags(list(argv), OPTIONS)))
    logs.configure(debug=settings.log.debug, fmt=settings.log.format)  # the process's, not the agent's
    ahead = OpenAhead.start(settings)
    try:
        from podgpu.agent import build_agent, run

        agent = build_agent(settings, backend=ahead.backend)
    except BaseException:
        ahead.abandon()
        raise
    return run(agent, open_backend=ahead.wait)


__all__ = ["main"]
