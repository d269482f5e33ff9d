"""promtool unit tests for deploy/prometheus/podgpu-accounting.rules.yml.

Input series: podgpu's simulated backend and scenario attributor run through the real `Collector`
every 10 s of a fake clock for two hours; the real `Accountant` integrates every snapshot, and its
counters are what Prometheus would store scraping once a minute, with podgpu restarting at minute
70 (its counters start again at 0). Values are rounded to 1/64 so that every sum Prometheus makes
is exact and the expected values, computed here from the input series with Prometheus' own
increase arithmetic (a fall is a reset), match to the last bit.
"""

from __future__ import annotations

import itertools
import re
from typing import Any

import yaml
from deploy.gen import accounting
from deploy.gen.simnode import HOSTNAME, INSTANCE, JOB, SCENARIO

from podgpu.accounting import Accountant
from podgpu.collect import Collector
from podgpu.fields.metriclist import load_default
from podgpu.sim.backend import MODELS, SimulatedBackend
from podgpu.sim.scenario import SimulatedAttributor, parse_scenario
from podgpu.sinks.prometheus.labels import LabelOptions
from podgpu.sinks.prometheus.source import render_sources

MINUTES = 120
CYCLE = 10.0
RESTART_MINUTE = 70
TARGET = (("instance", INSTANCE), ("job", JOB))
# the rule tests' node (simnode.SCENARIO): train-0 exclusive and busy half the time (the burn
# pattern), infer-a/infer-b time-sliced 60/40, notebook-0 held and never used (the waste), GPU 3 free

_LINE = re.compile(r"^(podgpu_pod_gpu_\w+_total)\{(.*)\} (\S+)$")
_PAIR = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')
Key = tuple[str, tuple[tuple[str, str], ...]]


class _Clock:
    now = 0.0

    def __call__(self) -> float:
        return self.now


def series() -> dict[Key, list[float]]:
    """Every accounting counter per minute 0..MINUTES, rounded to 1/64."""
    clock = _Clock()
    scenario = parse_scenario(SCENARIO, source="deploy/gen/accounting_tests.py")
    backend = SimulatedBackend(4, MODELS["H100"], clock=clock, scenario=scenario)
    collector = Collector(backend, load_default().fields, attributor=SimulatedAttributor(scenario),
                          want_processes=True, clock=clock)
    labels = LabelOptions(hostname=HOSTNAME)
    acc = Accountant(labels)
    out: dict[Key, list[float]] = {}
    steps = int(MINUTES * 60 / CYCLE)
    per_minute = int(60 / CYCLE)
    for k in range(steps + 1):
        clock.now = k * CYCLE
        if k == RESTART_MINUTE * per_minute:
            acc = Accountant(labels)  # podgpu restarted: its counters start again at 0
        acc.observe(collector.cycle())
        if k % per_minute:
            continue
        for line in render_sources([acc]).splitlines():
            m = _LINE.match(line)
            if m is not None:
                key = (m.group(1), tuple(sorted(_PAIR.findall(m.group(2)) + list(TARGET))))
                out.setdefault(key, []).append(round(float(m.group(3)) * 64) / 64)
    assert all(len(v) == MINUTES + 1 for v in out.values()), "a series came or went"
    return out


def increase(values: list[float], start: int, end: int) -> float:
    """Prometheus' increase() over samples start..end (both on the window's edges, so no
    extrapolation): last - first, plus the value before every fall (a reset)."""
    window = values[start:end + 1]
    correction = sum(a for a, b in itertools.pairwise(window) if b < a)
    return window[-1] - window[0] + correction


def _by_namespace(data: dict[Key, list[float]], metric: str, start: int, end: int
                  ) -> dict[str, float]:
    out: dict[str, float] = {}
    for (name, labels), values in data.items():
        if name == metric:
            ns = dict(labels)["namespace"]
            out[ns] = out.get(ns, 0.0) + increase(values, start, end)
    return out


def _samples(record: str, values: dict[str, float]) -> list[dict[str, Any]]:
    return [{"labels": f'{record}{{namespace="{ns}"}}', "value": v}
            for ns, v in sorted(values.items())]


def recording_tests(data: dict[Key, list[float]], minute: int) -> list[dict[str, Any]]:
    a = accounting
    alloc = {k: v / 3600 for k, v in _by_namespace(data, a.ALLOCATED, minute - 60, minute).items()}
    used = {k: v / 3600 for k, v in _by_namespace(data, a.USED, minute - 60, minute).items()}
    kwh = {k: v / 3.6e6 for k, v in _by_namespace(data, a.ENERGY, minute - 60, minute).items()}
    idle = {k: max(alloc[k] - used[k], 0.0) for k in alloc}
    now = {k: v / 300 for k, v in _by_namespace(data, a.ALLOCATED, minute - 5, minute).items()}
    at = f"{minute}m"
    return [{"expr": rec, "eval_time": at, "exp_samples": _samples(rec, vals)}
            for rec, vals in ((a.R_ALLOCATED_H, alloc), (a.R_USED_H, used), (a.R_IDLE_H, idle),
                              (a.R_KWH, kwh), (a.R_ALLOCATED_NOW, now))]


def _fmt(v: float) -> str:
    return str(int(v)) if v == int(v) else repr(v)


def build(rule_file: str = "../podgpu-accounting.rules.yml") -> dict[str, Any]:
    data = series()
    (waste,) = accounting.alerts()
    ns = "research"
    exp = {"namespace": ns, "severity": waste.severity, **waste.extra_labels}
    annotations = {k: v.replace("{{ $labels.namespace }}", ns)
                   for k, v in (("summary", waste.summary), ("description", waste.description))}
    inputs = [{"series": name + "{" + ", ".join(f'{k}="{v}"' for k, v in labels) + "}",
               "values": " ".join(_fmt(v) for v in values)}
              for (name, labels), values in sorted(data.items())]
    return {"rule_files": [rule_file], "evaluation_interval": "1m", "tests": [{
        "name": "accounting", "interval": "1m", "input_series": inputs,
        "alert_rule_test": [
            # pending only: idle more than the threshold for less than 15 minutes
            {"eval_time": "55m", "alertname": waste.name, "exp_alerts": []},
            # research's notebook held its GPU idle for the whole hour; ml and inference used
            # half of theirs (below the threshold), across podgpu's restart at minute 70
            {"eval_time": "100m", "alertname": waste.name, "exp_alerts": [
                {"exp_labels": exp, "exp_annotations": annotations}]},
        ],
        "promql_expr_test": recording_tests(data, 100) + recording_tests(data, 75),
    }]}


OPENCOST_QUERY = ('avg(avg_over_time(container_gpu_allocation{container!="", container!="POD", '
                  'node!=""}[20m])) by (container, pod, namespace, node)')
"""OpenCost's queryFmtGPUsAllocated (pkg/costmodel/allocation.go at opencost/opencost 5f65333)
with a 20 minute window and no cluster label."""


def build_opencost(rule_file: str = "../podgpu-opencost.rules.yml") -> dict[str, Any]:
    """container_gpu_allocation per container = its allocated share of a GPU, and OpenCost's own
    query over it gives the same (so its GPU-hours are share x hours, not one GPU per replica)."""
    data = series()
    minute = 100
    shares: list[tuple[dict[str, str], float]] = []
    for (name, labels), values in sorted(data.items()):
        if name == accounting.ALLOCATED:
            d = dict(labels)
            shares.append(({k: d[k] for k in ("container", "namespace", "pod")},
                           increase(values, minute - 5, minute) / 300))

    def sel(record: str, d: dict[str, str], extra: dict[str, str]) -> str:
        labels = {**d, "node": HOSTNAME, **extra}
        return record + "{" + ", ".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"

    rec = accounting.OPENCOST_ALLOCATION
    inputs = [{"series": name + "{" + ", ".join(f'{k}="{v}"' for k, v in labels) + "}",
               "values": " ".join(_fmt(v) for v in values)}
              for (name, labels), values in sorted(data.items())]
    return {"rule_files": [rule_file], "evaluation_interval": "1m", "tests": [{
        "name": "opencost", "interval": "1m", "input_series": inputs,
        "promql_expr_test": [
            {"expr": rec, "eval_time": f"{minute}m",
             "exp_samples": [{"labels": sel(rec, d, {"source": "podgpu"}), "value": v}
                             for d, v in shares]},
            {"expr": OPENCOST_QUERY, "eval_time": f"{minute}m",
             "exp_samples": [{"labels": sel("", d, {}), "value": v} for d, v in shares]},
        ],
    }]}


def render_opencost() -> str:
    body: str = yaml.safe_dump(build_opencost(), sort_keys=False, width=200)
    return ("# Generated by scripts/gen-rules from deploy/gen/accounting_tests.py; do not edit.\n"
            "# Run: promtool test rules <this file>\n"
            + body)


def render() -> str:
    body: str = yaml.safe_dump(build(), sort_keys=False, width=200)
    return ("# Generated by scripts/gen-rules from deploy/gen/accounting_tests.py (input series from\n"
            "# the simulated node's real accounting counters); do not edit.\n"
            "# Run: promtool test rules <this file>\n"
            + body)
