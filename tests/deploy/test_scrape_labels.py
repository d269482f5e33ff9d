"""The rendered ServiceMonitor keeps the workload's `pod` label, shown by
a real Prometheus scraping a real podgpu.

Prometheus cannot discover Kubernetes targets here, so each job is the one Kubernetes would
produce with its service discovery replaced by a static target carrying the same
`__meta_kubernetes_*` labels (the exporter pod's name, namespace, container, node). For the
ServiceMonitor, the relabelling prometheus-operator generates before the user's rules (target
labels namespace/service/pod/container/endpoint, Prometheus' documentation) is
written out, followed by the ServiceMonitor's own relabelings, honorLabels, interval and path as
rendered. A control job with honor_labels false shows the rename the ServiceMonitor avoids.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from podgpu.sim.backend import MODELS, SimulatedBackend
from tests.conftest import free_port, wait_for
from tests.deploy.render import ROOT, one, render
from tests.integration.kubelet_fake import FakeKubelet, gpu_pod
from tests.integration.prometheus_peer import Prometheus

pytestmark = pytest.mark.integration

U = [d.uuid for d in SimulatedBackend(2, MODELS["H100"]).devices()]
EXPORTER_POD = "podgpu-x7k2q"
META = {  # what endpoints discovery would attach to the podgpu target
    "__meta_kubernetes_namespace": "podgpu",
    "__meta_kubernetes_service_name": "podgpu",
    "__meta_kubernetes_endpoint_port_name": "metrics",
    "__meta_kubernetes_pod_name": EXPORTER_POD,
    "__meta_kubernetes_pod_container_name": "podgpu",
    "__meta_kubernetes_pod_node_name": "gpu-node-1",
}
_KEYS = {"sourceLabels": "source_labels", "targetLabel": "target_label", "regex": "regex",
         "action": "action", "replacement": "replacement", "separator": "separator",
         "modulus": "modulus"}


def operator_rules(job: str) -> list[dict[str, Any]]:
    """prometheus-operator's generated target labels for an endpoints-role ServiceMonitor (its
    `job` is the Service's name; here the test's job name, to tell the jobs apart)."""
    return [
        {"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace"},
        {"source_labels": ["__meta_kubernetes_service_name"], "target_label": "service"},
        {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
        {"source_labels": ["__meta_kubernetes_pod_container_name"], "target_label": "container"},
        {"target_label": "job", "replacement": job},
        {"target_label": "endpoint", "replacement": "metrics"},
    ]


def servicemonitor_job(name: str, target: str, honor: bool | None = None,
                       user_rules: bool = True) -> dict[str, Any]:
    sm = one(render("overlays/prometheus-operator"), "ServiceMonitor")
    (ep,) = sm["spec"]["endpoints"]
    rules = operator_rules(name)
    if user_rules:
        rules += [{_KEYS[k]: v for k, v in r.items()} for r in ep.get("relabelings", ())]
    return {
        "job_name": name,
        "scrape_interval": ep["interval"], "scrape_timeout": ep["scrapeTimeout"],
        "metrics_path": ep["path"], "scheme": ep["scheme"],
        "honor_labels": ep["honorLabels"] if honor is None else honor,
        "static_configs": [{"targets": [target], "labels": META}],
        "relabel_configs": rules,
    }


def plain_job(target: str) -> dict[str, Any]:
    """deploy/kubernetes/overlays/prometheus-operator/additional-scrape-config.yaml as shipped,
    its kubernetes_sd_configs replaced by the static target."""
    path = ROOT / "deploy/kubernetes/overlays/prometheus-operator/additional-scrape-config.yaml"
    job: dict[str, Any]
    (job,) = yaml.safe_load(path.read_text())
    assert job.pop("kubernetes_sd_configs")[0]["role"] == "endpoints"
    job["static_configs"] = [{"targets": [target], "labels": META}]
    return job


def promtool(config: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["promtool", "check", "config", str(config)], capture_output=True,
                          text=True, timeout=60)


def test_plain_scrape_config_finds_the_rendered_service(tmp_path: Path) -> None:
    """Debian's Prometheus is built without Kubernetes discovery (promtool rejects
    kubernetes_sd_configs), so the discovery block is checked against the rendered Service
    here, and the rest of the job by promtool and a real scrape in the next test."""
    path = ROOT / "deploy/kubernetes/overlays/prometheus-operator/additional-scrape-config.yaml"
    (job,) = yaml.safe_load(path.read_text())
    svc = one(render("overlays/prometheus-operator"), "Service")
    (sd,) = job["kubernetes_sd_configs"]
    assert sd == {"role": "endpoints", "namespaces": {"names": [svc["metadata"]["namespace"]]}}
    keep = job["relabel_configs"][0]
    assert keep["action"] == "keep" and keep["source_labels"] == [
        "__meta_kubernetes_service_name", "__meta_kubernetes_endpoint_port_name"]
    assert keep["regex"] == f"{svc['metadata']['name']};{svc['spec']['ports'][0]['name']}"
    assert job["honor_labels"] is True and job["scrape_interval"] == "1s"
    config = tmp_path / "prometheus.yml"
    config.write_text(yaml.safe_dump({"scrape_configs": [plain_job("127.0.0.1:9400")]}))
    out = promtool(config)
    assert out.returncode == 0, out.stdout + out.stderr


def test_servicemonitor_keeps_the_workloads_pod_label(tmp_path: Path, serve: Any,
                                                      kubelet: FakeKubelet) -> None:
    kubelet.set_pods([gpu_pod("ml", "train", "main", "nvidia.com/gpu", U[0])])
    p = serve("--simulate", "2", "--simulate-scenario", "none", "-k",
              "--pod-resources-kubelet-socket", kubelet.socket_path, "-c", "500")
    p.wait_ready()
    target = f"127.0.0.1:{p.port}"
    prom = Prometheus.__new__(Prometheus)  # the peer's helpers with this test's own config
    prom.binary = shutil.which("prometheus") or ""
    assert prom.binary, "prometheus is not installed: run scripts/check"
    prom.port = free_port()
    prom.url = f"http://127.0.0.1:{prom.port}"
    config = tmp_path / "prometheus.yml"
    config.write_text(yaml.safe_dump({"scrape_configs": [
        servicemonitor_job("servicemonitor", target),
        servicemonitor_job("control", target, honor=False, user_rules=False),
        plain_job(target),
    ]}, sort_keys=False))
    out = promtool(config)
    assert out.returncode == 0, out.stdout + out.stderr
    prom.proc = subprocess.Popen(
        [prom.binary, f"--config.file={config}", f"--web.listen-address=127.0.0.1:{prom.port}",
         f"--storage.tsdb.path={tmp_path / 'data'}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        prom.wait_ready()

        def util(job: str) -> dict[str, dict[str, str]]:
            res = prom.api("query", query=f'DCGM_FI_DEV_GPU_UTIL{{job="{job}"}}')["result"]
            return {r["metric"]["UUID"]: r["metric"] for r in res}

        def every_job_scraped() -> dict[str, dict[str, dict[str, str]]] | None:
            got = {j: util(j) for j in ("servicemonitor", "control", "gpu-metrics")}
            return got if all(len(v) == 2 for v in got.values()) else None

        got = wait_for(every_job_scraped, timeout=30, what="Prometheus scraping every job",
                       interval=0.3)
        for job in ("servicemonitor", "gpu-metrics"):
            busy, idle = got[job][U[0]], got[job][U[1]]
            assert (busy["pod"], busy["namespace"], busy["container"]) == ("train", "ml", "main")
            assert not any(k.startswith("exported_") for k in busy), busy
            # An idle GPU has no pod: it must not be labelled with the exporter's own pod.
            assert "pod" not in idle and "namespace" not in idle, idle
        assert got["servicemonitor"][U[0]]["kubernetes_node"] == "gpu-node-1"
        # The control: Prometheus' default renames the workload's labels.
        busy = got["control"][U[0]]
        assert busy["exported_pod"] == "train" and busy["pod"] == EXPORTER_POD
        assert got["control"][U[1]]["pod"] == EXPORTER_POD
    finally:
        prom.stop()


@pytest.fixture
def kubelet() -> Any:
    from tests.integration.kubelet_fake import socket_path

    with socket_path() as sock:
        k = FakeKubelet(sock).start()
        yield k
        k.stop()
