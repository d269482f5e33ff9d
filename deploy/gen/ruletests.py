"""promtool unit tests for deploy/prometheus/podgpu.rules.yml, with input series generated from
the simulated node's real exposition (deploy/gen/simnode.py), one minute apart.

Each alert has a firing case (a scenario with the fault) and a non-firing case (the healthy
node, or the fault before its `for` has passed). Expected alert labels are the labels of the
input series that caused the alert (looked up in the generated input, not written by hand);
expected annotations are the rule's templates with those labels substituted.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Any

import yaml
from deploy.gen import rules, simnode
from deploy.gen.simnode import Node, lose_gpu, set_value

MINUTES = 36
XID_AT = 600.0
FAULT_AT = 600.0
FB_TOTAL = 81559
FB_RESERVED = 573

SCENARIOS: dict[str, Node] = {
    "healthy": Node(),
    "healthy-virtual-gpus": Node(virtual_gpus=True),
    "xid79-gpu0": Node(xids=({"gpu": 0, "xid": 79, "every": 86400, "offset": XID_AT},)),
    "xid13-gpu1": Node(xids=({"gpu": 1, "xid": 13, "every": 86400, "offset": XID_AT},)),
    "lost-gpu3": Node(lost_gpus=(lose_gpu(3, FAULT_AT),)),
    "thermal-gpu0": Node(faults=(set_value(
        0, "DCGM_FI_DEV_THERMAL_VIOLATION", lambda t, s: int(0.5e9 * (t - FAULT_AT)), FAULT_AT),)),
    "power-gpu1": Node(faults=(set_value(
        1, "DCGM_FI_DEV_POWER_VIOLATION", lambda t, s: int(0.8e9 * (t - FAULT_AT)), FAULT_AT),)),
    "memfull-gpu0": Node(faults=(
        set_value(0, "DCGM_FI_DEV_FB_USED", lambda t, s: FB_TOTAL - FB_RESERVED - 500, FAULT_AT),
        set_value(0, "DCGM_FI_DEV_FB_FREE", lambda t, s: 500, FAULT_AT))),
    "remapfail-gpu2": Node(faults=(set_value(2, "DCGM_FI_DEV_ROW_REMAP_FAILURE",
                                             lambda t, s: 1, FAULT_AT),)),
    "gpu2-at-3pct": Node(faults=(set_value(2, "DCGM_FI_DEV_GPU_UTIL", lambda t, s: 3, 0.0),)),
    "gpu2-at-8pct": Node(faults=(set_value(2, "DCGM_FI_DEV_GPU_UTIL", lambda t, s: 8, 0.0),)),
    "kubelet-gone": Node(kubelet_gone_at=FAULT_AT),
    "collector-stuck": Node(stuck_at=FAULT_AT),
    "target-down": Node(down_at=FAULT_AT),
}

Key = tuple[str, tuple[tuple[str, str], ...]]
Values = list[float | str | None]


def series(node: Node) -> dict[Key, Values]:
    """Every series Prometheus would store scraping `node` once a minute (with `up`, `instance`
    and `job`), as values per minute: a number, 'stale' where a series vanished, None after."""
    steps: list[dict[Key, float]] = []
    for _, body in simnode.expositions(node, [60.0 * i for i in range(MINUTES + 1)]):
        target = (("instance", simnode.INSTANCE), ("job", simnode.JOB))
        samples = {} if body is None else simnode.parse(body.decode())
        step = {(n, tuple(sorted(labels + target))): v for (n, labels), v in samples.items()}
        step[("up", target)] = 0.0 if body is None else 1.0
        steps.append(step)
    out: dict[Key, Values] = {}
    for i, step in enumerate(steps):
        for key, v in step.items():
            out.setdefault(key, [None] * i).append(v)
        for vals in out.values():
            if len(vals) == i:
                vals.append("stale" if i and isinstance(vals[i - 1], float) else None)
    return out


def _fmt(v: float) -> str:
    return str(int(v)) if v == int(v) and abs(v) < 1e15 else repr(v)


def encode(vals: Values) -> str:
    """promtool's expanding notation: runs of one number as `vxN`, missing samples as `_`."""
    parts: list[str] = []
    i = 0
    while i < len(vals):
        v = vals[i]
        if not isinstance(v, float):
            parts.append("_" if v is None else "stale")
            i += 1
            continue
        j = i
        while j + 1 < len(vals) and vals[j + 1] == v:
            j += 1
        parts.append(_fmt(v) if j == i else f"{_fmt(v)}x{j - i}")
        i = j + 1
    return " ".join(parts)


def _escape(s: str) -> str:
    return s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def selector(name: str, labels: tuple[tuple[str, str], ...]) -> str:
    return name + "{" + ", ".join(f'{k}="{_escape(v)}"' for k, v in labels) + "}"


@dataclass(frozen=True)
class Expect:
    """An expected alert: the labels of the input series `metric` matching `match`, restricted
    to `keep` (all when None)."""

    metric: str
    match: dict[str, str]
    keep: tuple[str, ...] | None = None


@dataclass(frozen=True)
class Case:
    alert: str
    scenario: str
    minute: int
    expect: tuple[Expect, ...] = ()
    why: str = ""


DEV = ("Hostname", "gpu", "UUID")
TARGET = ("instance", "job")

CASES: tuple[Case, ...] = (
    Case("PodgpuTargetDown", "target-down", 14, (Expect("up", {}),)),
    Case("PodgpuTargetDown", "healthy", 14, why="target answering"),
    Case("PodgpuGpuLost", "lost-gpu3", 14, (Expect("podgpu_devices", {"state": "lost"}),)),
    Case("PodgpuGpuLost", "healthy", 14, why="no lost GPU"),
    Case("PodgpuGpuMissing", "lost-gpu3", 14,
         (Expect("DCGM_FI_DEV_GPU_TEMP", {"gpu": "3"}, TARGET + DEV),)),
    Case("PodgpuGpuMissing", "target-down", 14, why="whole target down: PodgpuTargetDown's case"),
    Case("PodgpuXidCritical", "xid79-gpu0", 12,
         (Expect("DCGM_FI_DEV_XID_ERRORS", {"gpu": "0", "err_code": "79"}),)),
    Case("PodgpuXidCritical", "xid79-gpu0", 25, why="the same last XID 15 minutes later is not new"),
    Case("PodgpuXidCritical", "lost-gpu3", 12,
         (Expect("DCGM_FI_DEV_XID_ERRORS", {"gpu": "3", "err_code": "79"}),),
         why="a lost GPU keeps its identity with XID 79 (fallen off the bus)"),
    Case("PodgpuXidCritical", "lost-gpu3", 25, why="still lost 15 minutes later: not new"),
    Case("PodgpuXidCritical", "xid13-gpu1", 12, why="XID 13 is an application error (warning)"),
    Case("PodgpuXidError", "xid13-gpu1", 12,
         (Expect("DCGM_FI_DEV_XID_ERRORS", {"gpu": "1", "err_code": "13"}),)),
    Case("PodgpuXidError", "xid79-gpu0", 12, why="XID 79 is critical, not a warning"),
    Case("PodgpuGpuAllocatedIdle", "healthy", 35,
         (Expect("podgpu_gpu_allocation", {"pod": "notebook-0"}),)),
    Case("PodgpuGpuAllocatedIdle", "healthy", 20, why="idle for less than 30 minutes"),
    Case("PodgpuGpuAllocatedIdle", "gpu2-at-3pct", 35,
         (Expect("podgpu_gpu_allocation", {"pod": "notebook-0"}),), why="3 % is idle (<= 5 %)"),
    Case("PodgpuGpuAllocatedIdle", "gpu2-at-8pct", 35, why="8 % is in use"),
    Case("PodgpuGpuThermalThrottling", "thermal-gpu0", 30, (Expect("DCGM_FI_DEV_GPU_TEMP",
                                                                    {"gpu": "0"}, DEV),)),
    Case("PodgpuGpuThermalThrottling", "healthy", 30, why="no thermal violation time"),
    Case("PodgpuGpuPowerThrottling", "power-gpu1", 30, (Expect("DCGM_FI_DEV_GPU_TEMP",
                                                                {"gpu": "1"}, DEV),)),
    Case("PodgpuGpuPowerThrottling", "healthy", 30,
         why="the simulated burn's own 2 % power-capped time is below the threshold"),
    Case("PodgpuPodGpuMemoryNearFull", "memfull-gpu0", 20,
         (Expect("podgpu_gpu_allocation", {"pod": "train-0"}),)),
    Case("PodgpuPodGpuMemoryNearFull", "healthy", 20, why="busy GPUs use 90 %"),
    Case("PodgpuRowRemapFailure", "remapfail-gpu2", 12,
         (Expect("DCGM_FI_DEV_ROW_REMAP_FAILURE", {"gpu": "2"}),)),
    Case("PodgpuRowRemapFailure", "healthy", 12),
    Case("PodgpuCollectionFailing", "kubelet-gone", 20,
         (Expect("podgpu_collect_success", {"stage": "attribution"}),)),
    Case("PodgpuCollectionFailing", "kubelet-gone", 13, why="failing for less than 5 minutes"),
    Case("PodgpuCollectionStale", "collector-stuck", 20,
         (Expect("podgpu_last_collect_timestamp_seconds", {}),)),
    Case("PodgpuCollectionStale", "healthy", 20),
)


def _labels_at(data: dict[Key, Values], e: Expect, minute: int) -> dict[str, str]:
    """The labels of the one series `e` names, present at `minute` (or, for a series that
    vanished, at its last sample before)."""
    def present(vals: Values, upto: int) -> bool:
        return any(isinstance(v, float) for v in vals[upto:minute + 1])

    matching = [(dict(labels), vals) for (name, labels), vals in data.items()
                if name == e.metric and all(dict(labels).get(k) == v for k, v in e.match.items())]
    found = [lb for lb, vals in matching if present(vals, minute)] \
        or [lb for lb, vals in matching if present(vals, 0)]
    if len(found) != 1:
        raise AssertionError(f"{e}: expected one input series at minute {minute}, got {found}")
    return {k: v for k, v in found[0].items() if e.keep is None or k in e.keep}


def _expand(template: str, labels: dict[str, str]) -> str:
    return re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda m: labels.get(m.group(1), ""), template)


def _recording_tests(data: dict[Key, Values]) -> list[dict[str, Any]]:
    """The per-pod utilization at a busy and an idle minute: the time-sliced GPU's pods get
    their scenario shares (0.6, 0.4) of the device, never the whole of it."""
    shares = {"train-0": 1.0, "infer-a": 0.6, "infer-b": 0.4, "notebook-0": 0.0}
    out = []
    for minute in (10, 11):
        util = {dict(lb)["gpu"]: vals[minute] for (n, lb), vals in data.items()  # the device's
                if n == "DCGM_FI_DEV_GPU_UTIL" and "pod_uid" not in dict(lb)}  # not 4.8.2's per pod
        samples = []
        for (n, lb), vals in sorted(data.items()):
            d = dict(lb)
            if n == "podgpu_gpu_allocation" and isinstance(vals[minute], float):
                keep = tuple((k, d[k]) for k in ("Hostname", "UUID", "container", "gpu",
                                                  "namespace", "pod"))
                value = float(util[d["gpu"]]) / 100 * shares[d["pod"]]  # type: ignore[arg-type]
                samples.append({"labels": selector("pod_gpu:podgpu_gpu_utilization:ratio", keep),
                                "value": value})
        out.append({"expr": "pod_gpu:podgpu_gpu_utilization:ratio", "eval_time": f"{minute}m",
                    "exp_samples": samples})
    return out


def build(rule_file: str = "../podgpu.rules.yml") -> dict[str, Any]:
    by_name = {a.name: a for a in rules.alerts()}
    used = sorted({c.scenario for c in CASES} | {"healthy-virtual-gpus"})
    tests = []
    for scen in used:
        data = series(SCENARIOS[scen])
        alert_tests = []
        for c in (c for c in CASES if c.scenario == scen):
            rule = by_name[c.alert]
            exp = []
            for e in c.expect:
                labels = {**_labels_at(data, e, c.minute), "severity": rule.severity,
                          **rule.extra_labels}
                exp.append({"exp_labels": dict(sorted(labels.items())),
                            "exp_annotations": {"summary": _expand(rule.summary, labels),
                                                "description": _expand(rule.description, labels)}})
            alert_tests.append({"eval_time": f"{c.minute}m", "alertname": c.alert,
                                "exp_alerts": exp})
        test: dict[str, Any] = {
            "name": scen, "interval": "1m",
            "input_series": [{"series": selector(n, lb), "values": encode(v)}
                             for (n, lb), v in sorted(data.items()) if _wanted(n)],
            "alert_rule_test": alert_tests,
        }
        if scen.startswith("healthy"):
            test["promql_expr_test"] = _recording_tests(data)
        tests.append(test)
    return {"rule_files": [rule_file], "evaluation_interval": "1m", "tests": tests}


@functools.cache
def _wanted(name: str) -> bool:
    """Only the families the rules read, to keep the test file reviewable."""
    return name == "up" or re.search(rf"\b{re.escape(name)}\b", _rules_text()) is not None


@functools.cache
def _rules_text() -> str:
    return rules.render_plain()


def render() -> str:
    body: str = yaml.safe_dump(build(), sort_keys=False, width=200)
    return ("# Generated by scripts/gen-rules from deploy/gen/ruletests.py (input series from the\n"
            "# simulated node's real exposition); do not edit. Run: promtool test rules <this file>\n"
            + body)

