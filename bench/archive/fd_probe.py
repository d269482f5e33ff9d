"""The short load test's attack (tests/integration/test_load_short.py) run N times, printing the
peak descriptor count of each run: how far accepts in flight carry podgpu past its connection cap.
Load the machine beside it to see the overshoot (bench/RESULTS.md "Accepts per loop turn").

    .venv/bin/python -m bench.archive.fd_probe [N]
"""

from __future__ import annotations

import argparse
import sys

from tests.support.load import run_load


def main() -> int:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 4
    for _ in range(n):
        res = run_load(argparse.Namespace(
            scrapers=20, scrape_every=0.2, duration=8.0, slow=150, slow_every=0.5,
            half_open=1200, gpus=2,
            serve_arg=["--http-max-connections", "200", "--http-request-timeout", "2"]))
        print(f"descriptors max {res.fds_max} (cap 200), failed scrapes {res.failed}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
