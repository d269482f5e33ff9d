"""`scripts/serve`, the quick start's first command: the address its first line announces is the one
podgpu listens on, whichever way the address is given (a flag in one of Go's spellings, the
environment, or none)."""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path

import pytest

from tests.harness import DEFAULT_READY_TIMEOUT, DEFAULT_STOP_TIMEOUT, free_port, scrape, wait_for

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "serve"


def serve_script(args: list[str], port: int, env: dict[str, str] | None = None) -> str:
    """Run scripts/serve until /health answers on `port`, stop it; its stderr."""
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(["bash", str(SCRIPT), *args], stdout=subprocess.DEVNULL,
                                stderr=err, env={**os.environ, **(env or {})})
        try:
            def answers() -> bool:
                if proc.poll() is not None:
                    err.seek(0)
                    raise AssertionError(f"scripts/serve exited {proc.returncode}:\n"
                                         f"{err.read().decode(errors='replace')}")
                try:
                    return scrape(f"http://127.0.0.1:{port}/health", timeout=1)[0] == 200
                except OSError:
                    return False

            wait_for(answers, DEFAULT_READY_TIMEOUT, f"scripts/serve on port {port}")
        finally:
            proc.terminate()
            proc.wait(DEFAULT_STOP_TIMEOUT)
        err.seek(0)
        return err.read().decode(errors="replace")


@pytest.mark.parametrize("spelling", [["-a", "{a}"], ["--address={a}"], ["-address", "{a}"]])
def test_the_first_line_names_the_address_given_on_the_command_line(spelling: list[str]) -> None:
    port = free_port()
    address = f"127.0.0.1:{port}"
    stderr = serve_script([s.format(a=address) for s in spelling], port,
                          env={"PODGPU_ADDRESS": "127.0.0.1:1"})  # the flag wins
    first = stderr.splitlines()[0]
    assert first.startswith("scripts/serve: ") and first.endswith(f" on {address}"), stderr
    assert f"listening on http://{address}/metrics" in stderr  # podgpu's own line agrees


def test_the_first_line_names_the_address_from_the_environment() -> None:
    port = free_port()
    stderr = serve_script([], port, env={"PODGPU_ADDRESS": f"127.0.0.1:{port}"})
    assert stderr.splitlines()[0].endswith(f" on 127.0.0.1:{port}"), stderr
