"""DCGM_HPC_JOB_MAPPING_DIR: files named by GPU (or GPU.instance), one job id per line."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from podgpu.attribution.hpcjobs import MAX_FILE_BYTES, HpcJobMapper, parse_jobs


def test_parse_keeps_order_drops_blanks_and_repeats() -> None:
    assert parse_jobs("1234\n\n  5678 \r\n1234\n") == ("1234", "5678")
    assert parse_jobs("") == ()


def test_directory_read_skips_names_dirs_and_fifos(tmp_path: Path) -> None:
    (tmp_path / "0").write_text("job-a\njob-b\n")
    (tmp_path / "2.1").write_text("mig-job\n")
    (tmp_path / "README").write_text("not a gpu\n")
    (tmp_path / "1.x").write_text("bad name\n")
    (tmp_path / "3").mkdir()
    os.mkfifo(tmp_path / "4")  # must not block
    (tmp_path / "5").write_text("\n\n")  # no job: the GPU keeps its plain series
    assert HpcJobMapper(str(tmp_path)).read() == {"0": ("job-a", "job-b"), "2.1": ("mig-job",)}


def test_missing_directory_is_logged_once_and_picked_up_when_it_appears(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    d = tmp_path / "slurm"
    with caplog.at_level(logging.WARNING):
        mapper = HpcJobMapper(str(d))
        assert mapper.read() == {} and mapper.read() == {}
    assert sum("not found" in r.message for r in caplog.records) == 1
    d.mkdir()
    (d / "0").write_text("77\n")
    assert mapper.read() == {"0": ("77",)}
    (d / "0").unlink()
    d.rmdir()
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        assert mapper.read() == {} and mapper.read() == {}
    assert sum("is gone" in r.message for r in caplog.records) == 1


def test_oversized_file_is_cut_at_a_line(tmp_path: Path) -> None:
    line = "j" * 99 + "\n"
    (tmp_path / "0").write_text(line * (MAX_FILE_BYTES // 100 + 10))
    jobs = HpcJobMapper(str(tmp_path)).read()["0"]
    assert jobs == ("j" * 99,)
