"""Builds the snapshots behind the golden exposition files; run as a script to regenerate them:

    .venv/bin/python -m tests.unit.sinks.golden   (or scripts/regen-golden)
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TypedDict, Unpack

from podgpu.fields import load_default
from podgpu.model import Allocation, ContainerRef, Device, GpuProcess, Snapshot, StageResult
from podgpu.model.device import LabeledValue, Sample
from podgpu.sim.backend import MODELS, SimulatedBackend
from podgpu.sinks.prometheus import RenderOptions, render
from podgpu.sinks.prometheus.labels import LabelOptions

GOLDEN = Path(__file__).resolve().parents[2] / "fixtures" / "golden"
T0 = 1_800_000_000.0
BUILD = (("version", "0.0.0-test"), ("backend", "simulated"), ("driver_version", "580.159.04"),
         ("python_version", "3.x"))


class _Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


def simulated_snapshot(count: int = 4, model: str = "H100", at: float = 5.0) -> Snapshot:
    clock = _Clock()
    backend = SimulatedBackend(count, MODELS[model], clock=clock)
    clock.now = T0 + at
    reading = backend.read(load_default().fields)
    return Snapshot(
        taken_at=clock.now,
        samples=reading.samples,
        stages=(StageResult("backend", 0.0015, True),),
        errors_total=(("simulated", 0),),
        cycle=7,
    )


def pods_snapshot() -> Snapshot:
    """GPU 0 exclusive, GPU 1 time-sliced by two pods, GPU 2 idle, GPU 3 a MIG instance."""
    base = simulated_snapshot(3)
    devs = [s.device for s in base.samples]
    mig = Device(index=3, uuid="GPU-00000000-0000-0000-0000-000000000003",
                 pci_bus_id="00000000:5D:00.0", device_name="nvidia3",
                 model="NVIDIA A100-SXM4-80GB", mig_profile="1g.10gb", mig_gi_id=9,
                 mig_uuid="MIG-11111111-2222-3333-4444-555555555555")
    mig_sample = Sample(mig, {"DCGM_FI_DEV_FB_USED": 1024, "DCGM_FI_DRIVER_VERSION": "580.159.04"},
                        labeled=(LabeledValue("DCGM_FI_DEV_FB_USED", (("note", 'a "q"'),), 5),))
    train = ContainerRef("ml", "train-0", "main", "uid-train")
    a = ContainerRef("team-a", "infer-a", "server", "uid-a")
    b = ContainerRef("team-b", "infer-b", "server", "uid-b")
    tiny = ContainerRef("ml", "notebook", "jupyter", "uid-nb")
    allocs = (
        Allocation(devs[0].key, train, "nvidia.com/gpu", devs[0].uuid),
        Allocation(devs[1].key, a, "nvidia.com/gpu", devs[1].uuid + "::0", 0),
        Allocation(devs[1].key, b, "nvidia.com/gpu", devs[1].uuid + "::1", 1),
        Allocation(mig.key, tiny, "nvidia.com/mig-1g.10gb", mig.key),
    )
    procs = (
        GpuProcess(devs[0].key, 100, 70 * 2**30, 97.0, train),
        GpuProcess(devs[1].key, 200, 3 * 2**30, 30.0, a),
        GpuProcess(devs[1].key, 201, 1 * 2**30, 12.5, a),
        GpuProcess(devs[1].key, 300, 5 * 2**30, 40.0, b),
        GpuProcess(devs[1].key, 400, 2**20, None, None),  # a host process: no pod series
    )
    return Snapshot(taken_at=base.taken_at, samples=(*base.samples, mig_sample),
                    stages=base.stages, allocations=allocs, processes=procs,
                    errors_total=base.errors_total, cycle=base.cycle)


class LabelFlags(TypedDict, total=False):
    """LabelOptions' fields past `hostname`, for render_default's keywords."""

    hostname_label: str
    replace_blanks_in_model_name: bool
    virtual_gpus: bool
    pod_uid: bool
    pod_labels: bool
    old_namespace: bool


def render_default(snapshot: Snapshot, **label_opts: Unpack[LabelFlags]) -> bytes:
    opts = LabelOptions(hostname="node-a", **label_opts)
    return render(snapshot, load_default(), RenderOptions(opts, BUILD, (("render", 0.0002),)))


def render_1x(snapshot: Snapshot) -> bytes:
    """dcgm-exporter's 1.x list (all rows enabled) with -o: dcgm_* names, 1.x labels."""
    from pathlib import Path

    from podgpu.fields.metriclist import parse_metric_list

    path = Path(__file__).resolve().parents[2] / "fixtures/dcgm-exporter/1.x-compatibility-metrics.csv"
    text = "\n".join(line.lstrip("# ") if line.startswith("# dcgm_") else line
                     for line in path.read_text().splitlines())
    ml = parse_metric_list(text, "1.x")
    clock = _Clock()
    backend = SimulatedBackend(3, MODELS["H100"], clock=clock)
    clock.now = T0 + 5.0
    samples = backend.read(ml.fields).samples  # the 1.x fields, read as serve would read them
    snap = Snapshot(taken_at=clock.now, samples=samples, stages=snapshot.stages,
                    allocations=snapshot.allocations, processes=snapshot.processes,
                    errors_total=snapshot.errors_total, cycle=snapshot.cycle)
    opts = LabelOptions(hostname="node-a", old_namespace=True)
    return render(snap, ml, RenderOptions(opts, BUILD, ()))


CASES: dict[str, Callable[[], bytes]] = {
    "simulated-4xH100.prom": lambda: render_default(simulated_snapshot()),
    "simulated-2xA10G.prom": lambda: render_default(simulated_snapshot(2, "A10G")),
    "pods.prom": lambda: render_default(pods_snapshot()),
    "pods-virtual-gpus.prom": lambda: render_default(pods_snapshot(), virtual_gpus=True),
    "pods-1x-old-namespace.prom": lambda: render_1x(pods_snapshot()),
}

if __name__ == "__main__":
    GOLDEN.mkdir(parents=True, exist_ok=True)
    for name, make in CASES.items():
        (GOLDEN / name).write_bytes(make())
        print("wrote", GOLDEN / name)
