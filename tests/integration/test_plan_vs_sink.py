"""`podgpu plan` against what the EMF sink really produces on a simulated cluster.

Several simulated nodes of the plan's shape (podgpu's SimulatedBackend, real Collector, real
EmfSink with its thread, encoder, queue and sender) run for a few fake-clock minutes; what they
send is read back (from a real CloudWatch Logs emulator, moto in server mode, for the churn case;
from an in-memory destination for the 100-node case, where 100 log streams in moto would only add
time) and counted with the spec-written extractor (tests/emf_validator.py): distinct custom
metrics, and PutLogEvents bytes per minute past the first (counter-seeding) minute. The plan's
numbers for the same shape must be within 5 %.

The nodes are built with the plan's own scenario (pod names, node names) so both sides see pods
of the same shape; what is checked is the plan's counting and its scaling from one node-minute to
the cluster and the period, including pod churn.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from podgpu.fields.metriclist import load_default
from podgpu.plan.model import PlanOptions, estimate
from podgpu.sim.node import Shape, SimNode
from podgpu.sinks.cloudwatch import EmfSink, load_emf_config
from podgpu.sinks.cloudwatch.destinations import CloudWatchDestination
from podgpu.sinks.cloudwatch.encode import Encoder
from podgpu.sinks.cloudwatch.queue import EVENT_OVERHEAD, EventQueue
from podgpu.sinks.cloudwatch.series import SeriesBuilder, SeriesOptions
from podgpu.sinks.prometheus.labels import LabelOptions
from tests.emf_validator import extract
from tests.integration.test_cloudwatch_moto import CREDS, moto_url, read_events

__all__ = ["moto_url"]
pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
SEED = ROOT / "tests" / "fixtures" / "seed" / "cwagent-config.json"
EXAMPLE = ROOT / "deploy" / "cloudwatch" / "podgpu-declarations.json"
LABELS = (("Service", "nvidia-dcgm-exporter"),)
CLUSTER = "plan-check"


class Captured:
    """An in-memory Destination: keeps every (timestamp, message) the sender delivers."""

    name = "memory"
    max_batch_events = 10_000
    max_batch_bytes = 1_048_576

    def __init__(self) -> None:
        self.events: list[tuple[int, str]] = []

    def send(self, batch: Sequence[tuple[int, str]]) -> int:
        self.events.extend(batch)
        return 0

    def close(self) -> None:
        pass


def make_sink(node: SimNode, config: Any, destination: Any) -> EmfSink:
    opts = SeriesOptions(labels=LabelOptions(hostname=node.name), namespace="gpu-operator",
                         instance=f"{node.name}:9400", cluster_name=CLUSTER, node_name=node.name,
                         extra=LABELS)  # the agent identity, as the plan's podgpu columns
    sink = EmfSink(SeriesBuilder(load_default(), opts), Encoder(config), EventQueue(64 << 20),
                   destination, interval=60)
    sink.start()
    return sink


def run_cluster(shape: Shape, config: Any, minutes: int, samples_per_minute: int,
                destination_for: Any, renamed_at: int | None = None) -> float:
    """Drive every node through `minutes` minutes; node 0's pods get new names at minute
    `renamed_at`. Returns the start time (Unix s, aligned to a minute)."""
    start = math.floor(time.time() / 60) * 60 - 60 * (minutes + 2)
    metrics = load_default()
    step = 60 / samples_per_minute
    for n in range(shape.nodes):
        node = SimNode(shape, metrics, n, 0, start=start)
        sink = make_sink(node, config, destination_for(node.name))
        for minute in range(minutes):
            if n == 0 and minute == renamed_at:
                node = SimNode(shape, metrics, n, 1, start=node.now)
            for snap in node.snapshots(samples_per_minute, step):
                sink.offer(snap)
        sink.stop()
    return start


def measure(messages: list[tuple[int, str]], start: float, minutes: int) -> tuple[int, float]:
    """(distinct custom metrics, PutLogEvents bytes per minute after the first minute)."""
    identities = {(x.namespace, x.name, x.dimensions) for _, m in messages for x in extract(m)}
    later = [m for ts, m in messages if ts >= (start + 60) * 1000]
    per_minute = sum(len(m.encode()) + EVENT_OVERHEAD for m in later) / (minutes - 1)
    return len(identities), per_minute


def within(measured: float, planned: float, tolerance: float = 0.05) -> bool:
    return abs(planned - measured) <= tolerance * measured


def test_churn_cluster_through_moto_matches_the_plan(moto_url: str,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    for k, v in CREDS.items():
        monkeypatch.setenv(k, v)
    config = load_emf_config(str(SEED))
    minutes = 4
    shape = Shape(nodes=3, gpus_per_node=4)
    group = f"/plan/{os.getpid()}"

    def dest(stream: str) -> CloudWatchDestination:
        return CloudWatchDestination(log_group=group, log_stream=stream, region="us-east-1",
                                     endpoint_url=moto_url)

    start = run_cluster(shape, config, minutes, 60, dest, renamed_at=2)
    messages = [(e["timestamp"], e["message"])
                for n in range(shape.nodes)
                for e in read_events(moto_url, group, SimNode(shape, load_default(), n).name)]
    measured_metrics, measured_bytes = measure(messages, start, minutes)
    period_days = minutes / 1440
    planned = estimate(Shape(nodes=3, gpus_per_node=4, churn_per_day=4 / period_days), config,
                       PlanOptions(cluster_name=CLUSTER, emf_labels=LABELS, days=period_days))
    p = planned.paths["podgpu-1s"]
    # 12 exclusive pods x 14 seed metrics, and node 0's 4 renamed pods add 4 x 14
    assert measured_metrics == 12 * 14 + 4 * 14
    assert within(measured_metrics, p.metrics_in_period)
    assert within(measured_bytes, p.bytes_per_minute), (measured_bytes, p.bytes_per_minute)


@pytest.mark.parametrize(("shape", "config", "samples", "path", "minutes"), [
    (Shape(nodes=100, gpus_per_node=8), SEED, 1, "podgpu-60s", 3),
    (Shape(nodes=2, gpus_per_node=4, sharing="time-slicing", pods_per_gpu=2), EXAMPLE, 60,
     "podgpu-1s", 3),
    (Shape(nodes=2, gpus_per_node=2, sharing="mig", pods_per_gpu=3), EXAMPLE, 60, "podgpu-1s", 3),
], ids=["100x8-seed-60s", "time-slicing-1s", "mig-1s"])
def test_simulated_cluster_matches_the_plan(shape: Shape, config: Path, samples: int, path: str,
                                            minutes: int) -> None:
    cfg = load_emf_config(str(config))
    captured = Captured()
    start = run_cluster(shape, cfg, minutes, samples, lambda _name: captured)
    measured_metrics, measured_bytes = measure(captured.events, start, minutes)
    planned = estimate(shape, cfg, PlanOptions(cluster_name=CLUSTER, emf_labels=LABELS))
    p = planned.paths[path]
    assert measured_metrics > 0
    assert within(measured_metrics, p.metrics_steady), (measured_metrics, p.metrics_steady)
    assert within(measured_bytes, p.bytes_per_minute), (measured_bytes, p.bytes_per_minute)


def podgpu_plan(*args: str) -> Any:
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-m", "podgpu", "plan", *args], capture_output=True,
                          text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT / "src")})


def test_plan_cli_100_nodes_x_8_gpus_prints_three_columns() -> None:
    res = podgpu_plan("--nodes", "100", "--gpus-per-node", "8", "--churn-per-day", "50")
    assert res.returncode == 0, res.stderr
    header = res.stdout.splitlines()[1]
    assert all(t in header for t in ("seed: central agent", "podgpu EMF, 60 s",
                                     "podgpu EMF, 1 s arrays"))
    assert "us-east-1 list prices as of 2026-12" in res.stdout
    res = podgpu_plan("--nodes", "100", "--gpus-per-node", "8", "--churn-per-day", "50",
                      "--format", "json", "--metric-prices", "0.3,0.1,0.05,0.02")
    d = json.loads(res.stdout)
    agent, p60, p1 = (d["paths"][k] for k in ("agent", "podgpu-60s", "podgpu-1s"))
    # the seed's declaration: 14 metrics per (Service, Namespace, ClusterName, job, pod)
    assert p60["custom_metrics_active"] == p1["custom_metrics_active"] == 800 * 14
    assert p1["custom_metrics_in_period"] == 800 * 14 + 50 * 30 * 14
    # CloudWatch prorates custom metrics by the hour: 800 pods' 14 metrics all month, and the
    # hour of each of the 1,500 replacements billed twice (the old and the new pod's metrics)
    billed = 800 * 14 + 50 * 30 * 14 * 1 / (30 * 24)
    assert p1["custom_metric_months_billed"] == pytest.approx(billed, abs=0.05)
    # the agent path keeps the workload's `pod`: the same metrics as podgpu
    assert agent["custom_metrics_active"] == p1["custom_metrics_active"]
    assert p1["put_log_events_bytes"] > p60["put_log_events_bytes"]
    assert p1["metrics_dollars"] == pytest.approx(10_000 * 0.3 + (billed - 10_000) * 0.1, abs=0.01)
    assert d["prometheus"]["active_series"] > 0


@pytest.mark.parametrize(("args", "expect"), [
    (["--sharing", "none", "--pods-per-gpu", "2"], "--pods-per-gpu 2: 1 without sharing"),
    (["--metric-prices", "0.3,x"], "--metric-prices '0.3,x': expected four"),
    (["--cloudwatch-config", "/nonexistent.json"], "/nonexistent.json: cannot read"),
])
def test_plan_bad_input_exits_2_with_one_line(args: list[str], expect: str) -> None:
    res = podgpu_plan(*args)
    assert res.returncode == 2
    (line,) = res.stderr.strip().splitlines()
    assert expect in line
