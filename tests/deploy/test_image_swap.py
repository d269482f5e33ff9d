"""The image-only swap into the GPU Operator's exporter DaemonSet, in the built
image. The GPU Operator's ClusterPolicy can change that DaemonSet's image, args and env but not
its securityContext: `privileged: true` and no user, so the image's default user runs it. The
test runs the image as that DaemonSet runs its container (restated from the operator's
assets/state-dcgm-exporter/0800_daemonset.yaml: env DCGM_EXPORTER_LISTEN, DCGM_EXPORTER_KUBERNETES,
DCGM_EXPORTER_COLLECTORS, NODE_NAME; the pod-resources hostPath read-only; no service-account
token) against the real gRPC kubelet stand-in on a root-owned socket, adding only
`--simulate` (no GPU here).

- as the image's default user (root, docs/deploy.md "Which user"): GPU series carry the
  workload's pod labels;
- as a non-root user (an overlay or policy forcing one): the documented loud failure, /health
  "degraded" naming the socket and the fix, and one log line saying the same.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from podgpu.sim.backend import MODELS, SimulatedBackend
from tests.conftest import free_port, http_get, wait_for
from tests.deploy.podman import IMAGE, image_present, podman
from tests.integration.kubelet_fake import FakeKubelet, gpu_pod, socket_path

pytestmark = pytest.mark.integration

UUIDS = [d.uuid for d in SimulatedBackend(4, MODELS["H100"]).devices()]


def operator_env(port: int) -> dict[str, str]:
    return {
        "DCGM_EXPORTER_LISTEN": f":{port}",  # the operator's ":9400", on a free port here
        "DCGM_EXPORTER_KUBERNETES": "true",
        "DCGM_EXPORTER_COLLECTORS": "/etc/dcgm-exporter/dcp-metrics-included.csv",
        "NODE_NAME": "test-node",
        # every pod has these; the operator's pod has no token (automountServiceAccountToken:
        # false), so the API is never reached: nothing listens on port 1
        "KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": "1",
    }


@pytest.fixture
def kubelet() -> Iterator[Path]:
    with socket_path() as sock:
        k = FakeKubelet(sock).start()
        k.set_pods([gpu_pod("ml", "train", "main", "nvidia.com/gpu", UUIDS[0])])
        try:
            yield Path(sock)
        finally:
            k.stop()


def swap(sock: Path, user: str | None) -> tuple[dict[str, Any], str, str]:
    """Run the image as the operator's DaemonSet runs it: (/health, /metrics, log)."""
    image_present()
    assert sock.stat().st_uid == 0 and not sock.stat().st_mode & 0o002  # root-only, as on nodes
    port = free_port()
    name = f"podgpu-swap-{port}"
    args = ["run", "-d", "--name", name, "--network", "host", "--privileged"]
    if user is not None:
        args += ["--user", user]
    for k, v in operator_env(port).items():
        args += ["-e", f"{k}={v}"]
    args += ["-v", f"{sock.parent}:/var/lib/kubelet/pod-resources:ro", IMAGE,
             "serve", "--simulate", "4", "--simulate-scenario", "none"]
    podman(*args)
    try:
        health: dict[str, Any] = {}

        def three_cycles() -> bool:
            nonlocal health
            try:
                status, _, body = http_get(f"http://127.0.0.1:{port}/health", timeout=3)
            except OSError:
                return False
            health = json.loads(body) if status == 200 else {}
            return bool(health.get("cycle", 0) >= 3)

        wait_for(three_cycles, timeout=60, what="three collect cycles in /health", interval=0.3)
        metrics = http_get(f"http://127.0.0.1:{port}/metrics")[2].decode()
        log = podman("logs", name).stderr + podman("logs", name).stdout
        return health, metrics, log
    finally:
        podman("rm", "-f", name, check=False)


def util_series(metrics: str) -> dict[str, dict[str, str]]:
    return {s.labels["UUID"]: s.labels for fam in text_string_to_metric_families(metrics)
            for s in fam.samples if s.name == "DCGM_FI_DEV_GPU_UTIL"}


def test_image_only_swap_as_the_default_user_gives_pod_labels(kubelet: Path) -> None:
    user = podman("image", "inspect", "--format", "{{.Config.User}}", IMAGE).stdout.strip()
    assert user == "0:0"  # the documented default (docs/deploy.md, "Which user")
    health, metrics, log = swap(kubelet, None)
    util = util_series(metrics)
    assert set(util) == set(UUIDS)
    assert (util[UUIDS[0]]["namespace"], util[UUIDS[0]]["pod"], util[UUIDS[0]]["container"]) == (
        "ml", "train", "main")
    assert health["kubelet"] == "ok", health
    assert "permission denied" not in log


def test_image_only_swap_as_non_root_fails_loudly(kubelet: Path) -> None:
    health, metrics, log = swap(kubelet, "65532:65532")
    assert "pod" not in json.dumps(util_series(metrics))  # no labels: the failure...
    assert health["status"] == "degraded", health  # ...is said, not silent
    (warning,) = [w for w in health["warnings"] if "kubelet" in w]
    for part in ("/var/lib/kubelet/pod-resources/kubelet.sock", "permission denied",
                 "UID 0", "runAsUser: 0"):
        assert part in warning, warning
    lines = [ln for ln in log.splitlines() if "permission denied" in ln]
    assert len(lines) == 1 and "runAsUser: 0" in lines[0], lines  # one line, naming the fix
