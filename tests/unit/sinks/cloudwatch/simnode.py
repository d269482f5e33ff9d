"""A simulated node driven by a fake clock: real backend, scenario pods, real Collector."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from podgpu.collect import Collector
from podgpu.fields.metriclist import MetricList, load_default
from podgpu.model import Snapshot
from podgpu.sim.backend import MODELS, SimulatedBackend
from podgpu.sim.scenario import SimulatedAttributor, default_scenario
from podgpu.sinks.cloudwatch.series import Item, LabelKey, SeriesBuilder, SeriesOptions
from podgpu.sinks.prometheus.labels import LabelOptions
from tests.conftest import FakeClock

LABELS = LabelOptions(hostname="node-a")
OPTS = SeriesOptions(labels=LABELS, instance="10.0.0.5:9400", cluster_name="prod",
                     node_name="node-a", namespace="gpu-operator", pod_name="podgpu-x7k2p",
                     container_name="podgpu", extra=(("Service", "nvidia-dcgm-exporter"),))
"""The agent identity, as podgpu runs in the gpu-operator namespace behind the Service
nvidia-dcgm-exporter (the dcgm-exporter migration overlay)."""


def flat(groups: Iterable[tuple[LabelKey, str, list[Item]]]
         ) -> Iterator[tuple[LabelKey, str, str, float]]:
    """(label key, metric, type, value) per series, for assertions."""
    for key, kind, items in groups:
        for name, value in items:
            yield key, name, kind, value


class SimNode:
    def __init__(self, count: int = 4, model: str = "H100", start: float = 1_800_000_000.0,
                 metrics: MetricList | None = None) -> None:
        self.clock = FakeClock(start)
        self.metrics = metrics or load_default()
        scenario = default_scenario(count)
        self.backend = SimulatedBackend(count, MODELS[model], clock=self.clock, scenario=scenario)
        self.backend.open()
        attributor = SimulatedAttributor(scenario)
        self.collector = Collector(self.backend, self.metrics.fields, attributor=attributor,
                                   want_processes=True, clock=self.clock)

    def snapshots(self, seconds: int, step: float = 1.0) -> Iterator[Snapshot]:
        for _ in range(int(seconds / step)):
            yield self.collector.cycle()
            self.clock.advance(step)

    def builder(self, opts: SeriesOptions = OPTS) -> SeriesBuilder:
        return SeriesBuilder(self.metrics, opts)
