"""The accounting rules: valid for promtool, their unit tests pass on input
series from the simulated node's real accounting counters (with a podgpu restart), a broken rule
fails them, and the PrometheusRule matches the operator's CRD. Regeneration without drift is
tests/integration/test_rules_promtool.py's test (it covers every file deploy.gen.write makes)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml
from deploy.gen import accounting

from tests.integration.test_rules_promtool import PROM_DIR, prometheusrule_validator, run

RULES = "podgpu-accounting.rules.yml"
TESTS = "podgpu-accounting.rules.test.yml"


def test_promtool_checks_the_accounting_rules() -> None:
    r = run("check", "rules", str(PROM_DIR / RULES))
    assert r.returncode == 0, r.stdout + r.stderr
    n = len(accounting.recording_rules()) + len(accounting.alerts())
    assert f"SUCCESS: {n} rules found" in r.stdout
    cr = yaml.safe_load((PROM_DIR / "podgpu-accounting-rules.yaml").read_text())
    plain = yaml.safe_load((PROM_DIR / RULES).read_text())
    assert cr["kind"] == "PrometheusRule" and cr["spec"]["groups"] == plain["groups"]


def test_promtool_unit_tests_pass() -> None:
    r = run("test", "rules", TESTS, cwd=PROM_DIR / "tests")
    assert r.returncode == 0 and "SUCCESS" in r.stdout, r.stdout + r.stderr


@pytest.mark.parametrize("mutation", [
    ("> 0.75", "> 1.5"),                           # the waste threshold
    ("/ 3600", "/ 60"),                             # GPU-hours, not GPU-minutes
    ("/ 3.6e+06", "/ 1000"),                        # kWh, not kJ
    ("clamp_min(namespace:podgpu_gpu_allocated_hours:increase1h - namespace:podgpu_gpu_used_hours"
     ":increase1h, 0)", "namespace:podgpu_gpu_allocated_hours:increase1h"),  # idle, not held
])
def test_the_unit_tests_catch_a_broken_rule(tmp_path: Path, mutation: tuple[str, str]) -> None:
    old, new = mutation
    text = (PROM_DIR / RULES).read_text()
    assert old in text
    (tmp_path / "tests").mkdir()
    (tmp_path / RULES).write_text(text.replace(old, new))
    shutil.copy(PROM_DIR / "tests" / TESTS, tmp_path / "tests")
    r = run("test", "rules", TESTS, cwd=tmp_path / "tests")
    assert r.returncode != 0 and "FAILED" in r.stdout + r.stderr, r.stdout


def test_prometheusrule_matches_the_prometheus_operator_crd() -> None:
    doc = yaml.safe_load((PROM_DIR / "podgpu-accounting-rules.yaml").read_text())
    assert [e.message for e in prometheusrule_validator().iter_errors(doc)] == []


def test_opencost_rule_gives_opencost_the_allocated_share() -> None:
    """The recorded container_gpu_allocation is each container's share of a GPU (1, 1, 0.5,
    0.5 in the simulated node), and OpenCost's own allocation query over it returns the same."""
    r = run("check", "rules", str(PROM_DIR / "podgpu-opencost.rules.yml"))
    assert r.returncode == 0, r.stdout + r.stderr
    r = run("test", "rules", "podgpu-opencost.rules.test.yml", cwd=PROM_DIR / "tests")
    assert r.returncode == 0 and "SUCCESS" in r.stdout, r.stdout + r.stderr
    doc = yaml.safe_load((PROM_DIR / "tests" / "podgpu-opencost.rules.test.yml").read_text())
    values = sorted(s["value"] for s in doc["tests"][0]["promql_expr_test"][1]["exp_samples"])
    assert values == [0.5, 0.5, 1.0, 1.0]


def test_the_alert_names_the_namespace() -> None:
    for a in accounting.alerts():
        assert "$labels.namespace" in a.summary and "$labels.namespace" in a.description
