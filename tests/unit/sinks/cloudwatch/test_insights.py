"""Container Insights GPU events (--emf-container-insights): the readings' scaling, who gets
which event on a node with every case (exclusive, time-sliced, MIG, a two-GPU pod, idle), the
EMF v0 shape, high-frequency distributions, and one queue holding two log groups' events.

Every event is checked with tests/ci_contract.py, the add-on's rules restated without podgpu's
code; the expected numbers below are worked out from the simulated readings by hand."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from podgpu.accounting.holders import AccountingShares
from podgpu.attribution.nodeinfo import NodeObject, instance_id_of, parse_node
from podgpu.attribution.podstore import PodInfo
from podgpu.attribution.services import ServiceIndex, parse_service
from podgpu.attribution.workload import PodGpus, controller_owners, pod_gpus, workload_name
from podgpu.backends.select import SelectedBackend
from podgpu.collect import Collector
from podgpu.config import parse_serve_args
from podgpu.errors import ConfigError
from podgpu.model import Device, Sample
from podgpu.model.selection import DeviceSelection
from podgpu.sim.backend import MODELS, SimulatedBackend
from podgpu.sim.node import scenario_pods, simulated_node
from podgpu.sim.scenario import SimulatedAttributor, load_scenario
from podgpu.sinks.cloudwatch.destinations import is_insights_event
from podgpu.sinks.cloudwatch.insights import (
    MEMO_ENTRIES,
    FixedNode,
    InsightsBuilder,
    InsightsOptions,
    ServiceSource,
    device_readings,
    with_insights_fields,
)
from podgpu.sinks.cloudwatch.insights_encode import CombinedEncoder, InsightsEncoder
from podgpu.sinks.cloudwatch.queue import EventQueue
from podgpu.sinks.cloudwatch.window import WindowAccumulator
from tests import ci_contract

ROOT = Path(__file__).resolve().parents[4]
SCENARIO = ROOT / "tests" / "fixtures" / "insights" / "scenario.yaml"
MIB = 1 << 20
START = 1_800_000_000.0  # a multiple of 60: windows start on it


class Node:
    """The contract node (tests/fixtures/insights/scenario.yaml) on a fake clock."""

    def __init__(self, services: ServiceSource | None = None) -> None:
        self.now = START
        scenario = load_scenario(str(SCENARIO))
        backend = SelectedBackend(  # -d f, as serve: a MIG GPU's instances, not its parent
            SimulatedBackend(6, MODELS["H100"], clock=lambda: self.now, scenario=scenario),
            DeviceSelection())
        backend.open()
        from podgpu.fields.metriclist import load_default

        self.collector = Collector(backend, with_insights_fields(load_default().fields),
                                   attributor=SimulatedAttributor(scenario), want_processes=True,
                                   clock=lambda: self.now)
        self.node = simulated_node(MODELS["H100"], 6, "ip-10-0-1-23.ec2.internal")
        pods = scenario_pods(scenario)
        self.builder = InsightsBuilder(InsightsOptions("demo", self.node.name),
                                       FixedNode(self.node), lambda: pods, services,
                                       shares=AccountingShares())

    def events(self, seconds: int, interval: float = 60.0) -> list[dict[str, Any]]:
        acc = WindowAccumulator(interval, lambda k, m: True)
        enc = InsightsEncoder()
        lines: list[str] = []
        for _ in range(seconds):
            closed = acc.add(self.now, self.builder.series(self.collector.cycle()))
            if closed is not None:
                lines += enc.encode(closed)
            self.now += 1
        closed = acc.close()
        if closed is not None:
            lines += enc.encode(closed)
        assert all(is_insights_event(line) for line in lines)
        return [json.loads(line) for line in lines]


def by(events: list[dict[str, Any]], t: str, device: str, pod: str = "") -> dict[str, Any]:
    found = [e for e in events if e["Type"] == t and e["GpuDevice"] == device
             and e.get("FullPodName", "") == pod]
    assert len(found) == 1, (t, device, pod, len(found))
    return found[0]


def test_readings_use_the_add_ons_units_and_scaling() -> None:
    dev = Device(0, "GPU-1", "0000:18:00.0", "nvidia0", "NVIDIA H100 80GB HBM3")
    s = Sample(dev, {"DCGM_FI_DEV_GPU_UTIL": 97, "DCGM_FI_DEV_FB_USED": 1000,
                     "DCGM_FI_DEV_FB_FREE": 800, "DCGM_FI_DEV_FB_RESERVED": 200,
                     "DCGM_FI_DEV_GPU_TEMP": 61, "DCGM_FI_DEV_POWER_USAGE": 182.5,
                     "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": 0.42})
    r = device_readings(s)
    assert r["utilization"] == 97  # percent, as DCGM gives it
    assert r["memory_used"] == 1000 * MIB and r["memory_total"] == 2000 * MIB  # MiB x 2^20
    assert r["memory_utilization"] == pytest.approx(1000 / (2000 - 200) * 100, abs=1e-3)
    assert r["temperature"] == 61 and r["power_draw"] == 182.5
    assert r["tensor_core_utilization"] == 0.42  # the add-on's raw ratio, not 42
    mig = Sample(Device(0, "GPU-1", "0000:18:00.0", "nvidia0", "H100", "3g.40gb", 2, "MIG-x"),
                 {"DCGM_FI_PROF_GR_ENGINE_ACTIVE": 0.5, "DCGM_FI_DEV_FB_USED": 10})
    assert device_readings(mig)["utilization"] == 50.0  # no GPU_UTIL per instance: its engine


def total(value: Any) -> float:
    """A window's Sum: a plain number or a high-frequency distribution's Sum."""
    return float(value["Sum"]) if isinstance(value, dict) else float(value)


def test_every_case_gets_the_right_events_with_its_own_values() -> None:
    events = Node().events(5, interval=60.0)  # one window, GPUs in their busy phase
    for e in events:
        assert ci_contract.check_event(e) == [], e
    errs, _ = ci_contract.check_stream(events)
    assert errs == []
    # One NodeGPU per physical GPU, a MIG GPU named as the add-on names it (dcgm-exporter's MIG
    # series carry their GPU's `device`, which the agent renames GpuDevice); the idle GPU 5 has
    # nothing else.
    assert sorted(e["GpuDevice"] for e in events if e["Type"] == "NodeGPU") == [
        "nvidia0", "nvidia1", "nvidia2", "nvidia3", "nvidia4", "nvidia5"]
    assert {e["GpuDevice"] for e in events if e["Type"] in ("ContainerGPU", "PodGPU")} == {
        "nvidia0", "nvidia1", "nvidia2", "nvidia3", "nvidia4"}
    # Exclusive: the GPU's own readings, as the add-on.
    node0, pod0 = by(events, "NodeGPU", "nvidia0"), by(events, "PodGPU", "nvidia0", "train-0")
    for k in ("utilization", "memory_used", "memory_total", "power_draw",
              "tensor_core_utilization", "temperature"):
        assert pod0[f"pod_gpu_{k}"] == node0[f"node_gpu_{k}"]
    # Time-sliced 70/30: each pod its own share (the add-on gives one arbitrary pod all of it),
    # and the two add up to the GPU in the window: utilisation, memory, power, tensor activity.
    node1 = by(events, "NodeGPU", "nvidia1")
    a, b = by(events, "PodGPU", "nvidia1", "infer-a"), by(events, "PodGPU", "nvidia1", "infer-b")
    assert ci_contract.samples(a["pod_gpu_utilization"])[2] == pytest.approx(70.0)
    assert ci_contract.samples(b["pod_gpu_utilization"])[2] == pytest.approx(30.0)
    for k in ("utilization", "memory_used", "memory_total", "memory_utilization", "power_draw",
              "tensor_core_utilization"):
        assert total(a[f"pod_gpu_{k}"]) + total(b[f"pod_gpu_{k}"]) == pytest.approx(
            total(node1[f"node_gpu_{k}"]), rel=1e-4), k
    # power by use (70/30 of the SM time), memory total by allocation (one replica each)
    assert total(a["pod_gpu_power_draw"]) / total(node1["node_gpu_power_draw"]) == \
        pytest.approx(0.7, abs=1e-3)
    assert total(a["pod_gpu_memory_total"]) == total(b["pod_gpu_memory_total"])
    assert a["pod_gpu_temperature"] == node1["node_gpu_temperature"]  # not split: copied
    ca = by(events, "ContainerGPU", "nvidia1", "infer-a")
    assert ca["container_gpu_power_draw"] == a["pod_gpu_power_draw"]  # one container
    # MIG, two 3g.40gb instances each held by a pod: one node event for the GPU, its power and
    # memory once; each pod's event on GpuDevice nvidia2 with its instance's memory and its
    # part of the GPU; the pods add up to the GPU.
    node2 = by(events, "NodeGPU", "nvidia2")
    m1, m2 = by(events, "PodGPU", "nvidia2", "mig-a"), by(events, "PodGPU", "nvidia2", "mig-b")
    assert m1["UUID"] == m2["UUID"]  # the parent GPU's, as dcgm-exporter labels MIG series
    assert total(node2["node_gpu_memory_total"]) == 5 * 2 * 40 * 1024 * MIB  # 5 samples
    assert total(m1["pod_gpu_memory_total"]) == 5 * 40 * 1024 * MIB
    for k in ("utilization", "memory_used", "memory_total", "power_draw",
              "tensor_core_utilization"):
        assert total(m1[f"pod_gpu_{k}"]) + total(m2[f"pod_gpu_{k}"]) == pytest.approx(
            total(node2[f"node_gpu_{k}"]), rel=1e-4), k
    # an instance of 3 of 7 slices busy at GR_ENGINE_ACTIVE ~0.99: ~42.4 % of the GPU
    assert ci_contract.samples(m1["pod_gpu_utilization"])[2] == pytest.approx(99 * 3 / 7,
                                                                              abs=0.5)
    # A pod with two GPUs: one event per GPU.
    assert by(events, "PodGPU", "nvidia3", "wide-0")["PodName"] == "wide-0"
    assert by(events, "PodGPU", "nvidia4", "wide-0")["InstanceType"] == "p5.48xlarge"
    # No `kubernetes.namespace` (the agent's decorator writes namespace_name, its filter keeps
    # namespace: neither reaches a GPU event).
    assert all("namespace" not in e["kubernetes"] for e in events if e["Type"].endswith("GPU"))


def test_high_frequency_form_one_event_per_minute_with_every_sample() -> None:
    events = Node().events(120)  # two minutes of 1 s samples: 20 s on / 20 s off
    node0 = [e for e in events if e["Type"] == "NodeGPU" and e["GpuDevice"] == "nvidia0"]
    assert [e["Timestamp"] for e in node0] == [str(int(START * 1000)),
                                               str(int((START + 60) * 1000))]
    util = node0[0]["node_gpu_utilization"]
    assert set(util) == {"Values", "Counts", "Max", "Min", "Count", "Sum"}
    assert util["Count"] == 60 and util["Max"] == 100 and util["Min"] == 0
    assert dict(zip(util["Values"], util["Counts"], strict=True)) == {100: 40, 0: 20}


def test_v0_shape_keys_in_go_order_and_no_service_set_without_a_service() -> None:
    e = by(Node().events(1), "ContainerGPU", "nvidia0", "train-0")
    keys = list(e)
    labels = [k for k in keys if not k.startswith("container_gpu_")]
    assert labels == sorted(labels) and keys[0] == "CloudWatchMetrics"
    assert keys[len(labels):] == sorted(keys[len(labels):])  # values after the labels
    assert isinstance(e["Timestamp"], str) and e["Version"] == "0" and "_aws" not in e
    assert e["kubernetes"]["container_name"] == "trainer"
    assert "containerd" in e["kubernetes"]  # the container's runtime id
    pod = by(Node().events(1), "PodGPU", "nvidia0", "train-0")
    assert ["ClusterName", "Namespace", "Service"] not in pod["CloudWatchMetrics"][0]["Dimensions"]


class Services:
    """The Service index with literal Services of the contract node's namespaces."""

    def __init__(self, *objs: dict[str, Any]) -> None:
        self.index = ServiceIndex()
        self.index.replace(s for s in map(parse_service, objs) if s is not None)
        self.started = 0

    def first(self, namespace: str, labels: tuple[tuple[str, str], ...]) -> str:
        return self.index.first(namespace, labels)

    def start(self, wait_seconds: float = 0.0) -> None:
        self.started += 1

    def health(self) -> dict[str, object]:
        return {"status": "ok", "services": len(self.index)}


def service_obj(ns: str, name: str, selector: dict[str, str] | None) -> dict[str, Any]:
    spec: dict[str, Any] = {"ports": [{"port": 80}]} | (
        {"selector": selector} if selector is not None else {})
    return {"kind": "Service", "metadata": {"namespace": ns, "name": name}, "spec": spec}


SERVICE_SET = ["ClusterName", "Namespace", "Service"]


def test_service_names_the_selected_pods_events_and_adds_the_pod_level_set() -> None:
    # train-0 (ml, app=trainer) is selected by two Services: the first by name wins; a
    # Service of another namespace with the same selector and one without a selector do not
    # count; infer-a/-b (no labels) are selected by none.
    services = Services(service_obj("ml", "trainer-svc", {"app": "trainer"}),
                        service_obj("ml", "metrics", {"app": "trainer"}),
                        service_obj("ml", "aaa-headless", None),
                        service_obj("inference", "aaa", {"app": "trainer"}))
    node = Node(services)
    events = node.events(2)
    assert services.started == 1
    assert node.builder.health() == {"services": {"status": "ok", "services": 3},
                                     "node": {"status": "known in advance (simulated node)"}}
    errs, _ = ci_contract.check_stream(events)
    assert errs == []
    pod, ctr = by(events, "PodGPU", "nvidia0", "train-0"), by(events, "ContainerGPU", "nvidia0",
                                                               "train-0")
    assert pod["Service"] == ctr["Service"] == "metrics"
    assert SERVICE_SET in pod["CloudWatchMetrics"][0]["Dimensions"]
    assert SERVICE_SET not in ctr["CloudWatchMetrics"][0]["Dimensions"]  # pod level only
    assert "service" not in pod["kubernetes"] and "service_name" not in pod["kubernetes"]
    cap = [e for e in events if e["Type"] == "Pod" and e["FullPodName"] == "train-0"]
    assert cap and cap[0]["Service"] == "metrics"  # the add-on's pod event has it too
    assert SERVICE_SET in cap[0]["CloudWatchMetrics"][0]["Dimensions"]
    for t in ("PodGPU", "ContainerGPU"):
        e = by(events, t, "nvidia1", "infer-a")
        assert "Service" not in e and SERVICE_SET not in e["CloudWatchMetrics"][0]["Dimensions"]
    assert all("Service" not in e for e in events if e["Type"] == "NodeGPU")
    # the Service goes: the next events have neither the field nor the set
    services.index.delete("ml", "metrics")
    services.index.delete("ml", "trainer-svc")
    later = by(node.events(1), "PodGPU", "nvidia0", "train-0")
    assert "Service" not in later and SERVICE_SET not in later["CloudWatchMetrics"][0][
        "Dimensions"]


def test_the_contract_ties_service_to_the_pod_level_set() -> None:
    pod = by(Node(Services(service_obj("ml", "web", {"app": "trainer"}))).events(1), "PodGPU",
             "nvidia0", "train-0")
    assert ci_contract.check_event(pod) == []
    no_set = json.loads(json.dumps(pod))
    no_set["CloudWatchMetrics"][0]["Dimensions"].remove(SERVICE_SET)
    assert any("not the pod-level" in e for e in ci_contract.check_event(no_set))
    no_field = json.loads(json.dumps(pod))
    del no_field["Service"]
    assert any("without a Service field" in e for e in ci_contract.check_event(no_field))
    ctr = by(Node(Services(service_obj("ml", "web", {"app": "trainer"}))).events(1),
             "ContainerGPU", "nvidia0", "train-0")
    ctr["CloudWatchMetrics"][0]["Dimensions"].append(SERVICE_SET)
    assert any("pod level only" in e for e in ci_contract.check_event(ctr))


def test_capacity_metrics_follow_the_add_ons_formulas() -> None:
    events = Node().events(1)
    pods = {e["FullPodName"]: e for e in events if e["Type"] == "Pod"}
    # GPU-limited pods only: a MIG instance is another resource than nvidia.com/gpu.
    assert set(pods) == {"train-0", "infer-a", "infer-b", "wide-0"}
    wide = pods["wide-0"]
    assert (wide["pod_gpu_request"], wide["pod_gpu_limit"], wide["pod_gpu_usage_total"]) == (
        2, 2, 2)  # Running: usage_total = the limit
    assert wide["pod_gpu_reserved_capacity"] == pytest.approx(2 / 6 * 100, abs=1e-3)
    (node,) = [e for e in events if e["Type"] == "Node"]
    # capacity 6; Running pods' limits 1 + 1 + 1 + 2 = 5 (a time-slicing replica counts one)
    assert (node["node_gpu_limit"], node["node_gpu_usage_total"]) == (6, 5)
    assert node["node_gpu_reserved_capacity"] == pytest.approx(5 / 6 * 100, abs=1e-3)
    assert "node_gpu_unreserved_capacity" not in node  # formula not published: left out
    for e in (wide, node):
        assert ci_contract.check_event(e) == []


def test_a_pods_gpu_and_capacity_events_name_it_alike() -> None:
    # train-0 as a Deployment's pod: its PodGPU, ContainerGPU and `Type: Pod` events carry one
    # workload name, the same labels and owners, however each level is built.
    node = Node()
    train = PodInfo("uid-train", "ml", "train-0", (("app", "trainer"), ("pod-template-hash", "7c9")),
                    owners=(("ReplicaSet", "trainer-7c9"),), gpus=PodGpus(1, 1, "Running"))
    builder = InsightsBuilder(InsightsOptions("demo", node.node.name), FixedNode(node.node),
                              lambda: {("ml", "train-0"): train},
                              Services(service_obj("ml", "web", {"app": "trainer"})),
                              shares=AccountingShares())
    keys = [dict(key) for key, _, _ in builder.series(node.collector.cycle())]
    events = [k for k in keys if k.get("FullPodName") == "train-0"]
    assert sorted(e["Type"] for e in events) == ["ContainerGPU", "Pod", "PodGPU"]
    for e in events:
        blob = json.loads(e["kubernetes"])
        assert (e["Namespace"], e["PodName"], e["Service"]) == ("ml", "trainer", "web"), e["Type"]
        assert blob["pod_name"] == "train-0"
        assert blob["labels"] == {"app": "trainer", "pod-template-hash": "7c9"}
        assert blob["pod_owners"] == [{"owner_kind": "Deployment", "owner_name": "trainer"}]


def test_pod_churn_keeps_the_label_set_memo_bounded() -> None:
    # Every cycle a new batch of GPU-limited pods, each a new `Type: Pod` label set: the memo of
    # built label sets must start over at its bound, not keep every pod that ever ran.
    node = Node()
    batch = MEMO_ENTRIES // 2 + 1
    pods: dict[tuple[str, str], PodInfo] = {}
    builder = InsightsBuilder(InsightsOptions("demo", node.node.name), FixedNode(node.node),
                              lambda: pods, shares=AccountingShares())
    snapshot = node.collector.cycle()
    for cycle in range(3):
        pods = {("churn", f"job-{cycle}-{i}"): PodInfo(f"uid-{cycle}-{i}", "churn",
                                                      f"job-{cycle}-{i}",
                                                      gpus=PodGpus(1, 1, "Running"))
                for i in range(batch)}
        got = sum(1 for key, _, _ in builder.series(snapshot) if ("Type", "Pod") in key)
        assert got == batch  # every pod still gets its event
        kept = len(builder._memo)
        assert kept <= MEMO_ENTRIES, (cycle, kept)


def test_workload_names_and_gpu_resources_from_the_pod_object() -> None:
    obj: dict[str, Any] = {"metadata": {"name": "trainer-7c9f8d6b5-x2kqz", "labels": {
        "pod-template-hash": "7c9f8d6b5"}, "ownerReferences": [
            {"kind": "ReplicaSet", "name": "trainer-7c9f8d6b5", "controller": True}]},
        "spec": {"containers": [{"resources": {"limits": {"nvidia.com/gpu": "2"}}},
                                {"resources": {"requests": {"cpu": "1"}}}]},
        "status": {"phase": "Pending"}}
    owners = controller_owners(obj["metadata"])
    assert workload_name("trainer-7c9f8d6b5-x2kqz", owners,
                         (("pod-template-hash", "7c9f8d6b5"),)) == (
        "trainer", (("Deployment", "trainer"),))
    assert pod_gpus(obj) == PodGpus(2, 2, "Pending")  # a missing request defaults to the limit
    assert workload_name("db-0", (("StatefulSet", "db"),)) == ("db-0", (("StatefulSet", "db"),))
    assert workload_name("agent-x", (("DaemonSet", "agent"),))[0] == "agent"
    assert workload_name("solo", ()) == ("solo", ())


def test_one_queue_hands_out_batches_of_one_log_group() -> None:
    q = EventQueue(1 << 20)
    q.put(1000, ['{"_aws":{}}', '{"CloudWatchMetrics":[]}', '{"CloudWatchMetrics":[]}',
                 '{"Timestamp":1}'])
    batches = []
    while (batch := q.peek(100, 1 << 20, 1 << 30)):
        batches.append([is_insights_event(m) for _, m, _ in batch])
        q.ack(len(batch))
    assert batches == [[False], [True, True], [False]]


def test_combined_encoder_keeps_insights_label_sets_from_the_declarations() -> None:
    enc = CombinedEncoder(None, InsightsEncoder())
    assert not enc.wanted((("ClusterName", "c"),), "DCGM_FI_DEV_GPU_UTIL")
    assert enc.wanted((("", "NodeGPU"), ("ClusterName", "c")), "node_gpu_utilization")


def test_node_object_gives_instance_id_type_and_gpus() -> None:
    node = parse_node({"metadata": {"name": "n", "labels": {
        "node.kubernetes.io/instance-type": "g5.12xlarge"}},
        "spec": {"providerID": "aws:///us-west-2a/i-0abc123"},
        "status": {"capacity": {"nvidia.com/gpu": "4", "cpu": "48"}}})
    assert node == NodeObject("n", "i-0abc123", "g5.12xlarge", 4)
    assert instance_id_of("gce://project/zone/name") == ""
    assert parse_node({}).gpu_capacity is None
    assert simulated_node(MODELS["A10G"], 4, "x").instance_type == "g5.12xlarge"
    assert simulated_node(MODELS["H200"], 8, "x").instance_type == "p5e.48xlarge"
    assert simulated_node(MODELS["A100"], 8, "x").instance_id.startswith("i-0")


def test_flag_and_its_checks() -> None:
    s = parse_serve_args(["--simulate", "1", "--emf-container-insights", "--cluster-name", "c"])
    assert s.emf is not None and s.emf.container_insights and s.emf.config == ""
    env = parse_serve_args(["--simulate", "1", "--cluster-name", "c"],
                           {"PODGPU_EMF_CONTAINER_INSIGHTS": "true"})
    assert env.emf is not None and env.emf.container_insights
    from podgpu.agent import build_agent

    with pytest.raises(ConfigError, match="--cluster-name"):
        build_agent(parse_serve_args(["--simulate", "1", "--emf-container-insights",
                                      "--emf-destination", "stdout"], {"NODE_NAME": "n"}))
    with pytest.raises(ConfigError, match="cloudwatch or stdout"):
        build_agent(parse_serve_args(["--simulate", "1", "--emf-container-insights",
                                      "--cluster-name", "c", "--emf-destination",
                                      "udp://127.0.0.1:25888"], {"NODE_NAME": "n"}))


def test_plan_prices_the_profile_per_observation_from_the_events_it_sends() -> None:
    from podgpu.fields.metriclist import load_default
    from podgpu.plan.cli import main, parse_args
    from podgpu.plan.insights import estimate_insights
    from podgpu.sim.node import Shape

    e = estimate_insights(Shape(nodes=10, gpus_per_node=2), load_default(), cluster="c",
                          emf_interval=60.0, collect_interval=1.0, days=30.0,
                          price_per_million=0.5)
    # per node and minute: 2 GPUs x (node + container + pod) events, 2 pods' Type: Pod events
    # and the Type: Node event; 2 x 7 x 3 GPU values + 2 x 4 pod + 3 node capacity values
    assert e.events_per_minute == 10 * (2 * 3 + 2 + 1)
    assert e.observations_per_minute == 10 * (2 * 7 * 3 + 2 * 4 + 3)
    assert e.dollars == pytest.approx(e.observations_per_minute * 30 * 1440 / 1e6 * 0.5)
    assert parse_args(["--ci-observation-price", "0.5"]).ci_observation_price == 0.5
    with pytest.raises(ConfigError, match="--ci-observation-price"):
        main(["--nodes", "1", "--ci-observation-price", "-1"])


def test_node_lookup_reads_the_own_node_once_through_the_api() -> None:
    from podgpu.attribution.kubeapi import KubeConfig
    from podgpu.attribution.nodeinfo import NodeLookup
    from tests.integration.kube_api_fake import FakeKubeApi

    api = FakeKubeApi().start()
    try:
        api.nodes["n1"] = {"metadata": {"name": "n1", "labels": {
            "node.kubernetes.io/instance-type": "p5e.48xlarge"}},
            "spec": {"providerID": "aws:///us-east-1a/i-0feedface"},
            "status": {"capacity": {"nvidia.com/gpu": "8"}}}
        lookup = NodeLookup("n1", configuration=KubeConfig(api.url))
        lookup.start(wait_seconds=10)
        lookup.close()
        assert lookup.current() == NodeObject("n1", "i-0feedface", "p5e.48xlarge", 8)
        assert [r["path"] for r in api.requests] == [["/api/v1/nodes/n1"]]  # one GET, no list
        missing = NodeLookup("n2", configuration=KubeConfig(api.url))
        missing.start(wait_seconds=10)
        missing.close()
        assert missing.current().instance_id == "" and "404" in missing.reason
    finally:
        api.stop()


def test_stdout_prints_the_declarations_and_container_insights_events_of_one_sink(
        capsys: pytest.CaptureFixture[str]) -> None:
    from podgpu.agent import build_agent

    seed = ROOT / "tests" / "fixtures" / "seed" / "cwagent-config.json"
    agent = build_agent(parse_serve_args(
        ["--simulate", "4", "--cloudwatch-config", str(seed), "--emf-container-insights",
         "--cluster-name", "c", "--emf-destination", "stdout", "--emf-label",
         "Service=nvidia-dcgm-exporter", "--emf-namespace", "gpu-operator"],
        {"NODE_NAME": "n1"}))
    assert agent.emf is not None and agent.attributor is not None
    agent.backend.open()
    collector = Collector(agent.backend, with_insights_fields(agent.metrics.fields),
                          attributor=agent.attributor, want_processes=True)
    agent.emf.offer(collector.cycle())
    agent.emf.stop(grace=5)
    lines = [x for x in capsys.readouterr().out.splitlines() if x.startswith("{")]
    kinds = {is_insights_event(x) for x in lines}
    assert kinds == {True, False}  # both, from one sink and one queue
    assert all(json.loads(x)["_aws"]["CloudWatchMetrics"][0]["Namespace"] ==
               "ContainerInsights/Prometheus" for x in lines if not is_insights_event(x))


def test_shares_follow_the_accounting_rule_when_processes_are_not_seen() -> None:
    """Without per-process numbers a holder's utilisation is the device's split by allocation,
    as accounting splits it; memory it cannot see is left out, never 0."""

    node = Node()
    snap = node.collector.cycle()
    nvidia1 = next(s.device.key for s in snap.samples if s.device.device_name == "nvidia1")

    def shares(processes: tuple[Any, ...]) -> dict[str, dict[str, Any]]:
        out = {}
        for key, _, items in node.builder.series(snap._replace(processes=processes)):
            d = dict(key)
            if d.get("Type") == "ContainerGPU" and d["GpuDevice"] == "nvidia1":
                out[d["FullPodName"]] = dict(items)
        return out

    on1 = [p for p in snap.processes if p.device_key == nvidia1]
    rest = tuple(p for p in snap.processes if p.device_key != nvidia1)
    # no hostPID: the GPU's processes are not attributed -> GPU_UTIL (100) split 1:1 by the
    # replicas held; no memory; power split by allocation too
    blind = shares(rest + tuple(p._replace(container=None) for p in on1))
    assert set(blind) == {"infer-a", "infer-b"}
    assert [v["container_gpu_utilization"] for v in blind.values()] == [50.0, 50.0]
    assert all("container_gpu_memory_used" not in v for v in blind.values())
    a, b = blind["infer-a"]["container_gpu_power_draw"], blind["infer-b"]["container_gpu_power_draw"]
    assert a == pytest.approx(b, abs=1e-3)
    # memory known, no per-process utilisation sample
    no_util = shares(rest + tuple(p._replace(sm_util_percent=None) for p in on1))
    assert all(v["container_gpu_utilization"] == 50.0 and "container_gpu_memory_used" in v
               for v in no_util.values())
    # only infer-a runs: infer-b holds the GPU and uses nothing of it, so no power either
    only_a = shares(rest + tuple(p for p in on1 if p.container and p.container.pod == "infer-a"))
    assert only_a["infer-b"]["container_gpu_utilization"] == 0.0
    assert only_a["infer-b"]["container_gpu_power_draw"] == 0.0


def test_container_insights_events_survive_the_spool(tmp_path: Path) -> None:
    lines = [json.dumps(e, separators=(",", ":")) for e in Node().events(1)]
    q = EventQueue(1 << 20, str(tmp_path))
    q.put(int(START * 1000), ['{"_aws":{"Timestamp":1,"CloudWatchMetrics":[]}}', *lines])
    again = EventQueue(1 << 20, str(tmp_path))  # a restarted pod loads the spool
    assert again.dropped == 0 and len(again) == 1 + len(lines)
    first = again.peek(100, 1 << 20, 1 << 30)
    again.ack(len(first))
    rest = again.peek(100, 1 << 20, 1 << 30)
    assert [m for _, m, _ in rest] == lines  # their own batch, to their own log group


def sink_events(args: list[str], capsys: pytest.CaptureFixture[str], seconds: int = 120
                ) -> list[dict[str, Any]]:
    """Every event `serve` with these EMF flags prints to stdout for `seconds` 1 s cycles on a
    fake clock starting on a minute (the window closes at each minute)."""
    from podgpu.agent import build_agent

    now = [START]
    agent = build_agent(parse_serve_args(
        ["--simulate", "2", "--emf-container-insights", "--cluster-name", "c",
         "--emf-destination", "stdout", "--emf-namespace", "gpu-operator", *args],
        {"NODE_NAME": "n1"}))
    assert agent.emf is not None
    agent.backend.open()
    collector = Collector(agent.backend, with_insights_fields(agent.metrics.fields),
                          attributor=agent.attributor, want_processes=True,
                          clock=lambda: now[0])
    for _ in range(seconds):
        agent.emf.offer(collector.cycle())
        now[0] += 1.0
    agent.emf.stop(grace=5)
    return [json.loads(x) for x in capsys.readouterr().out.splitlines() if x.startswith("{")]


def counts(events: list[dict[str, Any]], name: str) -> list[int]:
    """Samples per event of metric `name` (1 for a plain number)."""
    return [e[name]["Count"] if isinstance(e[name], dict) else 1 for e in events if name in e]


@pytest.mark.parametrize(("args", "per_window"), [
    ([], 1),  # the add-on's default: one scrape a minute, one value per event
    (["--emf-sample-interval", "60"], 1),  # equal to the window: one sample per window
    (["--emf-sample-interval", "10"], 6),
    (["--emf-sample-interval", "0"], 60),  # every 1 s sample: the add-on's high-frequency form
])
def test_sample_interval_means_the_same_with_and_without_declarations(
        args: list[str], per_window: int, capsys: pytest.CaptureFixture[str]) -> None:
    seed = str(ROOT / "tests" / "fixtures" / "seed" / "cwagent-config.json")
    alone = sink_events(args, capsys)
    both = sink_events([*args, "--cloudwatch-config", seed, "--emf-label",
                        "Service=nvidia-dcgm-exporter"], capsys)
    for events in (alone, both):
        ci = [e for e in events if is_insights_event(json.dumps(e)) and e["Type"] == "NodeGPU"]
        assert counts(ci, "node_gpu_power_draw") == [per_window] * 4  # 2 GPUs x 2 minutes
    # the declarations follow the flag when it is given, and keep every sample when it is not
    decl = [e for e in both if "_aws" in e]
    assert set(counts(decl, "DCGM_FI_DEV_GPU_UTIL")) == {per_window if args else 60}
