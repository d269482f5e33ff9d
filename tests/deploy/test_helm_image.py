"""The built image (localhost/podgpu:test, scripts/image) run with the chart's rendered pod spec:
the container's own args and env (downward API and ConfigMaps resolved as the kubelet does),
its user, read-only root and dropped capabilities, every volume mounted at its mountPath (the
ConfigMaps' and the web config Secret's files as the chart renders them), the service-account
token of the pod API stand-in. Added, and nothing else: `--simulate 4` (no GPU here) and the
listen address (host network, a free port).

With the defaults it serves /metrics with the workload's pod labels and its probes pass. With
TLS from a certificate Helm generated, basic auth hashed by Helm and an inline metric list, a
real client (curl) scrapes as the ServiceMonitor does: the chart's CA, the server name it
gives, the user and password of its scrape Secret; the probes pass over HTTPS without them.
"""

from __future__ import annotations

import base64
import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import FIXTURES, free_port, wait_for
from tests.deploy.contract import NODE_NAME, prepare
from tests.deploy.helmchart import chart
from tests.deploy.podman import IMAGE, image_present, podman
from tests.deploy.render import container, one
from tests.deploy.standins import KubeApi
from tests.deploy.test_startup_contract import TRAIN_UID, UUIDS
from tests.integration.kube_api_fake import pod
from tests.integration.kubelet_fake import FakeKubelet, gpu_pod, socket_path

pytestmark = pytest.mark.integration

CSV = "DCGM_FI_DEV_GPU_UTIL, gauge, GPU utilization (in %).\n"
SECURED = {"tlsServerConfig": {"enabled": True},
           "basicAuth": {"users": {"prometheus": "s3cret"}},
           "serviceMonitor": {"enabled": True}, "customMetrics": CSV}
VAR = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")
SERVICE_ACCOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"


def curl(url: str, *extra: str) -> tuple[int, str]:
    out = subprocess.run(["curl", "-sS", "--max-time", "5", "-o", "-", "-w", "\n%{http_code}",
                          *extra, url], capture_output=True, text=True, timeout=30)
    body, _, code = out.stdout.rpartition("\n")
    return int(code or 0), body


def secret_files(objs: list[dict[str, Any]], name: str) -> dict[str, bytes]:
    (secret,) = [o for o in objs if o["kind"] == "Secret" and o["metadata"]["name"] == name]
    return {k: base64.b64decode(v) for k, v in secret["data"].items()}


def run_pod(objs: list[dict[str, Any]], work: Path, sock: Path, api: KubeApi) -> tuple[str, int]:
    """`podman run` of the rendered pod's container; (container name, port)."""
    image_present()
    spec = one(objs, "DaemonSet")["spec"]["template"]["spec"]
    c = container(objs)
    launch = prepare(objs, work, pod_resources_dir=sock.parent, proc_fixture=FIXTURES / "proc")
    volumes = {v["name"]: v for v in spec["volumes"]}
    for m in c["volumeMounts"]:  # the Secret's files, which prepare() leaves to the caller
        secret = volumes[m["name"]].get("secret")
        if secret:
            for key, data in secret_files(objs, secret["secretName"]).items():
                (launch.mounts[m["mountPath"]] / key).write_bytes(data)
    sc = c["securityContext"]
    assert (sc["runAsUser"], sc["readOnlyRootFilesystem"], sc["capabilities"]) == (
        0, True, {"drop": ["ALL"]})
    port = free_port()
    name = f"podgpu-helm-{port}"
    args = ["run", "-d", "--name", name, "--network", "host", "--user", "0:0", "--read-only",
            "--cap-drop", "ALL", "--security-opt", "no-new-privileges"]
    read_only = {m["mountPath"]: m.get("readOnly", False) for m in c["volumeMounts"]}
    for path, local in launch.mounts.items():
        args += ["-v", f"{local}:{path}" + (":ro" if read_only[path] else "")]
    args += ["-v", f"{api.sa_dir}:{SERVICE_ACCOUNT}:ro"]
    for k, v in {**launch.env, **api.env()}.items():
        args += ["-e", f"{k}={v}"]
    # The kubelet expands $(VAR) in args from the container's env.
    expanded = [VAR.sub(lambda mt: launch.env.get(mt.group(1), mt.group(0)), a)
                for a in c["args"]]
    podman(*args, IMAGE, *expanded, "--simulate", "4", "--simulate-scenario", "none",
           "--address", f"127.0.0.1:{port}")
    return name, port


def wait_for_pod_label(name: str, get: Any) -> str:
    def labelled() -> str:
        status, body = get()
        if status == 200 and any(
                s.labels.get("pod") == "train" for fam in text_string_to_metric_families(body)
                for s in fam.samples if s.name == "DCGM_FI_DEV_GPU_UTIL"):
            return str(body)
        running = podman("inspect", "--format", "{{.State.Running}}", name).stdout.strip()
        assert running == "true", podman("logs", name).stderr[-3000:]
        return ""

    return wait_for(labelled, timeout=60, what="DCGM_FI_DEV_GPU_UTIL with pod=train", interval=0.3)


def series(body: str, name: str) -> list[dict[str, str]]:
    return [s.labels for fam in text_string_to_metric_families(body) for s in fam.samples
            if s.name == name]


@pytest.mark.parametrize("values", [{}, SECURED], ids=["defaults", "tls-basic-auth-csv"])
def test_the_image_runs_the_chart_pod_spec(values: dict[str, Any], tmp_path: Path) -> None:
    objs = list(chart(values))
    c = container(objs)
    api = KubeApi().start()
    api.fake.put(pod(TRAIN_UID, "ml", "train", node=NODE_NAME, containers={"main": "c0ffee"}))
    with socket_path() as sock_name:
        sock = Path(sock_name)
        kubelet = FakeKubelet(sock_name).start()
        kubelet.set_pods([gpu_pod("ml", "train", "main", "nvidia.com/gpu", UUIDS[0])])
        name = ""
        try:
            name, port = run_pod(objs, tmp_path, sock, api)
            if values:
                (ep,) = one(objs, "ServiceMonitor")["spec"]["endpoints"]
                files = secret_files(objs, ep["tlsConfig"]["ca"]["secret"]["name"])
                ca = tmp_path / "ca.crt"
                ca.write_bytes(files[ep["tlsConfig"]["ca"]["secret"]["key"]])
                auth = secret_files(objs, ep["basicAuth"]["username"]["name"])
                user = auth[ep["basicAuth"]["username"]["key"]].decode()
                password = auth[ep["basicAuth"]["password"]["key"]].decode()
                server = ep["tlsConfig"]["serverName"]
                base = f"https://{server}:{port}"
                as_prometheus = ("--cacert", str(ca), "--resolve", f"{server}:{port}:127.0.0.1")
                body = wait_for_pod_label(name, lambda: curl(
                    base + "/metrics", *as_prometheus, "-u", f"{user}:{password}"))
                assert series(body, "DCGM_FI_DEV_FB_USED") == []  # the inline list only
                assert curl(base + "/metrics", *as_prometheus)[0] == 401  # no password
                assert curl(base + "/metrics", *as_prometheus, "-u", f"{user}:nope")[0] == 401
            else:
                base = f"http://127.0.0.1:{port}"
                body = wait_for_pod_label(name, lambda: curl(base + "/metrics"))
                assert series(body, "DCGM_FI_DEV_FB_USED")  # the image's default list
            (util,) = [s for s in series(body, "DCGM_FI_DEV_GPU_UTIL") if s["UUID"] == UUIDS[0]]
            assert (util["namespace"], util["pod"], util["container"], util["Hostname"]) == (
                "ml", "train", "main", NODE_NAME)
            # the probes as the kubelet sends them: scheme, path, no certificate check, no auth
            for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
                http = c[probe]["httpGet"]
                status, answer = curl(f"{http['scheme'].lower()}://127.0.0.1:{port}"
                                      f"{http['path']}", "-k")
                assert status == 200, (probe, answer)
                assert json.loads(answer)["status"] == "ok", (probe, answer)
        finally:
            if name:
                podman("rm", "-f", name, check=False)
            kubelet.stop()
            api.stop()
