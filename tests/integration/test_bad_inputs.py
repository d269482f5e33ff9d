"""Issue 13: inputs that used to start a useless exporter or die with a traceback are exit 2 with
one line: an empty metric list (a ConfigMap mounted under the wrong key looked healthy), an
interval too large for the loop's timers, NaN burn times, an empty --proc-root."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest


def serve(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "podgpu", "serve", "-a", "127.0.0.1:0", *args],
                          capture_output=True, text=True, timeout=60,
                          env={"PATH": "/usr/bin:/bin", **(env or {})})


@pytest.mark.parametrize("content", ["", "\n\n", "# DCGM_FI_DEV_GPU_UTIL, gauge, commented out\n",
                                     "DCGM_FI_DRIVER_VERSION, label, driver\n"])
def test_a_metric_list_without_metric_rows_is_exit_2(tmp_path: Path, content: str) -> None:
    path = tmp_path / "counters.csv"
    path.write_text(content)
    res = serve("--simulate", "1", "-f", str(path))
    assert res.returncode == 2
    assert res.stderr.strip().splitlines()[-1] == (
        f"podgpu: {path}: the metric list has no metric rows (only comments, blank lines or "
        "label rows), so no GPU metric would be exported")
    assert "Traceback" not in res.stderr


@pytest.mark.parametrize(("args", "env", "needle"), [
    (["--simulate", "1", "-c", "10000000000000"], {}, "--collect-interval 10000000000000: must be at most"),
    (["--simulate", "1", "--simulate-burn", "nan,nan"], {}, "--simulate-burn: expected ON,OFF"),
    (["--simulate", "1"], {"DCGM_EXPORTER_INTERVAL": "50"}, "environment variable DCGM_EXPORTER_INTERVAL 50"),
    (["--simulate", "1", "-k", "--proc-root", "/nonexistent-proc"], {}, "--proc-root '/nonexistent-proc': does not exist"),
])
def test_out_of_range_values_are_exit_2_with_one_line(args: list[str], env: dict[str, str],
                                                      needle: str) -> None:
    res = serve(*args, env=env)
    assert res.returncode == 2, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], lines
