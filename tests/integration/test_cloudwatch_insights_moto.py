"""`podgpu serve --emf-container-insights` beside the seed's declarations, against a real
CloudWatch Logs emulator (moto in server mode): the events CloudWatch stores in
`/aws/containerinsights/<cluster>/performance` (stream = the node name) follow the add-on's
contract as restated in tests/ci_contract.py (names, units, scaling, dimension sets per level,
required fields per Type, the v0 shape, one NodeGPU per GPU and interval), on a simulated node
with every case: an exclusive GPU, a time-sliced GPU shared 70/30 by two pods, a MIG GPU with two
held instances, a two-GPU pod and an idle GPU. At the default sample interval each event holds one
sample per interval, as the add-on's default (one scrape a minute), and it is the first published
cycle of the interval (the snapshot `/metrics` is rendered from, read back at /api/v1/snapshot by
its `taken_at`); the holders of the shared and the MIG GPU add up to the GPU's node event; the
declarations' events stay in their own log group. The node runs as in a
pod (its service account and the API stand-in over TLS), whose Services select one pod:
that pod's events carry `Service` and the pod level its `[ClusterName, Namespace, Service]`
set, the others neither."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from typing import Any

import pytest

from tests import ci_contract
from tests.conftest import http_get, wait_for
from tests.deploy.standins import SHIM, KubeApi
from tests.integration.aws_fakes import ROOT, free_port, moto_url, podgpu_env, read_events
from tests.integration.kube_api_fake import service

__all__ = ["moto_url"]  # the fixture
pytestmark = pytest.mark.integration

SEED = ROOT / "tests" / "fixtures" / "seed" / "cwagent-config.json"
SCENARIO = ROOT / "tests" / "fixtures" / "insights" / "scenario.yaml"
NODE = "ip-10-9-8-7.ec2.internal"
CI_GROUP = "/aws/containerinsights/ci/performance"
SEED_GROUP = "/aws/containerinsights/ci/prometheus"
MIB = 1 << 20
INTERVAL = 2
SERVICE_SET = ["ClusterName", "Namespace", "Service"]


def stored(url: str, group: str, stream: str) -> list[dict[str, Any]]:
    try:
        return [json.loads(e["message"]) for e in read_events(url, group, stream)]
    except Exception as exc:  # the group and stream do not exist before the first send
        if "ResourceNotFound" in str(exc) or "ResourceNotFound" in type(exc).__name__:
            return []
        raise


def test_container_insights_events_in_moto_follow_the_add_ons_contract(moto_url: str) -> None:
    port = free_port()
    api = KubeApi().start()
    # train-0 (namespace ml, app=trainer) is selected by trainer-svc; the same selector in
    # another namespace and a Service without a selector select nothing on this node
    api.fake.put_service(service("ml", "trainer-svc", {"app": "trainer"}))
    api.fake.put_service(service("inference", "trainer-svc-2", {"app": "trainer"}))
    api.fake.put_service(service("ml", "a-headless"))
    cmd = [sys.executable, str(SHIM), str(api.sa_dir), "serve", "--simulate", "6",
           "--simulate-scenario", str(SCENARIO), "-a", f"127.0.0.1:{port}", "-c", "500",
           "--emf-container-insights", "--cloudwatch-config", str(SEED), "--emf-endpoint-url",
           moto_url, "--aws-region", "us-east-1", "--cluster-name", "ci", "--emf-interval",
           str(INTERVAL), "--emf-log-stream", "seed", "--emf-label", "Service=nvidia-dcgm-exporter",
           "--emf-namespace", "gpu-operator"]
    proc = subprocess.Popen(cmd, env=podgpu_env(NODE_NAME=NODE, **api.env()),
                            stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    seen: dict[float, dict[str, Any]] = {}
    try:
        def early(taken_at: float) -> bool:  # a snapshot of an interval's first cycle
            return taken_at - taken_at // INTERVAL * INTERVAL < 0.5

        def four_windows_stored() -> bool:
            stamps = {e["Timestamp"] for e in stored(moto_url, CI_GROUP, NODE)}
            # and a first-cycle snapshot seen of an interval before the last stored one (on a
            # loaded machine a poll can miss the first half-second of several intervals)
            if len(stamps) >= 4 and any(early(t) and int(t // INTERVAL * INTERVAL * 1000)
                                        < max(map(int, stamps)) for t in seen):
                return True
            assert proc.poll() is None, proc.communicate()[1]
            try:
                status, _, body = http_get(f"http://127.0.0.1:{port}/api/v1/snapshot", timeout=2)
            except OSError:
                return False
            if status == 200:
                view = json.loads(body)
                seen[view["taken_at"]] = view
            return False

        wait_for(four_windows_stored, timeout=60, what="4 windows of Container Insights events in moto",
                 interval=0.1)
        # /health says how the Service list goes: two Services with a selector kept
        services = json.loads(http_get(f"http://127.0.0.1:{port}/health")[2]
                              )["emf"]["container_insights"]["services"]
        assert services["status"] == "ok" and services["services"] == 2, services
    finally:
        proc.send_signal(signal.SIGTERM)
        err = proc.communicate(timeout=30)[1]
        api.stop()
    assert proc.returncode == 0, err
    events = stored(moto_url, CI_GROUP, NODE)
    for e in events:
        assert ci_contract.check_event(e) == [], e
    errs, summary = ci_contract.check_stream(events)
    assert errs == [], errs[:5]
    # The seed's declarations still go to their own group, and only there.
    seed = stored(moto_url, SEED_GROUP, "seed")
    assert seed and all("_aws" in d for d in seed)
    assert all("Type" in e and "_aws" not in e for e in events)
    # Every case, every interval (the last one is cut short by the stop: left out).
    stamps = sorted({e["Timestamp"] for e in events})[:-1]
    assert len(stamps) >= 3
    for ts in stamps:
        now = [e for e in events if e["Timestamp"] == ts]
        assert sorted(e["GpuDevice"] for e in now if e["Type"] == "NodeGPU") == [
            "nvidia0", "nvidia1", "nvidia2", "nvidia3", "nvidia4", "nvidia5"]
        holders = {(e["GpuDevice"], e["FullPodName"]) for e in now if e["Type"] == "PodGPU"}
        assert holders == {("nvidia0", "train-0"), ("nvidia1", "infer-a"),
                           ("nvidia1", "infer-b"), ("nvidia2", "mig-a"), ("nvidia2", "mig-b"),
                           ("nvidia3", "wide-0"), ("nvidia4", "wide-0")}
        # one sample per interval: plain numbers, never the high-frequency form
        assert all(not isinstance(v, dict) for e in now for k, v in e.items()
                   if "_gpu_" in k), ts
        # the holders of the time-sliced and of the MIG GPU add up to the GPU
        for dev, pods in (("nvidia1", ("infer-a", "infer-b")), ("nvidia2", ("mig-a", "mig-b"))):
            node = next(e for e in now if e["Type"] == "NodeGPU" and e["GpuDevice"] == dev)
            got = [next(e for e in now if e["Type"] == "PodGPU" and e["GpuDevice"] == dev
                        and e["FullPodName"] == p) for p in pods]
            for k in ("power_draw", "memory_used", "memory_total", "utilization"):
                assert sum(e[f"pod_gpu_{k}"] for e in got) == pytest.approx(
                    node[f"node_gpu_{k}"], rel=1e-4, abs=0.01), (ts, dev, k)
        assert all(e["InstanceType"] == "p5.48xlarge" and e["NodeName"] == NODE for e in now)
        # Service: on the selected pod's container, pod and Type: Pod events, the dimension
        # set on its pod level only; neither on any other pod's
        for e in now:
            if e["Type"] == "NodeGPU" or e["Type"] == "Node":
                assert "Service" not in e
                continue
            dims = e["CloudWatchMetrics"][0]["Dimensions"]
            if e["FullPodName"] == "train-0":
                assert e["Service"] == "trainer-svc", e
                assert (SERVICE_SET in dims) == (e["Type"] != "ContainerGPU")
            else:
                assert "Service" not in e and SERVICE_SET not in dims
        # GPU capacity: the Type: Pod events of GPU-limited pods (MIG instances are another
        # resource) and the Type: Node event: 6 GPUs, 5 held by Running pods.
        assert {e["FullPodName"] for e in now if e["Type"] == "Pod"} == {
            "train-0", "infer-a", "infer-b", "wide-0"}
        (cap,) = [e for e in now if e["Type"] == "Node"]
        assert (cap["node_gpu_limit"], cap["node_gpu_usage_total"]) == (6, 5)
    # Values: the interval's one sample is its first cycle's (cycles 0.5 s apart).
    index = {(e["Timestamp"], e["Type"], e["GpuDevice"], e.get("FullPodName", "")): e
             for e in events if "GpuDevice" in e}
    checked = 0
    for taken_at, view in seen.items():
        ts = str(int(taken_at // INTERVAL * INTERVAL * 1000))
        if ts not in stamps or not early(taken_at):
            continue
        for d in view["devices"]:
            if d["mig"]:
                continue  # a MIG GPU's node event is its instances' together (unit tests)
            v = d["values"]
            node = index[(ts, "NodeGPU", d["device"], "")]
            assert node["node_gpu_utilization"] == v["DCGM_FI_DEV_GPU_UTIL"], (d, taken_at)
            assert node["node_gpu_memory_used"] == v["DCGM_FI_DEV_FB_USED"] * MIB
            assert node["node_gpu_temperature"] == v["DCGM_FI_DEV_GPU_TEMP"]
            checked += 1
        for p in view["pods"]:
            if p["pod"] in ("infer-a", "infer-b"):  # the time-sliced GPU: each its own share
                c = index[(ts, "ContainerGPU", "nvidia1", p["pod"])]
                assert c["container_gpu_utilization"] == round(p["utilization_ratio"] * 100, 3)
                assert c["container_gpu_memory_used"] == p["memory_used_bytes"]
                checked += 1
    assert checked >= 5, (checked, summary)


def values(v: Any) -> list[float]:
    return v["Values"] if isinstance(v, dict) else [v]
