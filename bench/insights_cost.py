"""CPU of the Container Insights profile (`serve --emf-container-insights`) per collect cycle and
per interval, on a simulated node: the collect thread's part (InsightsBuilder.series + the
window's add) and the sink thread's (InsightsEncoder.encode of a closed 60 s window).

    .venv/bin/python -m bench.insights_cost [--gpus 8] [--sharing none|time-slicing|mig]

Nodes: `--gpus` H100s, each held by `--pods-per-gpu` pods (sim/node.py's shapes, as `podgpu
plan`). Snapshots are taken first (not timed); then the same snapshots run through the series
builder and the window `--rounds` times, CPU time (time.process_time) per cycle reported as the
median round. Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

from podgpu.accounting.holders import AccountingShares
from podgpu.fields.metriclist import load_default
from podgpu.sim.models import MODELS
from podgpu.sim.node import Shape, SimNode, scenario_pods, simulated_node
from podgpu.sinks.cloudwatch.insights import (
    FixedNode,
    InsightsBuilder,
    InsightsOptions,
    with_insights_fields,
)
from podgpu.sinks.cloudwatch.insights_encode import InsightsEncoder
from podgpu.sinks.cloudwatch.window import WindowAccumulator


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--sharing", default="none")
    ap.add_argument("--pods-per-gpu", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    shape = Shape(nodes=1, gpus_per_node=args.gpus, sharing=args.sharing,
                  pods_per_gpu=args.pods_per_gpu)
    metrics = load_default()
    node = SimNode(shape, metrics, 0, fields=with_insights_fields(metrics.fields))
    node.now -= node.now % 60
    snaps = list(node.snapshots(60, 1.0))
    pods = scenario_pods(node.scenario)
    sim = simulated_node(MODELS["H100"], args.gpus, node.name)
    per_cycle, per_encode, events, nbytes = [], [], 0, 0
    for _ in range(args.rounds):
        builder = InsightsBuilder(InsightsOptions("bench", node.name), FixedNode(sim),
                                  lambda: pods, shares=AccountingShares())
        acc = WindowAccumulator(60.0, lambda k, m: True)
        t0 = time.process_time()
        for s in snaps:
            acc.add(s.taken_at, builder.series(s))
        per_cycle.append((time.process_time() - t0) / len(snaps))
        window = acc.close()
        assert window is not None
        enc = InsightsEncoder()
        t0 = time.process_time()
        lines = enc.encode(window)
        per_encode.append(time.process_time() - t0)
        events, nbytes = len(lines), sum(len(x) for x in lines)
    print(json.dumps({
        "gpus": args.gpus, "sharing": args.sharing, "pods_per_gpu": args.pods_per_gpu,
        "collect_thread_ms_per_cycle": round(statistics.median(per_cycle) * 1000, 3),
        "encode_ms_per_interval": round(statistics.median(per_encode) * 1000, 3),
        "events_per_interval": events, "bytes_per_interval": nbytes,
        "python": sys.version.split()[0]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
