"""`python -m bench.prod_memory` runs (5 s, simulated) and measures what it says, with the DaemonSet's
own args: the H200 production-memory run must not be the first time it runs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.deploy.render import container, render
from tests.harness import ROOT
from tests.support import prod_memory

pytestmark = pytest.mark.integration


def test_bench_args_are_the_cloudwatch_overlays_daemonset_args() -> None:
    in_container = {"default_counters": "/etc/dcgm-exporter/default-counters.csv",
                    "socket": "/var/lib/kubelet/pod-resources/kubelet.sock", "proc": "/host/proc",
                    "cw_config": "/etc/podgpu/cloudwatch/cwagent-config.json",
                    "spool": "/var/lib/podgpu/emf-spool"}
    bench = ["serve", *(a.format(**in_container) for a in
                        prod_memory.DAEMONSET_ARGS + prod_memory.EMF_ARGS)]
    rendered = container(render("overlays/cloudwatch"))["args"]
    assert bench == [a.replace("$(CLUSTER_NAME)", "bench").replace("$(EMF_NAMESPACE)", "gpu-operator")
                     for a in rendered]


def test_prod_memory_runs_every_variant(tmp_path: Path) -> None:
    out = tmp_path / "pm.json"
    proc = subprocess.run(
        [sys.executable, "-m", "bench.prod_memory", "--duration", "5",
         "--sample-every", "1", "--simulate", "--out", str(out)],
        capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["backend"] == "simulated" and result["gpus"] == 8
    rss = {}
    for name in prod_memory.VARIANTS:
        v = result["variants"][name]
        assert len(v["samples"]) >= 4, name
        assert v["scrapes_ok"] >= 2 and v["scrape_errors"] == 0, (name, v["scrapes_ok"])
        s = v["summary"]
        assert 10 < s["rss_mib_end"] < 1000 and s["threads_max"] >= 1
        rss[name] = s["rss_mib_end"]
    # Each part adds to the footprint, none is free: the pod watch loads the kubernetes client,
    # the EMF sink boto3, -k grpc.
    assert rss["bare"] < rss["kubelet"] < rss["kubelet+podwatch"] < rss["production"], rss
