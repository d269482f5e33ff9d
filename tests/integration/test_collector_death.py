"""When the collector thread dies, the process notices and exits non-zero instead of
serving the last snapshot forever. The fault is injected in a wrapper around the real CLI (the
only monkeypatching here): from the fourth cycle on, `Collector.cycle` raises SystemExit, which
the per-cycle guard (it catches Exception) lets through, as any BaseException would."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Sequence

from podgpu.collect import CollectLoop
from tests.conftest import free_port

INJECT = textwrap.dedent("""
    import sys
    import podgpu.collect as collect
    real = collect.Collector.cycle
    calls = [0]
    def cycle(self):
        calls[0] += 1
        if calls[0] >= 4:
            raise SystemExit("injected: the collect thread dies")
        return real(self)
    collect.Collector.cycle = cycle
    from podgpu.cli import main
    sys.exit(main(sys.argv[1:]))
""")


def test_a_dead_collect_loop_stops_the_process_with_exit_1() -> None:
    port = free_port()
    res = subprocess.run([sys.executable, "-c", INJECT, "serve", "--simulate", "1", "-c", "200",
                          "-a", f"127.0.0.1:{port}"], capture_output=True, text=True, timeout=60)
    assert res.returncode == 1, res.stderr[-2000:]
    assert "the collect loop stopped: SystemExit: injected: the collect thread dies" in res.stderr
    assert "stopping" in res.stderr  # the server shut down in order, not killed


class _Dying:
    def __init__(self) -> None:
        self.n = 0

    def cycle(self) -> object:
        self.n += 1
        raise KeyboardInterrupt("from inside a library")


def test_on_death_is_called_with_what_killed_the_loop() -> None:
    seen: list[BaseException] = []
    loop = CollectLoop(_Dying(), 0.01, lambda s, t: None, on_death=seen.append)  # type: ignore[arg-type]
    loop.start()
    loop._thread.join(5)
    assert not loop._thread.is_alive()
    assert isinstance(loop.died, KeyboardInterrupt) and seen == [loop.died]


def test_in_process_a_dead_collect_loop_stops_the_server_through_the_event_loop() -> None:
    """No signal is raised at the process (a test's agent shares it); the
    serving task is cancelled from the dying thread and `run` returns 1. The fault is injected
    by wrapping the real backend's read (fault injection only)."""
    from podgpu.backends.base import Reading
    from podgpu.fields.catalog import Field
    from tests.conftest import InProcessAgent

    p = InProcessAgent("--simulate", "1", "-c", "200")
    real = p.agent.backend.read
    calls = [0]

    def read(fields: Sequence[Field], *, processes: bool = False) -> Reading:
        calls[0] += 1
        if calls[0] >= 4:
            raise SystemExit("injected: the collect thread dies")
        return real(fields, processes=processes)

    p.agent.backend.read = read  # type: ignore[method-assign]
    p._thread.join(30)
    assert not p._thread.is_alive() and p.exit_code == 1
    assert p.agent.stopper.reason is not None
    assert p.agent.stopper.reason.startswith("the collect loop stopped: SystemExit: injected")
