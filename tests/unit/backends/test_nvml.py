"""NvmlBackend against the fake pynvml: units, batching, unsupported fields, lost GPUs, init errors,
GPM, processes. (MIG and events have their own files.)"""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest

from podgpu.backends.nvml import NvmlBackend
from podgpu.errors import BackendError
from podgpu.fields.catalog import BY_NAME, CATALOG, Field
from podgpu.fields.metriclist import load_default
from podgpu.model import Sample
from tests.conftest import FakeClock
from tests.fakes.fake_pynvml import (
    DRIVER_NOT_LOADED,
    GPU_IS_LOST,
    LIBRARY_NOT_FOUND,
    NO_PERMISSION,
    TIMEOUT,
    UNKNOWN,
    FakeGpu,
    FakeNvml,
)


def gpus(n: int) -> list[FakeGpu]:
    return [FakeGpu(f"GPU-{i:08d}-0000-0000-0000-000000000000", minor=i,
                    bus_id=f"00000000:{0x18 + i:02X}:00.0") for i in range(n)]


def opened(nv: FakeNvml, clock: FakeClock | None = None, *, first_window: bool = False,
           **kw: float) -> NvmlBackend:
    """The backend opened; then, unless `first_window`, the clock moved past GPM's first 100 ms
    (by 0.25 s: at 1.8e9 s a float does not add 0.1 exactly),
    as in a start whose first cycle comes later (a read sooner has no DCGM_FI_PROF_* values)."""
    clock = clock or FakeClock()
    backend = NvmlBackend(pynvml_module=nv, clock=clock, **kw)  # type: ignore[arg-type]
    backend.open()
    if not first_window:
        clock.advance(0.25)
    return backend


def fields(*names: str) -> list[Field]:
    return [BY_NAME[n] for n in names]


def live(samples: tuple[Sample, ...]) -> list[Sample]:
    """The samples of GPUs that answered (a lost GPU keeps a sample with `lost` set)."""
    return [s for s in samples if s.lost is None]


def by_index(samples: tuple[Sample, ...]) -> dict[int, Sample]:
    return {s.device.index: s for s in samples if not s.device.is_mig}


@pytest.fixture
def nv() -> FakeNvml:
    return FakeNvml(gpus(2))


def test_discovery_gives_dcgm_identity(nv: FakeNvml) -> None:
    b = opened(nv)
    try:
        d0, d1 = b.devices()
        assert (d0.index, d0.uuid, d0.device_name, d0.model) == (
            0, "GPU-00000000-0000-0000-0000-000000000000", "nvidia0", "NVIDIA H200")
        assert d1.pci_bus_id == "00000000:19:00.0"
        assert b.info()["driver_version"] == "580.159.04"
        assert b.info()["cuda_driver_version"] == "13.0"
    finally:
        b.close()
    assert nv.initialized == 0  # nvmlShutdown balanced nvmlInit


def test_default_fields_in_dcgm_units(nv: FakeNvml) -> None:
    b = opened(nv)
    try:
        reading = b.read(load_default().fields)
    finally:
        b.close()
    v = by_index(reading.samples)[0].values
    assert v["DCGM_FI_DEV_POWER_USAGE"] == pytest.approx(77.427)  # mW -> W
    assert v["DCGM_FI_DEV_FB_RESERVED"] == 615  # bytes -> whole MiB, truncated like DCGM
    assert v["DCGM_FI_DEV_FB_FREE"] == 143155
    assert v["DCGM_FI_DEV_SM_CLOCK"] == 345 and v["DCGM_FI_DEV_MEM_CLOCK"] == 3201
    assert v["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"] == 3081900
    assert v["DCGM_FI_DEV_ENC_UTIL"] == 0 and v["DCGM_FI_DEV_GPU_UTIL"] == 0
    assert v["DCGM_FI_DEV_MEMORY_TEMP"] == 36 and v["DCGM_FI_DEV_GPU_TEMP"] == 35
    assert v["DCGM_FI_DEV_VGPU_LICENSE_STATUS"] == 0
    assert v["DCGM_FI_DRIVER_VERSION"] == "580.159.04"
    assert v["DCGM_FI_PROF_GR_ENGINE_ACTIVE"] == pytest.approx(0.99)  # percent -> ratio
    assert v["DCGM_FI_PROF_PCIE_RX_BYTES"] == 7691 * 1024 * 1024  # MiB/s -> B/s
    assert isinstance(v["DCGM_FI_DEV_FB_USED"], int)
    assert isinstance(v["DCGM_FI_PROF_DRAM_ACTIVE"], float)
    assert reading.errors == 0 and reading.lost == ()


def test_fewest_calls_per_gpu_per_cycle(nv: FakeNvml) -> None:
    b = opened(nv)
    try:
        nv.calls.clear()
        b.read(CATALOG)
    finally:
        b.close()
    # one field-values batch, one utilization call, one memory v2 call, one GPM computation per GPU
    assert nv.calls["nvmlDeviceGetFieldValues"] == 2
    assert nv.calls["nvmlDeviceGetUtilizationRates"] == 2
    assert nv.calls["nvmlDeviceGetMemoryInfo"] == 2
    assert nv.calls["nvmlGpmMetricsGet"] == 2
    assert nv.calls["nvmlGpmSampleGet"] == 2
    assert nv.calls["nvmlDeviceGetCurrentClocksEventReasons"] == 2  # field + EXP count share it


def test_static_labels_read_once(nv: FakeNvml) -> None:
    b = opened(nv)
    try:
        for _ in range(3):
            r = b.read(fields("DCGM_FI_DEV_SERIAL", "DCGM_FI_DEV_BRAND", "DCGM_FI_DEV_GPU_UTIL"))
    finally:
        b.close()
    assert nv.calls["nvmlDeviceGetSerial"] == 2  # once per GPU, not per cycle
    assert by_index(r.samples)[1].values["DCGM_FI_DEV_SERIAL"] == "1653724050116"
    assert by_index(r.samples)[1].values["DCGM_FI_DEV_BRAND"] == "NVIDIA"


def test_unsupported_field_absent_with_reason_logged_once(
    nv: FakeNvml, caplog: pytest.LogCaptureFixture
) -> None:
    nv.gpus[1].unsupported.add("nvmlDeviceGetPowerUsage")
    nv.gpus[1].unsupported.add("NVML_FI_DEV_MEMORY_TEMP")
    caplog.set_level(logging.INFO, logger="podgpu.backends.nvml")
    b = opened(nv)
    try:
        for _ in range(3):
            r = b.read(fields("DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_MEMORY_TEMP",
                              "DCGM_FI_DEV_FAN_SPEED"))
    finally:
        b.close()
    s0, s1 = by_index(r.samples)[0], by_index(r.samples)[1]
    assert "DCGM_FI_DEV_POWER_USAGE" in s0.values
    assert "DCGM_FI_DEV_POWER_USAGE" not in s1.values
    assert "not supported" in s1.missing["DCGM_FI_DEV_POWER_USAGE"]
    assert s1.missing["DCGM_FI_DEV_MEMORY_TEMP"] == "not supported"
    assert "DCGM_FI_DEV_FAN_SPEED" in s0.missing  # passive cooling, as on the H200
    assert r.errors == 0  # unsupported is not an error
    power_logs = [m for m in caplog.messages if "nvidia1: DCGM_FI_DEV_POWER_USAGE" in m]
    assert len(power_logs) == 1


def test_no_permission_is_a_reason_not_an_error(nv: FakeNvml) -> None:
    nv.gpus[0].errors["nvmlDeviceGetPowerManagementLimit"] = NO_PERMISSION
    b = opened(nv)
    try:
        r = b.read(fields("DCGM_FI_DEV_POWER_MGMT_LIMIT"))
    finally:
        b.close()
    assert "no permission" in by_index(r.samples)[0].missing["DCGM_FI_DEV_POWER_MGMT_LIMIT"]
    assert r.errors == 0


def test_transient_call_error_counts_as_error(nv: FakeNvml) -> None:
    nv.gpus[0].errors["nvmlDeviceGetClockInfo"] = TIMEOUT
    b = opened(nv)
    try:
        r = b.read(fields("DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_GPU_TEMP"))
    finally:
        b.close()
    s0 = by_index(r.samples)[0]
    assert "DCGM_FI_DEV_SM_CLOCK" not in s0.values and s0.values["DCGM_FI_DEV_GPU_TEMP"] == 35
    assert r.errors == 1 and r.lost == ()


def test_gpu_lost_mid_run_others_keep_reporting_then_recovers(nv: FakeNvml) -> None:
    clock = FakeClock()
    b = opened(nv, clock, retry_seconds=5.0)
    wanted = fields("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_POWER_USAGE",
                    "DCGM_FI_PROF_GR_ENGINE_ACTIVE")
    try:
        assert len(b.read(wanted).samples) == 2
        nv.gpus[1].lost = True
        r = b.read(wanted)
        assert [s.device.index for s in live(r.samples)] == [0]
        # the lost GPU keeps a sample: identity only here (no XID/health field was asked for)
        (gone,) = [s for s in r.samples if s.lost is not None]
        assert gone.device.uuid == nv.gpus[1].uuid and dict(gone.values) == {}
        assert r.lost[0][0] == "nvidia1" and "lost" in r.lost[0][1].lower()
        assert r.errors >= 1
        assert [d.index for d in b.devices()] == [0]
        nv.gpus[1].lost = False
        clock.advance(1.0)  # before retry_seconds: still reported lost, not probed
        r = b.read(wanted)
        assert [s.device.index for s in live(r.samples)] == [0] and r.lost[0][0] == "nvidia1"
        clock.advance(5.0)
        r = b.read(wanted)
        assert [s.device.index for s in r.samples] == [0, 1] and r.lost == ()
        back = by_index(r.samples)[1]  # GPM rebuilt: a new stream, its first sample just taken
        assert "first 100 ms" in back.missing["DCGM_FI_PROF_GR_ENGINE_ACTIVE"]
        clock.advance(1.0)
        r = b.read(wanted)
        assert "DCGM_FI_PROF_GR_ENGINE_ACTIVE" in by_index(r.samples)[1].values
    finally:
        b.close()


def test_unknown_error_counts_as_lost(nv: FakeNvml) -> None:
    b = opened(nv)
    try:
        nv.gpus[0].errors["nvmlDeviceGetFieldValues"] = UNKNOWN
        r = b.read(fields("DCGM_FI_DEV_MEMORY_TEMP", "DCGM_FI_DEV_GPU_UTIL"))
    finally:
        b.close()
    assert [s.device.index for s in live(r.samples)] == [1]
    assert r.lost[0][0] == "nvidia0"


def test_gpu_unreachable_at_start_is_reported_and_picked_up_later() -> None:
    nv = FakeNvml(gpus(2))
    nv.gpus[0].lost = True
    clock = FakeClock()
    b = opened(nv, clock, retry_seconds=1.0)
    try:
        r = b.read(fields("DCGM_FI_DEV_GPU_UTIL"))
        assert [s.device.index for s in r.samples] == [1] and r.lost[0][0] == "gpu0"
        nv.gpus[0].lost = False
        clock.advance(2.0)
        r = b.read(fields("DCGM_FI_DEV_GPU_UTIL"))
        assert [s.device.index for s in r.samples] == [0, 1]
    finally:
        b.close()


@pytest.mark.parametrize(("code", "words"), [
    (LIBRARY_NOT_FOUND, "libnvidia-ml.so.1"),
    (DRIVER_NOT_LOADED, "driver not loaded"),
    (NO_PERMISSION, "no permission"),
    (UNKNOWN, "/dev/nvidia"),
])
def test_open_fails_with_the_cause(code: int, words: str) -> None:
    b = NvmlBackend(pynvml_module=FakeNvml(gpus(1), init_error=code))
    with pytest.raises(BackendError, match=words):
        b.open()


def test_open_without_gpus_fails() -> None:
    with pytest.raises(BackendError, match="no NVIDIA GPU"):
        NvmlBackend(pynvml_module=FakeNvml([])).open()


def test_read_before_open_is_a_backend_error() -> None:
    with pytest.raises(BackendError):
        NvmlBackend(pynvml_module=FakeNvml(gpus(1))).read(CATALOG)


def test_old_binding_without_a_constant_makes_the_field_unavailable() -> None:
    nv = FakeNvml(gpus(1)).without("NVML_FI_DEV_REMAPPED_FAILURE")
    b = opened(nv)
    try:
        r = b.read(fields("DCGM_FI_DEV_ROW_REMAP_FAILURE", "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS"))
        assert "NVML_FI_DEV_REMAPPED_FAILURE" in b.unavailable_fields()[
            "DCGM_FI_DEV_ROW_REMAP_FAILURE"]
    finally:
        b.close()
    s = r.samples[0]
    assert "DCGM_FI_DEV_ROW_REMAP_FAILURE" in s.missing
    assert s.values["DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS"] == 0


def test_temperature_above_200_is_dropped_like_dcgm(nv: FakeNvml) -> None:
    nv.gpus[0].values["nvmlDeviceGetTemperature"] = 255
    b = opened(nv)
    try:
        r = b.read(fields("DCGM_FI_DEV_GPU_TEMP"))
    finally:
        b.close()
    assert "DCGM_FI_DEV_GPU_TEMP" not in by_index(r.samples)[0].values
    assert by_index(r.samples)[1].values["DCGM_FI_DEV_GPU_TEMP"] == 35


def test_vgpu_license_status_from_features(nv: FakeNvml) -> None:
    nv.gpus[0].values["nvmlDeviceGetGridLicensableFeatures"] = SimpleNamespace(
        isGridLicenseSupported=1, licensableFeaturesCount=2, gridLicensableFeatures=[
            SimpleNamespace(featureCode=2, featureState=1),
            SimpleNamespace(featureCode=1, featureState=1)])
    b = opened(nv)
    try:
        r = b.read(fields("DCGM_FI_DEV_VGPU_LICENSE_STATUS"))
    finally:
        b.close()
    assert by_index(r.samples)[0].values["DCGM_FI_DEV_VGPU_LICENSE_STATUS"] == 1
    assert by_index(r.samples)[1].values["DCGM_FI_DEV_VGPU_LICENSE_STATUS"] == 0


def test_nvlink_bandwidth_is_a_rate_of_the_counters() -> None:
    clock = FakeClock()
    nv = FakeNvml(gpus(1), clock=clock)
    g = nv.gpus[0]
    g.unsupported -= {"NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX", "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX"}
    g.values["NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX"] = 1_000_000
    g.values["NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX"] = 3_000_000
    b = opened(nv, clock)
    try:
        first = b.read(fields("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL")).samples[0]
        assert "two samples" in first.missing["DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL"]
        g.values["NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX"] = 3_000_000
        g.values["NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX"] = 5_000_000
        clock.advance(2.0)
        second = b.read(fields("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL")).samples[0]
    finally:
        b.close()
    # +4 000 000 KiB over 2 s = 2 000 000 KiB/s; DCGM divides by 1000 into "MB/s"
    assert second.values["DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL"] == 2000


# --- GPM

def test_gpm_first_read_within_100ms_is_absent_not_waited_for(
        caplog: pytest.LogCaptureFixture) -> None:
    """NVML needs its two GPM samples 100 ms apart. A first cycle that comes sooner after the
    open's sample does not wait: the DCP fields are absent from it (no sample taken, nothing
    logged), and the next cycle computes them from the open's sample."""
    clock = FakeClock()
    nv = FakeNvml(gpus(1), clock=clock)
    caplog.set_level(logging.INFO, logger="podgpu")
    b = opened(nv, clock, first_window=True)
    try:
        clock.advance(0.03)
        taken = nv.calls["nvmlGpmSampleGet"]
        assert b.read(fields("DCGM_FI_DEV_GPU_UTIL")).held_for is None  # no DCP field asked
        reading = b.read(fields("DCGM_FI_PROF_SM_ACTIVE", "DCGM_FI_DEV_GPU_UTIL"))
        assert reading.held_for == pytest.approx(0.07)  # the loop's next cycle comes then
        first = by_index(reading.samples)[0]
        assert nv.calls["nvmlGpmSampleGet"] == taken and nv.calls["nvmlGpmMetricsGet"] == 0
        assert "DCGM_FI_PROF_SM_ACTIVE" not in first.values
        assert "first 100 ms" in first.missing["DCGM_FI_PROF_SM_ACTIVE"]
        assert first.values["DCGM_FI_DEV_GPU_UTIL"] == 0  # the rest of the cycle is whole
        assert "DCGM_FI_PROF_SM_ACTIVE" not in caplog.text
        clock.advance(1.0)
        reading = b.read(fields("DCGM_FI_PROF_SM_ACTIVE"))
        assert reading.held_for is None
        second = by_index(reading.samples)[0]
    finally:
        b.close()
    assert second.values["DCGM_FI_PROF_SM_ACTIVE"] == pytest.approx(0.97)
    ((a, z),) = nv.gpm_pairs  # from the open's sample to the second cycle's
    assert z - a == pytest.approx(1.03)


def test_the_reading_holds_back_for_the_gpu_whose_first_window_ends_last() -> None:
    """`Reading.held_for` over several GPUs: a GPU without GPM holds nothing back and does not
    hide one that does; the GPU whose first sample came later decides."""
    clock = FakeClock()
    nv = FakeNvml(gpus(3), clock=clock)
    nv.gpus[0].gpm_supported = False
    b = opened(nv, clock, first_window=True)
    try:
        late = b._runners[2]._gpu.gpm
        assert late is not None
        late._taken_at = clock() + 0.04  # as if its first sample came 40 ms after the others'
        clock.advance(0.03)
        reading = b.read(fields("DCGM_FI_PROF_SM_ACTIVE"))
    finally:
        b.close()
    assert reading.held_for == pytest.approx(0.11)  # GPU 2's window ends 0.14 s after the open


def test_gpm_later_read_within_100ms_waits_only_the_rest() -> None:
    """Once a stream has computed, an early cycle (at a 100 ms interval, after a late one) waits
    for the rest of the 100 ms instead of dropping the fields: the series never flicker."""
    clock = FakeClock()
    nv = FakeNvml(gpus(1), clock=clock)
    b = opened(nv, clock)
    slept: list[float] = []
    stream = b._runners[0]._gpu.gpm
    assert stream is not None

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        clock.advance(seconds)

    stream._sleep = sleep
    try:
        b.read(fields("DCGM_FI_PROF_SM_ACTIVE"))
        assert slept == []  # the open's sample is 100 ms old
        clock.advance(0.03)
        r = b.read(fields("DCGM_FI_PROF_SM_ACTIVE"))
        assert slept == [pytest.approx(0.07)]
        clock.advance(1.0)
        b.read(fields("DCGM_FI_PROF_SM_ACTIVE"))
        assert len(slept) == 1  # a 1 s cycle never waits
    finally:
        b.close()
    assert by_index(r.samples)[0].values["DCGM_FI_PROF_SM_ACTIVE"] == pytest.approx(0.97)
    # each pair starts where the previous one ended: the previous cycle's sample is reused
    (a1, b1), (a2, b2), (a3, _) = nv.gpm_pairs
    assert a2 == b1 and a3 == b2 and b1 - a1 >= 0.1 - 1e-6 and b2 - a2 >= 0.1 - 1e-6


def test_without_gpm_dcp_fields_are_absent_and_said_so(caplog: pytest.LogCaptureFixture) -> None:
    nv = FakeNvml(gpus(2))
    for g in nv.gpus:
        g.name = "NVIDIA A100-SXM4-80GB"
        g.gpm_supported = False
    caplog.set_level(logging.INFO, logger="podgpu.backends.nvml")
    b = opened(nv)
    try:
        r = b.read(fields("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_DEV_GPU_UTIL"))
        unavailable = b.unavailable_fields()
    finally:
        b.close()
    s = by_index(r.samples)[0]
    assert "DCGM_FI_PROF_GR_ENGINE_ACTIVE" not in s.values
    assert "Hopper" in s.missing["DCGM_FI_PROF_GR_ENGINE_ACTIVE"]
    assert "Hopper" in unavailable["DCGM_FI_PROF_DRAM_ACTIVE"]
    assert nv.calls["nvmlGpmSampleGet"] == 0
    startup = [m for m in caplog.messages if "DCGM_FI_PROF_*" in m]
    assert len(startup) == 2 and "A100" in startup[0]


def test_gpm_metric_error_only_drops_that_field(nv: FakeNvml) -> None:
    del nv.gpus[0].gpm[3]
    b = opened(nv)
    try:
        r = b.read(fields("DCGM_FI_PROF_SM_OCCUPANCY", "DCGM_FI_PROF_SM_ACTIVE"))
    finally:
        b.close()
    s = by_index(r.samples)[0]
    assert "DCGM_FI_PROF_SM_OCCUPANCY" in s.missing
    assert s.values["DCGM_FI_PROF_SM_ACTIVE"] == pytest.approx(0.97)


# --- processes

def test_processes_with_memory_and_mean_sm_util(nv: FakeNvml) -> None:
    g = nv.gpus[0]
    g.processes = [(4242, 2 * 2**30), (4343, None)]
    g.graphics = [(4242, 2 * 2**30)]
    now_us = 1_900_000_000_000_000
    g.proc_samples = [(4242, now_us, 60), (4242, now_us + 1, 80)]
    b = opened(nv)
    try:
        r = b.read(fields("DCGM_FI_DEV_GPU_UTIL"), processes=True)
        g.proc_samples = []  # nothing new since the last timestamp: NVML says NotFound
        r2 = b.read(fields("DCGM_FI_DEV_GPU_UTIL"), processes=True)
    finally:
        b.close()
    procs = {p.pid: p for p in r.processes}
    assert set(procs) == {4242, 4343}
    assert procs[4242].device_key == "GPU-00000000-0000-0000-0000-000000000000"
    assert procs[4242].used_memory_bytes == 2 * 2**30 and procs[4242].sm_util_percent == 70.0
    assert procs[4343].used_memory_bytes is None and procs[4343].sm_util_percent == 0.0
    assert {p.pid: p.sm_util_percent for p in r2.processes} == {4242: 0.0, 4343: 0.0}


def test_no_processes_unless_asked(nv: FakeNvml) -> None:
    nv.gpus[0].processes = [(1, 1)]
    b = opened(nv)
    try:
        assert b.read(fields("DCGM_FI_DEV_GPU_UTIL")).processes == ()
    finally:
        b.close()
    assert nv.calls["nvmlDeviceGetComputeRunningProcesses"] == 0


def test_clock_events_counted_per_reason_over_the_window() -> None:
    clock = FakeClock()
    nv = FakeNvml(gpus(1), clock=clock)
    b = NvmlBackend(pynvml_module=nv, clock=clock,
                    clock_events_window_seconds=10.0, clock_events_sample_seconds=1.0)
    b.open()
    want = fields("DCGM_EXP_CLOCK_EVENTS_COUNT")
    try:
        nv.gpus[0].values["nvmlDeviceGetCurrentClocksEventReasons"] = 0x0
        first = b.read(want).samples[0].labeled
        nv.gpus[0].values["nvmlDeviceGetCurrentClocksEventReasons"] = 0x5  # idle + power cap
        clock.advance(1.0)
        b.read(want)
        clock.advance(3.0)
        third = b.read(want).samples[0].labeled
        clock.advance(8.0)  # the first two samples fall out of the 10 s window
        fourth = b.read(want).samples[0].labeled
    finally:
        b.close()
    window = ("window_size_in_ms", "10000")
    assert [(lv.labels, lv.value) for lv in first] == [((window,), 0)]
    assert {lv.labels[1][1]: lv.value for lv in third} == {"gpu_idle": 2, "power_cap": 2}
    assert {lv.labels[1][1]: lv.value for lv in fourth} == {"gpu_idle": 2, "power_cap": 2}
    assert all(lv.field == "DCGM_EXP_CLOCK_EVENTS_COUNT" for lv in third)


def test_lost_gpu_constant_is_nvml_gpu_is_lost() -> None:
    assert GPU_IS_LOST == 15  # the fake and nvml.h agree


def test_issue9_fields_health_and_p2p_from_nvml() -> None:
    # GPU 1 answers P2P "NotSupported" (5); GPU 0 has a row-remap failure (FAIL on MEM)
    nv = FakeNvml(gpus(3))
    nv.gpus[1].values["nvmlDeviceGetP2PStatus"] = 5
    nv.gpus[0].values["NVML_FI_DEV_REMAPPED_FAILURE"] = 1
    b = opened(nv)
    try:
        wanted = fields("DCGM_FI_DEV_ENFORCED_POWER_LIMIT", "DCGM_FI_DEV_SLOWDOWN_TEMP",
                        "DCGM_EXP_P2P_STATUS", "DCGM_EXP_GPU_HEALTH_STATUS",
                        "DCGM_FI_DEV_ROW_REMAP_FAILURE")
        s = by_index(b.read(wanted).samples)
        assert s[0].values["DCGM_FI_DEV_ENFORCED_POWER_LIMIT"] == 700.0  # mW -> W
        assert s[0].values["DCGM_FI_DEV_SLOWDOWN_TEMP"] == 90
        p2p = {dict(lv.labels)["peer_gpu"]: (dict(lv.labels)["link_status"], lv.value)
               for lv in s[1].labeled if lv.field == "DCGM_EXP_P2P_STATUS"}
        assert p2p == {"0": ("NotSupported", 5), "2": ("NotSupported", 5)}
        health = {dict(lv.labels)["health_watch"]: lv.value
                  for lv in s[0].labeled if lv.field == "DCGM_EXP_GPU_HEALTH_STATUS"}
        assert len(health) == 11 and health["MEM"] == 20
        assert {w: v for w, v in health.items() if w != "MEM"} == dict.fromkeys(
            ("PCIE", "NVLINK", "PMU", "MCU", "SM", "INFOROM", "THERMAL", "POWER", "DRIVER", "ALL"),
            0)
        mem = next(lv for lv in s[0].labeled if ("health_watch", "MEM") in lv.labels)
        assert ("health_error_code", "DCGM_FR_ROW_REMAP_FAILURE") in mem.labels
        assert all(lv.value == 0 for lv in s[1].labeled if lv.field == "DCGM_EXP_GPU_HEALTH_STATUS")
    finally:
        b.close()


def test_p2p_status_on_a_single_gpu_node_is_unavailable_with_a_reason() -> None:
    # Found on the H200 (bench/results/h200-compat-2026-12-03.json): with no peer GPU the row was
    # neither exported nor listed in podgpu_field_unavailable.
    b = opened(FakeNvml(gpus(1)))
    try:
        (sample,) = b.read(fields("DCGM_EXP_P2P_STATUS")).samples
    finally:
        b.close()
    assert not [lv for lv in sample.labeled if lv.field == "DCGM_EXP_P2P_STATUS"]
    assert "peer" in sample.missing["DCGM_EXP_P2P_STATUS"]


def test_per_link_nvlink_bandwidth_reads_its_own_link() -> None:
    # DCGM_FI_DEV_NVLINK_BANDWIDTH_L<n>: TX+RX field values scoped to link n, not the
    # all-links scope the total uses; L6 is DCGM id 475 (the ids are not contiguous)
    from podgpu.backends.nvml_lib import Lib
    from podgpu.backends.nvml_plan import ALL_LINKS, build_plan

    nv = FakeNvml(gpus(1))
    lib = Lib(nv)
    tx, rx = nv.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, nv.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX
    plan = build_plan(lib, fields("DCGM_FI_DEV_NVLINK_BANDWIDTH_L6",
                                  "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL"))
    assert BY_NAME["DCGM_FI_DEV_NVLINK_BANDWIDTH_L6"].id == 475
    assert plan.batch() == [(tx, 6), (rx, 6), (tx, ALL_LINKS), (rx, ALL_LINKS)]


def test_clock_event_counts_are_samples_at_dcgm_exporters_interval_whatever_podgpus() -> None:
    """dcgm-exporter counts DCGM's bitmask samples, taken once per its collect
    interval (30 s by default). podgpu reading every second keeps one read per 30 s, so two
    minutes of power capping at a 1 s or at a 30 s collect interval count the same: 4 samples,
    dcgm-exporter's count (not 120)."""
    counts = []
    for step in (1.0, 30.0):
        clock = FakeClock(1_800_000_000.0)  # on a 30 s boundary
        nv = FakeNvml(gpus(1), clock=clock)
        nv.gpus[0].values["nvmlDeviceGetCurrentClocksEventReasons"] = 0x4  # power cap
        b = NvmlBackend(pynvml_module=nv, clock=clock,
                        clock_events_window_seconds=300.0)
        b.open()
        try:
            for _ in range(int(120 / step)):
                labeled = b.read(fields("DCGM_EXP_CLOCK_EVENTS_COUNT")).samples[0].labeled
                clock.advance(step)
        finally:
            b.close()
        counts.append({dict(lv.labels).get("clock_event"): lv.value for lv in labeled})
    assert counts[0] == counts[1] == {"power_cap": 4}


def test_row_remap_pending_is_read_from_nvmls_field_value() -> None:
    """DCGM reads DCGM_FI_DEV_ROW_REMAP_PENDING (396) from NVML_FI_DEV_REMAPPED_PENDING (144;
    NVIDIA/DCGM dcgmlib/src/dcgm_fields.cpp), in the same batch as the other remap fields."""
    nv = FakeNvml(gpus(1))
    nv.gpus[0].values["NVML_FI_DEV_REMAPPED_PENDING"] = 1
    b = opened(nv)
    try:
        r = b.read(fields("DCGM_FI_DEV_ROW_REMAP_PENDING", "DCGM_FI_DEV_ROW_REMAP_FAILURE"))
    finally:
        b.close()
    s = r.samples[0]
    assert s.values["DCGM_FI_DEV_ROW_REMAP_PENDING"] == 1
    assert s.values["DCGM_FI_DEV_ROW_REMAP_FAILURE"] == 0
    assert nv.calls.get("nvmlDeviceGetFieldValues", 0) == 1
