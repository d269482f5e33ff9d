"""EMF documents: directives, units, value distributions, splitting, unmatched series."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from podgpu.sinks.cloudwatch.declarations import load_emf_config, parse_emf_config
from podgpu.sinks.cloudwatch.encode import MAX_VALUES, Encoder, distribution
from podgpu.sinks.cloudwatch.series import GAUGE
from podgpu.sinks.cloudwatch.window import ClosedWindow, WindowAccumulator
from tests.unit.sinks.cloudwatch.simnode import SimNode

SEED = Path(__file__).resolve().parents[3] / "fixtures" / "seed" / "cwagent-config.json"
EXAMPLE = Path(__file__).resolve().parents[4] / "deploy" / "cloudwatch" / "podgpu-declarations.json"


def one_minute(node: SimNode, encoder: Encoder) -> list[dict[str, Any]]:
    builder = node.builder()
    acc = WindowAccumulator(60.0, encoder.wanted)
    node.clock.now -= node.clock.now % 60
    for snap in node.snapshots(60):
        acc.add(snap.taken_at, builder.series(snap))
    closed = acc.close()
    assert closed is not None
    return [json.loads(line) for line in encoder.encode(closed)]


def test_seed_config_yields_per_pod_gpu_util_with_the_seed_dimensions() -> None:
    node = SimNode(4)
    docs = one_minute(node, Encoder(load_emf_config(str(SEED))))
    # only the exclusive GPU's series have a `pod` (its XID, with err_code/err_msg labels, is a
    # label set of its own, as on /metrics): the rest match no set
    assert len(docs) == 2 and len({d["pod"] for d in docs}) == 1
    doc = next(d for d in docs if "DCGM_FI_DEV_GPU_UTIL" in d)
    aws = doc["_aws"]
    assert isinstance(aws, dict) and aws["Timestamp"] % 60_000 == 0
    (directive,) = aws["CloudWatchMetrics"]
    assert directive["Namespace"] == "ContainerInsights/Prometheus"
    assert directive["Dimensions"] == [["ClusterName", "Namespace", "Service", "job", "pod"]]
    names = [m["Name"] for m in directive["Metrics"]]
    assert "DCGM_FI_DEV_GPU_UTIL" in names and "DCGM_FI_DEV_GPU_TEMP" not in names
    assert "DCGM_FI_DEV_GPU_TEMP" not in doc  # unmatched series are not sent at all
    util = doc["DCGM_FI_DEV_GPU_UTIL"]
    assert isinstance(util, dict)
    assert (util["Max"], util["Min"], util["Count"]) == (100, 0, 60)  # the 20 s on / 20 s off burn
    assert sum(util["Counts"]) == 60 and sorted(util["Values"]) == [0, 100]
    assert all("Unit" not in m for m in directive["Metrics"])  # the agent sends no unit
    assert doc["Namespace"] == "gpu-operator"  # the exporter pod's namespace, as the agent's
    for dim in directive["Dimensions"][0]:
        assert isinstance(doc[dim], str)


def test_example_declarations_give_every_pod_a_per_pod_series() -> None:
    node = SimNode(4)
    snap_pods = {a.container.pod for a in next(node.snapshots(1)).allocations}
    docs = one_minute(node, Encoder(load_emf_config(str(EXAMPLE))))
    per_pod = {d["pod"] for d in docs if "podgpu_pod_gpu_utilization_ratio" in d}
    assert per_pod == snap_pods and len(per_pod) >= 3


def test_keep_unmatched_sends_plain_events_without_a_directive() -> None:
    node = SimNode(2)
    docs = one_minute(node, Encoder(load_emf_config(str(SEED)), keep_unmatched=True))
    plain = [d for d in docs if "_aws" not in d]
    assert plain and all("Timestamp" in d for d in plain)
    with_pod = next(d for d in docs if "DCGM_FI_DEV_GPU_UTIL" in d)
    assert "DCGM_FI_DEV_GPU_TEMP" in with_pod  # rides along, not in the directive
    names = {m["Name"] for dd in with_pod["_aws"]["CloudWatchMetrics"] for m in dd["Metrics"]}
    assert "DCGM_FI_DEV_GPU_TEMP" not in names


def test_storage_resolution_and_config_units() -> None:
    cfg = parse_emf_config(json.dumps({"metric_unit": {"m": "Count"}, "metric_declaration": [
        {"source_labels": ["job"], "metric_selectors": ["^m$"], "dimensions": [["job"]]}]}))
    enc = Encoder(cfg, storage_resolution=1)
    doc = json.loads(enc.encode(ClosedWindow(60.0, {(("job", "j"),): {"m": [1.0, 2.0]}}))[0])
    assert doc["_aws"]["CloudWatchMetrics"][0]["Metrics"] == [
        {"Name": "m", "Unit": "Count", "StorageResolution": 1}]
    assert doc["_aws"]["Timestamp"] == 60_000


def test_more_than_100_metrics_are_split_into_events_of_at_most_100() -> None:
    cfg = parse_emf_config(json.dumps({"metric_declaration": [
        {"source_labels": ["job"], "metric_selectors": ["^m"], "dimensions": [["job"]]}]}))
    metrics = {f"m{i:03d}": [float(i)] for i in range(250)}
    lines = Encoder(cfg).encode(ClosedWindow(0.0, {(("job", "j"),): metrics}))
    docs = [json.loads(x) for x in lines]
    counts = [sum(len(d["Metrics"]) for d in doc["_aws"]["CloudWatchMetrics"]) for doc in docs]
    assert counts == [100, 100, 50]
    seen = [m["Name"] for doc in docs for d in doc["_aws"]["CloudWatchMetrics"] for m in d["Metrics"]]
    assert sorted(seen) == sorted(metrics)
    assert all(doc["job"] == "j" for doc in docs)


def test_disable_metric_extraction_writes_values_without_directives() -> None:
    cfg = parse_emf_config(json.dumps({"disable_metric_extraction": True, "emf_processor": {
        "metric_declaration": [{"source_labels": ["job"], "metric_selectors": ["^m$"],
                                "dimensions": [["job"]]}]}}))
    doc = json.loads(Encoder(cfg).encode(ClosedWindow(0.0, {(("job", "j"),): {"m": [3.0]}}))[0])
    assert "_aws" not in doc and doc["m"] == 3


def test_route_for_the_agent_listener() -> None:
    cfg = parse_emf_config(json.dumps({"metric_declaration": [
        {"source_labels": ["job"], "metric_selectors": ["^m$"], "dimensions": [[]]}]}))
    doc = json.loads(Encoder(cfg, route=("/g", "s")).encode(
        ClosedWindow(0.0, {(("job", "j"),): {"m": [1.0]}}))[0])
    assert (doc["_aws"]["LogGroupName"], doc["_aws"]["LogStreamName"]) == ("/g", "s")
    assert doc["_aws"]["CloudWatchMetrics"][0]["Dimensions"] == [[]]


def test_distribution_is_exact_in_max_min_count_sum() -> None:
    assert distribution([5.0]) == 5
    d = distribution([1.5, 1.5, 2.0])
    assert isinstance(d, dict)
    assert d == {"Values": [1.5, 2], "Counts": [2, 1], "Max": 2.0, "Min": 1.5, "Count": 3,
                 "Sum": 5.0}


def test_distribution_coalesces_beyond_100_distinct_values() -> None:
    raw = [float(i) for i in range(300)] + [0.0] * 5
    d = distribution(raw)
    assert isinstance(d, dict)
    values, counts = d["Values"], d["Counts"]
    assert isinstance(values, list) and isinstance(counts, list)
    assert len(values) == len(counts) == MAX_VALUES
    assert sum(counts) == len(raw) == d["Count"]
    assert (d["Max"], d["Min"], d["Sum"]) == (299.0, 0.0, sum(raw))
    weighted = sum(v * c for v, c in zip(values, counts, strict=True))
    assert abs(weighted - sum(raw)) < 1e-6 * sum(raw)  # merging keeps the mass


def test_wanted_is_false_for_series_no_declaration_extracts() -> None:
    enc = Encoder(load_emf_config(str(SEED)))
    key = tuple(sorted((("Service", "nvidia-dcgm-exporter"), ("pod", "p"), ("ClusterName", "c"),
                        ("Namespace", "n"), ("job", "j"), ("prom_metric_type", GAUGE))))
    assert enc.wanted(key, "DCGM_FI_DEV_GPU_UTIL")
    assert not enc.wanted(key, "DCGM_FI_DEV_GPU_TEMP")
    no_pod = tuple(kv for kv in key if kv[0] != "pod")
    assert not enc.wanted(no_pod, "DCGM_FI_DEV_GPU_UTIL")


def test_documents_without_labels_are_still_json() -> None:
    cfg = parse_emf_config(json.dumps({"metric_declaration": [
        {"source_labels": ["job"], "metric_selectors": ["^m$"], "dimensions": [[]]}]}))
    for keep in (False, True):
        lines = Encoder(cfg, keep_unmatched=keep).encode(
            ClosedWindow(0.0, {(): {"m": [1.0, 2.0], "other": [3]}}))
        docs = [json.loads(line) for line in lines]
        assert docs[0]["m"]["Sum"] == 3.0
        assert ("other" in docs[0]) is keep


def test_every_event_fits_256_kib_split_by_metrics_never_cut() -> None:
    """Thousands of unmatched, changing series in one label set: split into
    events under the cap, each whole JSON, every value once."""
    from podgpu.sinks.cloudwatch.encode import MAX_EVENT_BYTES

    cfg = parse_emf_config(json.dumps({"metric_declaration": [
        {"source_labels": ["job"], "metric_selectors": ["^gpu_util$"], "dimensions": [["job"]]}]}))
    metrics = {f"unlabelled_gauge_{i:04d}": [float(i + k / 7) for k in range(60)]
               for i in range(3000)}
    metrics["gpu_util"] = [1.0, 2.0]
    enc = Encoder(cfg, keep_unmatched=True)
    lines = enc.encode(ClosedWindow(0.0, {(("job", "burst"),): metrics}))
    assert len(lines) > 1 and enc.too_large == 0
    assert all(len(line.encode()) <= MAX_EVENT_BYTES for line in lines)
    assert MAX_EVENT_BYTES + 26 == 256 * 1024
    seen: list[str] = []
    for line in lines:
        doc = json.loads(line)  # whole JSON: never truncated
        assert doc["job"] == "burst"
        seen += [k for k in doc if k not in ("_aws", "Timestamp", "job")]
        for name in (k for k in doc if k.startswith("unlabelled")):
            assert doc[name]["Count"] == 60
    assert sorted(seen) == sorted(metrics)  # every metric exactly once
    extracted = [json.loads(x) for x in lines if "_aws" in json.loads(x)]
    assert len(extracted) == 1 and extracted[0]["gpu_util"]["Sum"] == 3.0


def test_an_event_that_cannot_fit_is_dropped_counted_and_logged(caplog: Any) -> None:
    cfg = parse_emf_config(json.dumps({"metric_declaration": [
        {"source_labels": ["job"], "metric_selectors": ["^m"], "dimensions": [["job"]]}]}))
    enc = Encoder(cfg)
    huge = (("job", "j"), ("blob", "x" * 300_000))
    with caplog.at_level("WARNING"):
        lines = enc.encode(ClosedWindow(0.0, {huge: {"m1": [1.0]}, (("job", "j"),): {"m2": [2.0]}}))
    assert [json.loads(x)["m2"] for x in lines] == [2]  # the rest is still sent
    assert enc.too_large == 1
    assert any("dropped" in r.getMessage() for r in caplog.records)


def test_hostile_label_names_never_duplicate_a_key() -> None:
    """Labels named `_aws`, `Timestamp` or like a metric: one key each, as the agent's map
    resolves them (labels, then metric values, then the reserved keys)."""
    cfg = parse_emf_config(json.dumps({"metric_declaration": [
        {"source_labels": ["job"], "metric_selectors": ["^m$", "^n$"],
         "dimensions": [["job"], ["job", "m"], ["_aws"]]}]}))
    key = tuple(sorted({"job": "j", "_aws": "label", "m": "label-m", "Timestamp": "t",
                        "Version": "v"}.items()))
    for keep in (False, True):
        lines = Encoder(cfg, keep_unmatched=keep).encode(
            ClosedWindow(0.0, {key: {"m": [1.0], "n": [2.0], "x": [3.0]}}))
        for line in lines:
            pairs = json.loads(line, object_pairs_hook=lambda p: p)
            names = [k for k, _ in pairs]
            assert len(names) == len(set(names)), names  # no key twice
            doc = dict(pairs)
            assert doc["m"] == 1 and doc["Version"] == "v"  # the value wins over the label
            if "_aws" in doc:
                aws = dict(doc["_aws"])
                dims = [d for dd in aws["CloudWatchMetrics"] for d in dict(dd)["Dimensions"]]
                assert dims == [["job"]]  # sets naming `m` or `_aws` would name no string
            else:
                assert doc["Timestamp"] == 0  # the reserved key wins over the label
