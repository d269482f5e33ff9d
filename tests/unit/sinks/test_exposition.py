from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable

import pytest
from prometheus_client.parser import text_string_to_metric_families

from podgpu.fields import parse_metric_list
from podgpu.model import Device, GpuProcess, Sample, Snapshot
from podgpu.sinks.prometheus import RenderOptions, render
from podgpu.sinks.prometheus.labels import LabelOptions
from tests.unit.sinks.golden import CASES, GOLDEN, pods_snapshot, render_default, simulated_snapshot

# dcgm-exporter 4.8.x GPU template order (dcgm-exporter's source)
LEADING = ["gpu", "UUID", "pci_bus_id", "device", "modelName"]


def families(body: bytes) -> dict[str, list]:  # type: ignore[type-arg]
    out: dict[str, list] = {}  # type: ignore[type-arg]
    for fam in text_string_to_metric_families(body.decode()):
        out[fam.name] = fam.samples
    return out


def label_names_in_order(body: bytes, metric: str) -> list[list[str]]:
    rows = []
    for line in body.decode().splitlines():
        if line.startswith(metric + "{"):
            inner = line[len(metric) + 1: line.rindex("}")]
            rows.append([kv.split("=", 1)[0] for kv in _split_labels(inner)])
    return rows


def _split_labels(inner: str) -> list[str]:
    parts, cur, quoted, esc = [], "", False, False
    for ch in inner:
        if esc:
            cur += ch
            esc = False
        elif ch == "\\":
            cur += ch
            esc = True
        elif ch == '"':
            cur += ch
            quoted = not quoted
        elif ch == "," and not quoted:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    parts.append(cur)
    return parts


@pytest.mark.parametrize("name", sorted(CASES))
def test_golden_files_are_current(name: str) -> None:
    """Run `scripts/regen-golden` after an intended change and review the diff."""
    assert CASES[name]() == (GOLDEN / name).read_bytes()


def test_label_names_and_order_match_dcgm_exporter() -> None:
    body = render_default(simulated_snapshot())
    rows = label_names_in_order(body, "DCGM_FI_DEV_GPU_UTIL")
    assert len(rows) == 4
    for row in rows:
        assert row == [*LEADING, "Hostname", "DCGM_FI_DRIVER_VERSION"]
    pods = render_default(pods_snapshot())
    assert label_names_in_order(pods, "DCGM_FI_DEV_FB_USED")[0] == [
        *LEADING, "Hostname", "DCGM_FI_DRIVER_VERSION", "container", "namespace", "pod"]
    mig = next(r for r in label_names_in_order(pods, "DCGM_FI_DEV_FB_USED") if "GPU_I_ID" in r)
    assert mig[:8] == [*LEADING, "GPU_I_PROFILE", "GPU_I_ID", "Hostname"]


def test_hostname_label_spelling_and_model_name_blanks() -> None:
    body = render_default(simulated_snapshot(1), hostname_label="hostname",
                          replace_blanks_in_model_name=True).decode()
    assert 'hostname="node-a"' in body and "Hostname=" not in body
    assert 'modelName="NVIDIA-H100-80GB-HBM3"' in body


def test_every_default_field_per_gpu_parses_with_prometheus_client() -> None:
    fams = families(render_default(simulated_snapshot(4)))
    util = fams["DCGM_FI_DEV_GPU_UTIL"]
    assert sorted(s.labels["gpu"] for s in util) == ["0", "1", "2", "3"]
    # prometheus_client renames counter samples to *_total
    energy = fams["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"]
    assert {s.name for s in energy} == {"DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION_total"}
    assert fams["podgpu_build_info"][0].labels["backend"] == "simulated"


def test_values_are_dcgm_formatted_ints_and_six_decimal_floats() -> None:
    body = render_default(simulated_snapshot(1)).decode()
    power = next(ln for ln in body.splitlines() if ln.startswith("DCGM_FI_DEV_POWER_USAGE{"))
    util = next(ln for ln in body.splitlines() if ln.startswith("DCGM_FI_DEV_GPU_UTIL{"))
    ratio = next(ln for ln in body.splitlines() if ln.startswith("DCGM_FI_PROF_DRAM_ACTIVE{"))
    assert power.rsplit(" ", 1)[1].count(".") == 1 and len(power.rsplit(".", 1)[1]) == 6
    assert util.rsplit(" ", 1)[1] == "100"
    assert len(ratio.rsplit(".", 1)[1]) == 6


def test_missing_values_are_omitted_never_sentinels() -> None:
    body = render_default(simulated_snapshot(2, "A10G")).decode()
    assert "DCGM_FI_DEV_MEMORY_TEMP" not in body.split("podgpu_")[0]
    assert "DCGM_FI_PROF_" not in body.split("# HELP podgpu_")[0]
    assert 'field="DCGM_FI_PROF_GR_ENGINE_ACTIVE",reason="not supported on NVIDIA A10G"' in body
    for bad in ("N/A", "NaN", "9223372036854775794"):
        assert bad not in body


def test_label_values_and_help_are_escaped() -> None:
    dev = Device(0, 'GPU-"x"', "0000:01:00.0", "nvidia0", 'Model "Q"\\ new\nline')
    snap = Snapshot(taken_at=1.0, samples=(Sample(dev, {"DCGM_FI_DEV_GPU_UTIL": 5}),))
    ml = parse_metric_list('DCGM_FI_DEV_GPU_UTIL, gauge, "back\\slash"\n')
    body = render(snap, ml, RenderOptions(LabelOptions("h"))).decode()
    assert 'modelName="Model \\"Q\\"\\\\ new\\nline"' in body
    assert "# HELP DCGM_FI_DEV_GPU_UTIL back\\\\slash" in body
    fam = families(body.encode())["DCGM_FI_DEV_GPU_UTIL"][0]
    assert fam.labels["modelName"] == 'Model "Q"\\ new\nline'
    assert fam.labels["UUID"] == 'GPU-"x"'


def test_exclusive_gpu_gets_pod_labels_shared_gpu_none_and_two_allocations() -> None:
    fams = families(render_default(pods_snapshot()))
    util = {s.labels["gpu"]: s.labels for s in fams["DCGM_FI_DEV_GPU_UTIL"]}
    assert util["0"]["pod"] == "train-0" and util["0"]["namespace"] == "ml"
    assert "pod" not in util["1"] and "pod" not in util["2"]
    alloc = fams["podgpu_gpu_allocation"]
    per_gpu: dict[str, list[str]] = {}
    for s in alloc:
        per_gpu.setdefault(s.labels["gpu"], []).append(s.labels["pod"])
    assert sorted(per_gpu["1"]) == ["infer-a", "infer-b"]
    assert per_gpu["0"] == ["train-0"] and "2" not in per_gpu


def test_virtual_gpus_mode_gives_one_series_per_pod_with_vgpu() -> None:
    fams = families(render_default(pods_snapshot(), virtual_gpus=True))
    shared = [s.labels for s in fams["DCGM_FI_DEV_POWER_USAGE"] if s.labels["gpu"] == "1"]
    assert sorted((x["pod"], x["vgpu"]) for x in shared) == [("infer-a", "0"), ("infer-b", "1")]


def test_virtual_gpus_split_util_and_memory_by_process_as_dcgm_exporter_4_8_2() -> None:
    """GPU_UTIL and FB_USED keep the device series (no pod labels) and add one
    per holder with its pod's processes' sum (SM %, MiB per process truncated); a holder with
    no process gets 0; `pod_uid` is always on those series."""
    snap = pods_snapshot()
    fams = families(render_default(snap, virtual_gpus=True))
    device = {s.labels["gpu"]: s.value for s in fams["DCGM_FI_DEV_GPU_UTIL"]
              if "pod" not in s.labels}
    assert device == {"0": 100, "1": 100, "2": 0}
    per_proc_of: tuple[tuple[str, Callable[[GpuProcess], float]], ...] = (
        ("DCGM_FI_DEV_GPU_UTIL", lambda p: p.sm_util_percent or 0),
        ("DCGM_FI_DEV_FB_USED", lambda p: (p.used_memory_bytes or 0) >> 20))
    for field, per_proc in per_proc_of:
        per_pod = {(s.labels["gpu"], s.labels["pod"], s.labels["pod_uid"]): s.value
                   for s in fams[field] if "pod" in s.labels and "note" not in s.labels}
        want: dict[tuple[str, str, str], int] = {}
        for a in snap.allocations:
            dev = next(d.device for d in snap.samples if d.device.key == a.device_key)
            procs = [p for p in snap.processes if p.device_key == a.device_key and p.container
                     and p.container.pod == a.container.pod]
            want[(str(dev.index), a.container.pod, a.container.pod_uid)] = int(
                sum(per_proc(p) for p in procs))
        if field == "DCGM_FI_DEV_GPU_UTIL":  # the MIG instance has no GPU_UTIL at all
            want = {k: v for k, v in want.items() if k[0] != "3"}
        assert per_pod == want
    assert ("3", "notebook", "uid-nb") in per_pod and per_pod[("3", "notebook", "uid-nb")] == 0


def test_per_pod_usage_sums_processes_per_container() -> None:
    snap = pods_snapshot()
    fams = families(render_default(snap))
    mem = {(s.labels["gpu"], s.labels["pod"]): s.value
           for s in fams["podgpu_pod_gpu_memory_used_bytes"]}
    util = {(s.labels["gpu"], s.labels["pod"]): s.value
            for s in fams["podgpu_pod_gpu_utilization_ratio"]}
    for key in mem:
        procs = [p for p in snap.processes if p.container and p.container.pod == key[1]]
        assert mem[key] == sum(p.used_memory_bytes or 0 for p in procs)
        assert util[key] == pytest.approx(sum((p.sm_util_percent or 0) / 100 for p in procs))
    assert ("1", "infer-a") in mem and len(mem) == 3  # the host process has no series


@pytest.mark.integration  # runs Debian's promtool
@pytest.mark.parametrize("name", sorted(CASES))
def test_promtool_parses_golden_and_podgpu_names_pass_lint(name: str) -> None:
    promtool = shutil.which("promtool")
    assert promtool, "promtool missing: scripts/check installs Debian's prometheus package"
    res = subprocess.run([promtool, "check", "metrics"], input=(GOLDEN / name).read_bytes(),
                         capture_output=True, timeout=60)
    assert res.returncode in (0, 3), res.stderr.decode()  # 1 = parse error
    problems = (res.stdout + res.stderr).decode().splitlines()
    ours = [p for p in problems if p.startswith("podgpu_")]
    assert ours == []
    # every lint problem is one of the documented, expected dcgm-exporter naming issues
    expected = ("counter metrics should have \"_total\" suffix",
                "label names should be written in 'snake_case' not 'camelCase'",
                "metric name should not include type 'counter'")
    for p in problems:
        assert p.endswith(expected), p


def test_a_bad_value_from_a_backend_drops_that_sample_not_the_exposition() -> None:
    dev = Device(0, "GPU-a", "0000:01:00.0", "nvidia0", "M")
    snap = Snapshot(taken_at=1.0, samples=(Sample(dev, {
        "DCGM_FI_DEV_POWER_USAGE": float("nan"), "DCGM_FI_DEV_GPU_UTIL": 7,
        "DCGM_FI_DEV_SM_CLOCK": "oops", "DCGM_FI_DEV_FB_USED": float("inf")}),))
    ml = parse_metric_list("DCGM_FI_DEV_POWER_USAGE, gauge, p\nDCGM_FI_DEV_GPU_UTIL, gauge, u\n"
                           "DCGM_FI_DEV_SM_CLOCK, gauge, c\nDCGM_FI_DEV_FB_USED, gauge, f\n")
    fams = families(render(snap, ml, RenderOptions(LabelOptions("h"))))
    assert [s.value for s in fams["DCGM_FI_DEV_GPU_UTIL"]] == [7]
    for gone in ("DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_FB_USED"):
        assert gone not in fams
