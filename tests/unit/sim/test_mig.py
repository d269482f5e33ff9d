"""MIG on the simulated node (the scenario's `mig` key): validated with errors naming the file
and the field; the node looks as the NVML backend shows a real MIG GPU (the parent without
GPU_UTIL or whole-GPU profiling, each GPU instance with the parent's identity, its profile and
id, its own memory and ratios); holders' allocations and processes are on the instance; a lost
MIG GPU keeps its instances."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from podgpu.backends.select import SelectedBackend
from podgpu.errors import ConfigError
from podgpu.fields.catalog import BY_NAME
from podgpu.model.device import Value
from podgpu.model.selection import parse_device_selection
from podgpu.sim.backend import MODELS, SimulatedBackend
from podgpu.sim.scenario import SimulatedAttributor, load_scenario, parse_scenario
from tests.conftest import FakeClock

FIELDS = [BY_NAME[n] for n in (
    "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_FB_TOTAL",
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_MIG_MODE",
    "DCGM_FI_DEV_XID_ERRORS", "DCGM_EXP_GPU_HEALTH_STATUS", "DCGM_EXP_P2P_STATUS")]
MIG = [{"gpu": 0, "instances": ["3g.40gb", "3g.40gb"]}]


def num(v: Value) -> float:
    """A reading that must be a number."""
    assert isinstance(v, int | float), v
    return v


def pod(name: str, gpu: dict[str, Any]) -> dict[str, Any]:
    return {"namespace": "ml", "name": name, "containers": [{"name": "c", "gpus": [gpu]}]}


def doc(*pods: dict[str, Any], **top: Any) -> dict[str, Any]:
    return {"mig": MIG, "pods": list(pods), **top}


@pytest.mark.parametrize(("data", "needle"), [
    ({"mig": {"gpu": 0}, "pods": []}, "mig: expected a list"),
    ({"mig": [{"gpu": 0}], "pods": []}, "mig[0].instances: expected a list of 0..7 MIG profiles"),
    ({"mig": [{"gpu": 0, "instances": ["4g.40gb", "4g.40gb"]}], "pods": []},
     "mig[0].instances: 8 compute slices; a GPU has 7"),
    ({"mig": [{"gpu": 0, "instances": ["3g"]}], "pods": []},
     "mig[0].instances[0]: expected a MIG profile such as \"1g.10gb\" or \"3g.40gb\", got '3g'"),
    ({"mig": [{"gpu": 0, "instances": ["1g.10gb"], "mode": 1}], "pods": []},
     "mig[0]: unknown field(s) ['mode']"),
    ({"mig": [{"gpu": 64, "instances": ["1g.10gb"]}], "pods": []},
     "mig[0].gpu: expected an integer in 0..63, got 64"),
    ({"mig": [{"gpu": 0, "instances": ["1g.10gb"]}, {"gpu": 0, "instances": ["1g.10gb"]}],
      "pods": []}, "mig[1].gpu: gpu 0 is listed twice"),
    (doc(pod("p", {"gpu": 0})), "pods[0].containers[0].gpus[0]: gpu 0 runs MIG; hold one of its "
                                "instances with instance: 1..2"),
    (doc(pod("p", {"gpu": 0, "instance": 3})),
     "pods[0].containers[0].gpus[0].instance: gpu 0 has GPU instances 1..2, not 3"),
    ({"mig": [{"gpu": 0, "instances": []}], "pods": [pod("p", {"gpu": 0})]},
     "pods[0].containers[0].gpus[0]: gpu 0 runs MIG with no GPU instance; nothing on it can be "
     "held"),
    ({"mig": [{"gpu": 0, "instances": []}], "pods": [pod("p", {"gpu": 0, "instance": 1})]},
     "pods[0].containers[0].gpus[0].instance: gpu 0 has no GPU instance, not 1"),
    (doc(pod("p", {"gpu": 1, "instance": 1})),
     "pods[0].containers[0].gpus[0].instance: gpu 1 is not in the scenario's mig list"),
    (doc(pod("p", {"gpu": 0, "instance": 0})),
     "pods[0].containers[0].gpus[0].instance: expected an integer in 1..7, got 0"),
    (doc(pod("p", {"gpu": 0, "instance": 1}), pod("q", {"gpu": 0, "instance": 1})),
     "pods[1].containers[0].gpus[0]: gpu 0 instance 1 is already held by ml/p/c"),
])
def test_bad_mig_names_file_and_field(tmp_path: Path, data: dict[str, Any], needle: str) -> None:
    path = tmp_path / "s.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ConfigError) as exc:
        load_scenario(str(path))
    assert str(exc.value).startswith(f"{path}: ") and needle in str(exc.value), str(exc.value)


def test_mig_needs_a_gpu_the_node_has_and_a_model_with_mig() -> None:
    s = parse_scenario({"mig": [{"gpu": 2, "instances": ["1g.10gb"]}], "pods": []}, "f.json")
    with pytest.raises(ConfigError, match=r"f\.json: mig\[0\]\.gpu: gpu 2 does not exist"):
        SimulatedBackend(2, MODELS["H100"], scenario=s)
    s = parse_scenario({"mig": [{"gpu": 0, "instances": ["1g.10gb"]}], "pods": []}, "f.json")
    with pytest.raises(ConfigError, match=r"f\.json: mig\[0\]: the NVIDIA A10G has no MIG .*"
                       r"simulate an A100, H100 or H200"):
        SimulatedBackend(1, MODELS["A10G"], scenario=s)
    # profiles are named by the memory they get: 2 x 3g.71gb do not fit an 80 GB GPU
    s = parse_scenario({"mig": [{"gpu": 0, "instances": ["3g.71gb", "3g.71gb"]}], "pods": []},
                       "f.json")
    with pytest.raises(ConfigError, match=r"f\.json: mig\[0\]\.instances: 142 GB of profiles; "
                       r"the NVIDIA A100-SXM4-80GB has 81 GB"):
        SimulatedBackend(1, MODELS["A100"], scenario=s)
    SimulatedBackend(1, MODELS["H200"], scenario=s)  # 143 GB: fits


def test_a_mig_gpu_looks_as_nvml_shows_one_and_its_holder_is_on_the_instance() -> None:
    s = parse_scenario(doc(pod("mig-pod", {"gpu": 0, "instance": 1}),
                           pod("whole", {"gpu": 1})))
    clock = FakeClock()
    b = SimulatedBackend(2, MODELS["H100"], scenario=s, clock=clock)
    devs = b.devices()
    assert [(d.index, d.mig_gi_id, d.mig_profile) for d in devs] == [
        (0, None, None), (0, 1, "3g.40gb"), (0, 2, "3g.40gb"), (1, None, None)]
    parent, gi1, gi2 = devs[:3]
    assert gi1.uuid == parent.uuid and gi1.mig_uuid and gi1.mig_uuid.startswith("MIG-")
    assert gi1.mig_uuid != gi2.mig_uuid
    r = b.read(FIELDS, processes=True)  # t=0: GPU 0 is in a busy phase
    p, i1, i2, whole = r.samples
    # the parent: no GPU_UTIL and no whole-GPU GPM with MIG on (NVML: NotSupported); MIG mode 1
    assert "DCGM_FI_DEV_GPU_UTIL" in p.missing and "DCGM_FI_PROF_GR_ENGINE_ACTIVE" in p.missing
    assert p.values["DCGM_FI_DEV_MIG_MODE"] == 1 and whole.values["DCGM_FI_DEV_MIG_MODE"] == 0
    # the held instance is busy, the other idle; each has its own memory (3g.40gb)
    assert i1.values["DCGM_FI_DEV_FB_TOTAL"] == i2.values["DCGM_FI_DEV_FB_TOTAL"] == 40 * 1024
    assert num(i1.values["DCGM_FI_DEV_FB_USED"]) > 0 and i2.values["DCGM_FI_DEV_FB_USED"] == 0
    assert p.values["DCGM_FI_DEV_FB_USED"] == i1.values["DCGM_FI_DEV_FB_USED"]
    assert float(i1.values["DCGM_FI_PROF_GR_ENGINE_ACTIVE"]) > 0.9
    assert i2.values["DCGM_FI_PROF_GR_ENGINE_ACTIVE"] == 0.0
    # GPU-level values and series are the parent's, as DCGM repeats them on instances; no P2P
    assert i1.values["DCGM_FI_DEV_POWER_USAGE"] == p.values["DCGM_FI_DEV_POWER_USAGE"]
    fields = {lv.field for lv in i1.labeled}
    assert "DCGM_EXP_GPU_HEALTH_STATUS" in fields and "DCGM_EXP_P2P_STATUS" not in fields
    assert "DCGM_FI_DEV_GPU_UTIL" not in i1.values
    # the kubelet's view: the MIG UUID under the mixed strategy's resource
    att = SimulatedAttributor(s).attribute(devs, r.processes)
    by_pod = {a.container.pod: a for a in att.allocations}
    assert (by_pod["mig-pod"].device_key, by_pod["mig-pod"].device_id,
            by_pod["mig-pod"].resource) == (gi1.key, gi1.mig_uuid, "nvidia.com/mig-3g.40gb")
    assert by_pod["whole"].resource == "nvidia.com/gpu"
    (proc,) = [x for x in r.processes if x.device_key == gi1.key]
    assert proc.sm_util_percent is None  # NVML has no per-process utilisation with MIG on
    assert proc.used_memory_bytes == i1.values["DCGM_FI_DEV_FB_USED"] * 2**20
    clock.advance(25)  # the idle phase
    idle = b.read(FIELDS).samples[1]
    assert idle.values["DCGM_FI_DEV_FB_USED"] == 0
    assert idle.values["DCGM_FI_PROF_GR_ENGINE_ACTIVE"] == 0.0


def test_a_given_resource_is_kept() -> None:
    s = parse_scenario(doc(pod("p", {"gpu": 0, "instance": 2, "resource": "nvidia.com/gpu"})))
    assert s.containers[0].gpus[0].resource == "nvidia.com/gpu"


@pytest.mark.parametrize(("spec", "ids"), [
    ("f", [1, 2]), ("i", [1, 2]), ("g", [None]), ("g+i", [None, 1, 2])])
def test_a_lost_mig_gpu_keeps_its_instances(spec: str, ids: list[int | None]) -> None:
    s = parse_scenario(doc(pod("mig-pod", {"gpu": 0, "instance": 1}),
                           lost_gpus=[{"gpu": 0, "at": 10}]))
    clock = FakeClock()
    b = SelectedBackend(SimulatedBackend(1, MODELS["H100"], scenario=s, clock=clock),
                        parse_device_selection(spec))
    before = b.read(FIELDS, processes=True)
    assert [x.device.mig_gi_id for x in before.samples] == ids
    clock.advance(10)
    r = b.read(FIELDS, processes=True)
    assert r.lost == (("nvidia0", "GPU lost (simulated, XID 79)"),) and r.processes == ()
    assert [x.device for x in r.samples] == [x.device for x in before.samples]
    for x in r.samples:
        assert x.lost is not None and x.values["DCGM_FI_DEV_XID_ERRORS"] == 79
        assert "DCGM_FI_DEV_FB_USED" not in x.values
        h = {dict(lv.labels)["health_watch"]: lv.value for lv in x.labeled
             if lv.field == "DCGM_EXP_GPU_HEALTH_STATUS"}
        assert h["ALL"] == 20
    att = SimulatedAttributor(s).attribute(tuple(x.device for x in r.samples), ())
    assert [a.container.pod for a in att.allocations] == (["mig-pod"] if 1 in ids else [])


def test_the_live_view_accounting_and_emf_see_a_simulated_mig_instance_as_a_real_one() -> None:
    """Downstream of the simulated backend, through the real Collector and -d f selection, as
    they see NVML's MIG devices: the live view lists instance `0/gi1` held by the pod, accounting
    gives the pod 3/7 of a GPU under GPU_I_ID 1, and the EMF series carry GPU_I_PROFILE/GPU_I_ID
    with the pod."""
    from podgpu.accounting.source import Accountant
    from podgpu.collect import Collector
    from podgpu.fields.metriclist import load_default
    from podgpu.sinks.cloudwatch.series import SeriesBuilder, SeriesOptions
    from podgpu.sinks.live.view import ViewOptions, build_view
    from podgpu.sinks.prometheus.labels import LabelOptions
    from podgpu.sinks.prometheus.source import render_sources

    s = parse_scenario(doc(pod("mig-pod", {"gpu": 0, "instance": 1})))
    clock = FakeClock()
    backend = SelectedBackend(SimulatedBackend(1, MODELS["H100"], scenario=s, clock=clock),
                              parse_device_selection("f"))
    metrics = load_default()
    collector = Collector(backend, metrics.fields, attributor=SimulatedAttributor(s),
                          want_processes=True, clock=clock)
    labels = LabelOptions(hostname="node-a")
    acct = Accountant(labels)
    snaps = []
    for _ in range(11):
        snaps.append(collector.cycle())
        acct.observe(snaps[-1])
        clock.advance(1.0)
    view = build_view(snaps[-1], ViewOptions("node-a", "simulated", "test", 1.0))
    gi1 = next(d for d in view["devices"] if d["gpu"] == "0/gi1")
    assert gi1["mig"] is not None and gi1["mig"]["profile"] == "3g.40gb"
    assert [h["pod"] for h in gi1["holders"]] == ["mig-pod"]
    assert {d["gpu"] for d in view["devices"]} == {"0/gi1", "0/gi2"}  # -d f: no parent
    text = render_sources([acct])
    line = next(ln for ln in text.splitlines()
                if ln.startswith("podgpu_pod_gpu_allocated_seconds_total{"))
    assert 'GPU_I_ID="1"' in line and 'pod="mig-pod"' in line
    assert float(line.split()[-1]) == pytest.approx(10 * 3 / 7)  # 10 s of 3 of 7 slices
    builder = SeriesBuilder(metrics, SeriesOptions(labels=labels, cluster_name="c"))
    fb = [dict(k) for k, _, items in builder.series(snaps[-1])
          for name, _ in items if name == "DCGM_FI_DEV_FB_USED"]
    held = next(d for d in fb if d.get("GPU_I_ID") == "1")
    assert (held["GPU_I_PROFILE"], held["pod"]) == ("3g.40gb", "mig-pod")


NOT_ON_MIG = ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_MEM_COPY_UTIL", "DCGM_FI_DEV_ENC_UTIL",
              "DCGM_FI_DEV_DEC_UTIL")
"""nvmlDeviceGetUtilizationRates, ...EncoderUtilization, ...DecoderUtilization: "On MIG-enabled
GPUs, querying ... is not currently supported" (nvml.h, NVML API reference)."""
REMAP = ("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
         "DCGM_FI_DEV_ROW_REMAP_FAILURE", "DCGM_FI_DEV_ROW_REMAP_PENDING")
"""nvmlDeviceGetRemappedRows and its field values: NotSupported "if MIG is enabled" with
active instances (nvml.h)."""


@pytest.mark.parametrize("model", ["A100", "H100", "H200"])
def test_a_held_instance_on_every_mig_model(model: str) -> None:
    """An A100 has no GPM: its instance has no profiling ratios but its memory and the GPU's
    values, and its holder's processes (memory only) are read without an error."""
    from podgpu.fields.catalog import CATALOG

    s = parse_scenario(doc(pod("mig-pod", {"gpu": 0, "instance": 1})))
    b = SimulatedBackend(1, MODELS[model], scenario=s, clock=FakeClock())
    r = b.read(CATALOG, processes=True)
    parent, i1, i2 = r.samples
    assert num(i1.values["DCGM_FI_DEV_FB_USED"]) > 0 and i2.values["DCGM_FI_DEV_FB_USED"] == 0
    assert ("DCGM_FI_PROF_GR_ENGINE_ACTIVE" in i1.values) is (model != "A100")
    for x in (parent, i1, i2):
        assert not set(NOT_ON_MIG) & set(x.values), x.device
        assert not set(REMAP) & set(x.values), x.device
    (proc,) = r.processes
    assert proc.used_memory_bytes == i1.values["DCGM_FI_DEV_FB_USED"] * 2**20


def test_a_mig_gpu_without_instances_is_shown_whole_in_flex_with_mig_mode_on() -> None:
    """MIG on, no GPU instance created yet: dcgm-exporter's flex mode monitors the GPU itself
    (devicemonitoring.monitorAllGPUInstances adds a GPU with no instances); NVML has no
    utilisation rates for it but does have its row-remapping counts (no active instance)."""
    from podgpu.fields.catalog import CATALOG

    s = parse_scenario({"mig": [{"gpu": 0, "instances": []}], "pods": []})
    for spec in ("f", "g"):
        b = SelectedBackend(SimulatedBackend(1, MODELS["A100"], scenario=s, clock=FakeClock()),
                            parse_device_selection(spec))
        b.open()
        (x,) = b.read(CATALOG).samples
        assert not x.device.is_mig and x.values["DCGM_FI_DEV_MIG_MODE"] == 1
        assert not set(NOT_ON_MIG) & set(x.values)
        assert x.values["DCGM_FI_DEV_ROW_REMAP_FAILURE"] == 0
    b = SelectedBackend(SimulatedBackend(1, MODELS["A100"], scenario=s, clock=FakeClock()),
                        parse_device_selection("i"))
    assert b.read(CATALOG).samples == ()


@pytest.mark.parametrize("model", ["A100", "H100", "H200"])
def test_the_parent_under_g_has_its_instances_memory_whatever_fields_are_read(model: str) -> None:
    """dcgm-exporter's default list reads FB_FREE and FB_USED but not FB_TOTAL: the parent's
    used is its instances' sum and used + free stay what the GPU has (never negative)."""
    names = ("DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_FB_USED")
    spec = MODELS[model]
    s = parse_scenario(doc(pod("a", {"gpu": 0, "instance": 1}), pod("b", {"gpu": 0,
                                                                          "instance": 2})))
    clock = FakeClock()
    b = SelectedBackend(SimulatedBackend(1, spec, scenario=s, clock=clock),
                        parse_device_selection("g+i"))
    for _ in range(2):  # busy, then idle
        parent, i1, i2 = b.read([BY_NAME[n] for n in names]).samples
        used = int(i1.values["DCGM_FI_DEV_FB_USED"]) + int(i2.values["DCGM_FI_DEV_FB_USED"])
        assert parent.values["DCGM_FI_DEV_FB_USED"] == used
        assert (int(parent.values["DCGM_FI_DEV_FB_FREE"]) + used
                == spec.fb_total_mib - spec.fb_reserved_mib)
        clock.advance(25)
