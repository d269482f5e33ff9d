"""SIGHUP during start-up never kills `podgpu serve`. Before, the handler was
installed after the imports, the metric list and the first cycle, and a SIGHUP in the first
~0.3 s ended the process (rc 129). Now `cli.main` installs it before anything else: the test waits
until the process catches SIGHUP (read from /proc, not timed), sends it while start-up is still
running, and expects the agent to come up and stop cleanly."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from tests.conftest import ROOT, free_port, wait_for


def _catches(pid: int, sig: int) -> bool:
    with open(f"/proc/{pid}/status") as f:
        fields = dict(line.split(":\t", 1) for line in f if ":\t" in line)
    mask = int(fields["SigCgt"].strip(), 16)
    return bool(mask & (1 << (sig - 1)))


def wait_catching(proc: subprocess.Popen[str], *sigs: int, interval: float = 0.01) -> None:
    """Returns once `proc` has a handler for every signal of `sigs` (read from /proc: not timed)."""
    def catching() -> bool:
        assert proc.poll() is None, f"podgpu exited {proc.returncode}"
        return all(_catches(proc.pid, sig) for sig in sigs)
    wait_for(catching, timeout=30, what=f"handlers for {sigs}", interval=interval)


def test_sighup_while_starting_is_ignored() -> None:
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "podgpu", "serve", "--simulate", "1", "-a",
                             f"127.0.0.1:{port}"], stderr=subprocess.PIPE, text=True)
    try:
        wait_catching(proc, signal.SIGHUP, interval=0.002)
        os.kill(proc.pid, signal.SIGHUP)  # during start-up: before the first cycle and the port
        os.kill(proc.pid, signal.SIGHUP)
        assert proc.stderr is not None
        seen = []
        for line in proc.stderr:
            seen.append(line)
            if "listening on" in line:
                break
        assert proc.poll() is None, "".join(seen)
        assert any("SIGHUP" in line for line in seen), "".join(seen)
        wait_catching(proc, signal.SIGTERM)  # the server's handler, once it serves
        proc.send_signal(signal.SIGTERM)
        rest = proc.communicate(timeout=30)[1]
        assert proc.returncode == 0, "".join(seen) + rest
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


PROBE = """
import signal, sys
real = signal.signal
def spy(sig, handler):
    if sig == signal.SIGHUP:
        print(sorted(m for m in sys.modules
                     if m.startswith(("podgpu", "aiohttp", "yaml", "asyncio"))))
        raise SystemExit(0)
    return real(sig, handler)
signal.signal = spy
from podgpu.cli import main
main(sys.argv[1:])
"""


def test_the_sighup_handler_comes_before_any_podgpu_part_is_imported() -> None:
    """Deterministic form of the above: when SIGHUP is first handled only podgpu's entry point
    and its signal policies are loaded, not even asyncio (before: config, attribution, the
    backends and aiohttp's import time came first)."""
    out = subprocess.run([sys.executable, "-c", PROBE, "--simulate", "1"], capture_output=True,
                         text=True, timeout=60, check=True).stdout
    assert out.strip() == "['podgpu', 'podgpu.cli', 'podgpu.signals']", out


@pytest.mark.parametrize("address", ["off", "listen"])
def test_sighup_never_kills_podgpu_emf(address: str) -> None:
    """SIGHUP once killed the bridge (3 of 3 runs); now ignored from cli.main's first line; with
    a listener it reloads the web config, without one it is ignored for good."""
    seed = ROOT / "tests" / "fixtures" / "seed" / "cwagent-config.json"
    where = "off" if address == "off" else f"127.0.0.1:{free_port()}"
    proc = subprocess.Popen([sys.executable, "-m", "podgpu", "emf", "--scrape",
                             "http://127.0.0.1:9/metrics", "--cloudwatch-config", str(seed),
                             "--cluster-name", "c", "--emf-destination", "stdout", "-a", where],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        wait_catching(proc, signal.SIGHUP, signal.SIGTERM)
        for _ in range(3):
            os.kill(proc.pid, signal.SIGHUP)
            time.sleep(0.2)  # spaced as a person re-sending it would; SIGTERM then stops it
        assert proc.poll() is None
        proc.send_signal(signal.SIGTERM)
        err = proc.communicate(timeout=30)[1]
        assert proc.returncode == 0, err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.parametrize("command", [["serve", "--simulate", "1"],
                                     ["emf", "--cloudwatch-config",
                                      str(ROOT / "deploy/kubernetes/components/cloudwatch/cwagent-config.json"),
                                      "--scrape", "http://127.0.0.1:9/metrics",
                                      "--emf-destination", "stdout", "--cluster-name", "c"]])
def test_sigint_during_start_up_ends_the_process(command: list[str]) -> None:
    """SIGINT is always honoured. During start-up it ends the process as
    SIGTERM's default does (before, a KeyboardInterrupt could be swallowed by a start-up step and
    `podgpu emf` kept running); once serving, the graceful handler takes over (other tests)."""
    proc = subprocess.Popen([sys.executable, "-m", "podgpu", *command, "-a",
                             f"127.0.0.1:{free_port()}"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    try:
        wait_catching(proc, signal.SIGHUP, interval=0.002)  # cli.main has begun
        os.kill(proc.pid, signal.SIGINT)
        err = proc.communicate(timeout=30)[1]
        # killed by SIGINT during start-up, or (if start-up had already finished) a clean stop
        assert proc.returncode in (-signal.SIGINT, 0), err
        assert "Traceback" not in err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
