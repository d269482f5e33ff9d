"""The accounting counters' exposition text, byte for byte: names, HELP, TYPE, label order and
escaping, value formatting (shortest round-trip floats, exponent form past 1e16), empty families
left out. Scraped series and recording rules depend on every one of these."""

from __future__ import annotations

from podgpu.accounting import Accountant
from podgpu.model import Allocation, ContainerRef, Device
from podgpu.sinks.prometheus.labels import LabelOptions
from podgpu.sinks.prometheus.source import render_sources
from tests.unit.accounting.test_integrate import GPU0, GPU1, MIG3, gpu, snap

GPU2 = Device(2, "GPU-c", "00000000:3A:00.0", "nvidia2", "NVIDIA H100 80GB HBM3")

FULL = (
    "# HELP podgpu_pod_gpu_allocated_seconds_total GPU-seconds the container held on this device: a time-sliced replica counts its share (the holders of one GPU add up to 1 per second), a MIG instance its compute slices over the GPU's.\n"
    '# TYPE podgpu_pod_gpu_allocated_seconds_total counter\n'
    'podgpu_pod_gpu_allocated_seconds_total{gpu="0",UUID="GPU-a",Hostname="n1",app="x",team="vi\\"sion",pod="a",namespace="ml",container="main",pod_uid="u-1"} 3.5\n'
    'podgpu_pod_gpu_allocated_seconds_total{gpu="1",UUID="GPU-b",GPU_I_ID="2",Hostname="n1",pod="b",namespace="ml",container="side",pod_uid="u-2"} 1.5\n'
    "# HELP podgpu_pod_gpu_used_seconds_total Utilisation-weighted GPU-seconds: the container's processes' SM utilisation (or the device's, split by allocation, when NVML has no per-process figure) x seconds.\n"
    '# TYPE podgpu_pod_gpu_used_seconds_total counter\n'
    'podgpu_pod_gpu_used_seconds_total{gpu="0",UUID="GPU-a",Hostname="n1",app="x",team="vi\\"sion",pod="a",namespace="ml",container="main",pod_uid="u-1"} 1.295\n'
    'podgpu_pod_gpu_used_seconds_total{gpu="1",UUID="GPU-b",GPU_I_ID="2",Hostname="n1",pod="b",namespace="ml",container="side",pod_uid="u-2"} 0.75\n'
    "# HELP podgpu_pod_gpu_energy_joules_total Joules of the GPU's energy counter while the container held it, split between holders by used share (by allocated share when nothing is used or use is unknown).\n"
    '# TYPE podgpu_pod_gpu_energy_joules_total counter\n'
    'podgpu_pod_gpu_energy_joules_total{gpu="0",UUID="GPU-a",Hostname="n1",app="x",team="vi\\"sion",pod="a",namespace="ml",container="main",pod_uid="u-1"} 4320.9845000000005\n'
    'podgpu_pod_gpu_energy_joules_total{gpu="1",UUID="GPU-b",GPU_I_ID="2",Hostname="n1",pod="b",namespace="ml",container="side",pod_uid="u-2"} 17.5\n'
    "# HELP podgpu_pod_gpu_memory_byte_seconds_total GPU memory of the container's processes integrated over time (byte-seconds).\n"
    '# TYPE podgpu_pod_gpu_memory_byte_seconds_total counter\n'
    'podgpu_pod_gpu_memory_byte_seconds_total{gpu="0",UUID="GPU-a",Hostname="n1",app="x",team="vi\\"sion",pod="a",namespace="ml",container="main",pod_uid="u-1"} 3.152519739159347e+16\n'
    'podgpu_pod_gpu_memory_byte_seconds_total{gpu="1",UUID="GPU-b",GPU_I_ID="2",Hostname="n1",pod="b",namespace="ml",container="side",pod_uid="u-2"} 0.0\n'
    "# HELP podgpu_gpu_unattributed_energy_joules_total Joules of the GPU's energy counter while no container held it (pods + this = the device's increase).\n"
    '# TYPE podgpu_gpu_unattributed_energy_joules_total counter\n'
    'podgpu_gpu_unattributed_energy_joules_total{gpu="2",UUID="GPU-c",Hostname="n1"} 0.875\n'
    '# HELP podgpu_accounting_skipped_seconds_total Seconds between snapshots too far apart to integrate (podgpu stalled); not in any accounting counter.\n'
    '# TYPE podgpu_accounting_skipped_seconds_total counter\n'
    'podgpu_accounting_skipped_seconds_total 498.0\n'
)

EMPTY = (
    '# HELP podgpu_accounting_skipped_seconds_total Seconds between snapshots too far apart to integrate (podgpu stalled); not in any accounting counter.\n'
    '# TYPE podgpu_accounting_skipped_seconds_total counter\n'
    'podgpu_accounting_skipped_seconds_total 0.0\n'
)


def test_the_accounting_text_of_a_node_is_exactly_the_contract() -> None:
    """GPU 0 held by a labelled pod (a quote to escape), a MIG instance of GPU 1 held, GPU 2
    idle (unattributed energy), and a 498 s stall (skipped)."""
    acc = Accountant(LabelOptions(hostname="n1", pod_labels=True, pod_uid=True))
    a = ContainerRef("ml", "a", "main", pod_uid="u-1",
                     pod_labels=(("team", 'vi"sion'), ("app", "x")))
    b = ContainerRef("ml", "b", "side", pod_uid="u-2")
    held = (Allocation("GPU-a", a, "nvidia.com/gpu", "GPU-a"),
            Allocation("MIG-3", b, "nvidia.com/mig-3g.40gb", "MIG-3"))
    for t in (0, 1, 2, 500, 501.5):
        acc.observe(snap(t, [gpu(GPU0, util=37, mj=1_234_567 * t, fb=2**33),
                             gpu(GPU1, mj=5000 * t), gpu(MIG3, gr=0.5),
                             gpu(GPU2, mj=250 * t)], held))
        text = render_sources([acc])
    assert text == FULL
    assert render_sources([acc]) == FULL  # the second render (label pairs cached) is the same


def test_before_any_holder_only_the_skipped_counter_is_exported() -> None:
    assert render_sources([Accountant(LabelOptions(hostname="n1"))]) == EMPTY
