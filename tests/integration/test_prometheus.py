"""A real Prometheus scrapes `podgpu serve --simulate` (in this process, tests/conftest.py
InProcessAgent) every second (the seed's gpu-metrics job)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from tests.conftest import wait_for
from tests.integration.prometheus_peer import Prometheus

LABELS = {"__name__", "gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname",
          "DCGM_FI_DRIVER_VERSION", "instance", "job"}


def test_prometheus_scrapes_one_series_per_gpu_with_dcgm_labels(agent, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    p = agent("--simulate", "4", "-c", "1000")
    p.wait_ready()
    prom = Prometheus(tmp_path, [f"127.0.0.1:{p.port}"])
    try:
        prom.wait_ready()
        def scraped() -> tuple[dict[str, Any], list[dict[str, Any]]] | None:
            targets = prom.api("targets")["activeTargets"]
            target = targets[0] if targets else {}
            result = prom.api("query", query="DCGM_FI_DEV_GPU_UTIL")["result"]
            return (target, result) if target.get("health") == "up" and len(result) == 4 else None

        target, result = wait_for(scraped, timeout=30, what="the target up with 4 GPU series",
                                  interval=0.5)
        assert target["lastError"] == ""
        assert sorted(r["metric"]["gpu"] for r in result) == ["0", "1", "2", "3"]
        for r in result:
            pods = {"container", "namespace", "pod"} if r["metric"]["gpu"] == "0" else set()
            assert set(r["metric"]) == LABELS | pods, r["metric"]
            assert r["metric"]["Hostname"] == "test-node"
            assert r["metric"]["device"] == f"nvidia{r['metric']['gpu']}"
        # counters keep dcgm-exporter's names (no _total added on ingestion)
        energy = prom.api("query", query="DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION")["result"]
        assert len(energy) == 4
        meta = prom.api("metadata", metric="DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION")
        assert meta["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"][0]["type"] == "counter"
        # the seed's Grafana legend `Pod {{pod}}` and the allocation join on shared GPUs
        assert [r["metric"]["pod"] for r in result if r["metric"]["gpu"] == "0"] == ["train-0"]
        # (allocation on the many side: a shared GPU has several allocation series per UUID, so
        # `GPU_UTIL * on(UUID) group_left(pod) podgpu_gpu_allocation` is many-to-many there)
        at = f"{time.time():.3f}"  # one evaluation time for both queries
        joined = prom.api("query", query="podgpu_gpu_allocation * on(UUID) group_left "
                          "DCGM_FI_DEV_GPU_UTIL", time=at)["result"]
        result = prom.api("query", query="DCGM_FI_DEV_GPU_UTIL", time=at)["result"]
        assert sorted(r["metric"]["pod"] for r in joined) == ["infer-a", "infer-b", "train-0"]
        # the other queries docs/attribution.md shows are accepted and evaluate
        for q in ("podgpu_gpu_allocation * on(UUID, GPU_I_ID) group_left "
                  "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
                  "podgpu_gpu_allocation * on(UUID) group_left max by (UUID) "
                  "(max_over_time(DCGM_FI_DEV_GPU_UTIL[30m])) == 0",
                  "sum by (namespace, pod) (podgpu_pod_gpu_memory_used_bytes)"):
            assert isinstance(prom.api("query", query=q, time=at)["result"], list)
        util = {r["metric"]["UUID"]: r["value"][1] for r in result}
        for r in joined:
            assert r["value"][1] == util[r["metric"]["UUID"]]
        up = prom.api("query", query="podgpu_build_info")["result"]
        assert up and up[0]["metric"]["backend"] == "simulated"
    finally:
        prom.stop()
