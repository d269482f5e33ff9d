"""Accounting on `podgpu serve --simulate 4`'s built-in scenario: over 20 s of real
time, train-0's allocated seconds grow by ~20, infer-a + infer-b's together by ~20, and the pods'
energy on GPUs 0 and 1 equals DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION's increase within 3 %. Also:
the counters are valid text format for Prometheus' own parser, `--accounting=false` removes them,
a metric list without the energy counter still gives energy (collected, not exported)."""

from __future__ import annotations

import time
from collections import defaultdict
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import InProcessAgent

pytestmark = pytest.mark.integration

ALLOC = "podgpu_pod_gpu_allocated_seconds_total"
ENERGY = "podgpu_pod_gpu_energy_joules_total"
DEVICE_ENERGY = "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"


def scrape(p: InProcessAgent) -> tuple[float, dict[tuple[str, str, str], float]]:
    """(the snapshot's time, {(metric, pod or gpu, ...): value}) from one /metrics."""
    status, _, body = p.get("/metrics")
    assert status == 200
    out: dict[tuple[str, str, str], float] = defaultdict(float)
    when = 0.0
    for fam in text_string_to_metric_families(body.decode()):
        for s in fam.samples:
            if s.name == "podgpu_last_collect_timestamp_seconds":
                when = s.value
            elif s.name in (ALLOC, ENERGY):
                out[(s.name, s.labels["pod"], s.labels["gpu"])] += s.value
            elif s.name in (DEVICE_ENERGY, DEVICE_ENERGY + "_total"):  # the parser adds _total
                out[(DEVICE_ENERGY, "", s.labels["gpu"])] = s.value
    assert when > 0
    return when, out


def test_done_when_on_the_built_in_scenario(agent: type[InProcessAgent]) -> None:
    p = agent("--simulate", "4")
    p.wait_ready()
    t0, a = scrape(p)
    time.sleep(20)
    t1, b = scrape(p)
    elapsed = t1 - t0  # between the two snapshots, by podgpu's own clock: not the test's wall time
    assert elapsed > 0  # the snapshots moved on

    def grew(metric: str, pod: str, gpu: str) -> float:
        return b[(metric, pod, gpu)] - a[(metric, pod, gpu)]

    # allocated seconds are integrated from snapshot to snapshot: they grow by exactly the time
    # between the two snapshots the scrapes saw, however late a loaded machine ran the cycles
    assert grew(ALLOC, "train-0", "0") == pytest.approx(elapsed, abs=0.01)
    assert grew(ALLOC, "infer-a", "1") + grew(ALLOC, "infer-b", "1") == pytest.approx(elapsed, abs=0.01)
    assert abs(grew(ALLOC, "infer-a", "1") - grew(ALLOC, "infer-b", "1")) <= 0.01
    for gpu, pods in (("0", ("train-0",)), ("1", ("infer-a", "infer-b"))):
        device = (b[(DEVICE_ENERGY, "", gpu)] - a[(DEVICE_ENERGY, "", gpu)]) / 1000.0
        pod_sum = sum(grew(ENERGY, pod, gpu) for pod in pods)
        assert device > 0 and abs(pod_sum - device) <= 0.03 * device, (gpu, pod_sum, device)


def test_accounting_off_and_fields_outside_the_list(agent: type[InProcessAgent],
                                                    tmp_path: Path) -> None:
    off = agent("--simulate", "2", "--accounting=false")
    off.wait_ready()
    assert ALLOC.encode() not in off.get("/metrics")[2]
    short = tmp_path / "short.csv"
    short.write_text("DCGM_FI_DEV_GPU_TEMP, gauge, GPU temperature (in C).\n")
    p = agent("--simulate", "2", "-f", str(short))
    p.wait_ready()
    time.sleep(3)
    body = p.get("/metrics")[2].decode()
    assert DEVICE_ENERGY not in body and "DCGM_FI_DEV_GPU_UTIL" not in body  # not exported
    energy = [float(line.rsplit(" ", 1)[1]) for line in body.splitlines()
              if line.startswith(ENERGY + "{") and 'pod="train-0"' in line]
    assert energy and energy[0] > 0  # but read for accounting
