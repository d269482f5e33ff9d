"""Issue 8 item 4: the rendered DaemonSet's own args and env start a working podgpu.

For every overlay: a real gRPC kubelet on a unix socket in the directory that stands in for the
pod-resources hostPath, the /proc fixture tree as the host's /proc, the pod API stand-in over
TLS with a service-account token, and (cloudwatch overlay) a CloudWatch Logs stand-in. The only
flags added are `--simulate 4 --simulate-scenario none` (no GPU here; allocations still come
from the kubelet socket) and the loopback listen address; EMF tests also set the endpoint and a
1 s EMF interval through the environment.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from podgpu.sim.backend import MODELS, SimulatedBackend
from tests.conftest import FIXTURES, free_port
from tests.deploy.contract import NODE_NAME, map_path, prepare
from tests.deploy.render import OVERLAYS, ROOT, container, render
from tests.deploy.standins import DUMMY_AWS, SHIM, KubeApi, LogsStandIn, environ_without_aws
from tests.integration.kube_api_fake import pod
from tests.integration.kubelet_fake import FakeKubelet, gpu_pod, socket_path

pytestmark = pytest.mark.integration

UUIDS = [d.uuid for d in SimulatedBackend(4, MODELS["H100"]).devices()]
TRAIN_UID = "5d7c2f4e-1a2b-4c3d-8e9f-0a1b2c3d4e5f"


@pytest.fixture
def kube_api() -> Iterator[KubeApi]:
    api = KubeApi().start()
    api.fake.put(pod(TRAIN_UID, "ml", "train", node=NODE_NAME, containers={"main": "c0ffee"}))
    api.fake.put(pod("6e8d3f5a-2b3c-4d5e-9f0a-1b2c3d4e5f60", "ml", "elsewhere", node="other-node"))
    yield api
    api.stop()


def get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def series(body: bytes, name: str) -> list[dict[str, str]]:
    return [s.labels for fam in text_string_to_metric_families(body.decode())
            for s in fam.samples if s.name == name]


def wait_until(cond: Any, proc: subprocess.Popen[str], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"podgpu exited {proc.returncode}: {proc.stderr.read()[-3000:]}")  # type: ignore[union-attr]
        try:
            got = cond()
        except OSError:
            got = None
        if got:
            return got
        time.sleep(0.1)
    raise AssertionError(f"not within {timeout} s: {what}")


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_daemonset_args_start_a_working_podgpu(overlay: str, tmp_path: Path,
                                               kube_api: KubeApi) -> None:
    objs = render(overlay)
    c = container(objs)
    logs = LogsStandIn().start()
    with socket_path() as sock:
        kubelet = FakeKubelet(sock).start()
        kubelet.set_pods([gpu_pod("ml", "train", "main", "nvidia.com/gpu", UUIDS[0])])
        launch = prepare(objs, tmp_path, pod_resources_dir=Path(sock).parent,
                         proc_fixture=FIXTURES / "proc")
        port = free_port()
        env = {**environ_without_aws(), **launch.env, **kube_api.env(), "PYTHONPATH": str(ROOT)}
        if "--cloudwatch-config" in launch.args:
            env.update(DUMMY_AWS, PODGPU_EMF_ENDPOINT_URL=logs.url, PODGPU_EMF_INTERVAL="1")
        cmd = [sys.executable, str(SHIM), str(kube_api.sa_dir), *launch.args,
               "--simulate", "4", "--simulate-scenario", "none", "--address", f"127.0.0.1:{port}"]
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)
        try:
            base = f"http://127.0.0.1:{port}"

            def allocated() -> bytes | None:
                status, body = get(base + "/metrics")
                return body if status == 200 and any(
                    s.get("pod") == "train" for s in series(body, "podgpu_gpu_allocation")) else None

            body = wait_until(allocated, proc, 30, "podgpu_gpu_allocation{pod=train}")
            (alloc,) = series(body, "podgpu_gpu_allocation")
            assert (alloc["namespace"], alloc["pod"], alloc["container"], alloc["UUID"]) == (
                "ml", "train", "main", UUIDS[0])
            util = {s["UUID"]: s for s in series(body, "DCGM_FI_DEV_GPU_UTIL")}
            assert util[UUIDS[0]]["pod"] == "train" and "pod" not in util[UUIDS[1]]
            assert {s["Hostname"] for s in util.values()} == {NODE_NAME}  # NODE_NAME reached podgpu
            # The pod watch reached the API with this node's field selector and the mounted token.
            wait_until(lambda: any(r.get("fieldSelector") == [f"spec.nodeName={NODE_NAME}"]
                                   for r in kube_api.fake.list_requests()), proc, 10, "pod list")
            # Every probe path answers 200 on a healthy node.
            for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
                status, _ = get(base + c[probe]["httpGet"]["path"])
                assert status == 200, probe
            if "--cloudwatch-config" in launch.args:
                check_emf(launch.env, logs, proc)
        finally:
            proc.terminate()
            try:
                proc.communicate(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
            kubelet.stop()
            logs.stop()


def check_emf(env: dict[str, str], logs: LogsStandIn, proc: subprocess.Popen[str]) -> None:
    """The overlay's declarations, cluster name (from its ConfigMap via $(CLUSTER_NAME)) and
    Service label reach CloudWatch Logs with the workload's pod as a dimension."""

    def pod_docs() -> list[dict[str, Any]]:
        return [d for d in logs.documents() if d.get("pod") == "train"]

    docs = wait_until(pod_docs, proc, 30, "an EMF document for pod train")
    doc = docs[0]
    assert doc["ClusterName"] == env["CLUSTER_NAME"] == "my-cluster"
    assert doc["Service"] == "nvidia-dcgm-exporter" and doc["Namespace"] == "ml"
    dims = doc["_aws"]["CloudWatchMetrics"][0]["Dimensions"]
    assert {"Service", "Namespace", "ClusterName", "job", "pod"} in [set(d) for d in dims]
    assert "DCGM_FI_DEV_GPU_UTIL" in json.dumps(doc["_aws"])


def test_contract_mapping_covers_every_mount_and_image_path(tmp_path: Path) -> None:
    """Every path-like arg of every overlay is a mount or an image file, so the test above
    really runs with the DaemonSet's own paths (a renamed mount would break it here first)."""
    for overlay in OVERLAYS:
        objs = render(overlay)
        with socket_path() as sock:
            work = tmp_path / overlay.replace("/", "_")
            work.mkdir()
            launch = prepare(objs, work, pod_resources_dir=Path(sock).parent,
                             proc_fixture=FIXTURES / "proc")
            for raw in container(objs)["args"]:
                if raw.startswith("/"):
                    local = map_path(raw, launch.mounts)
                    assert local != raw, f"{overlay}: {raw} is neither mounted nor in the image"
                    assert Path(local).parent.is_dir(), (overlay, raw, local)
            assert os.path.isdir(launch.mounts["/host/proc"] / "4101")
        shutil.rmtree(work)
