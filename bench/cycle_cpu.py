"""CPU per collection cycle and per render, in-process, so a loaded machine does not count.

The simulated 8 x H100 node with its built-in scenario through the real `Collector` and the
default-list renderer, as `podgpu serve --simulate 8` runs them: 50 warm-up cycles, then N cycles
timed with `time.process_time`, then N renders of those snapshots. Prints one JSON line
(`cycle_ms`, `render_ms`: CPU milliseconds per cycle). For a before/after, run it alternately with
`PYTHONPATH=<tree>/src` pointing at each tree (bench/RESULTS.md, "Lost and hung GPUs ..."):

    PYTHONPATH=/tmp/before/src .venv/bin/python -m bench.cycle_cpu 1000
"""

from __future__ import annotations

import json
import sys
import time

from podgpu.collect import Collector
from podgpu.fields import load_default
from podgpu.sim.backend import MODELS, SimulatedBackend
from podgpu.sim.scenario import SimulatedAttributor, default_scenario
from podgpu.sinks.prometheus import RenderOptions, render
from podgpu.sinks.prometheus.labels import LabelOptions


def main(argv: list[str]) -> int:
    n = int(argv[0]) if argv else 400
    metrics = load_default()
    scenario = default_scenario(8)
    backend = SimulatedBackend(8, MODELS["H100"], scenario=scenario)
    collector = Collector(backend, metrics.fields, attributor=SimulatedAttributor(scenario),
                          want_processes=True)
    opts = RenderOptions(LabelOptions(hostname="bench-node"), (("version", "bench"),))
    for _ in range(50):
        render(collector.cycle(), metrics, opts)
    t0 = time.process_time()
    snaps = [collector.cycle() for _ in range(n)]
    t1 = time.process_time()
    for snap in snaps:
        render(snap, metrics, opts)
    t2 = time.process_time()
    print(json.dumps({"cycle_ms": (t1 - t0) / n * 1000, "render_ms": (t2 - t1) / n * 1000}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
