"""Files podgpu reads from the node while running: a `--proc-root` whose cgroup file is a device
or a FIFO, and HPC job files listing many jobs. Bounded reads, counted errors, no blocking; the
HPC mapping bounded in series (jobs per GPU), with one log line and a /health entry when it cuts."""

from __future__ import annotations

import logging
import os
import tracemalloc
from pathlib import Path
from typing import Any

import pytest

from podgpu.attribution.cgroups import CgroupReader
from podgpu.attribution.hpcjobs import MAX_JOBS_PER_GPU, HpcJobMapper

POD = "0::/kubepods.slice/kubepods-pod6b9c2b7e_3d6e_4f0a_9a0b_1234567890ab.slice/cri-containerd-" \
      + "a" * 64 + ".scope\n"


@pytest.mark.parametrize("kind", ["zero", "fifo", "dir", "big"])
def test_a_cgroup_file_that_is_not_a_small_regular_file_is_an_error_not_a_hang(
        tmp_path: Path, kind: str, caplog: pytest.LogCaptureFixture) -> None:
    """`/dev/zero` there read without bound; a FIFO blocked collection."""
    (tmp_path / "7").mkdir()
    target = tmp_path / "7" / "cgroup"
    if kind == "zero":
        target.symlink_to("/dev/zero")
    elif kind == "fifo":
        os.mkfifo(target)
    elif kind == "dir":
        target.mkdir()
    else:
        target.write_bytes(POD.encode() * 10_000)  # 1.3 MB
    (tmp_path / "8").mkdir()
    (tmp_path / "8" / "cgroup").write_text(POD)
    reader = CgroupReader(str(tmp_path))
    tracemalloc.start()
    with caplog.at_level(logging.WARNING):
        found = reader.resolve([7, 8])
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert set(found) == {8} and reader.errors == 1
    assert peak < 1 << 20
    assert len([r for r in caplog.records if "cgroup" in r.getMessage()]) == 1


def test_hpc_jobs_per_gpu_are_capped_with_one_line_and_a_health_entry(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """8 files of 64 KiB made 1.64 M series: every job copies every series of its GPU."""
    (tmp_path / "0").write_text("".join(f"{i}\n" for i in range(5000)))
    (tmp_path / "1").write_text("a\nb\n")
    mapper = HpcJobMapper(str(tmp_path))
    assert mapper.health()["status"] == "ok"
    with caplog.at_level(logging.WARNING):
        first = mapper.read()
        mapper.read()
    assert first["0"] == tuple(str(i) for i in range(MAX_JOBS_PER_GPU))
    assert first["1"] == ("a", "b")
    assert len([r for r in caplog.records if "lists" in r.getMessage()]) == 1
    status = str(mapper.health()["status"])
    assert status.startswith(f"jobs cut at {MAX_JOBS_PER_GPU} per GPU") and "0 (" in status
    (tmp_path / "0").write_text("x\n")
    mapper.read()
    assert mapper.health()["status"] == "ok"


def test_an_hpc_file_that_is_a_device_or_fifo_is_skipped(tmp_path: Path) -> None:
    (tmp_path / "0").symlink_to("/dev/zero")
    os.mkfifo(tmp_path / "1")
    (tmp_path / "2").write_text("j\n")
    assert HpcJobMapper(str(tmp_path)).read() == {"2": ("j",)}


def test_serve_caps_hpc_jobs_per_gpu_in_metrics_and_health(agent: Any, tmp_path: Path) -> None:
    """Through the running agent: GPU 0's series appear once per kept job, and /health's
    hpc_job_mapping entry says the file was cut."""
    import json

    (tmp_path / "0").write_text("".join(f"j{i}\n" for i in range(500)))
    p = agent("--simulate", "1", "-c", "200", "--hpc-job-mapping-dir", str(tmp_path))
    p.wait_ready()
    _, _, metrics = p.get("/metrics")
    util = [ln for ln in metrics.decode().splitlines() if ln.startswith("DCGM_FI_DEV_GPU_UTIL{")]
    assert len(util) == MAX_JOBS_PER_GPU
    _, _, health = p.get("/health")
    doc = json.loads(health)
    cut = f"jobs cut at {MAX_JOBS_PER_GPU} per GPU: 0 (500 jobs)"
    assert doc["hpc_job_mapping"]["status"] == cut
    assert f"hpc_job_mapping: {cut}" in doc["warnings"] and doc["status"] == "degraded"


def test_hpc_job_ids_are_capped_in_length_too(tmp_path: Path,
                                              caplog: pytest.LogCaptureFixture) -> None:
    """8 files of 64 ids of 1,000 characters made /metrics 15.9 MB: an id over
    MAX_JOB_ID_CHARS is skipped (never cut short: two cut ids could become one), logged once,
    and /health says so."""
    from podgpu.attribution.hpcjobs import MAX_JOB_ID_CHARS

    ok = "9" * MAX_JOB_ID_CHARS
    for n in range(8):
        (tmp_path / str(n)).write_text("".join(f"{i:04d}{'x' * 996}\n" for i in range(64)))
    (tmp_path / "8").write_text(f"1234_7\n{ok}\n{ok}9\n")
    mapper = HpcJobMapper(str(tmp_path))
    with caplog.at_level(logging.WARNING):
        first = mapper.read()
        mapper.read()
    assert set(first) == {"8"} and first["8"] == ("1234_7", ok)
    assert len([r for r in caplog.records if "over 128 characters" in r.getMessage()]) == 9
    assert mapper.cut
    status = str(mapper.health()["status"])
    assert status == ("job ids over 128 characters skipped: 0 (64 ids), 1 (64 ids), 2 (64 ids), "
                      "3 (64 ids), 4 (64 ids), 5 (64 ids), 6 (64 ids), 7 (64 ids)")
