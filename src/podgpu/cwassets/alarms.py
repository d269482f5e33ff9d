"""Alarm definitions as PutMetricAlarm requests, one JSON object per alarm.

PutMetricAlarm JSON rather than CloudFormation: each object is exactly what
`aws cloudwatch put-metric-alarm --cli-input-json` and boto3's `put_metric_alarm(**alarm)` take,
so it can be applied or diffed without a stack, and wrapped into a template by whoever uses one.

Each alarm watches a Metrics Insights query over the config's namespace and per-pod dimension set,
so pods that appear later are covered without editing the alarm (CloudWatch alarms accept Metrics
Insights queries, including GROUP BY ones whose every series is a contributor):

- XID errors: the last XID of any pod's GPU above 0 in a minute (per pod);
- a lost GPU: fewer GPU samples per minute than `--expected-gpus` GPUs would send (a GPU that
  falls off the bus stops reporting: its series vanish rather than show a value);
- an idle GPU: a pod that holds a GPU and used at most `--idle-percent` of it for 30 minutes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from podgpu.cwassets.targets import MetricTarget, filters, per_pod, quote, targets
from podgpu.sinks.cloudwatch.declarations import EmfConfig

IDLE_MINUTES = 30


def query(t: MetricTarget, func: str, cluster: str, group_by: tuple[str, ...],
          constant: Mapping[str, str] | None = None) -> str:
    schema = ", ".join([f'"{t.namespace}"', *(quote(d) for d in t.dimensions)])
    q = f"SELECT {func}({quote(t.metric)}) FROM SCHEMA({schema})"
    where = filters(t, constant or {}, cluster)
    if where:
        q += " WHERE " + " AND ".join(f"{quote(k)} = '{v}'" for k, v in where.items())
    by = [d for d in group_by if d in t.dimensions]
    if by:
        q += " GROUP BY " + ", ".join(quote(d) for d in by)
    return q


def _alarm(name: str, description: str, q: str, *, threshold: float, op: str, periods: int,
           missing: str, actions: tuple[str, ...], period: int) -> dict[str, Any]:
    alarm: dict[str, Any] = {
        "AlarmName": name, "AlarmDescription": description, "ActionsEnabled": bool(actions),
        "Metrics": [{"Id": "q1", "Expression": q, "Period": period, "ReturnData": True}],
        "EvaluationPeriods": periods, "DatapointsToAlarm": periods, "Threshold": threshold,
        "ComparisonOperator": op, "TreatMissingData": missing}
    if actions:
        alarm["AlarmActions"] = list(actions)
        alarm["OKActions"] = list(actions)
    return alarm


def alarms(config: EmfConfig, *, cluster: str = "", prefix: str = "podgpu",
           expected_gpus: int | None = None, samples_per_minute: int = 60,
           idle_percent: float = 1.0, actions: tuple[str, ...] = (),
           constant: Mapping[str, str] | None = None
           ) -> tuple[list[dict[str, Any]], list[str]]:
    """(PutMetricAlarm requests, why an alarm could not be made for this config). `constant`:
    the labels every series carries as configured (targets.py)."""
    out: list[dict[str, Any]] = []
    skipped: list[str] = []
    const = constant or {}
    pre = f"{prefix}-{cluster}" if cluster else prefix
    xid = targets(config, "DCGM_FI_DEV_XID_ERRORS", constant=constant)
    if xid:
        out.append(_alarm(
            f"{pre}-gpu-xid-error", "A pod's GPU reported an XID error (DCGM_FI_DEV_XID_ERRORS is "
            "the last XID; see NVIDIA's XID catalog).",
            query(xid[0], "MAX", cluster, per_pod(xid[0], const), const),
            threshold=0, op="GreaterThanThreshold", periods=1, missing="notBreaching",
            actions=actions, period=60))
    else:
        skipped.append("XID errors: the config extracts no per-pod DCGM_FI_DEV_XID_ERRORS")
    util = targets(config, "DCGM_FI_DEV_GPU_UTIL", constant=constant)
    if util and expected_gpus:
        out.append(_alarm(
            f"{pre}-gpu-lost", f"Fewer than {expected_gpus} GPUs report GPU utilization: a GPU "
            "was lost (fell off the bus, driver error) or its pod's series stopped.",
            query(util[0], "COUNT", cluster, (), const),
            threshold=expected_gpus * samples_per_minute,
            op="LessThanThreshold", periods=3, missing="breaching", actions=actions, period=60))
    elif util:
        skipped.append("lost GPU: pass --expected-gpus N (the GPUs whose series the config "
                       "extracts) to make it")
    else:
        skipped.append("lost GPU: the config extracts no per-pod DCGM_FI_DEV_GPU_UTIL")
    shared = targets(config, "podgpu_pod_gpu_utilization_ratio", constant=constant)
    idle = (shared[0], idle_percent / 100.0) if shared else (
        (util[0], idle_percent) if util else None)
    if idle is not None:
        t, threshold = idle
        out.append(_alarm(
            f"{pre}-gpu-allocated-idle", f"A pod has held a GPU for {IDLE_MINUTES} minutes and "
            f"used at most {idle_percent:g} % of it ({t.metric}, per-minute maximum).",
            query(t, "MAX", cluster, per_pod(t, const), const), threshold=threshold,
            op="LessThanOrEqualToThreshold", periods=IDLE_MINUTES, missing="notBreaching",
            actions=actions, period=60))
    else:
        skipped.append("idle GPU: the config extracts no per-pod utilization")
    return out, skipped
