"""The benchmark's baseline: a "naive" exporter that builds every series on every scrape.

This is what dcgm-exporter 4.x and most Python exporters do: a custom `prometheus_client` Collector
whose `collect()` reads the backend and builds fresh metric families each time `/metrics` is hit.
It reads the same simulated node (`SimulatedBackend`, same model, same fields from podgpu's
default metric list) and emits the same DCGM families with the same labels in the same order
(`gpu, UUID, pci_bus_id, device, modelName, Hostname, <label-type fields>`), so the benchmark
compares two ways of serving one body, not two bodies.

Known, deliberate differences from podgpu's body (prometheus_client's own conventions):
counter samples get a `_total` suffix, floats print as Go-style shortest repr, and there are no
podgpu_* self-metrics. Served by `prometheus_client.start_http_server` (wsgiref, HTTP/1.0: one TCP
connection per scrape) on a private CollectorRegistry (no process/GC collectors).

    python -m bench.baseline_prometheus_client --gpus 8 --address 127.0.0.1 --port 9401
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import threading
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from podgpu.fields import MetricList, load_default
from podgpu.sim.backend import SimulatedBackend, parse_simulate

IDENTITY = ("gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname")


class NaiveDcgmCollector(Collector):
    """Reads the backend and builds every family from scratch on each `collect()`."""

    def __init__(self, backend: SimulatedBackend, metrics: MetricList, hostname: str) -> None:
        self._backend = backend
        self._metrics = metrics
        self._fields = metrics.fields
        self._hostname = hostname
        self._label_fields = tuple(sorted(r.name for r in metrics.labels))
        self._label_names = IDENTITY + self._label_fields

    def collect(self) -> Iterator[Metric]:
        reading = self._backend.read(self._fields)
        per_device = []
        for s in reading.samples:
            d = s.device
            labels = [str(d.index), d.uuid, d.pci_bus_id, d.device_name, d.model, self._hostname]
            labels += [str(s.values.get(n, "")) for n in self._label_fields]
            per_device.append((labels, s.values))
        for row in self._metrics.metrics:
            cls = CounterMetricFamily if row.prom_type == "counter" else GaugeMetricFamily
            family = cls(row.name, row.help, labels=self._label_names)
            for labels, values in per_device:
                v = values.get(row.name)
                if v is not None:
                    family.add_metric(labels, float(v))
            if family.samples:
                yield family


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--gpus", default="8", help="as podgpu's --simulate: N or NxMODEL")
    p.add_argument("--address", default="127.0.0.1")
    p.add_argument("--port", type=int, default=9401)
    args = p.parse_args()

    count, model = parse_simulate(args.gpus)
    backend = SimulatedBackend(count, model)
    backend.open()
    hostname = os.environ.get("NODE_NAME", "") or socket.gethostname()
    registry = CollectorRegistry(auto_describe=False)
    registry.register(NaiveDcgmCollector(backend, load_default(), hostname))
    server, _thread = start_http_server(args.port, addr=args.address, registry=registry)

    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()
    server.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
