"""The accounting counters reach CloudWatch through the EMF sink as per-minute
deltas, with the declarations of deploy/cloudwatch/podgpu-declarations.json: a whole minute of
an exclusive GPU is 60 GPU-seconds, a time-sliced GPU's two pods 30 each, and the energy deltas
of a GPU's pods add up to its counter's increase over the minute."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from podgpu.accounting import Accountant
from podgpu.sinks.cloudwatch import EmfSink, load_emf_config
from podgpu.sinks.cloudwatch.encode import Encoder
from podgpu.sinks.cloudwatch.queue import EventQueue
from tests.emf_validator import extract
from tests.integration.test_plan_vs_sink import Captured
from tests.unit.sinks.cloudwatch.simnode import SimNode

CONFIG = Path(__file__).resolve().parents[3] / "deploy" / "cloudwatch" / "podgpu-declarations.json"
ALLOCATED = "podgpu_pod_gpu_allocated_seconds_total"
ENERGY = "podgpu_pod_gpu_energy_joules_total"


def test_per_minute_deltas_per_pod_and_per_namespace() -> None:
    node = SimNode(count=4, start=1_800_000_000.0)  # a minute boundary
    captured = Captured()
    sink = EmfSink(node.builder(), Encoder(load_emf_config(str(CONFIG))), EventQueue(1 << 24),
                   captured, interval=60)
    acc = Accountant(node.builder().options.labels)
    energy: dict[tuple[int, float], float] = {}  # (GPU, time) -> counter (mJ)
    for snap in node.snapshots(4 * 60 + 1):
        acc.observe(snap)
        sink.offer(snap)
        sink.offer_counters(snap.taken_at, acc.emf_items())
        for s in snap.samples:
            value = s.values["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"]
            energy[(s.device.index, snap.taken_at)] = float(value)
    sink.stop()
    per_pod: dict[tuple[int, str, str], float] = defaultdict(float)
    per_ns: dict[tuple[int, str, str], float] = defaultdict(float)
    for ts, message in captured.events:
        minute = ts // 60_000 - 1_800_000_000 // 60
        for x in extract(message):
            dims = dict(x.dimensions)
            if x.name not in (ALLOCATED, ENERGY):
                continue
            if "pod" in dims:
                per_pod[(minute, dims["pod"], x.name)] += sum(x.values)
            else:
                per_ns[(minute, dims["namespace"], x.name)] += sum(x.values)
    for minute in (1, 2, 3):  # minute 0 seeds the counters (the first sample is not a delta)
        assert abs(per_pod[(minute, "train-0", ALLOCATED)] - 60) < 1e-6
        assert abs(per_pod[(minute, "infer-a", ALLOCATED)] - 30) < 1e-6
        assert abs(per_ns[(minute, "inference", ALLOCATED)] - 60) < 1e-6
        # the window of minute m holds the samples taken in it, each with the delta since the
        # sample before: the counter's increase from the second before the minute to its last
        start = 1_800_000_000.0 + 60 * minute
        for gpu, pods in ((0, ("train-0",)), (1, ("infer-a", "infer-b"))):
            device = (energy[(gpu, start + 59)] - energy[(gpu, start - 1)]) / 1000.0
            pod_sum = sum(per_pod[(minute, p, ENERGY)] for p in pods)
            assert abs(pod_sum - device) <= 0.01 * device, (minute, gpu, pod_sum, device)
