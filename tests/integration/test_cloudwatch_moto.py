"""`podgpu serve` with the EMF sink against a real CloudWatch Logs emulator (moto in server mode,
boto3 over real HTTP on loopback): the issue-7 "Done when" with the seed post's config, unchanged."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.emf_validator import validate

ROOT = Path(__file__).resolve().parents[2]
SEED = ROOT / "tests" / "fixtures" / "seed" / "cwagent-config.json"
EXAMPLE = ROOT / "deploy" / "cloudwatch" / "podgpu-declarations.json"
CREDS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
         "AWS_SESSION_TOKEN": "testing", "AWS_DEFAULT_REGION": "us-east-1"}
GROUP = "/aws/containerinsights/e2e/prometheus"

pytestmark = pytest.mark.integration


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def moto_url() -> Iterator[str]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p",
                             str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env={**os.environ, **CREDS})
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            break
        except OSError:
            assert proc.poll() is None and time.monotonic() < deadline, "moto did not start"
            time.sleep(0.1)
    yield f"http://127.0.0.1:{port}"
    proc.terminate()
    proc.wait(10)


def logs_client(url: str) -> Any:
    import boto3

    return boto3.session.Session(
        aws_access_key_id="testing", aws_secret_access_key="testing",
        region_name="us-east-1").client("logs", endpoint_url=url)


def read_events(url: str, group: str, stream: str) -> list[dict[str, Any]]:
    client = logs_client(url)
    out: list[dict[str, Any]] = []
    kwargs: dict[str, Any] = {"logGroupName": group, "logStreamName": stream,
                              "startFromHead": True}
    while True:
        resp = client.get_log_events(**kwargs)
        out.extend(resp["events"])
        token = resp.get("nextForwardToken")
        if not resp["events"] or token == kwargs.get("nextToken"):
            return out
        kwargs["nextToken"] = token


def serve(moto_url: str, config: Path, stream: str, *extra: str) -> subprocess.Popen[str]:
    port = free_port()
    cmd = [sys.executable, "-m", "podgpu", "serve", "--simulate", "4", "-a", f"127.0.0.1:{port}",
           "-c", "200", "--cloudwatch-config", str(config), "--emf-endpoint-url", moto_url,
           "--aws-region", "us-east-1", "--cluster-name", "e2e", "--emf-interval", "2",
           "--emf-log-stream", stream, "--emf-label", "Service=nvidia-dcgm-exporter", *extra]
    env = {**os.environ, **CREDS, "PYTHONPATH": str(ROOT / "src")}
    return subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True)


def collect(moto_url: str, stream: str, flushes: int) -> list[dict[str, Any]]:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            events = read_events(moto_url, GROUP, stream)
        except Exception:  # the group does not exist until the first send
            events = []
        stamps = {e["timestamp"] for e in events}
        if len(stamps) >= flushes:
            return [validate(e["message"]) for e in events]
        time.sleep(0.3)
    raise AssertionError(f"fewer than {flushes} flushes arrived in moto")


def stop(proc: subprocess.Popen[str]) -> str:
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err
    return err


def test_seed_config_unchanged_gives_per_pod_gpu_util_with_the_seed_dimensions(
        moto_url: str) -> None:
    proc = serve(moto_url, SEED, "node-seed")
    try:
        docs = collect(moto_url, "node-seed", 2)
    finally:
        stop(proc)
    assert docs
    for doc in docs:
        (directive,) = doc["_aws"]["CloudWatchMetrics"]
        assert directive["Dimensions"] == [["ClusterName", "Namespace", "Service", "job", "pod"]]
        assert directive["Namespace"] == "ContainerInsights/Prometheus"
        assert {doc[d] for d in ("ClusterName", "Service", "job")} == \
            {"e2e", "nvidia-dcgm-exporter", "podgpu"}
        # only the exclusive pod's GPU (the built-in scenario: ml/train-0 on GPU 0)
        assert (doc["pod"], doc["Namespace"], doc["gpu"]) == ("train-0", "ml", "0")
        assert "DCGM_FI_DEV_GPU_UTIL" in doc
        assert "DCGM_FI_DEV_GPU_TEMP" not in doc  # matches no declaration: not sent at all
    stamps = sorted({d["_aws"]["Timestamp"] for d in docs})
    assert len(stamps) >= 2 and all(t % 2000 == 0 for t in stamps)


def test_example_declarations_cover_every_pod_including_a_time_sliced_gpu(moto_url: str) -> None:
    proc = serve(moto_url, EXAMPLE, "node-example")
    try:
        docs = collect(moto_url, "node-example", 2)
    finally:
        stop(proc)
    pods = {d["pod"] for d in docs if "podgpu_pod_gpu_utilization_ratio" in d}
    assert pods == {"train-0", "infer-a", "infer-b"}  # infer-a and infer-b share GPU 1
    shared = [d for d in docs if d.get("pod") in ("infer-a", "infer-b")
              and "podgpu_pod_gpu_utilization_ratio" in d]
    assert {d["gpu"] for d in shared} == {"1"}


def test_unreachable_endpoint_is_a_health_reason_not_a_crash(moto_url: str) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    port = free_port()
    cmd = [sys.executable, "-m", "podgpu", "serve", "--simulate", "2", "-a", f"127.0.0.1:{port}",
           "-c", "200", "--cloudwatch-config", str(SEED), "--emf-endpoint-url", dead,
           "--aws-region", "us-east-1", "--cluster-name", "e2e", "--emf-interval", "1",
           "--emf-label", "Service=nvidia-dcgm-exporter"]
    proc = subprocess.Popen(cmd, env={**os.environ, **CREDS, "PYTHONPATH": str(ROOT / "src")},
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        import urllib.request

        deadline = time.monotonic() + 20
        body: dict[str, Any] = {}
        status = 0
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                    status, body = r.status, json.loads(r.read())
                if body.get("emf", {}).get("status", "ok") != "ok":
                    break
            except OSError:
                pass
            time.sleep(0.3)
        assert status == 200
        assert body["emf"]["status"].startswith("failing: cloudwatch:")
        assert body["emf"]["queued_events"] > 0
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
            text = r.read().decode()
        assert 'podgpu_emf_events_total{result="retried"}' in text
    finally:
        err = stop(proc)
    assert "EMF: send to cloudwatch failed" in err


@pytest.mark.parametrize(("content", "expect"), [
    ({"metric_declaration": [{"source_labels": ["a"], "metric_selectors": ["("],
                              "dimensions": [["a"]]}]},
     "metric_declaration[0].metric_selectors[0]: invalid regular expression"),
    ({"metric_declaration": [{"source_labels": ["a"], "metric_selectors": ["x"],
                              "dimensions": [[f"d{i}" for i in range(31)]]}]},
     "metric_declaration[0].dimensions[0]: 31 dimensions"),
    ({"metric_declaration": [{"source_labels": ["a"], "metric_selector": ["x"]}]},
     "metric_declaration[0]: unknown key 'metric_selector'"),
    ({"metric_declaration": [{"source_labels": "a", "metric_selectors": ["x"]}]},
     "metric_declaration[0].source_labels: expected a list"),
])
def test_bad_config_exits_2_with_one_line(tmp_path: Path, content: dict[str, Any],
                                          expect: str) -> None:
    bad = tmp_path / "cw.json"
    bad.write_text(json.dumps(content))
    res = subprocess.run([sys.executable, "-m", "podgpu", "serve", "--simulate", "1",
                          "--cloudwatch-config", str(bad), "--emf-destination", "stdout"],
                         env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
                         capture_output=True, text=True, timeout=30)
    assert res.returncode == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and expect in lines[0] and str(bad) in lines[0]


def test_spooled_events_survive_a_restart(moto_url: str, tmp_path: Path) -> None:
    spool = tmp_path / "spool"
    dead = f"http://127.0.0.1:{free_port()}"
    first = serve(dead, SEED, "node-spool", "--emf-spool-dir", str(spool))
    deadline = time.monotonic() + 20
    while len(list(spool.glob("*.jsonl"))) < 2:
        assert time.monotonic() < deadline, "nothing spooled"
        time.sleep(0.2)
    stop(first)
    spooled = {json.loads(line)["_aws"]["Timestamp"]
               for f in spool.glob("*.jsonl") for line in f.read_text().splitlines()}
    restarted_at = time.time() * 1000
    second = serve(moto_url, SEED, "node-spool", "--emf-spool-dir", str(spool))
    try:
        docs = collect(moto_url, "node-spool", len(spooled) + 1)
    finally:
        stop(second)
    arrived = {d["_aws"]["Timestamp"] for d in docs}
    assert spooled <= arrived  # every interval the first process could not send
    assert min(arrived) < restarted_at
    assert not list(spool.glob("*.jsonl")) or all(
        json.loads(f.read_text().splitlines()[0])["_aws"]["Timestamp"] > max(spooled)
        for f in spool.glob("*.jsonl"))  # sent files are deleted
