"""The integrator on small snapshots whose integrals are worked out by hand in the comments."""

from __future__ import annotations

from podgpu.accounting import Options, State, advance
from podgpu.accounting.shares import mig_fraction
from podgpu.model import Allocation, ContainerRef, Device, GpuProcess, Sample, Snapshot

GPU0 = Device(0, "GPU-a", "00000000:18:00.0", "nvidia0", "NVIDIA H100 80GB HBM3")
GPU1 = Device(1, "GPU-b", "00000000:2A:00.0", "nvidia1", "NVIDIA H100 80GB HBM3")
MIG3 = Device(1, "GPU-b", "00000000:2A:00.0", "nvidia1", "NVIDIA H100 80GB HBM3",
              mig_profile="3g.40gb", mig_gi_id=2, mig_uuid="MIG-3")
MIG1 = Device(1, "GPU-b", "00000000:2A:00.0", "nvidia1", "NVIDIA H100 80GB HBM3",
              mig_profile="1g.10gb+me", mig_gi_id=9, mig_uuid="MIG-1")
A = ContainerRef("ml", "a", "main")
B = ContainerRef("ml", "b", "main")
T0 = 1_800_000_000.0


def snap(t: float, samples: list[Sample], allocs: tuple[Allocation, ...] = (),
         procs: tuple[GpuProcess, ...] = ()) -> Snapshot:
    return Snapshot(taken_at=T0 + t, samples=tuple(samples), allocations=allocs, processes=procs)


def gpu(dev: Device, **values: float) -> Sample:
    names = {"util": "DCGM_FI_DEV_GPU_UTIL", "mj": "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
             "w": "DCGM_FI_DEV_POWER_USAGE", "fb": "DCGM_FI_DEV_FB_USED",
             "gr": "DCGM_FI_PROF_GR_ENGINE_ACTIVE"}
    return Sample(dev, {names[k]: v for k, v in values.items()})


def run(snaps: list[Snapshot], opts: Options = Options()) -> State:  # noqa: B008
    state, prev = State(), None
    for s in snaps:
        state = advance(state, prev, s, opts)
        prev = s
    return state


def entry(state: State, dev: Device, ref: ContainerRef) -> tuple[float, float, float, float]:
    e = state.entries[(dev.key, ref.namespace, ref.pod, ref.container, ref.pod_uid,
                       ref.pod_labels)]
    return (round(e.allocated_seconds, 9), round(e.used_seconds, 9), round(e.energy_joules, 9),
            round(e.memory_byte_seconds, 3))


def test_exclusive_gpu_integrates_by_time_across_a_missed_cycle() -> None:
    held = (Allocation("GPU-a", A, "nvidia.com/gpu", "GPU-a"),)
    state = run([
        snap(0, [gpu(GPU0, util=0, mj=10_000, fb=1024)], held),
        snap(1, [gpu(GPU0, util=50, mj=510_000, fb=1024)], held),
        # the cycle at t=2 was missed: the next one covers 2 s
        snap(3, [gpu(GPU0, util=100, mj=1_710_000, fb=1024)], held),
    ])
    # held 3 s; used 0.5*1 + 1.0*2 = 2.5; energy (1_710_000-10_000) mJ = 1700 J;
    # no processes visible, sole holder: FB_USED 1 GiB for 3 s
    assert entry(state, GPU0, A) == (3.0, 2.5, 1700.0, 3 * 1024**3)


def test_time_sliced_gpu_splits_allocation_by_replicas_and_energy_by_use() -> None:
    held = (Allocation("GPU-a", A, "nvidia.com/gpu", "GPU-a::0", 0),
            Allocation("GPU-a", A, "nvidia.com/gpu", "GPU-a::1", 1),
            Allocation("GPU-a", B, "nvidia.com/gpu", "GPU-a::2", 2))
    procs = (GpuProcess("GPU-a", 10, 3 << 30, 30.0, A), GpuProcess("GPU-a", 11, 1 << 30, 60.0, B))
    state = run([snap(0, [gpu(GPU0, util=90, mj=0)], held, procs),
                 snap(2, [gpu(GPU0, util=90, mj=900_000)], held, procs)])
    # A holds 2 of 3 replicas: 2/3 * 2 s; used 0.3 * 2; energy 900 J * 0.3/0.9; 3 GiB * 2 s
    assert entry(state, GPU0, A) == (round(4 / 3, 9), 0.6, 300.0, 2 * (3 << 30))
    assert entry(state, GPU0, B) == (round(2 / 3, 9), 1.2, 600.0, 2 * (1 << 30))


def test_mig_instances_count_compute_slices() -> None:
    assert mig_fraction(MIG3) == 3 / 7 and mig_fraction(MIG1) == 1 / 7 and mig_fraction(GPU0) == 1
    assert mig_fraction(Device(0, "G", "", "nvidia0", "NVIDIA A30", mig_profile="2g.12gb",
                               mig_gi_id=1)) == 2 / 4
    held = (Allocation("MIG-3", A, "nvidia.com/mig-3g.40gb", "MIG-3"),
            Allocation("MIG-1", B, "nvidia.com/mig-1g.10gb", "MIG-1"))
    state = run([snap(0, [gpu(GPU1, mj=0), gpu(MIG3, gr=0.5), gpu(MIG1, gr=0.0)], held),
                 snap(7, [gpu(GPU1, mj=2_100_000), gpu(MIG3, gr=0.5), gpu(MIG1, gr=0.0)], held)])
    # 7 s: A 3/7 of the GPU -> 3 GPU-s, used 0.5 of that -> 1.5; B 1/7 -> 1, used 0;
    # the parent's 2100 J go by use: all to A
    assert entry(state, MIG3, A)[:3] == (3.0, 1.5, 2100.0)
    assert entry(state, MIG1, B)[:3] == (1.0, 0.0, 0.0)


def test_unknown_use_splits_energy_by_allocation_and_counts_no_use() -> None:
    held = (Allocation("GPU-a", A, "nvidia.com/gpu", "GPU-a::0", 0),
            Allocation("GPU-a", B, "nvidia.com/gpu", "GPU-a::1", 1))
    state = run([snap(0, [gpu(GPU0, mj=0)], held), snap(1, [gpu(GPU0, mj=400_000)], held)])
    assert entry(state, GPU0, A) == (0.5, 0.0, 200.0, 0.0)
    assert entry(state, GPU0, B) == (0.5, 0.0, 200.0, 0.0)


def test_energy_counter_reset_or_absent_falls_back_to_power() -> None:
    held = (Allocation("GPU-a", A, "nvidia.com/gpu", "GPU-a"),)
    state = run([snap(0, [gpu(GPU0, util=0, mj=5_000_000, w=100)], held),
                 snap(2, [gpu(GPU0, util=0, mj=1_000, w=150)], held),  # went backwards
                 snap(3, [gpu(GPU0, util=0, w=200)], held)])          # counter gone
    assert entry(state, GPU0, A)[2] == 150 * 2 + 200 * 1


def test_a_gpu_nobody_holds_adds_to_its_unattributed_energy() -> None:
    state = run([snap(0, [gpu(GPU0, mj=0), gpu(GPU1, mj=0)],
                      (Allocation("GPU-a", A, "nvidia.com/gpu", "GPU-a"),)),
                 snap(1, [gpu(GPU0, mj=70_000), gpu(GPU1, mj=80_000)],
                      (Allocation("GPU-a", A, "nvidia.com/gpu", "GPU-a"),))])
    assert set(state.unattributed) == {"GPU-b"} and state.unattributed["GPU-b"].joules == 80.0
    assert entry(state, GPU0, A)[2] == 70.0


def test_a_long_gap_is_not_integrated_and_is_counted() -> None:
    held = (Allocation("GPU-a", A, "nvidia.com/gpu", "GPU-a"),)
    state = run([snap(0, [gpu(GPU0, util=100, mj=0)], held),
                 snap(1000, [gpu(GPU0, util=100, mj=10**9)], held),
                 snap(1001, [gpu(GPU0, util=100, mj=10**9 + 500_000)], held)],
                Options(max_gap_seconds=300))
    assert entry(state, GPU0, A)[:3] == (1.0, 1.0, 500.0)
    assert state.skipped_seconds == 1000


def test_finished_holders_stay_for_the_grace_period_then_go() -> None:
    held = (Allocation("GPU-a", A, "nvidia.com/gpu", "GPU-a"),)
    snaps = [snap(0, [gpu(GPU0)], held), snap(1, [gpu(GPU0)], held)]
    snaps += [snap(1 + t, [gpu(GPU0)]) for t in range(1, 40)]
    state, prev = State(), None
    seen = []
    for s in snaps:
        state = advance(state, prev, s, Options(grace_seconds=10))
        prev = s
        seen.append(any(e.ref == A for e in state.entries.values()))
    # last seen at t=1, so past its 10 s of grace from t=11.01 on; finished holders are looked
    # for every PRUNE_EVERY (10) s: at t=2 (the first cycle without it: kept), then t=12 (gone)
    assert seen.index(False) == 12 and not any(seen[12:])
    assert state.entries == {}


def test_a_lost_device_credits_nothing_and_a_first_snapshot_starts_at_zero() -> None:
    held = (Allocation("GPU-a", A, "nvidia.com/gpu", "GPU-a"),)
    first = run([snap(0, [gpu(GPU0, util=100, mj=0)], held)])
    assert entry(first, GPU0, A) == (0.0, 0.0, 0.0, 0.0)
    state = run([snap(0, [gpu(GPU0, util=100, mj=0)], held), snap(1, [], held),
                 snap(2, [gpu(GPU0, util=100, mj=2_000_000)], held)])
    # t=1: GPU lost, nothing credited; t=2 covers its own 1 s. The counter has no previous
    # reading to subtract (t=1 had no sample) and there is no power reading: no energy
    assert entry(state, GPU0, A)[:3] == (1.0, 1.0, 0.0)


def test_memory_stays_bounded_under_churn() -> None:
    """A new pod every second for an hour (3,600 pods): the state never holds more than the
    pods of the last grace period (60 s) plus one look-up interval."""
    state, prev = State(), None
    most = 0
    for t in range(3600):
        ref = ContainerRef("batch", f"job-{t}", "main")
        s = snap(t, [gpu(GPU0, util=50, mj=1000 * t)], (Allocation("GPU-a", ref,
                                                                  "nvidia.com/gpu", "GPU-a"),))
        state = advance(state, prev, s, Options(grace_seconds=60))
        prev = s
        most = max(most, len(state.entries))
    assert most <= 60 + 10 + 1


def test_fields_accounting_reads_survive_a_metric_list_switch() -> None:
    """A list without the energy counter still gets it collected, at start and after a reload
    (SIGHUP switches lists through `use_fields`)."""
    from podgpu.accounting import Accountant, with_accounting_fields
    from podgpu.fields.catalog import Field, lookup
    from podgpu.sinks.prometheus.labels import LabelOptions

    temp = lookup("DCGM_FI_DEV_GPU_TEMP")
    assert temp is not None
    start = with_accounting_fields((temp,))
    names = [f.name for f in start]
    assert names[0] == "DCGM_FI_DEV_GPU_TEMP" and "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION" in names
    assert len(with_accounting_fields(start)) == len(start)  # nothing twice

    class Collector:
        fields: tuple[Field, ...] = ()

        def use_fields(self, fields: tuple[Field, ...]) -> None:
            self.fields = fields

    c = Collector()
    Accountant(LabelOptions(hostname="n")).fields_target(c).use_fields((temp,))
    assert {f.name for f in c.fields} == set(names)
