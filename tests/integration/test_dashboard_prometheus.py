"""The dashboard's queries, the recording rules and dashboard 12239's queries against a real
Prometheus scraping two real simulated podgpu nodes.

Expected numbers come from the scenario (deploy/gen/simnode.py: which pod holds which GPU with
what share) and from the device series Prometheus scraped, never from the queries under test.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import ROOT
from tests.integration.podgpu_stack import Stack

DASHBOARD = ROOT / "deploy" / "grafana" / "podgpu-dashboard.json"
POD_KEY = {"Hostname", "gpu", "UUID", "namespace", "pod", "container"}
SHARES = {("ml", "train-0"): 1.0, ("inference", "infer-a"): 0.6, ("inference", "infer-b"): 0.4,
          ("research", "notebook-0"): 0.0}
"""deploy/gen/simnode.py's scenario: each pod's share of its GPU."""


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    s = Stack(tmp_path_factory.mktemp("stack"))
    yield s
    s.stop()


def grafana_expr(expr: str) -> str:
    """What Grafana sends with every variable on "All" (allValue .*) over a 1 minute range."""
    return (expr.replace("$__rate_interval", "15s").replace("$__range", "1m")
            .replace("$Hostname", ".*").replace("$namespace", ".*").replace("$pod", ".*")
            .replace("$gpu", ".*").replace("$job", "podgpu"))


def targets() -> list[tuple[str, dict[str, Any]]]:
    doc = json.loads(DASHBOARD.read_text())
    return [(p["title"], t) for p in doc["panels"] if p["type"] != "row" for t in p["targets"]]


def panel_value(stack: Stack, title: str, at: float, ref: str = "A") -> list[dict[str, Any]]:
    (expr,) = [t["expr"] for ti, t in targets() if ti == title and t["refId"] == ref]
    assert stack.prom is not None
    return stack.prom.query(grafana_expr(expr), at)


def test_every_panel_query_returns_series_with_its_legend_labels(stack: Stack) -> None:
    assert stack.prom is not None
    at = time.time()
    seen = 0
    for title, t in targets():
        result = stack.prom.query(grafana_expr(t["expr"]), at)
        assert result, f"panel {title!r} query {t['refId']} returned nothing: {t['expr']}"
        wanted = set(re.findall(r"\{\{(\w+)\}\}", t.get("legendFormat", "")))
        for r in result:
            missing = wanted - set(r["metric"])
            assert not missing, f"panel {title!r}: series {r['metric']} lack legend labels {missing}"
        seen += 1
    assert seen >= 25  # every target of every panel was queried


def test_fleet_stats_match_the_scenario(stack: Stack) -> None:
    at = time.time()

    def one(title: str, ref: str = "A") -> float:
        (r,) = panel_value(stack, title, at, ref)
        return float(r["value"][1])

    assert one("GPUs") == 4 + 2
    assert one("Allocated") == 3  # GPUs 0, 1 (shared: counted once) and 2 of gpu-node-1
    assert one("Allocated but idle") == 1  # GPU 2: notebook-0 never uses it
    assert (one("podgpu targets up"), one("podgpu targets up", "B")) == (2, 2)
    assert one("GPUs lost") == 0
    assert one("Busy pods") == 3


def test_per_pod_utilization_splits_the_time_sliced_gpu(stack: Stack) -> None:
    """The recording rule and the dashboard panel agree, carry the pod label set, and give the
    pods of the time-sliced GPU their shares of the device, never the whole GPU."""
    assert stack.prom is not None
    at = time.time()
    rec = stack.prom.query("pod_gpu:podgpu_gpu_utilization:ratio", at)
    device = {r["metric"]["UUID"]: float(r["value"][1]) / 100
              for r in stack.prom.query("DCGM_FI_DEV_GPU_UTIL", at)}
    assert {(r["metric"]["namespace"], r["metric"]["pod"]) for r in rec} == set(SHARES)
    by_uuid: dict[str, float] = {}
    for r in rec:
        m = r["metric"]
        assert set(m) == POD_KEY | {"__name__"}, m
        value = float(r["value"][1])
        assert value == pytest.approx(device[m["UUID"]] * SHARES[m["namespace"], m["pod"]])
        by_uuid[m["UUID"]] = by_uuid.get(m["UUID"], 0.0) + value
    shared = {r["metric"]["UUID"] for r in rec if r["metric"]["pod"].startswith("infer-")}
    (gpu1,) = shared
    assert device[gpu1] == 1.0  # busy phase: the split below is not 0 = 0 + 0
    assert by_uuid[gpu1] == pytest.approx(device[gpu1])
    assert all(float(r["value"][1]) < device[gpu1] for r in rec if r["metric"]["UUID"] == gpu1)
    panel = {(r["metric"]["namespace"], r["metric"]["pod"]): float(r["value"][1])
             for r in panel_value(stack, "GPU utilization per pod", at)}
    assert panel == pytest.approx({k: device_of(rec, k, device) * s for k, s in SHARES.items()})


def device_of(rec: list[dict[str, Any]], pod: tuple[str, str], device: dict[str, float]) -> float:
    (uuid,) = {r["metric"]["UUID"] for r in rec if (r["metric"]["namespace"], r["metric"]["pod"]) == pod}
    return device[uuid]


def test_memory_rules_add_up_to_the_device(stack: Stack) -> None:
    assert stack.prom is not None
    at = time.time()
    rec = stack.prom.query("pod_gpu:podgpu_gpu_memory_used:bytes", at)
    fb = {r["metric"]["UUID"]: float(r["value"][1]) * 1048576
          for r in stack.prom.query("DCGM_FI_DEV_FB_USED", at)}
    per_gpu: dict[str, float] = {}
    for r in rec:
        assert set(r["metric"]) == POD_KEY | {"__name__"}, r["metric"]
        per_gpu[r["metric"]["UUID"]] = per_gpu.get(r["metric"]["UUID"], 0.0) + float(r["value"][1])
    assert per_gpu == pytest.approx({u: fb[u] for u in per_gpu})
    ns = {r["metric"]["namespace"]: float(r["value"][1])
          for r in stack.prom.query("namespace:podgpu_gpu_memory_used:bytes", at)}
    assert set(ns) == {"ml", "inference", "research"}
    counts = {r["metric"]["pod"]: r["value"][1]
              for r in stack.prom.query("namespace_pod:podgpu_gpus_allocated:count", at)}
    assert counts == {"train-0": "1", "infer-a": "1", "infer-b": "1", "notebook-0": "1"}


def test_profiling_panels_say_why_on_gpus_without_gpm(stack: Stack) -> None:
    """The A100 node has no DCGM_FI_PROF_*: the profiling panels carry a no-value text and the
    'cannot read' table lists the fields with the reason, rather than silent empty graphs."""
    doc = json.loads(DASHBOARD.read_text())
    prof = [p for p in doc["panels"] if "group_left() max by (UUID, GPU_I_ID) (DCGM_FI_PROF_"
            in json.dumps(p.get("targets", []))]
    assert len(prof) == 3  # tensor, DRAM, graphics engine
    for p in prof:
        assert "GPM" in p["fieldConfig"]["defaults"]["noValue"]
    rows = panel_value(stack, "Fields podgpu cannot read", time.time())
    a100 = [r["metric"] for r in rows if r["metric"]["Hostname"] == "gpu-node-2"]
    assert {m["field"] for m in a100} >= {"DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "DCGM_FI_PROF_DRAM_ACTIVE",
                                          "DCGM_FI_PROF_GR_ENGINE_ACTIVE"}
    assert all("not supported on NVIDIA A100" in m["reason"] for m in a100)
    assert not [r for r in rows if r["metric"]["Hostname"] == "gpu-node-1"]


# Dashboard 12239 ("NVIDIA DCGM Exporter Dashboard"), restated from NVIDIA/dcgm-exporter
# grafana/dcgm-exporter-dashboard.json at d5e5f51 (2026-05-12): variables `instance` =
# label_values(DCGM_FI_DEV_GPU_TEMP, instance) and `gpu` = label_values(DCGM_FI_DEV_GPU_TEMP, gpu);
# panel id -> (title, expr). Panel 16 is an instant query in the original.
D12239 = {
    12: ("GPU Temperature", 'DCGM_FI_DEV_GPU_TEMP{instance=~"$instance", gpu=~"$gpu"}'),
    14: ("GPU Avg. Temp", 'avg(DCGM_FI_DEV_GPU_TEMP{instance=~"$instance", gpu=~"$gpu"})'),
    10: ("GPU Power Usage", 'DCGM_FI_DEV_POWER_USAGE{instance=~"$instance", gpu=~"$gpu"}'),
    16: ("GPU Power Total", 'sum(DCGM_FI_DEV_POWER_USAGE{instance=~"$instance", gpu=~"$gpu"})'),
    2: ("GPU SM Clocks", 'DCGM_FI_DEV_SM_CLOCK{instance=~"$instance", gpu=~"$gpu"} * 1000000'),
    6: ("GPU Utilization", 'DCGM_FI_DEV_GPU_UTIL{instance=~"$instance", gpu=~"$gpu"}'),
    18: ("GPU Framebuffer Mem Used", 'DCGM_FI_DEV_FB_USED{instance=~"$instance", gpu=~"$gpu"}'),
    4: ("Tensor Core Utilization", 'DCGM_FI_PROF_PIPE_TENSOR_ACTIVE{instance=~"$instance", gpu=~"$gpu"}'),
}


def test_dashboard_12239_queries_work_unchanged(stack: Stack) -> None:
    assert stack.prom is not None
    # label_values(DCGM_FI_DEV_GPU_TEMP, <label>) as Grafana resolves it: the series API
    series = stack.prom.api("series", **{"match[]": "DCGM_FI_DEV_GPU_TEMP"})
    instances = sorted({s["instance"] for s in series})
    gpus = sorted({s["gpu"] for s in series})
    assert sorted(instances) == sorted(f"127.0.0.1:{n.port}" for n in stack.nodes)
    assert sorted(gpus) == ["0", "1", "2", "3"]
    at = time.time()
    # Grafana's multi-value "All" without allValue: an alternation of every value, regex
    # metacharacters escaped with a backslash (doubled inside a PromQL string)
    inst_re = "|".join(i.replace(".", "\\\\.") for i in instances)
    gpu_re = "|".join(gpus)
    results = {pid: stack.prom.query(expr.replace("$instance", inst_re).replace("$gpu", gpu_re), at)
               for pid, (_, expr) in D12239.items()}
    for pid in (12, 10, 2, 6, 18):  # one series per GPU of both nodes, legend `GPU {{gpu}}`
        assert len(results[pid]) == 6, (D12239[pid][0], results[pid])
        assert all("gpu" in r["metric"] for r in results[pid])
    temps = [float(r["value"][1]) for r in results[12]]
    assert float(results[14][0]["value"][1]) == pytest.approx(sum(temps) / len(temps))
    power = [float(r["value"][1]) for r in results[10]]
    assert float(results[16][0]["value"][1]) == pytest.approx(sum(power))
    assert all(float(r["value"][1]) >= 1e8 for r in results[2])  # MHz scaled to Hz
    # profiling exists only on the H100 node (GPM); the A100s are absent, not zero
    assert sorted(r["metric"]["instance"] for r in results[4]) == [f"127.0.0.1:{stack.node1.port}"] * 4
    # the seed post's legend `Pod {{pod}}`: the exclusive GPU names its pod
    assert [r["metric"].get("pod") for r in results[6] if r["metric"]["gpu"] == "0"
            and r["metric"]["Hostname"] == "gpu-node-1"] == ["train-0"]
