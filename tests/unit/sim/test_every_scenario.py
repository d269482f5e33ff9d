"""Every simulated scenario the docs and the fixtures show, on every model the docs list with
MIG (A100, H100, H200), through every `-d` selection: each cycle collects without an error, and
the exposition, the live view, the Container Insights series and accounting are built from it
without an exception. A scenario whose MIG profiles do not fit a model's memory is refused
with a one-line ConfigError on that model (as a real GPU of that model has no such profile)."""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from podgpu.accounting.holders import AccountingShares
from podgpu.accounting.source import Accountant
from podgpu.backends.select import SelectedBackend
from podgpu.collect import Collector
from podgpu.errors import ConfigError
from podgpu.fields.catalog import CATALOG
from podgpu.fields.metriclist import parse_metric_list
from podgpu.model.selection import parse_device_selection
from podgpu.sim.backend import MODELS, SimulatedBackend
from podgpu.sim.node import scenario_pods, simulated_node
from podgpu.sim.scenario import SimulatedAttributor, parse_scenario
from podgpu.sinks.cloudwatch.insights import FixedNode, InsightsBuilder, InsightsOptions
from podgpu.sinks.live.view import ViewOptions, build_view
from podgpu.sinks.prometheus.exposition import RenderOptions, render
from podgpu.sinks.prometheus.labels import LabelOptions
from podgpu.sinks.prometheus.source import render_sources

ROOT = Path(__file__).resolve().parents[3]
MIG_MODELS = ("A100", "H100", "H200")
SPECS = ("f", "g", "g+i", "i")
TIMES = (0.0, 5.0, 25.0, 45.0, 65.0, 130.0)
"""Seconds after start: busy and idle phases of the 20/20 burn, before and after the docs'
lost_gpus times (30, 60, 120)."""
EVERY_FIELD = parse_metric_list("\n".join(f"{f.name}, {f.prom_type}, all" for f in CATALOG), "all")


def scenarios() -> list[tuple[str, dict[str, Any]]]:
    """(where, document) of every scenario: the fixtures' files and the docs' YAML blocks with
    `pods:`."""
    out = []
    for path in sorted((ROOT / "tests" / "fixtures").rglob("*.yaml")):
        doc = yaml.safe_load(path.read_text())
        if isinstance(doc, dict) and "pods" in doc:
            out.append((str(path.relative_to(ROOT)), doc))
    for path in sorted((ROOT / "docs").glob("*.md")):
        for n, block in enumerate(re.findall(r"```yaml\n(.*?)```", path.read_text(), re.S)):
            doc = yaml.safe_load(block)
            if isinstance(doc, dict) and "pods" in doc:
                out.append((f"{path.relative_to(ROOT)}#{n}", doc))
    return out


SCENARIOS = scenarios()


def test_the_docs_and_fixtures_have_scenarios_with_mig() -> None:
    assert len(SCENARIOS) >= 3
    assert sum(1 for _, d in SCENARIOS if d.get("mig")) >= 2


def gpus_needed(doc: dict[str, Any]) -> int:
    used: list[int] = [g["gpu"] for p in doc["pods"] for c in p["containers"] for g in c["gpus"]]
    used += [m["gpu"] for m in doc.get("mig") or []]
    used += [x["gpu"] for x in doc.get("lost_gpus") or []] + [x["gpu"] for x in doc.get(
        "xids") or []]
    return max([3, *used]) + 1


def run_selection(where: str, doc: dict[str, Any], model: str, sel: str) -> None:
    """TIMES cycles of the scenario on `model` under `-d sel`, each through every consumer."""
    spec = MODELS[model]
    count = gpus_needed(doc)
    now = [1_800_000_000.0]
    start = now[0]
    scenario = parse_scenario(doc, where)
    try:
        backend = SelectedBackend(SimulatedBackend(count, spec, clock=lambda: now[0],
                                                   scenario=scenario),
                                  parse_device_selection(sel))
    except ConfigError as exc:  # profiles of another model's memory: refused, one line
        assert "GB of profiles" in str(exc) and "\n" not in str(exc)
        return
    backend.open()
    collector = Collector(backend, EVERY_FIELD.fields, attributor=SimulatedAttributor(
        scenario), want_processes=True, clock=lambda: now[0])
    labels = LabelOptions(hostname="node-a")
    acct = Accountant(labels)
    pods = scenario_pods(scenario)
    insights = InsightsBuilder(InsightsOptions("c", "node-a"),
                               FixedNode(simulated_node(spec, count, "node-a")), lambda: pods,
                               shares=AccountingShares())
    for t in TIMES:
        now[0] = start + t
        snap = collector.cycle()
        stage = snap.stage("backend")
        assert stage is not None and (stage.ok or snap.lost_devices), (sel, t, stage)
        assert snap.samples or snap.lost_devices or sel == "i", (sel, t)
        render(snap, EVERY_FIELD, RenderOptions(labels))
        build_view(snap, ViewOptions("node-a", "simulated", "test", 1.0))
        for _ in insights.series(snap):
            pass
        acct.observe(snap)
        render_sources([acct])


@pytest.mark.parametrize("model", MIG_MODELS)
@pytest.mark.parametrize(("where", "doc"), SCENARIOS, ids=[w for w, _ in SCENARIOS])
def test_every_scenario_runs_on_every_mig_model(where: str, doc: dict[str, Any], model: str,
                                                caplog: pytest.LogCaptureFixture) -> None:
    for sel in SPECS:
        with caplog.at_level(logging.WARNING):
            run_selection(where, doc, model, sel)
        errors = [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
        assert errors == [], (sel, [r.getMessage() for r in errors])
        caplog.clear()
