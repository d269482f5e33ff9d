"""The EMF sink's cost on the collect thread per 1 s cycle (`SeriesBuilder.series` +
`WindowAccumulator.add`, 8 simulated GPUs, the seed's config), for a before/after comparison:

    git archive COMMIT src bench tests/fixtures | tar -x -C OLD_DIR
    .venv/bin/python -m bench.archive.emf_offer_cost --root OLD_DIR     # before
    .venv/bin/python -m bench.archive.emf_offer_cost                    # after (this tree)

Prints median, p99 and min in microseconds over 180 cycles after a 60-cycle warm-up.
"""

from __future__ import annotations

import argparse
import inspect
import json
import statistics
import sys
import time
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--root", default=str(Path(__file__).resolve().parents[2]))
    root = ap.parse_args().root
    sys.path.insert(0, root + "/src")
    sys.path.insert(0, root)
    from bench.bench_emf import SEED, Clock, node

    from podgpu.fields.metriclist import load_default
    from podgpu.sinks.cloudwatch.declarations import load_emf_config
    from podgpu.sinks.cloudwatch.encode import Encoder
    from podgpu.sinks.cloudwatch.series import SeriesBuilder, SeriesOptions
    from podgpu.sinks.cloudwatch.window import WindowAccumulator
    from podgpu.sinks.prometheus.labels import LabelOptions

    kw: dict[str, object] = dict(labels=LabelOptions(hostname="n"), instance="n:9400",
                                 cluster_name="prod", node_name="n",
                                 extra=(("Service", "nvidia-dcgm-exporter"),))
    if "namespace" in inspect.signature(SeriesOptions).parameters:
        kw["namespace"] = "gpu-operator"
    builder = SeriesBuilder(load_default(), SeriesOptions(**kw))  # type: ignore[arg-type]
    enc = Encoder(load_emf_config(str(SEED)))
    acc = WindowAccumulator(60.0, enc.wanted)
    clock = Clock(1_800_000_000.0)
    collector = node(clock)
    snaps = []
    for _ in range(240):
        snaps.append(collector.cycle())
        clock.now += 1.0
    times = []
    for s in snaps:
        t0 = time.perf_counter()
        acc.add(s.taken_at, builder.series(s))
        times.append(time.perf_counter() - t0)
    t = sorted(times[60:])
    print(json.dumps({"median_us": statistics.median(t) * 1e6,
                      "p99_us": t[int(len(t) * 0.99)] * 1e6, "min_us": t[0] * 1e6}))


if __name__ == "__main__":
    main()
