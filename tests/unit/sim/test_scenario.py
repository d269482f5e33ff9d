"""Simulated pods: the built-in scenario, scenario files, and per-pod usage that adds up."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from podgpu.attribution.enrich import EnrichOptions
from podgpu.errors import ConfigError
from podgpu.fields.catalog import BY_NAME
from podgpu.sim.backend import MODELS, SimulatedBackend
from podgpu.sim.scenario import SimulatedAttributor, default_scenario, load_scenario, parse_scenario
from tests.conftest import FakeClock

FIELDS = (BY_NAME["DCGM_FI_DEV_GPU_UTIL"], BY_NAME["DCGM_FI_DEV_FB_USED"])


def test_default_scenario_one_exclusive_two_sharing_one_idle(clock: FakeClock) -> None:
    sc = default_scenario(4)
    backend = SimulatedBackend(4, MODELS["H100"], clock=clock, scenario=sc)
    devs = backend.devices()
    attributor = SimulatedAttributor(sc)
    assert attributor is not None
    reading = backend.read(FIELDS, processes=True)
    result = attributor.attribute(devs, reading.processes)
    assert result.status.ok
    holders = {d.index: [(a.container.pod, a.replica) for a in result.allocations
                         if a.device_key == d.key] for d in devs}
    assert holders == {0: [("train-0", None)], 1: [("infer-a", 0), ("infer-b", 1)], 2: [], 3: []}
    assert result.allocations[1].device_id == f"{devs[1].uuid}::0"
    # per-pod usage adds up to the device's own series, busy phase and idle phase alike
    for advance in (0.0, 25.0):
        clock.advance(advance)
        reading = backend.read(FIELDS, processes=True)
        for s in reading.samples:
            procs = [p for p in reading.processes if p.device_key == s.device.key]
            assert sum(p.used_memory_bytes or 0 for p in procs) == \
                s.values["DCGM_FI_DEV_FB_USED"] * 1024 * 1024 * (1 if procs else 0)
            assert sum(p.sm_util_percent or 0 for p in procs) == pytest.approx(
                s.values["DCGM_FI_DEV_GPU_UTIL"] if procs else 0)
    assert {p.container.pod for p in reading.processes if p.container} == {
        "train-0", "infer-a", "infer-b"}


def test_scenario_gpus_are_the_busy_ones(clock: FakeClock) -> None:
    sc = parse_scenario({"pods": [{"namespace": "n", "name": "p", "containers": [
        {"name": "c", "gpus": [{"gpu": 3, "processes": 2}]}]}]})
    backend = SimulatedBackend(4, MODELS["H100"], clock=clock, scenario=sc)
    busy = [s.device.index for s in backend.read(FIELDS).samples
            if s.values["DCGM_FI_DEV_GPU_UTIL"] == 100]
    assert busy == [3]
    procs = backend.read(FIELDS, processes=True).processes
    assert [p.sm_util_percent for p in procs] == [50.0, 50.0]
    assert len({p.pid for p in procs}) == 2
    assert backend.read(FIELDS).processes == ()  # only when asked


def test_default_scenario_shrinks_to_small_nodes() -> None:
    assert [c.ref.pod for c in default_scenario(1).containers] == ["train-0"]
    assert len(default_scenario(2).containers) == 3


def test_options_apply_to_simulated_allocations_and_processes(clock: FakeClock) -> None:
    sc = default_scenario(2)
    backend = SimulatedBackend(2, MODELS["H100"], clock=clock, scenario=sc)
    plain = SimulatedAttributor(sc)
    full = SimulatedAttributor(sc, EnrichOptions(enable_pod_uid=True, enable_pod_labels=True))
    assert plain is not None and full is not None
    procs = backend.read(FIELDS, processes=True).processes
    a, b = plain.attribute(backend.devices(), procs), full.attribute(backend.devices(), procs)
    assert a.allocations[0].container.pod_uid == "" and a.allocations[0].container.pod_labels == ()
    assert b.allocations[0].container.pod_uid != ""
    assert b.allocations[0].container.pod_labels == (("app", "trainer"),)
    assert all(p.container and p.container.pod_uid for p in a.processes)  # processes: always


def test_load_json_and_yaml(tmp_path: Path) -> None:
    doc = {"pods": [{"namespace": "n", "name": "p", "uid": "fixed-uid", "labels": {"a": "b"},
                     "containers": [{"name": "c", "gpus": [{"gpu": 0, "replica": 2, "share": 0.5,
                                                             "resource": "nvidia.com/gpu.shared"}]}]}]}
    j = tmp_path / "s.json"
    j.write_text(json.dumps(doc))
    y = tmp_path / "s.yaml"
    y.write_text("pods:\n- namespace: n\n  name: p\n  uid: fixed-uid\n  labels: {a: b}\n"
                 "  containers:\n  - name: c\n    gpus:\n    - {gpu: 0, replica: 2, share: 0.5, "
                 "resource: nvidia.com/gpu.shared}\n")
    a, b = load_scenario(str(j)), load_scenario(str(y))
    assert a.containers == b.containers
    assert a.source == str(j)
    (c,) = a.containers
    assert c.ref.pod_uid == "fixed-uid" and c.gpus[0].replica == 2
    assert c.gpus[0].resource == "nvidia.com/gpu.shared"


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ([], "top level: expected a mapping"),
        ({"pod": []}, "top level: unknown field(s) ['pod']"),
        ({"pods": {}}, "pods: expected a list"),
        ({"pods": [{"name": "p", "containers": []}]}, "pods[0]: missing field(s) ['namespace']"),
        ({"pods": [{"namespace": "n", "name": "p", "containers": []}]},
         "pods[0].containers: expected a non-empty list"),
        ({"pods": [{"namespace": "n", "name": "", "containers": [{"name": "c", "gpus": []}]}]},
         "pods[0].name: expected a non-empty string"),
        ({"pods": [{"namespace": "n", "name": "p", "containers": [
            {"name": "c", "gpus": [{"gpu": -1}]}]}]},
         "pods[0].containers[0].gpus[0].gpu: expected an integer in 0..63, got -1"),
        ({"pods": [{"namespace": "n", "name": "p", "containers": [
            {"name": "c", "gpus": [{"gpu": "0"}]}]}]},
         "pods[0].containers[0].gpus[0].gpu: expected an integer in 0..63, got '0'"),
        ({"pods": [{"namespace": "n", "name": "p", "containers": [
            {"name": "c", "gpus": [{"gpu": 0, "share": 1.5}]}]}]},
         "pods[0].containers[0].gpus[0].share: expected a number in 0..1"),
        ({"pods": [{"namespace": "n", "name": "p", "containers": [
            {"name": "c", "gpus": [{"gpu": 0, "gpus": 1}]}]}]},
         "pods[0].containers[0].gpus[0]: unknown field(s) ['gpus']"),
        ({"pods": [{"namespace": "n", "name": "p", "containers": [
            {"name": "c", "gpus": [{"gpu": 0}]}, {"name": "d", "gpus": [{"gpu": 0}]}]}]},
         "pods[0].containers[1].gpus[0]: gpu 0 is already held by n/p/c"),
        ({"pods": [{"namespace": "n", "name": "p", "containers": [
            {"name": "c", "gpus": [{"gpu": 0, "replica": 0, "share": 0.7}]},
            {"name": "d", "gpus": [{"gpu": 0, "replica": 1, "share": 0.7}]}]}]},
         "pods[0].containers[1].gpus[0].share: shares of gpu 0 add up to more than 1"),
        ({"pods": [{"namespace": "n", "name": "p", "labels": {"a": 1}, "containers": [
            {"name": "c", "gpus": []}]}]}, "pods[0].labels: expected at most 64 strings mapped to strings"),
        ({"pods": [{"namespace": "n", "name": "p", "containers": [{"name": "c", "gpus": []}]},
                   {"namespace": "n", "name": "p", "containers": [{"name": "c", "gpus": []}]}]},
         "pods[1].name: pod n/p appears twice"),
    ],
)
def test_bad_scenarios_name_the_field(doc: object, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_scenario(doc, source="my.json")
    assert str(err.value).startswith("my.json: ")
    assert message in str(err.value)


def test_bad_files_name_the_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"missing\.json: cannot read"):
        load_scenario(str(tmp_path / "missing.json"))
    bad = tmp_path / "bad.json"
    bad.write_text('{"pods": [\n  {"namespace": }\n]}')
    with pytest.raises(ConfigError, match=r"bad.json:2:17: not valid JSON"):
        load_scenario(str(bad))
    bad_yaml = tmp_path / "bad.yml"
    bad_yaml.write_text("pods: [\n")
    with pytest.raises(ConfigError, match=r"bad\.yml: not valid YAML"):
        load_scenario(str(bad_yaml))


def test_scenario_gpu_beyond_the_node_is_refused() -> None:
    sc = parse_scenario({"pods": [{"namespace": "n", "name": "p", "containers": [
        {"name": "c", "gpus": [{"gpu": 4}]}]}]}, source="s.json")
    with pytest.raises(ConfigError, match=r"s.json: n/p container 'c'.*gpu 4 does not exist.*0..3"):
        SimulatedBackend(4, MODELS["H100"], scenario=sc)
