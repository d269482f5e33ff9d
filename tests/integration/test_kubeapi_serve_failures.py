"""podgpu started as in a pod whose service-account CA bundle cannot be loaded (not PEM), with the
pod watch (-k) and Container Insights on: it serves, logs no traceback, and /health says what is
wrong for each of its three Kubernetes API callers (the pod watch, the Service watch, the Node
lookup), with their failed calls counted. Before, the Node lookup's thread died with
`ssl.SSLError` and /health said nothing. The same for a token file over its cap and an API
address that refuses connections."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

from tests.deploy.standins import SHIM, self_signed
from tests.harness import free_port, http_get, wait_for

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("how", ["ca", "token", "connection"])
def test_an_api_failure_is_said_in_health_without_a_traceback(tmp_path: Path, how: str) -> None:
    sa = tmp_path / "serviceaccount"
    sa.mkdir()
    (sa / "token").write_text("x" * (64 * 1024 + 1) if how == "token" else "token")
    if how == "ca":
        (sa / "ca.crt").write_text("not a certificate\n")
        why = f"CA bundle {sa / 'ca.crt'} cannot be loaded: [X509: NO_CERTIFICATE_OR_CRL_FOUND]"
    else:
        (sa / "ca.crt").write_bytes(self_signed(tmp_path)[0].read_bytes())
        why = (f"OSError: service-account token {sa / 'token'}" if how == "token"
               else "ConnectionRefusedError")
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "NODE_NAME": "n1",
           "KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": str(free_port())}
    cmd = [sys.executable, str(SHIM), str(sa), "serve", "--simulate", "1", "-k",
           "--pod-resources-kubelet-socket", str(tmp_path / "kubelet.sock"),
           "--emf-container-insights", "--cluster-name", "ci", "--emf-destination", "stdout",
           "-a", f"127.0.0.1:{port}", "-c", "500"]
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=err)
        try:
            def callers() -> dict[str, Any] | None:
                assert proc.poll() is None, "podgpu serve exited"
                try:
                    status, _, body = http_get(f"http://127.0.0.1:{port}/health", timeout=2)
                except OSError:
                    return None
                health = json.loads(body)
                found = {"pod_watch": health.get("pod_watch", {}),
                         **health.get("emf", {}).get("container_insights", {})}
                return ({**found, "_top": health} if status == 200 and all(
                    e.get("errors", 0) >= 1 for e in found.values()) else None)

            found = wait_for(callers, 30, "the three API callers' failures in /health")
            top = found.pop("_top")
        finally:
            proc.terminate()
            proc.wait(10)
        err.seek(0)
        stderr = err.read().decode(errors="replace")
    assert set(found) == {"pod_watch", "services", "node"}, found
    for entry in found.values():
        assert entry["status"].startswith(f"failing: {why}"), found
    # each blind caller makes the node "degraded" (200, never a restart) and says why
    assert top["status"] == "degraded", top
    for name in ("pod_watch", "emf.container_insights.services", "emf.container_insights.node"):
        assert any(w.startswith(f"{name}: failing: {why}") for w in top["warnings"]), top
    assert "Traceback" not in stderr, stderr
    assert stderr.count(why) == 3, stderr  # one line per caller, however often it failed
