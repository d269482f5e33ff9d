"""podgpu's EMF against the restated agent path (agent_oracle.py), on a simulated node.

The oracle scrapes podgpu's own `/metrics` text (rendered by the Prometheus sink, not by the EMF
code) as the agent's `kubernetes-service-endpoints` job would, through the relabel rules, and
extracts with the agent's declaration rules; podgpu's EMF encoder sees the same snapshots.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from podgpu.sinks.cloudwatch.declarations import fill_placeholders, parse_emf_config
from podgpu.sinks.cloudwatch.encode import Encoder
from podgpu.sinks.cloudwatch.series import SeriesOptions
from podgpu.sinks.cloudwatch.window import WindowAccumulator
from podgpu.sinks.prometheus import RenderOptions, render
from tests.unit.sinks.cloudwatch import agent_oracle as oracle
from tests.unit.sinks.cloudwatch.simnode import LABELS, SimNode

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures" / "seed"
SEED = (FIXTURES / "cwagent-config.json").read_text()
SEED_POD_JOB = (FIXTURES / "cwagent-prometheus-job.yaml").read_text()

META = {  # podgpu's pod behind the GPU Operator's Service, as Kubernetes SD (endpoints) sees it
    "__address__": "10.0.0.5:9400",
    "__meta_kubernetes_namespace": "gpu-operator",
    "__meta_kubernetes_service_name": "nvidia-dcgm-exporter",
    "__meta_kubernetes_service_label_app": "nvidia-dcgm-exporter",
    "__meta_kubernetes_service_annotation_prometheus_io_scrape": "true",
    "__meta_kubernetes_pod_name": "podgpu-x7k2p",
    "__meta_kubernetes_pod_container_name": "podgpu",
    "__meta_kubernetes_pod_node_name": "node-a",
    "__meta_kubernetes_pod_controller_kind": "DaemonSet",
    "__meta_kubernetes_pod_controller_name": "podgpu",
    "__meta_kubernetes_pod_phase": "Running",
    "__meta_kubernetes_pod_label_app": "podgpu",
}
PODGPU = SeriesOptions(labels=LABELS, instance="10.0.0.5:9400", cluster_name="prod",
                       node_name="node-a", namespace="gpu-operator", pod_name="podgpu-x7k2p",
                       container_name="podgpu",
                       extra=(("app", "nvidia-dcgm-exporter"), ("Service", "nvidia-dcgm-exporter")))
"""The same pod as podgpu's settings: POD_NAMESPACE, POD_NAME, the Service via --emf-label."""

SECONDS = 60


def run_both(config_text: str, seconds: int = SECONDS, keep_unmatched: bool = False
             ) -> tuple[list[dict[str, Any]], list[oracle.Scraped]]:
    """One minute of a 4-GPU simulated node: podgpu's EMF documents and the oracle's scrapes."""
    node = SimNode(4, start=1_800_000_000.0 - 1_800_000_000.0 % 60)
    encoder = Encoder(parse_emf_config(config_text), keep_unmatched=keep_unmatched)
    builder = node.builder(PODGPU)
    acc = WindowAccumulator(60.0, encoder.wanted)
    job = oracle.load_job(oracle.SERVICE_ENDPOINTS_JOB)
    target = oracle.target_labels(job, META)
    assert target is not None
    scrapes = []
    for snap in node.snapshots(seconds):
        acc.add(snap.taken_at, builder.series(snap))
        text = render(snap, node.metrics, RenderOptions(LABELS)).decode()
        scrapes.append(oracle.scrape(text, job, target, "prod"))
    closed = acc.close()  # None: nothing was wanted
    docs = [json.loads(x) for x in encoder.encode(closed)] if closed is not None else []
    return docs, scrapes


def podgpu_metrics(docs: list[dict[str, Any]]
                   ) -> dict[oracle.Identity, tuple[str | None, list[float]]]:
    """The CloudWatch metrics podgpu's documents make: identity -> (unit, every sample)."""
    out: dict[oracle.Identity, tuple[str | None, list[float]]] = {}
    for doc in docs:
        for d in doc.get("_aws", {}).get("CloudWatchMetrics", []):
            for m in d["Metrics"]:
                v = doc[m["Name"]]
                values = ([x for x, c in zip(v["Values"], v["Counts"], strict=True)
                           for _ in range(c)] if isinstance(v, dict) else [v])
                for ds in d["Dimensions"]:
                    assert all(isinstance(doc[k], str) for k in ds)
                    ident = (d["Namespace"], m["Name"], tuple((k, doc[k]) for k in ds))
                    unit, prev = out.get(ident, (m.get("Unit"), []))
                    assert unit == m.get("Unit")
                    out[ident] = (unit, sorted(prev + values))
    return out


def oracle_metrics(config_text: str, scrapes: list[oracle.Scraped]
                   ) -> dict[oracle.Identity, tuple[str | None, list[float]]]:
    got = oracle.extract(oracle.agent_config(config_text), oracle.deltas(scrapes))
    return {k: (u, sorted(v)) for k, (u, v) in got.items()}


def test_seed_config_gives_the_agents_metrics_namespace_from_the_exporter_pod() -> None:
    docs, scrapes = run_both(SEED)
    mine, theirs = podgpu_metrics(docs), oracle_metrics(SEED, scrapes)
    assert theirs and mine == theirs
    for _ns, _name, dims in mine:
        d = dict(dims)
        assert d["Namespace"] == "gpu-operator" and d["job"] == "kubernetes-service-endpoints"
        assert d["pod"].startswith("train-") or d["pod"]  # the workload's pod, not podgpu's
        assert d["pod"] != "podgpu-x7k2p"
    assert all(unit is None for unit, _ in mine.values())


def test_every_series_has_the_agents_labels() -> None:
    """Not only the extracted dimensions: every label of every event equals the agent's."""
    everything = json.dumps({"metric_declaration": [
        {"source_labels": ["job"], "metric_selectors": [".*"], "dimensions": [["job"]]}]})
    docs, scrapes = run_both(everything, seconds=3)
    mine: dict[str, set[frozenset[tuple[str, str]]]] = {}
    for doc in docs:
        labels = frozenset((k, v) for k, v in doc.items() if isinstance(v, str))
        for k, v in doc.items():
            if k != "_aws" and not isinstance(v, str):
                mine.setdefault(k, set()).add(labels)
    theirs: dict[str, set[frozenset[tuple[str, str]]]] = {}
    for name, series_labels, _ in oracle.deltas(scrapes):
        if name in mine or name.startswith(("DCGM_", "podgpu_pod_", "podgpu_gpu_allocation")):
            theirs.setdefault(name, set()).add(frozenset(series_labels.items()))
    assert set(mine) == set(theirs)
    for name in mine:
        assert mine[name] == theirs[name], name


def test_seed_pod_job_keeps_nothing_and_would_keep_the_workload_pod() -> None:
    """The post's own job: its keep regex is anchored (`^DCGM.*$` as `^(?s:^DCGM.*$)$`), so a
    container named nvidia-dcgm-exporter is dropped; and `__meta_kubernetes_pod` is no meta
    label, so its `pod` rule yields "" and deletes nothing: the workload's `pod` survives."""
    job = oracle.load_job(SEED_POD_JOB)
    gpu_operator = dict(META, __meta_kubernetes_pod_container_name="nvidia-dcgm-exporter")
    assert oracle.target_labels(job, gpu_operator) is None
    renamed = dict(META, __meta_kubernetes_pod_container_name="DCGM-exporter")
    target = oracle.target_labels(job, renamed)
    assert target is not None and "pod" not in target
    assert (target["Namespace"], target["NodeName"]) == ("gpu-operator", "node-a")
    assert "Service" not in target  # so the seed's declaration (Service =~ .*dcgm.*) never matches
    merged = oracle.merge({"pod": "train-0", "namespace": "ml"}, target)
    assert merged["pod"] == "train-0" and "exported_pod" not in merged


def test_honor_labels_false_moves_a_clashing_series_label() -> None:
    merged = oracle.merge({"job": "x", "exported_job": "y", "pod": "p"}, {"job": "j"})
    assert merged == {"job": "j", "exported_job": "y", "exported_exported_job": "x", "pod": "p"}
    from podgpu.sinks.cloudwatch.series import AgentTarget, merge_target

    key = dict(merge_target({"job": "x", "exported_job": "y", "pod": "p"},
                            AgentTarget(job="j"), "gauge"))
    assert {k: v for k, v in key.items() if k != "prom_metric_type"} == merged


def decl(**kw: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"source_labels": ["Service"], "label_matcher": ".*dcgm.*",
                            "metric_selectors": ["^DCGM_FI_DEV_GPU_UTIL$"],
                            "dimensions": [["ClusterName", "Namespace", "Service", "job", "pod"]]}
    base.update(kw)
    return {k: v for k, v in base.items() if v is not None}


def cfg(*decls: dict[str, Any], **emf: Any) -> str:
    return json.dumps({"logs": {"metrics_collected": {"prometheus": {
        "cluster_name": "prod", "emf_processor": {"metric_declaration": list(decls), **emf}}}}})


ELEVEN = ["ClusterName", "Namespace", "Service", "job", "pod", "gpu", "UUID", "device",
          "modelName", "Hostname", "instance"]
VARIANTS: dict[str, str] = {
    "seed": SEED,
    "selector unanchored": cfg(decl(metric_selectors=["DCGM_FI_DEV_GPU_UTIL"])),
    "selector substring": cfg(decl(metric_selectors=["UTIL"])),
    "selector prefix": cfg(decl(metric_selectors=["^DCGM_FI_PROF"])),
    "selector end anchor": cfg(decl(metric_selectors=["_CLOCK$"])),
    "selector POSIX class": cfg(decl(metric_selectors=["^DCGM_FI_DEV_[[:upper:]]+_UTIL$"])),
    "selector \\z": cfg(decl(metric_selectors=["GPU_TEMP\\z"])),
    "selector \\Q..\\E": cfg(decl(metric_selectors=["^\\QDCGM_FI_DEV_FB_USED\\E$"])),
    "selector (?i)": cfg(decl(metric_selectors=["(?i)^dcgm_fi_dev_power_usage$"])),
    "selector \\pL": cfg(decl(metric_selectors=["^\\pL+_FI_DEV_SM_CLOCK$"])),
    "selector (?U)": cfg(decl(metric_selectors=["(?U)^DCGM_.+_UTIL$"])),
    "selector alternation": cfg(decl(metric_selectors=["^DCGM_FI_DEV_(GPU|MEM_COPY)_UTIL$"])),
    "matcher anchored": cfg(decl(label_matcher="^nvidia-dcgm-exporter$")),
    "matcher POSIX": cfg(decl(label_matcher="^[[:alpha:]-]+$")),
    "matcher empty string": cfg(decl(label_matcher="")),
    "matcher absent": cfg(decl(label_matcher=None, source_labels=["nothere"])),
    "matcher invalid": cfg(decl(label_matcher="["), decl(metric_selectors=["^DCGM_FI_DEV_FB_"])),
    "matcher two labels": cfg(decl(source_labels=["Service", "Namespace"],
                                   label_matcher="dcgm.*;gpu-operator")),
    "matcher ^ after separator": cfg(decl(source_labels=["Service", "Namespace"],
                                          label_matcher="nvidia-dcgm-exporter;^gpu-operator")),
    "matcher missing label as empty": cfg(decl(source_labels=["Service", "nothere"],
                                               label_matcher="exporter;$")),
    "separator ignored": cfg(decl(source_labels=["Service", "Namespace"], label_separator="|",
                                  label_matcher="exporter;gpu-operator")),
    "matcher on prom_metric_type": cfg(decl(source_labels=["prom_metric_type"],
                                            label_matcher="^counter$", metric_selectors=[".*"],
                                            dimensions=[["ClusterName", "UUID"]])),
    "matcher on job": cfg(decl(source_labels=["job"], label_matcher="^kubernetes-service-endpoints$")),
    "eleven dimensions": cfg(decl(dimensions=[ELEVEN, ["ClusterName", "pod"]])),
    "ten dimensions": cfg(decl(dimensions=[ELEVEN[:10]])),
    "duplicate names in a set": cfg(decl(dimensions=[["pod", "pod", "Namespace"]])),
    "set naming a missing label": cfg(decl(dimensions=[["nothere", "pod"], ["UUID"]])),
    "empty set": cfg(decl(dimensions=[[]])),
    "no dimensions": cfg(decl(dimensions=None)),
    "empty dimension name": cfg(decl(dimensions=[["", "pod"], ["gpu"]])),
    "two declarations union": cfg(decl(dimensions=[["pod"]]),
                                  decl(metric_selectors=["UTIL$"], dimensions=[["pod"], ["gpu"]])),
    "unit valid": cfg(decl(), metric_unit={"DCGM_FI_DEV_GPU_UTIL": "Percent"}),
    "unit invalid": cfg(decl(), metric_unit={"DCGM_FI_DEV_GPU_UTIL": "Percentage"}),
    "namespace empty": cfg(decl(), metric_namespace=""),
    "namespace custom": cfg(decl(), metric_namespace="GPU/Pods"),
    "source_labels empty": cfg(decl(source_labels=[]), decl(metric_selectors=["TEMP"])),
    "selectors empty": cfg(decl(metric_selectors=[]), decl(metric_selectors=["TEMP"])),
    "no selectors key": cfg(decl(metric_selectors=None), decl(metric_selectors=["POWER"])),
    "per-pod series": cfg(decl(metric_selectors=["^podgpu_pod_", "^podgpu_gpu_allocation$"],
                               dimensions=[["Namespace", "namespace", "pod"]])),
    "counters": cfg(decl(metric_selectors=["ENERGY", "REPLAY"], dimensions=[["UUID"]])),
}


@pytest.mark.parametrize("name", list(VARIANTS))
def test_declaration_variant_matches_the_oracle(name: str) -> None:
    text = VARIANTS[name]
    docs, scrapes = run_both(text, seconds=20)
    assert podgpu_metrics(docs) == oracle_metrics(text, scrapes)


def test_there_are_at_least_32_variants_and_most_extract_something() -> None:
    assert len(VARIANTS) >= 32
    empty = [n for n, t in VARIANTS.items()
             if not oracle_metrics(t, run_both(t, seconds=2)[1])]
    # these extract nothing by the agent's rules, and podgpu agrees (tested above)
    assert set(empty) <= {"matcher empty string", "matcher ^ after separator", "no dimensions",
                          "selectors empty"}, empty


@pytest.mark.parametrize("template", [
    "/aws/containerinsights/{ClusterName}/prometheus", "/gpu/{JobName}", "{PodName}",
    "/x/{NodeName}/{ServiceName}", "/{TaskId}/{Unknown}", "plain",
])
def test_placeholders_filled_as_awsemf_fills_them(template: str) -> None:
    labels = {"ClusterName": "prod", "job": "kubernetes-service-endpoints", "pod": "train-0",
              "kubernetes_node": "node-a"}
    assert fill_placeholders(template, labels) == oracle.fill(template, labels)
    assert oracle.fill("{NodeName}", labels) == "undefined"  # no NodeName on this job's series
    assert oracle.fill("{JobName}", labels) == "kubernetes-service-endpoints"


def test_counts_of_values_agree_for_gauges_and_counters() -> None:
    """Per metric, the samples podgpu puts in its value distributions are the agent's samples."""
    text = VARIANTS["counters"]
    docs, scrapes = run_both(text, seconds=30)
    mine, theirs = podgpu_metrics(docs), oracle_metrics(text, scrapes)
    assert mine and all(Counter(mine[k][1]) == Counter(theirs[k][1]) for k in theirs)


def test_bridge_labels_equal_the_oracles_on_the_seed_a10g_exposition() -> None:
    """`podgpu emf` scraping dcgm-exporter (the seed's A10G sample) labels every series as the
    agent's service-endpoints job would, given the same target labels."""
    from podgpu.bridge.parse import parse_exposition
    from podgpu.bridge.series import TargetLabels, to_series

    text = (FIXTURES / "dcgm-exporter-metrics-a10g.txt").read_text()
    text += "# TYPE foo counter\nfoo_total{gpu=\"0\"} 3\n# TYPE h histogram\nh_bucket{le=\"1\"} 1\n"
    meta = dict(META, __meta_kubernetes_pod_name="nvidia-dcgm-exporter-48cwd",
                __meta_kubernetes_pod_container_name="nvidia-dcgm-exporter")
    job = oracle.load_job(oracle.SERVICE_ENDPOINTS_JOB)
    target = oracle.target_labels(job, meta)
    assert target is not None
    theirs = {(name, frozenset(labels.items()))
              for name, _, labels, _ in oracle.scrape(text, job, target, "prod").samples}
    extra = tuple((k, v) for k, v in target.items()
                  if k not in ("job", "instance", "kubernetes_node"))
    tl = TargetLabels(job=target["job"], instance=target["instance"], extra=extra,
                      cluster_name="prod", node_name=target["kubernetes_node"])
    mine = {(name, frozenset(key)) for key, _, items in to_series(parse_exposition(text), tl)
            for name, _ in items if not name.startswith("h_")}  # histograms: podgpu keeps them
    assert mine == theirs
    assert ("foo_total" in {n for n, _ in mine}) and all(
        dict(lbls)["pod"] == "gpu-burn-c68d8c774-ltg9s" for n, lbls in mine if n.startswith("DCGM_F"))


def test_plan_agent_column_on_the_seed_a10g_exposition_is_the_oracles() -> None:
    """`podgpu plan`'s agent path fed two scrapes of the seed's A10G
    exposition: the custom metrics the oracle's agent makes (the workload `pod` kept), and one
    event per label set per scrape, undeclared series included (billed as logs)."""
    from podgpu.bridge.parse import parse_exposition
    from podgpu.bridge.series import TargetLabels, to_series
    from podgpu.plan.model import PlanOptions, agent_options, agent_scrapes

    text = (FIXTURES / "dcgm-exporter-metrics-a10g.txt").read_text()
    opts = agent_options("ip-192-168-1-10", PlanOptions(cluster_name="prod"))
    target = opts.target()
    tl = TargetLabels(job=target.job, instance=target.instance, node_name=target.node_name,
                      cluster_name="prod", extra=tuple(
                          (k, v) for k, v in target.target_labels().items()
                          if k not in ("job", "instance", "kubernetes_node")))
    run = agent_scrapes(parse_emf_config(SEED), [to_series(parse_exposition(text), tl)] * 3,
                        60.0, measured=1)
    meta = dict(META, __meta_kubernetes_pod_name=target.pod_name,
                __meta_kubernetes_pod_container_name="nvidia-dcgm-exporter",
                __meta_kubernetes_pod_node_name="ip-192-168-1-10",
                __address__=target.instance)
    job = oracle.load_job(oracle.SERVICE_ENDPOINTS_JOB)
    otarget = oracle.target_labels(job, meta)
    assert otarget is not None
    scrapes = [oracle.scrape(text, job, otarget, "prod") for _ in range(3)]
    theirs = oracle.extract(oracle.agent_config(SEED), oracle.deltas(scrapes))
    assert run.identities == set(theirs) and len(run.identities) == 14
    assert {dict(d)["pod"] for _, _, d in run.identities} == {"gpu-burn-c68d8c774-ltg9s"}
    label_sets = {frozenset(lbls.items()) for _, _, lbls, _ in scrapes[2].samples}
    assert len(run.events) == len(label_sets)  # gauges and counters: one event each
    plain = [e for e in run.events if "_aws" not in json.loads(e)]
    assert plain  # the undeclared (counter) series: still sent, billed as logs
