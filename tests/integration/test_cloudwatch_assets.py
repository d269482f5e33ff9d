"""`podgpu cloudwatch-dashboard` and `podgpu cloudwatch-alarms` (real subprocesses) applied to a
CloudWatch emulator (moto in server mode: PutDashboard, PutMetricAlarm over real HTTP), their
structure checked here, and every metric and dimension set they query checked against what the
EMF sink really produced for the same config on a simulated node in the same test (extracted with
the spec-written tests/emf_validator.py)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import boto3
import pytest

from podgpu.accounting import Accountant
from podgpu.sinks.cloudwatch import EmfSink, load_emf_config
from podgpu.sinks.cloudwatch.encode import Encoder
from podgpu.sinks.cloudwatch.queue import EventQueue
from tests.emf_validator import extract
from tests.integration.test_cloudwatch_moto import CREDS, moto_url
from tests.integration.test_plan_vs_sink import Captured
from tests.unit.sinks.cloudwatch.simnode import SimNode

__all__ = ["moto_url"]
pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = {"seed": ROOT / "tests" / "fixtures" / "seed" / "cwagent-config.json",
           "example": ROOT / "deploy" / "cloudwatch" / "podgpu-declarations.json"}
SEARCH = re.compile(r"^SEARCH\('\{(?P<schema>[^}]*)\} MetricName=\"(?P<metric>[^\"]+)\""
                    r"(?P<filters>(?: [A-Za-z]+=\"[^\"]*\")*)', '(?P<stat>Average|Maximum|Minimum"
                    r"|Sum|SampleCount)', (?P<period>\d+)\)$")
INSIGHTS = re.compile(r"^SELECT (?P<func>MAX|MIN|AVG|SUM|COUNT)\((?P<metric>\w+)\) FROM SCHEMA\("
                      r"(?P<schema>[^)]*)\)(?: WHERE (?P<where>\w+ = '[^']*'(?: AND \w+ = '[^']*')*))?"
                      r"(?: GROUP BY (?P<by>[\w, ]+))?$")
IDENTITY = ("--emf-namespace", "gpu-operator", "--emf-label", "Service=nvidia-dcgm-exporter")
"""As the sink runs in produced() (tests/unit/sinks/cloudwatch/simnode.py's OPTS)."""
CONSTANT = {"ClusterName": "prod", "Namespace": "gpu-operator", "Service": "nvidia-dcgm-exporter",
            "job": "kubernetes-service-endpoints"}


def produced(config: Path) -> tuple[set[tuple[str, str, frozenset[str]]], set[str]]:
    """(namespace, metric, dimension names) of every metric the sink sent, and ClusterNames."""
    node = SimNode(count=4)
    captured = Captured()
    sink = EmfSink(node.builder(), Encoder(load_emf_config(str(config))), EventQueue(1 << 24),
                   captured, interval=60)
    sink.start()
    accountant = Accountant(node.builder().options.labels)  # the accounting counters, as serve does
    for snap in node.snapshots(150):
        sink.offer(snap)
        accountant.observe(snap)
        sink.offer_counters(snap.taken_at, accountant.emf_items())
    sink.stop()
    seen = {(x.namespace, x.name, frozenset(dict(x.dimensions))) for _, m in captured.events
            for x in extract(m)}
    clusters = {dict(x.dimensions).get("ClusterName", "") for _, m in captured.events
                for x in extract(m)}
    return seen, clusters


def names(schema: str) -> list[str]:
    return [s.strip().strip('"') for s in schema.split(",")]


def podgpu(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "podgpu", *args], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT / "src")}, timeout=60)


def client(url: str) -> Any:
    return boto3.session.Session(aws_access_key_id=CREDS["AWS_ACCESS_KEY_ID"],
                                 aws_secret_access_key=CREDS["AWS_SECRET_ACCESS_KEY"],
                                 region_name="us-east-1").client("cloudwatch", endpoint_url=url)


@pytest.mark.parametrize("which", ["seed", "example"])
def test_dashboard_queries_only_what_the_sink_produced_and_moto_accepts_it(
        moto_url: str, which: str) -> None:
    seen, clusters = produced(CONFIGS[which])
    res = podgpu("cloudwatch-dashboard", "--cloudwatch-config", str(CONFIGS[which]),
                 "--cluster-name", "prod", "--region", "us-east-1", *IDENTITY)
    assert res.returncode == 0, res.stderr
    body = json.loads(res.stdout)
    graphs = [w for w in body["widgets"] if w["type"] == "metric"]
    metrics_graphed = set()
    for w in body["widgets"]:
        assert set(w) == {"type", "x", "y", "width", "height", "properties"}
        assert w["x"] + w["width"] <= 24 and w["width"] > 0 and w["height"] > 0
    for w in graphs:
        props = w["properties"]
        assert props["region"] == "us-east-1" and props["view"] == "timeSeries"
        ids = [line[0]["id"] for line in props["metrics"]]
        assert all(re.fullmatch(r"[a-z][A-Za-z0-9_]*", i) for i in ids)
        for (line,) in props["metrics"]:
            m = SEARCH.match(line["expression"])
            assert m, line["expression"]
            ns, *dims = names(m["schema"])
            assert (ns, m["metric"], frozenset(dims)) in seen, (m["metric"], dims)
            assert "pod" in dims and line["label"] == "${PROP('Dim.pod')}"  # Namespace is constant
            # the queries follow the identity configured: every constant dimension is a filter
            want = "".join(f' {k}="{v}"' for k, v in sorted(CONSTANT.items()) if k in dims)
            assert m["filters"] == want and "prod" in clusters
            metrics_graphed.add(m["metric"])
    # the seed's graph, and the profiling ratios the simulated H100 has
    assert {"DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
            "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_PROF_DRAM_ACTIVE"} <= metrics_graphed
    if which == "example":  # the per-pod series of shared GPUs, the accounting counters
        assert {"podgpu_pod_gpu_utilization_ratio", "podgpu_pod_gpu_memory_used_bytes",
                "podgpu_pod_gpu_allocated_seconds_total", "podgpu_pod_gpu_used_seconds_total",
                "podgpu_pod_gpu_energy_joules_total"} <= metrics_graphed
    else:  # memory is not in the seed's selectors: said so on the dashboard and on stderr
        assert "DCGM_FI_DEV_FB_USED" in res.stderr
        assert any("DCGM_FI_DEV_FB_USED" in w["properties"].get("markdown", "")
                   for w in body["widgets"] if w["type"] == "text")
    cw = client(moto_url)
    answer = cw.put_dashboard(DashboardName=f"podgpu-{which}", DashboardBody=res.stdout)
    assert answer["DashboardValidationMessages"] == []
    stored = cw.get_dashboard(DashboardName=f"podgpu-{which}")["DashboardBody"]
    assert json.loads(stored) == body


@pytest.mark.parametrize("which", ["seed", "example"])
def test_alarms_query_only_what_the_sink_produced_and_moto_accepts_them(
        moto_url: str, which: str) -> None:
    seen, _ = produced(CONFIGS[which])
    res = podgpu("cloudwatch-alarms", "--cloudwatch-config", str(CONFIGS[which]),
                 "--cluster-name", "prod", "--expected-gpus", "1", "--alarm-prefix", which, *IDENTITY,
                 "--alarm-action", "arn:aws:sns:us-east-1:123456789012:gpu-alerts")
    assert res.returncode == 0, res.stderr
    alarms = json.loads(res.stdout)
    assert {a["AlarmName"] for a in alarms} == {
        f"{which}-prod-gpu-xid-error", f"{which}-prod-gpu-lost", f"{which}-prod-gpu-allocated-idle"}
    cw = client(moto_url)
    for a in alarms:
        (q,) = a["Metrics"]
        assert q["ReturnData"] is True and q["Period"] == 60
        m = INSIGHTS.match(q["Expression"])
        assert m, q["Expression"]
        ns, *dims = names(m["schema"])
        assert (ns, m["metric"], frozenset(dims)) in seen, (m["metric"], dims)
        assert m["where"] == " AND ".join(f"{k} = '{v}'" for k, v in sorted(CONSTANT.items())
                                          if k in dims)
        assert set(names(m["by"] or "")) - {""} <= set(dims) - set(CONSTANT)
        assert a["DatapointsToAlarm"] <= a["EvaluationPeriods"]
        assert a["AlarmActions"] == ["arn:aws:sns:us-east-1:123456789012:gpu-alerts"]
        cw.put_metric_alarm(**a)
    idle = next(a for a in alarms if a["AlarmName"].endswith("idle"))
    assert idle["EvaluationPeriods"] == 30  # idle for 30 minutes
    if which == "example":  # covers time-sliced pods through the per-pod ratio
        assert "podgpu_pod_gpu_utilization_ratio" in idle["Metrics"][0]["Expression"]
    stored = {a["AlarmName"]: a for a in cw.describe_alarms(AlarmNamePrefix=which)["MetricAlarms"]}
    assert set(stored) == {a["AlarmName"] for a in alarms}
    for a in alarms:
        assert stored[a["AlarmName"]]["Metrics"][0]["Expression"] == a["Metrics"][0]["Expression"]
        assert stored[a["AlarmName"]]["Threshold"] == a["Threshold"]


def test_bad_config_exits_2_with_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "cw.json"
    bad.write_text('{"metric_declaration": [{"source_labels": ["a"], "metric_selectors": ["("]}]}')
    for cmd in ("cloudwatch-dashboard", "cloudwatch-alarms"):
        res = podgpu(cmd, "--cloudwatch-config", str(bad))
        assert res.returncode == 2
        (line,) = res.stderr.strip().splitlines()
        assert str(bad) in line and "metric_selectors[0]: bad regex" in line
