"""podgpu's Prometheus rules: regenerated without drift, valid for promtool, and every alert
firing and not firing in `promtool test rules` on input series generated from the simulated
node's real exposition."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from deploy.gen import rules, ruletests, write

from tests.conftest import ROOT
from tests.integration.prometheus_peer import ensure_installed

PROM_DIR = ROOT / "deploy" / "prometheus"


def promtool() -> str:
    ensure_installed()
    path = shutil.which("promtool")
    assert path, "promtool is installed with Debian's prometheus package"
    return path


def run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([promtool(), *args], capture_output=True, text=True, cwd=cwd, timeout=120)


def test_generated_files_are_committed_unchanged() -> None:
    for rel, text in write.files("rules").items():
        assert (PROM_DIR / rel).read_text() == text, f"{rel} drifted: run scripts/gen-rules"


def test_promtool_checks_the_plain_file_and_the_prometheusrule(tmp_path: Path) -> None:
    r = run("check", "rules", str(PROM_DIR / "podgpu.rules.yml"))
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"SUCCESS: {len(rules.recording_rules()) + len(rules.alerts())} rules found" in r.stdout
    cr = yaml.safe_load((PROM_DIR / "podgpu-rules.yaml").read_text())
    assert cr["kind"] == "PrometheusRule" and cr["apiVersion"] == "monitoring.coreos.com/v1"
    plain = yaml.safe_load((PROM_DIR / "podgpu.rules.yml").read_text())
    assert cr["spec"]["groups"] == plain["groups"]


def test_promtool_unit_tests_pass() -> None:
    r = run("test", "rules", "podgpu.rules.test.yml", cwd=PROM_DIR / "tests")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "SUCCESS" in r.stdout


def test_every_alert_has_a_firing_and_a_non_firing_case() -> None:
    for a in rules.alerts():
        cases = [c for c in ruletests.CASES if c.alert == a.name]
        assert any(c.expect for c in cases), f"{a.name}: no firing case"
        assert any(not c.expect for c in cases), f"{a.name}: no non-firing case"


def test_every_alert_names_its_node_and_gpu_or_pod() -> None:
    """A page must say where to look: the node (Hostname, or the scrape target when the alert is
    about podgpu itself) and the GPU or pod when the alert is about one."""
    for a in rules.alerts():
        text = a.summary + " " + a.description
        assert re.search(r"\$labels\.(Hostname|instance)", text), a.name
        about_gpu = "DCGM_FI_DEV" in a.expr or "podgpu_gpu_allocation" in a.expr
        if about_gpu:
            assert "$labels.gpu" in text and "$labels.UUID" in text, a.name
        if "podgpu_gpu_allocation" in a.expr:
            assert "$labels.pod" in text and "$labels.namespace" in text, a.name


@pytest.mark.parametrize("mutation", [
    # (The shared-GPU guard, `count by (UUID, GPU_I_ID) (podgpu_gpu_allocation) > 1`, is no longer
    # mutated here: --kubernetes-virtual-gpus gives each pod its own processes'
    # GPU_UTIL/FB_USED as dcgm-exporter 4.8.2, so the simulated node's copies no longer give a
    # pod a whole shared GPU; the guard still covers MIG copies, which that node cannot make.)
    # XID severity: 79 moved out of the critical set
    ("|79|", "|"),
    # the idle threshold
    ("<= 5)", "<= 0.5)"),
])
def test_the_unit_tests_catch_a_broken_rule(tmp_path: Path, mutation: tuple[str, str]) -> None:
    old, new = mutation
    text = (PROM_DIR / "podgpu.rules.yml").read_text()
    assert old in text
    (tmp_path / "tests").mkdir()
    (tmp_path / "podgpu.rules.yml").write_text(text.replace(old, new))
    shutil.copy(PROM_DIR / "tests" / "podgpu.rules.test.yml", tmp_path / "tests")
    r = run("test", "rules", "podgpu.rules.test.yml", cwd=tmp_path / "tests")
    assert r.returncode != 0 and "FAILED" in r.stdout + r.stderr, r.stdout


def prometheusrule_validator() -> Any:
    """A validator for PrometheusRule objects: the vendored CRD schema (prometheus-operator
    v0.93.0), closed to unknown fields."""
    import json

    from tests.deploy.test_manifests import crd_validator

    return crd_validator(json.loads(
        (ROOT / "tests" / "integration" / "schemas" / "prometheusrule-v0.93.0.json").read_text()))


def test_prometheusrule_matches_the_prometheus_operator_crd() -> None:
    validator = prometheusrule_validator()
    doc = yaml.safe_load((PROM_DIR / "podgpu-rules.yaml").read_text())
    assert [e.message for e in validator.iter_errors(doc)] == []
    doc["spec"]["groups"][1]["rules"][0]["for_"] = "5m"  # a misspelling the schema must refuse
    assert [e.message for e in validator.iter_errors(doc)]
