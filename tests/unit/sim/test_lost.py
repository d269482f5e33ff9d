"""The scenario's `lost_gpus`: validated with errors naming the file and the
field, and the simulated backend exporting what the NVML backend exports for a lost GPU."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from podgpu.errors import ConfigError
from podgpu.fields.catalog import BY_NAME
from podgpu.sim.backend import MODELS, SimulatedBackend
from podgpu.sim.scenario import load_scenario, parse_scenario
from tests.conftest import FakeClock

WANTED = [BY_NAME[n] for n in ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_XID_ERRORS",
                               "DCGM_EXP_XID_ERRORS_COUNT", "DCGM_EXP_GPU_HEALTH_STATUS",
                               "DCGM_FI_DEV_SERIAL")]
POD = {"namespace": "ml", "name": "t", "containers": [{"name": "c", "gpus": [{"gpu": 1}]}]}


@pytest.mark.parametrize(("lost", "needle"), [
    ({"gpu": 0}, "lost_gpus[0]: missing field 'at'"),
    ({"at": 3}, "lost_gpus[0]: missing field 'gpu'"),
    ({"gpu": 0, "at": 3, "when": 1}, "lost_gpus[0]: unknown field(s) ['when']"),
    ({"gpu": 64, "at": 3}, "lost_gpus[0].gpu: expected an integer in 0..63, got 64"),
    ({"gpu": True, "at": 3}, "lost_gpus[0].gpu: expected an integer"),
    ({"gpu": 0, "at": -1}, "lost_gpus[0].at: expected seconds in 0.."),
    ({"gpu": 0, "at": "soon"}, "lost_gpus[0].at: expected seconds in 0..3.16224e+07, got 'soon'"),
    ({"gpu": 0, "at": 3, "xid": 0}, "lost_gpus[0].xid: expected an integer in 1..999, got 0"),
    ({"gpu": 0, "at": 3, "back_at": 3}, "lost_gpus[0].back_at: 3 is not after at (3)"),
    ("gpu0", "lost_gpus[0]: expected a mapping, got str"),
])
def test_bad_lost_gpus_name_file_and_field(tmp_path: Path, lost: object, needle: str) -> None:
    path = tmp_path / "s.json"
    path.write_text(json.dumps({"pods": [], "lost_gpus": [lost]}))
    with pytest.raises(ConfigError) as exc:
        load_scenario(str(path))
    assert str(exc.value).startswith(f"{path}: ") and needle in str(exc.value), str(exc.value)


def test_lost_gpus_must_be_a_list_and_name_existing_gpus() -> None:
    with pytest.raises(ConfigError, match=r"f\.json: lost_gpus: expected a list, got dict"):
        parse_scenario({"pods": [], "lost_gpus": {"gpu": 0}}, "f.json")
    s = parse_scenario({"pods": [], "lost_gpus": [{"gpu": 3, "at": 0}]}, "f.json")
    with pytest.raises(ConfigError, match=r"f\.json: lost_gpus\[0\]\.gpu: gpu 3 does not exist; "
                                          r"the simulated node has 2 GPU\(s\)"):
        SimulatedBackend(2, MODELS["H100"], scenario=s)


def test_a_simulated_gpu_falls_off_the_bus_and_comes_back() -> None:
    clock = FakeClock()
    s = parse_scenario({"pods": [POD], "lost_gpus": [{"gpu": 1, "at": 10, "back_at": 20}]})
    b = SimulatedBackend(2, MODELS["H100"], scenario=s, clock=clock)
    before = b.read(WANTED, processes=True)
    assert before.lost == () and {p.device_key for p in before.processes} == {b.devices()[1].key}
    clock.advance(10)
    r = b.read(WANTED, processes=True)
    assert r.lost == (("nvidia1", "GPU lost (simulated, XID 79)"),) and r.processes == ()
    ok, gone = r.samples
    assert ok.lost is None and gone.lost is not None and gone.device == b.devices()[1]
    assert gone.values == {"DCGM_FI_DEV_XID_ERRORS": 79,
                           "DCGM_FI_DEV_SERIAL": before.samples[1].values["DCGM_FI_DEV_SERIAL"]}
    assert [(dict(lv.labels).get("xid"), lv.value) for lv in gone.labeled
            if lv.field == "DCGM_EXP_XID_ERRORS_COUNT"] == [("79", 1)]
    health = {dict(lv.labels)["health_watch"]: lv.value for lv in gone.labeled
              if lv.field == "DCGM_EXP_GPU_HEALTH_STATUS"}
    assert health["ALL"] == 20 and health["PCIE"] == 0 and health["SM"] == 0  # 79: ALL only
    clock.advance(10)
    back = b.read(WANTED, processes=True)
    assert back.lost == () and back.samples[1].lost is None
    assert "DCGM_FI_DEV_GPU_UTIL" in back.samples[1].values
    assert back.samples[1].values["DCGM_FI_DEV_XID_ERRORS"] == 79  # the last XID, as DCGM keeps
    assert back.processes != ()
