"""Accounting on `podgpu serve --simulate 4`'s built-in scenario, burning 1 s on and 1 s off: over
at least 4 s of podgpu's own clock (two busy and two idle phases), train-0's allocated seconds grow
by exactly the time between the two snapshots, infer-a + infer-b's together by the same, and the pods'
energy on GPUs 0 and 1 equals DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION's increase within 3 %. Also:
the counters are valid text format for Prometheus' own parser, `--accounting=false` removes them,
a metric list without the energy counter still gives energy (collected, not exported)."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import InProcessAgent, wait_for

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
    p = agent("--simulate", "4", "--simulate-burn", "1,1")
    p.wait_ready()
    t0, a = scrape(p)

    def four_seconds_on() -> tuple[float, dict[tuple[str, str, str], float]] | None:
        later = scrape(p)
        return later if later[0] - t0 >= 4.0 else None

    # the second scrape once podgpu's own snapshot clock has moved 4 s on: not the test's wall time
    t1, b = wait_for(four_seconds_on, timeout=60, what="a snapshot 4 s after the first")
    elapsed = t1 - t0

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

    def energy_counted() -> str:
        """The exposition once train-0's energy counter is above 0 (read for accounting)."""
        body = p.get("/metrics")[2].decode()
        return body if any(line.startswith(ENERGY + "{") and 'pod="train-0"' in line
                           and float(line.rsplit(" ", 1)[1]) > 0 for line in body.splitlines()) else ""

    body = wait_for(energy_counted, timeout=30, what="train-0's energy counter above 0")
    assert DEVICE_ENERGY not in body and "DCGM_FI_DEV_GPU_UTIL" not in body  # but not exported
