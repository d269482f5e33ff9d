"""podgpu.signals is the one module that installs signal handlers (checked on src/ by an AST
scan), and its policies do what their names say."""

from __future__ import annotations

import ast
import os
import signal
from collections.abc import Iterator

import pytest

from podgpu import signals
from tests.conftest import ROOT

SRC = ROOT / "src" / "podgpu"
OWNER = SRC / "signals.py"
LOOP_METHODS = {"add_signal_handler", "remove_signal_handler"}
MODULE_FUNCTIONS = {"signal", "set_wakeup_fd", "siginterrupt", "pthread_sigmask"}


def _installs(source: str) -> list[int]:
    """Lines of `source` that install or restore a signal handler (or the wakeup fd) directly."""
    found: list[int] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module == "signal":
            found += [node.lineno for alias in node.names if alias.name in MODULE_FUNCTIONS]
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
            continue
        attr, owner = node.func.attr, node.func.value
        if attr in LOOP_METHODS or (
                attr in MODULE_FUNCTIONS and isinstance(owner, ast.Name) and owner.id == "signal"):
            found.append(node.lineno)
    return found


def test_the_scan_sees_each_way_of_installing_a_handler() -> None:
    source = ("import signal\nfrom signal import signal as s\nsignal.signal(1, f)\n"
              "loop.add_signal_handler(1, f)\nloop.remove_signal_handler(1)\n"
              "signal.set_wakeup_fd(-1)\nsignal.Signals(1)\nsignals.on_signal(loop, 1, f)\n")
    assert _installs(source) == [2, 3, 4, 5, 6]


def test_only_signals_py_installs_signal_handlers() -> None:
    offenders = {str(path.relative_to(ROOT)): lines
                 for path in sorted(SRC.rglob("*.py"))
                 if path != OWNER and (lines := _installs(path.read_text()))}
    assert offenders == {}, f"call podgpu.signals instead: {offenders}"
    assert _installs(OWNER.read_text()), "the scan no longer sees signals.py's own calls"


@pytest.fixture
def restored() -> Iterator[None]:
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGHUP, *signals.TERMINATION)}
    yield
    for sig, handler in saved.items():
        signal.signal(sig, handler)


@pytest.mark.usefixtures("restored")
def test_stop_on_termination_calls_stop_for_each_signal() -> None:
    calls: list[str] = []
    signals.stop_on_termination(lambda: calls.append("stop"))
    for sig in (*signals.TERMINATION, signal.SIGTERM):
        os.kill(os.getpid(), sig)  # the handler runs before the next bytecode of this thread
    assert calls == ["stop", "stop", "stop"]


@pytest.mark.usefixtures("restored")
def test_sighup_at_start_writes_one_line_and_is_otherwise_ignored(
        capfd: pytest.CaptureFixture[str]) -> None:
    signals.ignore_sighup_at_start()
    os.kill(os.getpid(), signal.SIGHUP)
    os.kill(os.getpid(), signal.SIGHUP)
    assert capfd.readouterr().err.count("SIGHUP during start-up: ignored") == 2


def test_the_start_up_policies_import_nothing_slow() -> None:
    """cli.main calls them before any slow import: importing this module must not load asyncio."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", "import sys, podgpu.signals; "
                          "print(sorted(m for m in ('asyncio', 'socket') if m in sys.modules))"],
                         capture_output=True, text=True, timeout=60, check=True).stdout
    assert out.strip() == "[]", out
