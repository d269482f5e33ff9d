"""Accounting across a GPU that falls off the bus.

A lost GPU stays in `snapshot.samples` with `Sample.lost` set. Its holders keep
their allocation while the kubelet lists it; nothing is measured on it: no used seconds, no
memory, no energy, whatever values the sample carries (docs/accounting.md, "A lost GPU")."""

from __future__ import annotations

from podgpu.accounting import advance
from podgpu.backends.lost import lost_sample
from podgpu.model import Allocation, Device, Sample
from tests.unit.accounting.test_integrate import GPU0, GPU1, A, B, entry, gpu, run, snap

HELD = (Allocation(GPU0.key, A, "nvidia.com/gpu", GPU0.uuid),)
FIELDS = ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
          "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_XID_ERRORS")


def lost(dev: Device = GPU0) -> Sample:
    """What every backend exports for a GPU that fell off the bus (backends/lost.py)."""
    return lost_sample(dev, FIELDS, reason="GPU is lost", xid=79,
                       xid_counts={79: 1}, xid_window_seconds=300.0, labels={})


def test_a_lost_gpu_keeps_its_allocation_and_measures_nothing() -> None:
    state = run([snap(0, [gpu(GPU0, util=100, mj=0, w=700, fb=1024)], HELD),
                 snap(1, [lost()], HELD),   # lost: 1 s held, nothing measured
                 snap(2, [lost()], HELD),   # still lost
                 snap(3, [gpu(GPU0, util=50, mj=9_000_000, w=400, fb=1024)], HELD)])
    # held 3 s; used only in the interval after it came back (0.5 x 1 s); energy: the counter
    # has no reading before t=3 (t=2 was lost), so that interval uses power: 400 W x 1 s;
    # memory: FB_USED 1 GiB for the one second it could be read
    assert entry(state, GPU0, A) == (3.0, 0.5, 400.0, 1024**3)
    assert state.unattributed == {}


def test_stale_values_on_a_lost_sample_are_not_integrated() -> None:
    """A lost sample is not a reading: a backend that left old values on it (util 100 %, the
    energy counter, power, FB_USED) must not make the holder use the GPU or draw energy."""
    stale = Sample(GPU0, {"DCGM_FI_DEV_GPU_UTIL": 100, "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION":
                          5_000_000, "DCGM_FI_DEV_POWER_USAGE": 700, "DCGM_FI_DEV_FB_USED": 1024},
                   lost="GPU is lost")
    state = run([snap(0, [gpu(GPU0, util=100, mj=0, w=700, fb=1024)], HELD),
                 snap(1, [stale], HELD)])
    assert entry(state, GPU0, A) == (1.0, 0.0, 0.0, 0.0)


def test_a_lost_gpu_nobody_holds_adds_no_unattributed_energy_and_others_go_on() -> None:
    held_b = (Allocation(GPU1.key, B, "nvidia.com/gpu", GPU1.uuid),)
    prev = snap(0, [gpu(GPU0, mj=0, w=700), gpu(GPU1, util=100, mj=0)], held_b)
    cur = snap(1, [lost(GPU0), gpu(GPU1, util=100, mj=2_000)], held_b)
    state = advance(run([prev]), prev, cur)
    assert state.unattributed == {}  # GPU 0's counter cannot be read: no energy, not 700 J
    assert entry(state, GPU1, B) == (1.0, 1.0, 2.0, 0.0)
