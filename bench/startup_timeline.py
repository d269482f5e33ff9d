"""Where one `podgpu serve` start spends its time until the first valid /metrics, on this machine.

    # on a GPU machine (wheels in /tmp/site, bytecode compiled as in the image):
    PYTHONDONTWRITEBYTECODE=1 PYTHONPATH=/tmp/site python3 -m bench.startup_timeline \\
        --starts 4 [-- -f /tmp/noprof.csv]
    # without a GPU, over bench/slow_nvml's fake NVML:
    .venv/bin/python -m bench.startup_timeline --fake-nvml

Each start runs podgpu with bench/timeline_site first on PYTHONPATH (its sitecustomize logs the
events, see there), polls /metrics every 5 ms until it answers 200 with a GPU series
(bench.startup's `first_metrics`), then stops it and prints the seconds to that answer and the `TL`
lines, each in seconds since the spawn. Arguments after `--` go to `podgpu serve`. A timeline, not
a timing: use bench.startup for the figures (the lines cost a little).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from bench.startup import SERIES, first_metrics
from tests.harness import free_port

ROOT = Path(__file__).resolve().parents[1]


def one_start(podgpu_args: list[str], fake_nvml: bool) -> list[str]:
    port = free_port()
    t0, p0 = time.time(), time.perf_counter()  # the child's clock, and first_metrics'
    path = [str(ROOT / "bench" / "timeline_site"),
            *([str(ROOT / "bench" / "slow_nvml"), str(ROOT)] if fake_nvml else []),
            str(ROOT / "src"), *filter(None, [os.environ.get("PYTHONPATH")])]
    env = dict(os.environ, PODGPU_TIMELINE_T0=repr(t0), PYTHONPATH=os.pathsep.join(path))
    proc = subprocess.Popen([sys.executable, "-m", "podgpu", "serve", "-a", f"127.0.0.1:{port}",
                             "-c", "1000", *podgpu_args], env=env, text=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    lines: list[str] = []

    def read() -> None:
        assert proc.stderr is not None
        lines.extend(line.rstrip() for line in proc.stderr if line.startswith("TL "))
    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        head = f"first valid /metrics {first_metrics(port, SERIES['podgpu'], proc, p0):.4f} s"
    except RuntimeError as exc:
        head = str(exc)
    proc.terminate()
    proc.wait(10)
    reader.join(5)
    return [f"{head} ({' '.join(podgpu_args) or 'defaults'})", *lines]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--starts", type=int, default=2)
    ap.add_argument("--fake-nvml", action="store_true",
                    help="no GPU: podgpu's NVML backend over bench/slow_nvml's fake NVML")
    ap.add_argument("podgpu_args", nargs="*", help="after --: arguments of podgpu serve")
    a = ap.parse_args()
    for _ in range(a.starts):
        print("\n".join(one_start(a.podgpu_args, a.fake_nvml)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
