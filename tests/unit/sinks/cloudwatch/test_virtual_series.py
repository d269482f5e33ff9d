"""`--kubernetes-virtual-gpus` on the EMF sink: the series podgpu's SeriesBuilder makes are the
ones the CloudWatch agent would make scraping podgpu's own `/metrics`.

The expected side is the Prometheus sink's exposition text, read back by the restated agent
(agent_oracle.py's scrape: parse, merge the target labels, `prom_metric_type`, `ClusterName`), so
the per-process `GPU_UTIL`/`FB_USED` split is checked against what `/metrics` prints, not
against a copy of the EMF code.
"""

from __future__ import annotations

import dataclasses
from collections import Counter

import pytest

from podgpu.fields import load_default
from podgpu.model import Snapshot
from podgpu.sinks.cloudwatch.series import SeriesBuilder
from podgpu.sinks.prometheus import RenderOptions, render
from podgpu.sinks.prometheus.labels import LabelOptions
from tests.unit.sinks.cloudwatch import agent_oracle as oracle
from tests.unit.sinks.cloudwatch.simnode import OPTS
from tests.unit.sinks.golden import pods_snapshot

TARGET = {"job": "kubernetes-service-endpoints", "instance": "10.0.0.5:9400",
          "Namespace": "gpu-operator", "kubernetes_node": "node-a", "pod_name": "podgpu-x7k2p",
          "container_name": "podgpu", "Service": "nvidia-dcgm-exporter"}
"""simnode.OPTS's agent target, written out as the agent's service-endpoints job gives it."""

Row = tuple[str, frozenset[tuple[str, str]], float]


def emf_rows(snap: Snapshot, labels: LabelOptions) -> Counter[Row]:
    builder = SeriesBuilder(load_default(), dataclasses.replace(OPTS, labels=labels))
    return Counter((name, frozenset(key), float(value))
                   for key, _, items in builder.series(snap) for name, value in items)


def agent_rows(snap: Snapshot, labels: LabelOptions, names: set[str]) -> Counter[Row]:
    text = render(snap, load_default(), RenderOptions(labels)).decode()
    scraped = oracle.scrape(text, {}, TARGET, "prod")
    return Counter((name, frozenset(lbls.items()), value) for name, _, lbls, value
                   in scraped.samples
                   if name in names or name.startswith(("DCGM_", "podgpu_pod_",
                                                        "podgpu_gpu_allocation")))


VIRTUAL = LabelOptions(hostname="node-a", virtual_gpus=True)


@pytest.mark.parametrize("labels", [VIRTUAL, VIRTUAL._replace(pod_uid=True),
                                    VIRTUAL._replace(old_namespace=True)],
                         ids=["default", "pod-uid", "old-namespace"])
def test_virtual_gpus_emf_series_equal_the_agents_scrape_of_metrics(labels: LabelOptions
                                                                    ) -> None:
    snap = pods_snapshot()
    mine = emf_rows(snap, labels)
    theirs = agent_rows(snap, labels, {name for name, _, _ in mine})
    assert mine == theirs
    # the split is really there: the shared GPU 1's device series and infer-a's own sum
    util = {lbls: v for (name, lbls, v) in mine if name == "DCGM_FI_DEV_GPU_UTIL"}
    on_gpu1 = [(dict(k), v) for k, v in util.items() if dict(k)["gpu"] == "1"]
    assert sorted(v for _, v in on_gpu1 if "vgpu" not in _) == [100.0]
    pod = "exported_pod_name" if labels.old_namespace else "pod"  # pod_name: the target
    per_pod = {d[pod]: v for d, v in on_gpu1 if "vgpu" in d}
    assert per_pod == {"infer-a": 42.0, "infer-b": 40.0}  # 30 % + 12.5 % printed as %d


def test_default_mode_keeps_one_device_series_per_gpu() -> None:
    """Without the flag nothing is split: one GPU_UTIL per device, no per-pod copies."""
    labels = LabelOptions(hostname="node-a")
    snap = pods_snapshot()
    mine = emf_rows(snap, labels)
    assert mine == agent_rows(snap, labels, {name for name, _, _ in mine})
    gpus = [dict(lbls)["gpu"] for name, lbls, _ in mine if name == "DCGM_FI_DEV_GPU_UTIL"]
    assert sorted(gpus) == ["0", "1", "2"]


def test_hpc_jobs_reach_emf_as_they_reach_metrics() -> None:
    """--hpc-job-mapping-dir: the agent scraping /metrics sees hpc_job, so the EMF sink carries it."""
    labels = LabelOptions(hostname="node-a")
    snap = pods_snapshot()._replace(hpc_jobs=(("0", ("1001", "1002")),))
    mine = emf_rows(snap, labels)
    assert mine == agent_rows(snap, labels, {name for name, _, _ in mine})
    jobs = sorted(dict(lbls).get("hpc_job", "") for name, lbls, _ in mine
                  if name == "DCGM_FI_DEV_GPU_UTIL" and dict(lbls)["gpu"] == "0")
    assert jobs == ["1001", "1002"]
