"""Two `podgpu serve --simulate` agents (in this process) and one real Prometheus scraping them every second
with podgpu's rules loaded: the stack the dashboard and rule tests query.

Node gpu-node-1: 4 x H100 with deploy/gen/simnode.py's scenario (GPU 0 held by one pod, GPU 1
time-sliced 60/40 by two pods, GPU 2 allocated to a pod that never uses it, GPU 3 free).
Node gpu-node-2: 2 x A100 without pods: no profiling fields (no GPM), so the dashboard must say so.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import yaml
from deploy.gen import simnode

from tests.conftest import ROOT, InProcessAgent, free_port, wait_for
from tests.integration.prometheus_peer import Prometheus, ensure_installed

RULES = ROOT / "deploy" / "prometheus" / "podgpu.rules.yml"


class RulesPrometheus(Prometheus):
    """Prometheus with podgpu's rule file, its groups evaluated every second (the test cannot
    wait for the shipped 30 s interval; the expressions are the shipped ones)."""

    def __init__(self, workdir: Path, targets: list[str], job: str = "podgpu") -> None:
        self.binary = ensure_installed()
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        doc = yaml.safe_load(RULES.read_text())
        for g in doc["groups"]:
            g["interval"] = "1s"
        (workdir / "rules.yml").write_text(yaml.safe_dump(doc))
        config = workdir / "prometheus.yml"
        config.write_text(yaml.safe_dump({
            "global": {"scrape_interval": "1s", "scrape_timeout": "1s",
                       "evaluation_interval": "1s"},
            "rule_files": [str(workdir / "rules.yml")],
            "scrape_configs": [{"job_name": job, "static_configs": [{"targets": targets}]}],
        }))
        self.proc = subprocess.Popen(
            [self.binary, f"--config.file={config}", f"--web.listen-address=127.0.0.1:{self.port}",
             f"--storage.tsdb.path={workdir / 'data'}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)

    def query(self, expr: str, at: float | None = None) -> list[dict[str, Any]]:
        params = {"query": expr}
        if at is not None:
            params["time"] = f"{at:.3f}"
        return list(self.api("query", **params)["result"])


class Stack:
    def __init__(self, workdir: Path) -> None:
        scen = workdir / "scenario.json"
        scen.write_text(json.dumps(simnode.SCENARIO))
        # busy for 10 minutes from start: the test sees the burn's busy phase throughout
        # two agents in this process on ports the OS picks (tests/conftest.py InProcessAgent)
        self.node1 = InProcessAgent("--simulate", "4xH100", "--simulate-scenario", str(scen),
                                    "--simulate-burn", "600,10", env={"NODE_NAME": "gpu-node-1"})
        self.node2 = InProcessAgent("--simulate", "2xA100", "--simulate-scenario", "none",
                                    env={"NODE_NAME": "gpu-node-2"})
        self.nodes = (self.node1, self.node2)
        self.prom: RulesPrometheus | None = None
        try:
            for n in self.nodes:
                n.wait_ready()
            self.prom = RulesPrometheus(workdir, [f"127.0.0.1:{n.port}" for n in self.nodes])
            self.prom.wait_ready()
            self._wait_for_data()
        except BaseException:
            self.stop()
            raise

    def _wait_for_data(self, timeout: float = 60.0) -> None:
        """Until both targets are up, every recording rule has produced series and there are
        6 scrapes of each target are stored (enough for the rate and range panels)."""
        prom = self.prom
        assert prom is not None

        def stored() -> bool:
            up = prom.query("up")
            rec = prom.query("pod_gpu:podgpu_gpu_utilization:ratio")
            mem = prom.query("namespace:podgpu_gpu_memory_used:bytes")
            scrapes = prom.query("count_over_time(up[1m])")
            return bool(len(up) == 2 and all(r["value"][1] == "1" for r in up) and len(rec) == 4
                        and mem and len(scrapes) == 2
                        and all(int(r["value"][1]) >= 6 for r in scrapes))

        wait_for(stored, timeout, "both targets up, the recording rules and 6 scrapes each",
                 interval=0.5)

    def stop(self) -> None:
        if self.prom is not None:
            self.prom.stop()
        for n in self.nodes:
            n.stop()
