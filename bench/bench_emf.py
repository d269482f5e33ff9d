"""EMF sink benchmark: build cost per flush against aws-embedded-metrics, the
collect-thread cost per cycle, send cost per flush to a real CloudWatch Logs emulator (moto server
over HTTP), bytes per minute (queue sizing) and RSS added by the sink.

    .venv/bin/python -m bench.bench_emf --out bench/results/emf-DATE.json

Shape: a simulated 8 x H100 node, every GPU held by its own pod, the seed post's agent config
(14 selectors, dimensions Service/Namespace/ClusterName/job/pod), 60 one-second samples per
metric per flush.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

from tests.harness import Serve, free_port, rss_fds  # noqa: E402

from podgpu.collect import Collector  # noqa: E402
from podgpu.fields.metriclist import load_default  # noqa: E402
from podgpu.sim.backend import MODELS, SimulatedBackend  # noqa: E402
from podgpu.sim.scenario import SimulatedAttributor, parse_scenario  # noqa: E402
from podgpu.sinks.cloudwatch.declarations import load_emf_config  # noqa: E402
from podgpu.sinks.cloudwatch.encode import Encoder  # noqa: E402
from podgpu.sinks.cloudwatch.queue import EventQueue  # noqa: E402
from podgpu.sinks.cloudwatch.series import SeriesBuilder, SeriesOptions  # noqa: E402
from podgpu.sinks.cloudwatch.window import ClosedWindow, WindowAccumulator  # noqa: E402
from podgpu.sinks.prometheus.labels import LabelOptions  # noqa: E402

SEED = ROOT / "tests" / "fixtures" / "seed" / "cwagent-config.json"
GPUS = 8


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def node(clock: Clock) -> Collector:
    scenario = parse_scenario({"pods": [
        {"namespace": "ml", "name": f"train-{i}",
         "containers": [{"name": "trainer", "gpus": [{"gpu": i}]}]} for i in range(GPUS)]})
    backend = SimulatedBackend(GPUS, MODELS["H100"], clock=clock, scenario=scenario)
    backend.open()
    metrics = load_default()
    return Collector(backend, metrics.fields, want_processes=True, clock=clock,
                     attributor=SimulatedAttributor(scenario))


def series_builder() -> SeriesBuilder:
    return SeriesBuilder(load_default(), SeriesOptions(
        labels=LabelOptions(hostname="ip-10-0-1-5"), instance="ip-10-0-1-5:9400",
        cluster_name="prod", node_name="ip-10-0-1-5", namespace="gpu-operator",
        service="nvidia-dcgm-exporter"))


def one_minute(encoder: Encoder, start: float) -> tuple[ClosedWindow, list[float]]:
    clock = Clock(start)
    collector = node(clock)
    builder = series_builder()
    acc = WindowAccumulator(60.0, encoder.wanted)
    offer_seconds = []
    for _ in range(60):
        snap = collector.cycle()
        t0 = time.perf_counter()
        acc.add(snap.taken_at, builder.series(snap))
        offer_seconds.append(time.perf_counter() - t0)
        clock.now += 1.0
    closed = acc.close()
    assert closed is not None
    return closed, offer_seconds


def official_documents(closed: ClosedWindow, namespace: str, dims: tuple[str, ...],
                       units: dict[str, str]) -> list[str]:
    """The same documents built with aws-embedded-metrics (the official Python library)."""
    from aws_embedded_metrics.logger.metrics_context import MetricsContext
    from aws_embedded_metrics.serializers.log_serializer import LogSerializer

    out: list[str] = []
    for key, metrics in closed.groups.items():
        labels = dict(key)
        ctx = MetricsContext.empty()
        ctx.namespace = namespace
        ctx.set_dimensions([{d: labels[d] for d in dims}], use_default=False)
        for k, label in labels.items():
            if k not in dims:
                ctx.set_property(k, label)
        for name, values in metrics.items():
            for value in values:
                ctx.put_metric(name, value, units.get(name, "None"))
        ctx.meta["Timestamp"] = closed.timestamp_ms
        out.extend(LogSerializer.serialize(ctx))
    return out


def timed(fn: Any, repeat: int) -> list[float]:
    out = []
    for _ in range(repeat):
        gc.collect()
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def stats(xs: list[float]) -> dict[str, float]:
    xs = sorted(xs)
    return {"median_ms": statistics.median(xs) * 1000, "p90_ms": xs[int(len(xs) * 0.9)] * 1000,
            "min_ms": xs[0] * 1000}


def bench_build(repeat: int) -> dict[str, Any]:
    config = load_emf_config(str(SEED))
    encoder = Encoder(config)
    start = 1_800_000_000.0 - 1_800_000_000.0 % 60
    closed, offers = one_minute(encoder, start)
    metrics_per_doc = {len(m) for m in closed.groups.values()}
    samples = {len(v) for m in closed.groups.values() for v in m.values()}
    cold = timed(lambda: Encoder(config).encode(closed), 1)[0]
    ours = timed(lambda: encoder.encode(closed), repeat)
    units = {}
    for doc in encoder.encode(closed):
        for d in json.loads(doc)["_aws"]["CloudWatchMetrics"]:
            units.update({m["Name"]: m.get("Unit", "None") for m in d["Metrics"]})
    dims = config.declarations[0].dimensions[0]
    official = timed(lambda: official_documents(closed, config.namespace, dims, units), repeat)
    our_docs = encoder.encode(closed)
    their_docs = official_documents(closed, config.namespace, dims, units)
    return {
        "label_sets": len(closed.groups), "metrics_per_document": sorted(metrics_per_doc),
        "samples_per_metric": sorted(samples),
        "podgpu_encode": stats(ours), "podgpu_encode_cold_ms": cold * 1000,
        "aws_embedded_metrics": stats(official),
        "ratio_official_over_podgpu": statistics.median(official) / statistics.median(ours),
        "podgpu_bytes_per_flush": sum(len(d.encode()) for d in our_docs),
        "official_bytes_per_flush": sum(len(d.encode()) for d in their_docs),
        "offer_per_cycle_us": {"median": statistics.median(offers) * 1e6,
                               "max": max(offers) * 1e6},
    }


def bench_bytes() -> dict[str, Any]:
    """Bytes per minute queued for 8 GPUs: the seed config, and every default-list field kept
    (--emf-keep-unmatched), the worst case the queue must hold for an hour."""
    out = {}
    start = 1_800_000_000.0 - 1_800_000_000.0 % 60
    for name, enc in (("seed", Encoder(load_emf_config(str(SEED)))),
                      ("keep_unmatched", Encoder(load_emf_config(str(SEED)),
                                                 keep_unmatched=True))):
        closed, _ = one_minute(enc, start)
        docs = enc.encode(closed)
        per_min = sum(len(d.encode()) + 26 for d in docs)
        out[name] = {"events_per_minute": len(docs), "bytes_per_minute": per_min,
                     "bytes_per_hour": per_min * 60}
    # The agent's path scraping every second: one event per label set per scrape, one sample
    # each, and every unmatched series still ingested as a plain log event.
    enc = Encoder(load_emf_config(str(SEED)), keep_unmatched=True)
    clock = Clock(start)
    collector = node(clock)
    builder = series_builder()
    acc = WindowAccumulator(1.0, enc.wanted)
    total = events = 0
    for _ in range(61):
        snap = collector.cycle()
        window = acc.add(snap.taken_at, builder.series(snap))
        clock.now += 1.0
        if window is not None:
            docs = enc.encode(window)
            events += len(docs)
            total += sum(len(d.encode()) + 26 for d in docs)
    out["agent_path_1s_scrape_equivalent"] = {"events_per_minute": events,
                                              "bytes_per_minute": total,
                                              "bytes_per_hour": total * 60}
    return out


def bench_send(flushes: int) -> dict[str, Any]:
    """CPU of our process per flush sending to moto (boto3 signing, HTTP, JSON)."""
    from podgpu.sinks.cloudwatch.destinations import CloudWatchDestination
    from podgpu.sinks.cloudwatch.sender import Sender

    port = free_port()
    env = {**os.environ, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}
    moto = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p",
                             str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env=env)
    try:
        for _ in range(200):
            try:
                socket.create_connection(("127.0.0.1", port), 0.2).close()
                break
            except OSError:
                time.sleep(0.05)
        os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
        os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
        dest = CloudWatchDestination(log_group="/aws/containerinsights/prod/prometheus",
                                     log_stream="ip-10-0-1-5", region="us-east-1",
                                     endpoint_url=f"http://127.0.0.1:{port}")
        encoder = Encoder(load_emf_config(str(SEED)))
        queue = EventQueue(1 << 30)
        sender = Sender(dest, queue)
        start = time.time() - time.time() % 60 - 60 * flushes
        cpu = []
        wall = []
        events = 0
        for i in range(flushes):
            closed, _ = one_minute(encoder, start + 60 * i)
            c0, w0 = time.thread_time(), time.perf_counter()
            documents = encoder.encode(closed)
            events += len(documents)
            queue.put(closed.timestamp_ms, documents)
            sender.pump()
            cpu.append(time.thread_time() - c0)
            wall.append(time.perf_counter() - w0)
        st = sender.stats()
        assert st.sent == events, (events, st)
        return {"flushes": flushes, "events_per_flush": events / flushes, "cpu_per_flush_ms": stats(cpu), "wall_per_flush_ms": stats(wall),
                "first_flush_cpu_ms": cpu[0] * 1000,
                "cpu_per_minute_percent_of_a_core": statistics.median(cpu) / 60 * 100}
    finally:
        moto.terminate()
        moto.wait(10)


def rss_of_serve(extra: list[str], seconds: float) -> float:
    """RSS in MiB of `podgpu serve --simulate 8 EXTRA`, `seconds` after it is ready."""
    env = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}
    with Serve(["--simulate", "8", *extra], env=env) as serve:
        time.sleep(seconds)
        return rss_fds(serve.pid)[0]


def bench_rss(seconds: float) -> dict[str, float]:
    """RSS after two 5 s flushes: no sink, the sink to stdout, the sink with boto3 (CloudWatch
    destination pointed at a closed port: the client exists, sends fail and queue)."""
    common = ["--cloudwatch-config", str(SEED), "--cluster-name", "prod", "--emf-interval", "5",
              "--emf-label", "Service=nvidia-dcgm-exporter"]
    dead = f"http://127.0.0.1:{free_port()}"
    return {
        "no_sink_mib": rss_of_serve([], seconds),
        "sink_stdout_mib": rss_of_serve([*common, "--emf-destination", "stdout"], seconds),
        "sink_cloudwatch_boto3_mib": rss_of_serve(
            [*common, "--emf-endpoint-url", dead, "--aws-region", "us-east-1"], seconds),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeat", type=int, default=50)
    ap.add_argument("--flushes", type=int, default=10)
    ap.add_argument("--rss-seconds", type=float, default=12.0)
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    result = {"when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
              "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python "
                         f"{platform.python_version()}",
              "build": bench_build(args.repeat), "bytes": bench_bytes(),
              "send": bench_send(args.flushes), "rss": bench_rss(args.rss_seconds)}
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
