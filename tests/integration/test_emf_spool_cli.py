"""A bad `--emf-spool-dir` is one line and exit 2 for `serve` and `emf`, and a spool holding a FIFO
and a symlink to /dev/zero does not stop `serve` from starting. Real processes,
real files."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ServeProcess

pytestmark = pytest.mark.integration

SEED_CONFIG = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "seed" / \
    "cwagent-config.json"
EMF = ["--cloudwatch-config", str(SEED_CONFIG), "--cluster-name", "c", "--emf-destination",
       "stdout"]


@pytest.mark.parametrize("command", [
    ["serve", "--simulate", "1", "-a", "127.0.0.1:0"],
    ["emf", "--scrape", "http://127.0.0.1:1/metrics", "-a", "off"],
])
@pytest.mark.parametrize(("sub", "why"), [("", "exists and is not a directory"),
                                          ("x", "cannot create it: Not a directory")])
def test_a_bad_spool_dir_is_exit_2_and_one_line(tmp_path: Path, command: list[str], sub: str,
                                                why: str) -> None:
    afile = tmp_path / "afile"
    afile.write_text("")
    spool = afile / sub if sub else afile
    proc = subprocess.run([sys.executable, "-m", "podgpu", *command, *EMF, "--emf-spool-dir",
                           str(spool)], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines()[-1].endswith(f"--emf-spool-dir {str(spool)!r}: {why}")


def test_a_fifo_and_a_dev_zero_link_in_the_spool_do_not_stop_the_start(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "podgpu-emf-001700000000000-1-000001.jsonl")
    (tmp_path / "podgpu-emf-001700000000001-1-000002.jsonl").symlink_to("/dev/zero")
    serve = ServeProcess("--simulate", "1", *EMF, "--emf-spool-dir", str(tmp_path))
    try:
        serve.wait_ready(timeout=20)
    finally:
        serve.stop()
