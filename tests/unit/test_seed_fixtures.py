"""The vendored seed files stay identical to ../shared/seed (when that folder is beside the repo)."""

from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parents[1] / "fixtures" / "seed"
SHARED = Path(__file__).resolve().parents[3] / "shared" / "seed"


@pytest.mark.parametrize("name", ["cwagent-config.json", "dcgm-exporter-metrics-a10g.txt",
                                  "cwagent-prometheus-job.yaml"])
def test_vendored_seed_matches_shared(name: str) -> None:
    assert (HERE / name).is_file()
    original = SHARED / name
    if original.is_file():  # absent in a clone without ../shared: the copy is the test data
        assert (HERE / name).read_bytes() == original.read_bytes()
