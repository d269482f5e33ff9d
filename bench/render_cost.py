"""Render cost of one 8-GPU simulated snapshot: the whole /metrics body, and podgpu's own
self-metrics alone (`MetricSource` families rendered by one function).

Run: .venv/bin/python -m bench.render_cost (best of five loops, microseconds per render; the
imports fall back to the older module paths, so the same script measures an older tree with
PYTHONPATH=<that tree>/src)
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # this tree's module; the fallback below exists only in older ones
    from podgpu.sim.backend import MODELS, SimulatedBackend
else:
    try:
        from podgpu.sim.backend import MODELS, SimulatedBackend
    except ImportError:  # older trees: sim/ did not exist
        from podgpu.backends.simulated import MODELS, SimulatedBackend
from podgpu.collect import Collector
from podgpu.fields.metriclist import load_default
from podgpu.sinks.prometheus import RenderOptions, render
from podgpu.sinks.prometheus.labels import LabelOptions
from podgpu.sinks.prometheus.selfmetrics import self_families
from podgpu.sinks.prometheus.source import render as render_families


def best_us(fn: Callable[[], object], loops: int) -> float:
    for _ in range(50):
        fn()
    times = []
    for _ in range(5):
        t = time.perf_counter()
        for _ in range(loops):
            fn()
        times.append((time.perf_counter() - t) / loops * 1e6)
    return min(times)


def main() -> None:
    ml = load_default()
    backend = SimulatedBackend(8, MODELS["H100"], clock=lambda: 1_800_000_000.0)
    backend.open()
    snap = Collector(backend, ml.fields).cycle()
    build, timings = (("version", "x"),), (("render", 0.001),)
    opts = RenderOptions(LabelOptions(hostname="n"), build, timings)
    print(f"render {best_us(lambda: render(snap, ml, opts), 1000):.1f} us")
    print(f"self {best_us(lambda: render_families(self_families(snap, LabelOptions(hostname='n'), build, timings, unavailable=ml.unavailable, listed=ml.spellings)), 5000):.1f} us")


if __name__ == "__main__":
    main()
