"""podgpu's EMF path against aws-embedded-metrics, like for like.

    .venv/bin/python -m bench.archive.bench_emf_aem --out bench/results/emf-aem-DATE.json

Both sides get the same input: one minute of a simulated 8 x H100 node (every GPU held by its
own pod, podgpu's agent-identity labels, the seed's agent config), as 60 one-second cycles of
(label set, [(metric, value), ...]) restricted to the metrics the seed's declaration extracts.
Both sides do the same work: accumulate the 60 cycles, then encode the minute's documents.

- podgpu: `WindowAccumulator.add` per cycle, `Encoder.encode` at the end of the minute.
- aws-embedded-metrics 3.5: one `MetricsContext` per label set (the config's namespace, the
  declaration's dimension set, the other labels as properties), `put_metric` per sample,
  `LogSerializer.serialize` per context at the end of the minute.

Cold: every repetition builds new podgpu objects (no plan, head or "wanted" caches: a new label
set, e.g. after a pod change). Warm: the same accumulator and encoder over consecutive minutes
(a steady node). aws-embedded-metrics keeps no state between minutes, so its cold and warm runs
do the same work; both are measured anyway, interleaved with podgpu's.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "src"))

from bench.bench_emf import Clock, node  # noqa: E402

from podgpu.fields.metriclist import load_default  # noqa: E402
from podgpu.sinks.cloudwatch.declarations import load_emf_config  # noqa: E402
from podgpu.sinks.cloudwatch.encode import Encoder  # noqa: E402
from podgpu.sinks.cloudwatch.series import Item, LabelKey, SeriesBuilder, SeriesOptions  # noqa: E402
from podgpu.sinks.cloudwatch.window import WindowAccumulator  # noqa: E402
from podgpu.sinks.prometheus.labels import LabelOptions  # noqa: E402

SEED = ROOT / "tests" / "fixtures" / "seed" / "cwagent-config.json"
Cycle = list[tuple[LabelKey, str, list[Item]]]


def inputs(start: float) -> list[tuple[float, Cycle]]:
    """60 cycles of the node, only the series the seed's declaration extracts."""
    config = load_emf_config(str(SEED))
    probe = Encoder(config)
    builder = SeriesBuilder(load_default(), SeriesOptions(
        labels=LabelOptions(hostname="ip-10-0-1-5"), instance="10.0.1.5:9400",
        cluster_name="prod", node_name="ip-10-0-1-5", namespace="gpu-operator",
        extra=(("Service", "nvidia-dcgm-exporter"),)))
    clock = Clock(start)
    collector = node(clock)
    out = []
    for _ in range(60):
        snap = collector.cycle()
        cycle = []
        for key, kind, items in builder.series(snap):
            kept = [(n, v) for n, v in items if probe.plan(key, n)[0]]
            if kept:
                cycle.append((key, kind, kept))
        out.append((snap.taken_at, cycle))
        clock.now += 1.0
    return out


def podgpu_minute(acc: WindowAccumulator, encoder: Encoder, cycles: list[tuple[float, Cycle]],
                  ) -> list[str]:
    for taken_at, cycle in cycles:
        acc.add(taken_at, cycle)
    closed = acc.close()
    assert closed is not None
    return encoder.encode(closed)


def aem_minute(cycles: list[tuple[float, Cycle]], namespace: str, dims: tuple[str, ...],
               timestamp_ms: int) -> list[str]:
    from aws_embedded_metrics.logger.metrics_context import MetricsContext
    from aws_embedded_metrics.serializers.log_serializer import LogSerializer

    contexts: dict[LabelKey, Any] = {}
    for _, cycle in cycles:
        for key, _kind, items in cycle:
            ctx = contexts.get(key)
            if ctx is None:
                labels = dict(key)
                ctx = contexts[key] = MetricsContext.empty()
                ctx.namespace = namespace
                ctx.set_dimensions([{d: labels[d] for d in dims}], use_default=False)
                for k, v in labels.items():
                    if k not in dims:
                        ctx.set_property(k, v)
                ctx.meta["Timestamp"] = timestamp_ms
            for name, value in items:
                ctx.put_metric(name, value)
    out: list[str] = []
    for ctx in contexts.values():
        out.extend(LogSerializer.serialize(ctx))
    return out


def timed(fn: Any) -> float:
    gc.collect()
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def stats(xs: list[float]) -> dict[str, float]:
    xs = sorted(xs)
    return {"median_ms": statistics.median(xs) * 1000, "min_ms": xs[0] * 1000,
            "p90_ms": xs[int(len(xs) * 0.9)] * 1000}


def run(repeat: int) -> dict[str, Any]:
    config = load_emf_config(str(SEED))
    dims = config.declarations[0].dimensions[0]
    start = 1_800_000_000.0 - 1_800_000_000.0 % 60
    minutes = [[(t + 60 * m, c) for t, c in inputs(start)] for m in range(2)]
    ts = round(start * 1000)
    warm_acc = WindowAccumulator(60.0, (warm_enc := Encoder(config)).wanted)
    podgpu_minute(warm_acc, warm_enc, minutes[0])  # the warm objects have seen a minute
    samples = {"podgpu_cold": [], "podgpu_warm": [], "aem_cold": [], "aem_warm": []}
    for i in range(repeat):
        def cold() -> None:
            enc = Encoder(config)
            podgpu_minute(WindowAccumulator(60.0, enc.wanted), enc, minutes[0])
        samples["podgpu_cold"].append(timed(cold))
        samples["aem_cold"].append(timed(lambda: aem_minute(minutes[0], config.namespace,
                                                            dims, ts)))
        # warm: consecutive minutes through the same objects (alternating the two inputs keeps
        # the window moving forward in time)
        shifted = [(t + 120 * (i + 1), c) for t, c in minutes[i % 2]]
        samples["podgpu_warm"].append(timed(lambda s=shifted: podgpu_minute(warm_acc, warm_enc, s)))
        samples["aem_warm"].append(timed(lambda s=shifted: aem_minute(s, config.namespace, dims,
                                                                      ts)))
    ours = podgpu_minute(WindowAccumulator(60.0, (e := Encoder(config)).wanted), e, minutes[0])
    theirs = aem_minute(minutes[0], config.namespace, dims, ts)
    result: dict[str, Any] = {k: stats(v) for k, v in samples.items()}
    result["ratio_cold"] = (statistics.median(samples["aem_cold"])
                            / statistics.median(samples["podgpu_cold"]))
    result["ratio_warm"] = (statistics.median(samples["aem_warm"])
                            / statistics.median(samples["podgpu_warm"]))
    result["documents"] = {"podgpu": len(ours), "aem": len(theirs)}
    result["bytes"] = {"podgpu": sum(len(x) for x in ours), "aem": sum(len(x) for x in theirs)}
    result["samples_per_minute"] = sum(len(items) for _, c in minutes[0] for _, _, items in c)
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeat", type=int, default=30)
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    result = {"when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
              "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python "
                         f"{platform.python_version()}",
              **run(args.repeat)}
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
