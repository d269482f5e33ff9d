"""Inputs that used to die with a traceback are exit 2 with one line: NaN burn times, an
empty --proc-root. (A metric list without metric rows starts, as in dcgm-exporter, with a warning
and `/health`'s metric_list entry saying so: tests/integration/test_list_follow.py.)"""

from __future__ import annotations

import subprocess
import sys

import pytest


def serve(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "podgpu", "serve", "-a", "127.0.0.1:0", *args],
                          capture_output=True, text=True, timeout=60,
                          env={"PATH": "/usr/bin:/bin", **(env or {})})


@pytest.mark.parametrize(("args", "env", "needle"), [
    (["--simulate", "1", "--simulate-burn", "nan,nan"], {}, "--simulate-burn: expected ON,OFF"),
    (["--simulate", "1", "-k", "--proc-root", "/nonexistent-proc"], {}, "--proc-root '/nonexistent-proc': does not exist"),
])
def test_out_of_range_values_are_exit_2_with_one_line(args: list[str], env: dict[str, str],
                                                      needle: str) -> None:
    res = serve(*args, env=env)
    assert res.returncode == 2, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], lines
