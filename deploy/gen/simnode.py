"""A simulated podgpu node rendered through podgpu's real pipeline, for rule tests and demos.

`expositions()` runs the simulated backend and scenario attributor through `Collector` on a
fake clock and renders every snapshot with the real exposition renderer: the same bytes
`podgpu serve --simulate` would serve at those instants. A lost GPU and XID errors come from the
simulated backend's own scenario (`lost_gpus`, `xids`: sim/lost.py), so a lost GPU exports what
podgpu exports for one (identity, `DCGM_FI_DEV_XID_ERRORS` 79, the XID count, health FAIL; no
readings) and is listed in `Reading.lost`. Other faults (throttling, a failing stage, a stuck
collector, a dead target) are injected by small wrappers around the backend and attributor; they
are fakes for fault injection only, and change values the way the real failure would.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from podgpu.attribution.base import Attribution
from podgpu.backends.base import Reading
from podgpu.collect import Collector
from podgpu.fields.catalog import Field
from podgpu.fields.metriclist import default_text, parse_metric_list
from podgpu.model import Device, GpuProcess, Sample
from podgpu.model.status import StageStatus
from podgpu.sim.backend import MODELS, SimulatedBackend
from podgpu.sim.scenario import SimulatedAttributor, parse_scenario
from podgpu.sinks.prometheus import RenderOptions, render
from podgpu.sinks.prometheus.labels import LabelOptions

HOSTNAME = "gpu-node-1"
INSTANCE = "10.0.0.11:9400"
JOB = "podgpu"

SCENARIO: dict[str, Any] = {
    "pods": [
        {"namespace": "ml", "name": "train-0",
         "containers": [{"name": "trainer", "gpus": [{"gpu": 0}]}]},
        {"namespace": "inference", "name": "infer-a",
         "containers": [{"name": "server", "gpus": [{"gpu": 1, "replica": 0, "share": 0.6}]}]},
        {"namespace": "inference", "name": "infer-b",
         "containers": [{"name": "server", "gpus": [{"gpu": 1, "replica": 1, "share": 0.4}]}]},
        {"namespace": "research", "name": "notebook-0",
         "containers": [{"name": "jupyter", "gpus": [{"gpu": 2, "share": 0}]}]},
    ],
}
"""Exclusive busy (GPU 0), time-sliced 60/40 (GPU 1), allocated but idle (GPU 2), free (GPU 3)."""

EXTRA_ROWS = """
DCGM_FI_DEV_THERMAL_VIOLATION, counter, Throttling duration due to thermal constraints (in ns).
DCGM_FI_DEV_POWER_VIOLATION, counter, Throttling duration due to power constraints (in ns).
"""
"""Rows beyond dcgm-exporter's default list that the throttling alerts need (docs/dashboards.md)."""

Fault = Callable[[float, Reading], Reading]


def set_value(gpu: int, field: str, value: Callable[[float, Sample], float | int],
              start: float) -> Fault:
    """From `start` on, GPU `gpu`'s `field` reads `value(t, sample)`."""
    def fault(t: float, r: Reading) -> Reading:
        if t < start:
            return r
        samples = tuple(s._replace(values={**s.values, field: value(t, s)})
                        if s.device.index == gpu else s for s in r.samples)
        return r._replace(samples=samples)
    return fault


def lose_gpu(gpu: int, start: float, xid: int = 79) -> dict[str, Any]:
    """From `start` on, GPU `gpu` is lost (fell off the bus): a `lost_gpus` entry of the simulated
    node's scenario (sim/lost.py), so it exports what podgpu exports for a lost GPU."""
    return {"gpu": gpu, "at": start, "xid": xid}


class _FaultyBackend:
    """The simulated backend with faults applied to each reading (fault injection only)."""

    def __init__(self, inner: SimulatedBackend, clock: Callable[[], float],
                 faults: Sequence[Fault]) -> None:
        self.name = inner.name
        self._inner, self._clock, self._faults = inner, clock, faults

    def open(self) -> None:
        self._inner.open()

    def devices(self) -> tuple[Device, ...]:
        return self._inner.devices()

    def info(self) -> dict[str, str]:
        return self._inner.info()

    def unavailable_fields(self) -> dict[str, str]:
        return self._inner.unavailable_fields()

    def read(self, fields: Sequence[Field], *, processes: bool = False) -> Reading:
        r = self._inner.read(fields, processes=processes)
        for f in self._faults:
            r = f(self._clock(), r)
        return r

    def close(self) -> None:
        self._inner.close()


class _FailingAttributor:
    """The scenario attributor whose kubelet goes away at `start` (fault injection only)."""

    def __init__(self, inner: SimulatedAttributor, clock: Callable[[], float], start: float) -> None:
        self._inner, self._clock, self._start = inner, clock, start

    def start(self) -> None:
        self._inner.start()

    def close(self) -> None:
        self._inner.close()

    def attribute(self, devices: tuple[Device, ...], processes: tuple[GpuProcess, ...]) -> Attribution:
        if self._clock() >= self._start:
            return Attribution(processes=processes, status=StageStatus.failed("kubelet socket missing"),
                               errors=(("kubelet", 1),))
        return self._inner.attribute(devices, processes)


@dataclass(frozen=True)
class Node:
    """How to run the simulated node: faults and whole-node conditions from a time on."""

    faults: tuple[Fault, ...] = ()
    xids: tuple[dict[str, Any], ...] = ()
    lost_gpus: tuple[dict[str, Any], ...] = ()
    """Scenario `lost_gpus` entries (`lose_gpu`)."""
    kubelet_gone_at: float | None = None
    stuck_at: float | None = None
    """The collector stops; the server keeps serving the last bytes (a hung NVML call)."""
    down_at: float | None = None
    """The target stops answering: no exposition, `up` 0."""
    gpus: int = 4
    virtual_gpus: bool = False
    """dcgm-exporter's shared-GPU mode: copies of the device series per holder, with `vgpu`."""


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def expositions(node: Node, times: Sequence[float]) -> Iterator[tuple[float, bytes | None]]:
    """(t, exposition bytes or None when the target is down) at each time in `times`."""
    clock = _Clock()
    scenario = parse_scenario({**SCENARIO, "xids": list(node.xids),
                               "lost_gpus": list(node.lost_gpus)}, source="deploy/gen/simnode.py")
    sim = SimulatedBackend(node.gpus, MODELS["H100"], clock=clock, scenario=scenario)
    backend = _FaultyBackend(sim, clock, node.faults)
    attributor: Any = SimulatedAttributor(scenario)
    if node.kubelet_gone_at is not None:
        attributor = _FailingAttributor(attributor, clock, node.kubelet_gone_at)
    metrics = parse_metric_list(default_text() + EXTRA_ROWS, "default-counters.csv + throttling rows")
    collector = Collector(backend, metrics.fields, attributor=attributor, want_processes=True,
                          clock=clock)
    opts = RenderOptions(LabelOptions(hostname=HOSTNAME, virtual_gpus=node.virtual_gpus))
    last = b""
    for t in times:
        clock.now = t
        if node.down_at is not None and t >= node.down_at:
            yield t, None
            continue
        if node.stuck_at is None or t <= node.stuck_at:
            last = render(collector.cycle(), metrics, opts)
        yield t, last


_LINE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$")
_PAIR = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)",?')
_UNESCAPE = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}


def parse(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Text format 0.0.4 -> {(name, sorted labels): value}; independent of prometheus_client,
    whose parser renames un-suffixed counters to `_total`."""
    out: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = _LINE.match(line)
        if m is None:
            raise ValueError(f"unparsable exposition line: {line!r}")
        name, body, value = m.groups()
        labels = tuple(sorted(
            (k, re.sub(r'\\[\\"n]', lambda e: _UNESCAPE[e.group(0)], v))
            for k, v in _PAIR.findall(body or "")))
        out[(name, labels)] = float(value)
    return out
