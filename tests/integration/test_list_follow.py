"""dcgm-exporter parity for the metric list and HPC jobs, through `podgpu serve`,
agents in this process (tests/conftest.py InProcessAgent): the -f file is followed while running (a bad edit refused in one line, the last good list
kept), a list of only label rows starts, and DCGM_HPC_JOB_MAPPING_DIR adds hpc_job labels."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import InProcessAgent, wait_for

pytestmark = pytest.mark.integration


def body(p: InProcessAgent) -> str:
    status, _, raw = p.get("/metrics")
    assert status == 200
    return raw.decode()


def test_the_list_file_is_followed_and_a_bad_edit_keeps_the_last_good_list(
        agent: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    lst = tmp_path / "counters.csv"
    lst.write_text("DCGM_FI_DEV_GPU_TEMP, gauge, temperature\n")
    p = agent("--simulate", "1", "-f", str(lst))
    p.wait_ready()
    assert "DCGM_FI_DEV_POWER_USAGE{" not in body(p)
    time.sleep(0.05)  # a new mtime on coarse-timestamp filesystems
    lst.write_text("DCGM_FI_DEV_GPU_TEMP, gauge, temperature\nDCGM_FI_DEV_POWER_USAGE, gauge, W\n")
    wait_for(lambda: "DCGM_FI_DEV_POWER_USAGE{" in body(p), what="the edited list in /metrics")
    health = wait_for(lambda: json.loads(p.get("/health")[2]), what="health")
    assert health["metric_list"] == {"status": "ok", "path": str(lst), "metrics": 2, "labels": 0}
    lst.write_text("DCGM_FI_DEV_NOT_A_FIELD, gauge, typo\n")

    def list_health() -> dict[str, Any]:
        return dict(json.loads(p.get("/health")[2])["metric_list"])

    refused = wait_for(lambda: (h := list_health())["status"] != "ok" and h,
                       what="the refused edit in /health")
    assert refused["status"].startswith("edit refused, still exporting the last good list: ")
    assert "DCGM_FI_DEV_NOT_A_FIELD" in refused["status"]
    assert (refused["path"], refused["metrics"]) == (str(lst), 2)  # the last good list
    text = body(p)
    assert "DCGM_FI_DEV_POWER_USAGE{" in text and "DCGM_FI_DEV_GPU_TEMP{" in text
    time.sleep(0.05)
    lst.write_text("DCGM_FI_DEV_GPU_TEMP, gauge, temperature\n")  # a good edit clears it
    wait_for(lambda: list_health() == {"status": "ok", "path": str(lst), "metrics": 1,
                                       "labels": 0}, what="the good edit in /health")
    assert p.stop() == 0
    err = caplog.text
    refused = [ln for ln in err.splitlines() if "metric list not reloaded" in ln]
    assert len(refused) == 1 and "DCGM_FI_DEV_NOT_A_FIELD" in refused[0], err
    assert not any(r.exc_info for r in caplog.records)  # no traceback


def test_a_list_of_only_label_rows_starts_with_a_warning(
        agent: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    lst = tmp_path / "labels.csv"
    lst.write_text("# GPU metrics come later\nDCGM_FI_DRIVER_VERSION, label, driver\n")
    p = agent("--simulate", "1", "-f", str(lst))
    p.wait_ready()
    assert "DCGM_FI_DEV_GPU_UTIL{" not in body(p)
    health = json.loads(p.get("/health")[2])
    assert health["metric_list"]["status"] == "no metric rows"
    assert p.stop() == 0 and "the metric list has no metric rows" in caplog.text


def test_hpc_job_mapping_dir_from_the_environment(agent: Any, tmp_path: Path) -> None:
    jobs = tmp_path / "slurm"
    jobs.mkdir()
    (jobs / "1").write_text("4242\n")
    p = agent("--simulate", "2", env={"DCGM_HPC_JOB_MAPPING_DIR": str(jobs)})
    p.wait_ready()
    util = [ln for ln in body(p).splitlines() if ln.startswith("DCGM_FI_DEV_GPU_UTIL{")]
    assert len(util) == 2
    assert next(ln for ln in util if 'hpc_job="4242"' in ln).startswith('DCGM_FI_DEV_GPU_UTIL{gpu="1"')
    (jobs / "0").write_text("a\nb\n")  # read every cycle
    wait_for(lambda: sum(ln.startswith("DCGM_FI_DEV_GPU_UTIL{") for ln in body(p).splitlines()) == 3,
             what="GPU 0 once per job")
