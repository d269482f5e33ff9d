"""`podgpu serve` with the EMF sink against a real CloudWatch Logs emulator (moto in server mode,
boto3 over real HTTP on loopback): the issue-7 "Done when" with the seed post's config, unchanged."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import http_get, wait_for
from tests.emf_validator import Extracted, extract, validate
from tests.integration.aws_fakes import (
    CREDS,
    ROOT,
    FaultProxy,
    free_port,
    moto_url,
    podgpu_env,
    proxy,
    read_events,
)

__all__ = ["CREDS", "free_port", "moto_url", "proxy", "read_events"]  # fixtures; helpers reused

SEED = ROOT / "tests" / "fixtures" / "seed" / "cwagent-config.json"
EXAMPLE = ROOT / "deploy" / "cloudwatch" / "podgpu-declarations.json"
GROUP = "/aws/containerinsights/e2e/prometheus"
SEED_SELECTED = {s.strip("^$") for s in json.loads(SEED.read_text())["logs"]["metrics_collected"]
                 ["prometheus"]["emf_processor"]["metric_declaration"][0]["metric_selectors"]}

pytestmark = pytest.mark.integration


class Node:
    """A real `podgpu serve --simulate` process with the EMF sink, and the snapshots it was seen
    to take (its own /api/v1/snapshot, polled while the test waits), keyed by `taken_at`."""

    def __init__(self, endpoint: str, config: Path, stream: str, *extra: str,
                 interval: str = "2", simulate: str = "4") -> None:
        self.port = free_port()
        cmd = [sys.executable, "-m", "podgpu", "serve", "--simulate", simulate, "-a",
               f"127.0.0.1:{self.port}", "-c", "200", "--cloudwatch-config", str(config),
               "--emf-endpoint-url", endpoint, "--aws-region", "us-east-1", "--cluster-name",
               "e2e", "--emf-interval", interval, "--emf-log-stream", stream,
               "--emf-label", "Service=nvidia-dcgm-exporter", "--emf-namespace", "gpu-operator",
               *extra]
        self.stream = stream
        self.proc = subprocess.Popen(cmd, env=podgpu_env(), stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, text=True)
        self.seen: dict[float, dict[str, Any]] = {}

    def get(self, path: str) -> tuple[int, str]:
        status, _, body = http_get(f"http://127.0.0.1:{self.port}{path}", timeout=2)
        return status, body.decode()

    def observe(self) -> None:
        try:
            status, text = self.get("/api/v1/snapshot")
            view = json.loads(text) if status == 200 else None
        except (OSError, ValueError):
            view = None
        if view is None:
            return  # not listening yet, or before the first cycle
        self.seen[view["taken_at"]] = view

    def health(self) -> tuple[int, dict[str, Any]]:
        """(status, body) of /health; (0, {}) while the process is not listening yet."""
        try:
            status, text = self.get("/health")
        except OSError:
            return 0, {}
        return status, json.loads(text)

    def emf_count(self, result: str) -> float:
        for line in self.get("/metrics")[1].splitlines():
            if line.startswith(f'podgpu_emf_events_total{{result="{result}"}} '):
                return float(line.split()[-1])
        raise AssertionError(f"no podgpu_emf_events_total{{result={result!r}}} in /metrics")

    def wait(self, what: str, ok: Any, seconds: float = 20.0) -> None:
        def observed() -> bool:
            if ok():
                return True
            assert self.proc.poll() is None, f"podgpu exited: {self.proc.communicate()[1]}"
            self.observe()
            return False

        wait_for(observed, timeout=seconds, what=what, interval=0.1)

    def stop(self) -> str:
        self.proc.send_signal(signal.SIGTERM)
        _, err = self.proc.communicate(timeout=20)
        assert self.proc.returncode == 0, err
        return err


def events(url: str, stream: str) -> list[dict[str, Any]]:
    try:
        return read_events(url, GROUP, stream)
    except Exception as exc:  # the group and stream do not exist before the first send
        if "ResourceNotFound" in type(exc).__name__ or "ResourceNotFound" in str(exc):
            return []
        raise


def messages(url: str, stream: str) -> list[str]:
    return [e["message"] for e in events(url, stream)]


def flushes(url: str, stream: str) -> int:
    """Intervals in CloudWatch: every event carries its interval's start as its timestamp."""
    return len({e["timestamp"] for e in events(url, stream)})


def extracted(url: str, stream: str) -> list[Extracted]:
    """Every event validated and extracted as CloudWatch would; no per-pod metric twice in one
    interval (a set without `pod`, e.g. accounting's per-namespace one, aggregates several
    pods' events by design)."""
    out = [x for m in messages(url, stream) for x in extract(m)]
    twice = [k for k, n in Counter((x.name, x.dimensions, x.timestamp_ms) for x in out).items()
             if n > 1 and "pod" in dict(k[1])]
    assert not twice, f"metrics extracted more than once: {twice[:3]}"
    return out


def window_ms(taken_at: float, interval: float = 2.0) -> int:
    return round(taken_at // interval * interval * 1000)


def assert_samples_arrived(got: list[Extracted], name: str,
                           expected: dict[tuple[tuple[str, str], ...], list[tuple[float, float]]]
                           ) -> None:
    """Each (dimensions -> [(taken_at, value)]) sample seen in the node's snapshots is among the
    values CloudWatch extracted for that metric, those dimensions and that interval."""
    by_key = {(x.dimensions, x.timestamp_ms): Counter(x.values) for x in got if x.name == name}
    want: dict[tuple[Any, int], Counter[float]] = {}
    for dims, samples in expected.items():
        for taken_at, value in samples:
            want.setdefault((dims, window_ms(taken_at)), Counter())[float(value)] += 1
    assert want, "no snapshot was observed"
    for key, values in want.items():
        assert key in by_key, f"{name} {dict(key[0])} at {key[1]}: nothing extracted"
        assert not values - by_key[key], (key, values, by_key[key])


def seed_dims(pod: str = "train-0") -> tuple[tuple[str, str], ...]:
    """The agent path's dimensions: Namespace is podgpu's own (POD_NAMESPACE), job the agent's
    default job, pod the workload's."""
    return tuple(sorted({"Service": "nvidia-dcgm-exporter", "Namespace": "gpu-operator",
                         "ClusterName": "e2e", "job": "kubernetes-service-endpoints",
                         "pod": pod}.items()))


def test_seed_config_unchanged_gives_per_pod_gpu_util_with_the_seed_dimensions(
        moto_url: str) -> None:
    node = Node(moto_url, SEED, "node-seed")
    try:
        node.wait("two flushes in moto", lambda: flushes(moto_url, "node-seed") >= 2)
    finally:
        node.stop()
    docs = [validate(m) for m in messages(moto_url, "node-seed")]
    got = extracted(moto_url, "node-seed")
    # Every event carries a directive; no plain log lines for series nothing selects.
    assert docs and all("_aws" in d for d in docs)
    assert all("DCGM_FI_DEV_GPU_TEMP" not in d for d in docs)
    # Only the exclusive pod's GPU: GPU 1 is time-sliced (its device series have no pod),
    # GPUs 2 and 3 hold no pod; the seed's dimension set drops them all.
    assert {(d["gpu"], d["pod"]) for d in docs} == {("0", "train-0")}
    assert {x.dimensions for x in got} == {seed_dims()}
    assert {x.namespace for x in got} == {"ContainerInsights/Prometheus"}
    names = {x.name for x in got}
    assert "DCGM_FI_DEV_GPU_UTIL" in names and names <= SEED_SELECTED
    assert all("Unit" not in m for d in docs for dd in d["_aws"]["CloudWatchMetrics"]
               for m in dd["Metrics"])  # no unit: the agent sends none
    stamps = sorted({x.timestamp_ms for x in got})
    assert len(stamps) >= 2 and all(t % 2000 == 0 for t in stamps)
    # The values are the snapshots' own: GPU 0's utilization in each 2 s interval.
    assert_samples_arrived(got, "DCGM_FI_DEV_GPU_UTIL", {seed_dims(): [
        (t, next(d for d in v["devices"] if d["gpu"] == "0")["values"]["DCGM_FI_DEV_GPU_UTIL"])
        for t, v in node.seen.items()]})


def test_keep_unmatched_sends_plain_events_that_extract_nothing(moto_url: str) -> None:
    node = Node(moto_url, SEED, "node-unmatched", "--emf-keep-unmatched=true", simulate="2")
    try:
        node.wait("two flushes in moto", lambda: flushes(moto_url, "node-unmatched") >= 2)
    finally:
        node.stop()
    docs = [validate(m) for m in messages(moto_url, "node-unmatched")]
    plain = [d for d in docs if "_aws" not in d]
    # the time-sliced GPU 1's device series match the declaration but have no `pod`
    assert any(d.get("gpu") == "1" and "DCGM_FI_DEV_GPU_TEMP" in d for d in plain)
    assert any("DCGM_FI_DEV_GPU_TEMP" in d for d in docs if "_aws" in d)  # rides along, unbilled
    got = extracted(moto_url, "node-unmatched")
    assert {x.dimensions for x in got} == {seed_dims()}  # still only the exclusive pod
    assert "DCGM_FI_DEV_GPU_UTIL" in {x.name for x in got}
    assert {x.name for x in got} <= SEED_SELECTED


def test_example_declarations_cover_every_pod_including_a_time_sliced_gpu(moto_url: str) -> None:
    node = Node(moto_url, EXAMPLE, "node-example")
    try:
        node.wait("two flushes in moto", lambda: flushes(moto_url, "node-example") >= 2)
    finally:
        node.stop()
    got = [x for x in extracted(moto_url, "node-example")
           if x.name == "podgpu_pod_gpu_utilization_ratio"]
    assert {dict(x.dimensions)["pod"] for x in got} == {"train-0", "infer-a", "infer-b"}
    docs = [validate(m) for m in messages(moto_url, "node-example")]
    shared = {d["pod"]: d["gpu"] for d in docs if "podgpu_pod_gpu_utilization_ratio" in d
              and d["pod"] != "train-0"}
    assert shared == {"infer-a": "1", "infer-b": "1"}  # both pods time-slicing GPU 1
    expected: dict[tuple[tuple[str, str], ...], list[tuple[float, float]]] = {}
    for t, view in node.seen.items():
        for pod in view["pods"]:
            expected.setdefault(seed_dims(pod["pod"]), []).append(
                (t, pod["utilization_ratio"]))
    assert len(expected) == 3
    assert_samples_arrived(got, "podgpu_pod_gpu_utilization_ratio", expected)


def test_access_denied_keeps_serving_names_the_failure_and_recovers(
        moto_url: str, proxy: FaultProxy) -> None:
    proxy.mode = "denied"
    node = Node(proxy.url, SEED, "node-denied")
    try:
        node.wait("the emf health entry to fail",
                  lambda: node.health()[1].get("emf", {}).get("status", "ok") != "ok")
        status, body = node.health()
        assert status == 200  # GPU metrics are fine: no restart loop
        assert "credentials or permissions" in body["emf"]["status"]
        assert "AccessDenied" in body["emf"]["status"]
        # /metrics is rendered once per cycle, so its counters may trail /health by a cycle
        node.wait("queued events and counted retries", lambda: node.health()[1]["emf"][
            "queued_events"] > 0 and node.emf_count("retried") > 0)
        proxy.mode = "pass"
        node.wait("delivery after the fix", lambda: node.health()[1].get("emf", {}).get("status") == "ok"
                  and node.emf_count("sent") > 0)
        node.wait("two flushes in moto", lambda: flushes(moto_url, "node-denied") >= 2)
    finally:
        err = node.stop()
    assert "credentials or permissions" in err
    assert proxy.count(mode="denied") >= 1 and proxy.count(mode="pass") >= 1
    got = extracted(moto_url, "node-denied")
    assert_samples_arrived(got, "DCGM_FI_DEV_GPU_UTIL", {seed_dims(): [
        (t, next(d for d in v["devices"] if d["gpu"] == "0")["values"]["DCGM_FI_DEV_GPU_UTIL"])
        for t, v in node.seen.items()]})  # what was refused arrived later


def test_unreachable_endpoint_is_a_health_reason_not_a_crash() -> None:
    node = Node(f"http://127.0.0.1:{free_port()}", SEED, "node-dead", interval="1",
                simulate="2")
    try:
        node.wait("the emf health entry to fail",
                  lambda: node.health()[1].get("emf", {}).get("status", "ok") != "ok")
        status, body = node.health()
        assert status == 200
        assert body["emf"]["status"].startswith("failing: cloudwatch:")
        node.wait("queued events and counted retries", lambda: node.health()[1]["emf"][
            "queued_events"] > 0 and node.emf_count("retried") > 0)
        assert node.emf_count("dropped") == 0
    finally:
        err = node.stop()
    assert "EMF: send to cloudwatch failed" in err


DECL = {"source_labels": ["Service"], "metric_selectors": ["x"], "dimensions": [["pod"]]}


def agent_file(*decls: dict[str, Any]) -> dict[str, Any]:
    """The whole CloudWatch agent file, as the seed has it."""
    return {"logs": {"metrics_collected": {"prometheus": {"emf_processor": {
        "metric_declaration": list(decls)}}}}}


P = "logs.metrics_collected.prometheus.emf_processor."


@pytest.mark.parametrize(("content", "expect"), [
    ({"metric_declaration": [{**DECL, "metric_selectors": ["("]}]},
     "metric_declaration[0].metric_selectors[0]: bad regex '('"),
    (agent_file(DECL, {**DECL, "metric_selectors": ["x", "a{1001}"]}),
     P + "metric_declaration[1].metric_selectors[1]: bad regex 'a{1001}'"),
    ({"metric_declaration": [{"source_labels": ["a"], "metric_selector": ["x"]}]},
     "metric_declaration[0]: unknown key 'metric_selector'"),
    ({"metric_declaration": [{**DECL, "source_labels": "a"}]},
     "metric_declaration[0].source_labels: expected a list"),
    ({"metric_declaration": [DECL, {**DECL, "label_matcher": 7}]},
     "metric_declaration[1].label_matcher: expected a string"),
    ({"metric_declaration": [{**DECL, "dimensions": ["pod"]}]},
     "metric_declaration[0].dimensions[0]: expected a list"),
    ({"metric_declaration": [{**DECL, "metric_selectors": ["x", 3]}]},
     "metric_declaration[0].metric_selectors[1]: expected a string"),
    ({"metric_namespace": 5, "metric_declaration": [DECL]}, "metric_namespace: expected a string"),
])
def test_bad_config_exits_2_with_one_line(tmp_path: Path, content: dict[str, Any],
                                          expect: str) -> None:
    bad = tmp_path / "cw.json"
    bad.write_text(json.dumps(content))
    res = subprocess.run([sys.executable, "-m", "podgpu", "serve", "--simulate", "1",
                          "--cloudwatch-config", str(bad), "--emf-destination", "stdout"],
                         env=podgpu_env(), capture_output=True, text=True, timeout=30)
    assert res.returncode == 2, res.stderr
    lines = [ln for ln in res.stderr.strip().splitlines()
             if " INFO " not in ln]  # start-up info (which metric list) may come first
    assert len(lines) == 1 and expect in lines[0] and str(bad) in lines[0], lines


def test_spooled_events_survive_a_restart(moto_url: str, tmp_path: Path) -> None:
    spool = tmp_path / "spool"
    first = Node(f"http://127.0.0.1:{free_port()}", SEED, "node-spool", "--emf-spool-dir",
                 str(spool))
    first.wait("two spooled intervals", lambda: len(list(spool.glob("*.jsonl"))) >= 2)
    first.stop()
    spooled = {json.loads(line)["_aws"]["Timestamp"]
               for f in spool.glob("*.jsonl") for line in f.read_text().splitlines()}
    restarted_at = time.time() * 1000
    second = Node(moto_url, SEED, "node-spool", "--emf-spool-dir", str(spool))
    try:
        second.wait("the spooled and a new interval in moto",
                    lambda: flushes(moto_url, "node-spool") >= len(spooled) + 1)
    finally:
        second.stop()
    got = extracted(moto_url, "node-spool")
    arrived = {x.timestamp_ms for x in got}
    assert spooled <= arrived  # every interval the first process could not send
    assert min(arrived) < restarted_at
    # the first process's samples are in CloudWatch, with the values its snapshots had
    assert_samples_arrived(got, "DCGM_FI_DEV_GPU_UTIL", {seed_dims(): [
        (t, next(d for d in v["devices"] if d["gpu"] == "0")["values"]["DCGM_FI_DEV_GPU_UTIL"])
        for t, v in first.seen.items() if window_ms(t) in spooled]})
    assert not list(spool.glob("*.jsonl")) or all(
        json.loads(f.read_text().splitlines()[0])["_aws"]["Timestamp"] > max(spooled)
        for f in spool.glob("*.jsonl"))  # sent files are deleted


def agent_identity_config(tmp_path: Path) -> Path:
    """Two declarations a team could have written against the agent path: one keyed on the
    exporter's container and a Service label (set by the agent's service-endpoints job, not by
    the exporter), one selecting every metric (`.*`)."""
    path = tmp_path / "identity.json"
    path.write_text(json.dumps({"logs": {"metrics_collected": {"prometheus": {"emf_processor": {
        "metric_declaration": [
            {"source_labels": ["container_name", "app_kubernetes_io_name"],
             "label_matcher": "^podgpu;podgpu$",
             "dimensions": [["ClusterName", "container_name", "app_kubernetes_io_name", "pod"]],
             "metric_selectors": ["^DCGM_FI_DEV_GPU_UTIL$"]},
            {"source_labels": ["Service"], "label_matcher": "^nvidia-dcgm-exporter$",
             "dimensions": [["ClusterName", "Service", "pod"]], "metric_selectors": [".*"]}]}}}}}))
    return path


def test_declarations_keyed_on_the_agents_container_and_service_labels_extract(
        moto_url: str, tmp_path: Path) -> None:
    """The agent path's identity, restated from its service-endpoints job (the oracle in
    tests/unit/sinks/cloudwatch/agent_oracle.py relabels the Kubernetes discovery labels of
    podgpu's pod behind the Service `nvidia-dcgm-exporter`, labelled
    app.kubernetes.io/name=podgpu): the exporter
    container's `container_name` (the shipped manifests' container, `podgpu`, by default), the
    Service's name as `Service` and its labels mapped by the job's labelmap. A `.*` selector
    selects what the agent path had: no podgpu_* series unless --emf-podgpu-series asks."""
    from tests.unit.sinks.cloudwatch import agent_oracle as oracle

    job = oracle.load_job(oracle.SERVICE_ENDPOINTS_JOB)
    target = oracle.target_labels(job, {
        "__address__": "10.0.0.7:9400", "__meta_kubernetes_namespace": "gpu-operator",
        "__meta_kubernetes_service_name": "nvidia-dcgm-exporter",
        "__meta_kubernetes_service_label_app_kubernetes_io_name": "podgpu",
        "__meta_kubernetes_pod_container_name": "podgpu",
        "__meta_kubernetes_service_annotation_prometheus_io_scrape": "true"})
    assert target is not None
    config = agent_identity_config(tmp_path)
    runs = {"node-id": (), "node-own": ("--emf-podgpu-series=true",)}
    nodes = [Node(moto_url, config, stream, "--emf-service", "nvidia-dcgm-exporter",
                  "--emf-service-labels",
                  "app.kubernetes.io/name=podgpu", *extra) for stream, extra in runs.items()]
    try:
        for node in nodes:
            node.wait("two flushes in moto", lambda n=node: flushes(moto_url, n.stream) >= 2)
    finally:
        for node in nodes:
            node.stop()
    got = extracted(moto_url, "node-id")
    keyed = {(x.name, x.dimensions) for x in got if "container_name" in dict(x.dimensions)}
    assert keyed == {("DCGM_FI_DEV_GPU_UTIL", tuple(sorted({
        "ClusterName": "e2e", "container_name": target["container_name"],
        "app_kubernetes_io_name": target["app_kubernetes_io_name"], "pod": "train-0"}.items())))}
    wildcard = {x.name for x in got if dict(x.dimensions).get("Service") == target["Service"]}
    assert "DCGM_FI_DEV_GPU_UTIL" in wildcard
    assert not {n for n in wildcard if n.startswith("podgpu_")}, wildcard
    own = {x.name for x in extracted(moto_url, "node-own") if x.name.startswith("podgpu_")}
    assert {"podgpu_gpu_allocation", "podgpu_pod_gpu_allocated_seconds_total"} <= own, own
