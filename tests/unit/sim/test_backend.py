from __future__ import annotations

import pytest

from podgpu.errors import ConfigError
from podgpu.fields import load_default
from podgpu.fields.catalog import CATALOG
from podgpu.sim.backend import MODELS, SimulatedBackend, parse_simulate
from tests.conftest import FakeClock

FIELDS = load_default().fields


def values(backend: SimulatedBackend, index: int) -> dict[str, float]:
    """GPU `index`'s numeric readings (string-valued fields left out)."""
    return {k: v for k, v in backend.read(FIELDS).samples[index].values.items()
            if isinstance(v, int | float)}


def test_parse_simulate_forms() -> None:
    assert parse_simulate("4") == (4, MODELS["H100"])
    assert parse_simulate("8xh200") == (8, MODELS["H200"])
    for bad in ("0", "x", "4xFOO", "65", "-1", "4xx"):
        with pytest.raises(ConfigError, match="--simulate"):
            parse_simulate(bad)


def test_busy_gpus_follow_the_20s_square_wave_and_idle_gpus_stay_idle(clock: FakeClock) -> None:
    b = SimulatedBackend(4, MODELS["H100"], clock=clock)
    seen = []
    for t in range(0, 80, 5):
        clock.now = b._epoch + t + 0.5
        seen.append([values(b, i)["DCGM_FI_DEV_GPU_UTIL"] for i in range(4)])
    busy = [100, 100, 100, 100, 0, 0, 0, 0]
    assert [row[0] for row in seen] == busy * 2
    assert [row[1] for row in seen] == busy * 2
    assert {row[2] for row in seen} == {0} and {row[3] for row in seen} == {0}


def test_power_clock_memory_and_profiling_move_with_utilization(clock: FakeClock) -> None:
    b = SimulatedBackend(2, MODELS["H100"], clock=clock)
    clock.now = b._epoch + 1
    hot = values(b, 0)
    clock.now = b._epoch + 21
    cold = values(b, 0)
    for name in ("DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_FB_USED",
                 "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
                 "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "DCGM_FI_PROF_DRAM_ACTIVE"):
        assert hot[name] > cold[name], name
    assert hot["DCGM_FI_DEV_FB_USED"] + hot["DCGM_FI_DEV_FB_FREE"] + hot["DCGM_FI_DEV_FB_RESERVED"] \
        == MODELS["H100"].fb_total_mib
    assert 0.0 <= cold["DCGM_FI_PROF_GR_ENGINE_ACTIVE"] <= hot["DCGM_FI_PROF_GR_ENGINE_ACTIVE"] <= 1.0


def test_energy_counter_never_decreases_and_grows_faster_while_busy(clock: FakeClock) -> None:
    b = SimulatedBackend(1, MODELS["A10G"], clock=clock)
    readings = []
    for t in range(0, 81):
        clock.now = b._epoch + t
        readings.append(values(b, 0)["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"])
    assert readings == sorted(readings)
    busy_gain = readings[10] - readings[5]
    idle_gain = readings[30] - readings[25]
    assert busy_gain > 5 * idle_gain


def test_profiling_fields_only_on_models_with_gpm() -> None:
    for key, spec in MODELS.items():
        s = SimulatedBackend(1, spec).read(FIELDS).samples[0]
        has = "DCGM_FI_PROF_GR_ENGINE_ACTIVE" in s.values
        assert has == spec.gpm, key
        if not spec.gpm:
            assert "DCGM_FI_PROF_GR_ENGINE_ACTIVE" in s.missing
            assert "DCGM_FI_PROF_GR_ENGINE_ACTIVE" in SimulatedBackend(1, spec).unavailable_fields()


def test_value_types_match_the_catalog() -> None:
    all_fields = tuple(f for f in CATALOG if f.group != "EXP")
    for spec in MODELS.values():
        s = SimulatedBackend(2, spec).read(all_fields).samples[0]
        for f in all_fields:
            v = s.values.get(f.name)
            if v is None:
                assert f.name in s.missing
                continue
            expected = {"int": int, "float": float, "str": str}[f.value_type]
            assert isinstance(v, expected), (spec.name, f.name, v)


def test_identities_are_deterministic_and_unique() -> None:
    a = SimulatedBackend(8, MODELS["H100"]).devices()
    b = SimulatedBackend(8, MODELS["H100"]).devices()
    assert a == b
    assert len({d.uuid for d in a}) == 8 and len({d.pci_bus_id for d in a}) == 8
    assert [d.device_name for d in a] == [f"nvidia{i}" for i in range(8)]
    assert all(d.uuid.startswith("GPU-") for d in a)
    assert SimulatedBackend(1, MODELS["H200"]).devices()[0].uuid != a[0].uuid


def test_scenario_xids_drive_the_last_xid_and_the_windowed_count() -> None:
    # XID 31 on GPU 1 every 100 s from t=50 s; a 120 s window
    from podgpu.fields.catalog import BY_NAME
    from podgpu.sim.scenario import parse_scenario

    scenario = parse_scenario({"pods": [], "xids": [{"gpu": 1, "xid": 31, "every": 100,
                                                      "offset": 50}]})
    now = [1000.0]
    b = SimulatedBackend(2, MODELS["H100"], clock=lambda: now[0], scenario=scenario,
                         xid_window_seconds=120.0)
    want = [BY_NAME[n] for n in ("DCGM_FI_DEV_XID_ERRORS", "DCGM_EXP_XID_ERRORS_COUNT",
                                 "DCGM_EXP_GPU_HEALTH_STATUS", "DCGM_EXP_P2P_STATUS")]

    def at(t: float) -> tuple[int, list[tuple[tuple[tuple[str, str], ...], float]]]:
        now[0] = 1000.0 + t
        s = b.read(want).samples[1]
        counts = [(lv.labels, lv.value) for lv in s.labeled
                  if lv.field == "DCGM_EXP_XID_ERRORS_COUNT"]
        last = s.values["DCGM_FI_DEV_XID_ERRORS"]
        assert isinstance(last, int)
        return last, counts

    win = ("window_size_in_ms", "120000")
    assert at(10) == (0, [((win,), 0)])
    assert at(60) == (31, [((win, ("xid", "31")), 1)])
    assert at(160) == (31, [((win, ("xid", "31")), 2)])   # t=50 and t=150 in the window
    assert at(300) == (31, [((win, ("xid", "31")), 1)])   # only t=250
    # XID 31 is an application error: health stays PASS; P2P over NVLink is OK on an H100
    s = b.read(want).samples[0]
    assert all(lv.value == 0 for lv in s.labeled if lv.field != "DCGM_EXP_XID_ERRORS_COUNT")
    assert [dict(lv.labels) for lv in s.labeled if lv.field == "DCGM_EXP_P2P_STATUS"] == [
        {"link_status": "OK", "peer_gpu": "1"}]


def test_p2p_on_a_one_gpu_node_is_unavailable_not_absent() -> None:
    from podgpu.fields.catalog import BY_NAME

    s = SimulatedBackend(1, MODELS["H200"]).read([BY_NAME["DCGM_EXP_P2P_STATUS"]]).samples[0]
    assert s.labeled == () and s.missing == {"DCGM_EXP_P2P_STATUS": "no peer GPU on this node"}
