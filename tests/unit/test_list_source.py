"""Which metric list `serve` uses: -f, else dcgm-exporter's default path when a
chart mounted a list there, else the embedded default."""

from __future__ import annotations

from pathlib import Path

from podgpu.fields.metriclist import load_default
from podgpu.parts import load_metrics
from podgpu.settings import CollectSettings


def test_a_list_mounted_at_the_default_path_is_used(tmp_path: Path) -> None:
    mounted = tmp_path / "default-counters.csv"
    mounted.write_text("DCGM_FI_DEV_GPU_TEMP, gauge, only the temperature\n")
    ml = load_metrics(CollectSettings(default_list=str(mounted)))
    assert ml.path == str(mounted)
    assert [r.name for r in ml.metrics] == ["DCGM_FI_DEV_GPU_TEMP"]


def test_without_a_file_there_the_embedded_list_is_used(tmp_path: Path) -> None:
    ml = load_metrics(CollectSettings(default_list=str(tmp_path / "absent.csv")))
    assert [r.name for r in ml.metrics] == [r.name for r in load_default().metrics]
    assert ml.path.startswith("<embedded")


def test_f_wins_over_the_default_path(tmp_path: Path) -> None:
    mounted = tmp_path / "default-counters.csv"
    mounted.write_text("DCGM_FI_DEV_GPU_TEMP, gauge, t\n")
    mine = tmp_path / "mine.csv"
    mine.write_text("DCGM_FI_DEV_POWER_USAGE, gauge, p\n")
    ml = load_metrics(CollectSettings(collectors=str(mine), default_list=str(mounted)))
    assert [r.name for r in ml.metrics] == ["DCGM_FI_DEV_POWER_USAGE"]
