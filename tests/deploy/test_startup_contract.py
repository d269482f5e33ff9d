"""The rendered DaemonSet's own args and env start a working
podgpu, its probes pass with and without TLS, and it waits for a driver that is not there yet.

For every overlay: a real gRPC kubelet on a unix socket in the directory that stands in for the
pod-resources hostPath, the /proc fixture tree as the host's /proc, the pod API stand-in over
TLS with a service-account token, and (cloudwatch overlay) a CloudWatch Logs stand-in. The only
flags added are the loopback listen address and, where no GPU is needed, `--simulate 4
--simulate-scenario none` (allocations still come from the kubelet socket); EMF tests also set
the endpoint and a 1 s EMF interval through the environment. The driver-wait test runs the real
NVML backend over the fake NVML of tests/fakes/fake_pynvml.py (tests/deploy/nvml_appears/),
which answers only 20 s after start: the injected fault.
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
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from podgpu.http.ready import FIRST_COLLECTION
from podgpu.sim.backend import MODELS, SimulatedBackend
from tests.conftest import FIXTURES, free_port, wait_for
from tests.deploy.contract import NODE_NAME, Launch, map_path, prepare
from tests.deploy.render import OVERLAYS, ROOT, configured, container, render
from tests.deploy.standins import (
    DUMMY_AWS,
    SHIM,
    KubeApi,
    LogsStandIn,
    environ_without_aws,
    self_signed,
)
from tests.harness import unverified_tls
from tests.integration.kube_api_fake import pod
from tests.integration.kubelet_fake import FakeKubelet, gpu_pod, socket_path

pytestmark = pytest.mark.integration

UUIDS = [d.uuid for d in SimulatedBackend(4, MODELS["H100"]).devices()]
TRAIN_UID = "5d7c2f4e-1a2b-4c3d-8e9f-0a1b2c3d4e5f"
NVML_APPEARS = ROOT / "tests" / "deploy" / "nvml_appears"
DRIVER_DELAY = 20.0  # seconds until the fake NVML answers (the "after 20 s")
PROBES = ("startupProbe", "livenessProbe", "readinessProbe")
# The kubelet does not verify the certificate of an HTTPS probe (InsecureSkipVerify).
KUBELET_TLS = unverified_tls()


@pytest.fixture
def kube_api() -> Iterator[KubeApi]:
    api = KubeApi().start()
    api.fake.put(pod(TRAIN_UID, "ml", "train", node=NODE_NAME, containers={"main": "c0ffee"}))
    api.fake.put(pod("6e8d3f5a-2b3c-4d5e-9f0a-1b2c3d4e5f60", "ml", "elsewhere", node="other-node"))
    yield api
    api.stop()


def get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=5, context=KUBELET_TLS) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def probe(c: dict[str, Any], name: str, port: int) -> tuple[int, dict[str, Any]]:
    """What the kubelet's httpGet probe gets: its scheme, path and our port."""
    http = c[name]["httpGet"]
    status, body = get(f"{http['scheme'].lower()}://127.0.0.1:{port}{http['path']}")
    return status, json.loads(body)


def series(body: bytes, name: str) -> list[dict[str, str]]:
    return [s.labels for fam in text_string_to_metric_families(body.decode())
            for s in fam.samples if s.name == name]


def stderr_tail(proc: subprocess.Popen[str]) -> str:
    """The end of what an exited podgpu wrote to stderr."""
    assert proc.stderr is not None  # start() passes stderr=PIPE
    return proc.stderr.read()[-3000:]


def wait_until(cond: Any, proc: subprocess.Popen[str], timeout: float, what: str) -> Any:
    def holds() -> Any:
        if proc.poll() is not None:
            raise AssertionError(f"podgpu exited {proc.returncode}: {stderr_tail(proc)}")
        try:
            return cond()
        except OSError:
            return None

    return wait_for(holds, timeout, what, interval=0.1)


def web_config(launch: Launch, work: Path) -> None:
    """The Secret the tls component mounts: a web config serving TLS."""
    secret = launch.mounts["/etc/podgpu/web"]
    cert, key = self_signed(work)
    shutil.copy(cert, secret / "tls.crt")
    shutil.copy(key, secret / "tls.key")
    (secret / "web-config.yml").write_text(
        f"tls_server_config:\n  cert_file: {secret / 'tls.crt'}\n  key_file: {secret / 'tls.key'}\n")


@dataclass
class Started:
    proc: subprocess.Popen[str]
    port: int
    c: dict[str, Any]
    launch: Launch

    @property
    def base(self) -> str:
        scheme = self.c["readinessProbe"]["httpGet"]["scheme"].lower()
        return f"{scheme}://127.0.0.1:{self.port}"

    def stop(self) -> str:
        self.proc.terminate()
        try:
            return self.proc.communicate(timeout=15)[1]
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.communicate()[1]


def start(objs: list[dict[str, Any]], work: Path, sock: str, kube_api: KubeApi,
          logs: LogsStandIn, extra: list[str], env_extra: dict[str, str] | None = None
          ) -> Started:
    c = container(objs)
    launch = prepare(objs, work, pod_resources_dir=Path(sock).parent,
                     proc_fixture=FIXTURES / "proc")
    if "/etc/podgpu/web" in launch.mounts:
        web_config(launch, work)
    port = free_port()
    env = {**environ_without_aws(), **launch.env, **kube_api.env(), "PYTHONPATH": str(ROOT),
           **(env_extra or {})}
    if "--cloudwatch-config" in launch.args:
        env.update(DUMMY_AWS, PODGPU_EMF_ENDPOINT_URL=logs.url, PODGPU_EMF_INTERVAL="1")
    cmd = [sys.executable, str(SHIM), str(kube_api.sa_dir), *launch.args, *extra,
           "--address", f"127.0.0.1:{port}"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    return Started(proc, port, c, launch)


@contextmanager
def started_beside_train(objs: list[dict[str, Any]], work: Path,
                         kube_api: KubeApi) -> Iterator[tuple[Started, LogsStandIn]]:
    """`start` on 4 simulated GPUs (no scenario) beside a CloudWatch Logs stand-in and a gRPC
    kubelet whose pod ml/train holds the first GPU; all three are stopped afterwards."""
    logs = LogsStandIn().start()
    with socket_path() as sock:
        kubelet = FakeKubelet(sock).start()
        kubelet.set_pods([gpu_pod("ml", "train", "main", "nvidia.com/gpu", UUIDS[0])])
        run = start(objs, work, sock, kube_api, logs,
                    ["--simulate", "4", "--simulate-scenario", "none"])
        try:
            yield run, logs
        finally:
            run.stop()
            kubelet.stop()
            logs.stop()


@pytest.mark.parametrize("tls", [False, True], ids=["http", "tls"])
@pytest.mark.parametrize("overlay", OVERLAYS)
def test_daemonset_args_start_a_working_podgpu(overlay: str, tls: bool, tmp_path: Path,
                                               kube_api: KubeApi) -> None:
    objs = list(configured(overlay, "tls") if tls else configured(overlay))
    with started_beside_train(objs, tmp_path, kube_api) as (run, logs):
        def allocated() -> bytes | None:
            status, body = get(run.base + "/metrics")
            return body if status == 200 and any(
                s.get("pod") == "train" for s in series(body, "podgpu_gpu_allocation")) else None

        body = wait_until(allocated, run.proc, 30, "podgpu_gpu_allocation{pod=train}")
        (alloc,) = series(body, "podgpu_gpu_allocation")
        assert (alloc["namespace"], alloc["pod"], alloc["container"], alloc["UUID"]) == (
            "ml", "train", "main", UUIDS[0])
        util = {s["UUID"]: s for s in series(body, "DCGM_FI_DEV_GPU_UTIL")}
        assert util[UUIDS[0]]["pod"] == "train" and "pod" not in util[UUIDS[1]]
        assert {s["Hostname"] for s in util.values()} == {NODE_NAME}  # NODE_NAME reached podgpu
        # The pod watch reached the API with this node's field selector and the mounted token.
        wait_until(lambda: any(r.get("fieldSelector") == [f"spec.nodeName={NODE_NAME}"]
                               for r in kube_api.fake.list_requests()), run.proc, 10, "pod list")
        # Every probe passes on a healthy node, as the kubelet sends it (scheme, path, port).
        for name in PROBES:
            status, answer = probe(run.c, name, run.port)
            assert status == 200, (name, answer)
        if tls:  # control: the same probes over plain HTTP would fail
            with pytest.raises(OSError):
                urllib.request.urlopen(f"http://127.0.0.1:{run.port}/health", timeout=5)
        if "--cloudwatch-config" in run.launch.args:
            check_emf(run.launch.env, logs, run.proc)


def check_emf(env: dict[str, str], logs: LogsStandIn, proc: subprocess.Popen[str]) -> None:
    """The overlay's declarations, cluster name (from its ConfigMap via $(CLUSTER_NAME)) and
    Service label reach CloudWatch Logs with the workload's pod as a dimension."""

    def pod_docs() -> list[dict[str, Any]]:
        return [d for d in logs.documents() if d.get("pod") == "train"]

    docs = wait_until(pod_docs, proc, 30, "an EMF document for pod train")
    doc = docs[0]
    assert doc["ClusterName"] == env["CLUSTER_NAME"] == "my-cluster"
    assert doc["Service"] == "nvidia-dcgm-exporter"
    # Namespace is the one the agent path sent (the scraped exporter's, gpu-operator: the
    # cloudwatch component's EMF_NAMESPACE), though podgpu runs in podgpu; the workload's is in
    # `namespace`.
    assert doc["Namespace"] == "gpu-operator" and doc["namespace"] == "ml", doc
    dims = doc["_aws"]["CloudWatchMetrics"][0]["Dimensions"]
    assert {"Service", "Namespace", "ClusterName", "job", "pod"} in [set(d) for d in dims]
    wait_until(lambda: any("DCGM_FI_DEV_GPU_UTIL" in json.dumps(d["_aws"]) for d in pod_docs()),
               proc, 30, "DCGM_FI_DEV_GPU_UTIL in an EMF document for pod train")


def test_every_overlay_waits_for_a_driver_that_appears_after_20_s(tmp_path: Path,
                                                                   kube_api: KubeApi) -> None:
    """Each overlay's DaemonSet args on the real NVML backend, whose library "appears" 20 s
    after start (all overlays at once, so the test waits once): podgpu never exits; liveness
    and start-up probes pass throughout; readiness is 503 with the reason, then 200 with the
    GPUs and the workload's pod label; the log says so once, not once a cycle."""
    logs = LogsStandIn().start()
    runs: dict[str, Started] = {}
    seen: dict[str, list[tuple[float, int, int]]] = {o: [] for o in OVERLAYS}
    appears = time.time() + DRIVER_DELAY
    env = {"PYTHONPATH": f"{NVML_APPEARS}{os.pathsep}{ROOT}",
           "PODGPU_TEST_NVML_AT": repr(appears), "PODGPU_TEST_NVML_UUIDS": ",".join(UUIDS)}
    with socket_path() as sock:
        kubelet = FakeKubelet(sock).start()
        kubelet.set_pods([gpu_pod("ml", "train", "main", "nvidia.com/gpu", UUIDS[0])])
        try:
            for overlay in OVERLAYS:
                work = tmp_path / overlay.replace("/", "_")
                work.mkdir()
                runs[overlay] = start(list(configured(overlay)), work, sock, kube_api, logs, [],
                                      env)
            ready: set[str] = set()
            deadline = appears + 40.0  # backoff reaches 10 s: ready well within this
            while len(ready) < len(runs) and time.time() < deadline:
                for overlay, run in runs.items():
                    assert run.proc.poll() is None, f"{overlay}: exited {run.proc.returncode}: " \
                        f"{stderr_tail(run.proc)}"
                    try:
                        live, live_body = probe(run.c, "livenessProbe", run.port)
                        start_ok, _ = probe(run.c, "startupProbe", run.port)
                        rd, rd_body = probe(run.c, "readinessProbe", run.port)
                    except OSError:
                        continue  # not listening yet
                    seen[overlay].append((time.time(), live, rd))
                    assert live == 200 and start_ok == 200, (overlay, live_body)
                    if rd == 503:  # how soon it turns ready: the driver wait's own tests count it
                        assert rd_body["status"] == "waiting", rd_body
                        # the driver's absence, or (once it is there) the first collection of
                        # its GPUs still to come
                        assert any(("waiting for the NVIDIA driver" in r
                                    and "libnvidia-ml.so.1" in r)
                                   or (r == FIRST_COLLECTION and time.time() >= appears)
                                   for r in rd_body["reasons"]), rd_body
                    else:
                        assert rd == 200, (overlay, rd_body)
                        assert time.time() >= appears, (overlay, "ready before the driver")
                        ready.add(overlay)
                time.sleep(0.5)
            assert ready == set(runs), f"never ready: {set(runs) - ready}"
            for overlay, run in runs.items():
                early = [s for s in seen[overlay] if s[0] < appears]
                assert early and all(rd == 503 for _, _, rd in early), (overlay, early[:3])
                status, body = get(run.base + "/metrics")
                util = {s["UUID"]: s for s in series(body, "DCGM_FI_DEV_GPU_UTIL")}
                assert status == 200 and set(util) == set(UUIDS), overlay
                wait_until(lambda run=run: any(
                    s.get("pod") == "train" and s["UUID"] == UUIDS[0]
                    for s in series(get(run.base + "/metrics")[1], "DCGM_FI_DEV_GPU_UTIL")),
                    run.proc, 15, f"{overlay}: pod label on the GPU")
        finally:
            stderr = {o: r.stop() for o, r in runs.items()}
            kubelet.stop()
            logs.stop()
    for overlay, text in stderr.items():
        lines = [ln for ln in text.splitlines() if "NVIDIA driver" in ln]
        waiting = [ln for ln in lines if "waiting for the NVIDIA driver" in ln]
        assert len(waiting) == 1, (overlay, lines)  # not one per cycle or per attempt
        assert any("the NVIDIA driver is ready" in ln for ln in lines), (overlay, lines)


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
