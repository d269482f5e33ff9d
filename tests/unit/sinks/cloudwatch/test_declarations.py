"""The agent's declaration semantics (awsemf's metric_declaration.go, the agent's translator),
one rule per test."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from podgpu.errors import ConfigError
from podgpu.sinks.cloudwatch.declarations import EmfConfig, load_emf_config, parse_emf_config
from podgpu.sinks.cloudwatch.encode import Encoder

SEED = Path(__file__).resolve().parents[3] / "fixtures" / "seed" / "cwagent-config.json"


def cfg(*decls: dict[str, object], **emf: object) -> str:
    return json.dumps({"metric_declaration": list(decls), **emf})


def dimension_sets(config: EmfConfig, labels: dict[str, str], metric: str
                   ) -> tuple[tuple[str, ...], ...]:
    """The dimension sets the encoder extracts `metric` of this label set with (none: not
    extracted)."""
    return Encoder(config).plan(tuple(sorted(labels.items())), metric)[1]


def test_seed_config_read_unchanged() -> None:
    c = load_emf_config(str(SEED))
    assert c.namespace == "ContainerInsights/Prometheus"
    assert len(c.declarations) == 1
    d = c.declarations[0]
    # dimension sets are sorted alphabetically, as the agent emits them
    assert d.dimensions == (("ClusterName", "Namespace", "Service", "job", "pod"),)
    assert d.selects("DCGM_FI_DEV_GPU_UTIL") and not d.selects("DCGM_FI_DEV_GPU_TEMP")
    assert d.matches_labels({"Service": "nvidia-dcgm-exporter"})
    assert not d.matches_labels({"Service": "node-exporter"})
    assert not d.matches_labels({})  # a missing label joins as "", which .*dcgm.* cannot match


def test_three_input_shapes_are_equivalent() -> None:
    emf = {"metric_declaration": [{"source_labels": ["job"], "metric_selectors": ["x"],
                                   "dimensions": [["job"]]}]}
    whole = {"agent": {"region": "us-east-1"},
             "logs": {"metrics_collected": {"prometheus": {"cluster_name": "c",
                                                           "emf_processor": emf}}}}
    a = parse_emf_config(json.dumps(whole))
    b = parse_emf_config(json.dumps({"cluster_name": "c", "emf_processor": emf}))
    c = parse_emf_config(json.dumps(emf))
    assert a.declarations == b.declarations == c.declarations
    assert a.cluster_name == b.cluster_name == "c" and c.cluster_name == ""


def test_source_labels_joined_with_separator_missing_as_empty() -> None:
    c = parse_emf_config(cfg({"source_labels": ["job", "key2"], "label_matcher": "^MY_JOB;$",
                              "metric_selectors": ["m"], "dimensions": [["job"]]}))
    d = c.declarations[0]
    assert d.matches_labels({"job": "MY_JOB"})  # "MY_JOB;" with key2 absent
    assert not d.matches_labels({"job": "MY_JOB", "key2": "v"})


def test_label_separator_is_ignored_like_the_agent_with_a_warning() -> None:
    """The agent's translator never passes label_separator on: ";" always."""
    c = parse_emf_config(cfg({"source_labels": ["a", "b"], "label_separator": "|",
                              "label_matcher": "^x;y$", "metric_selectors": ["m"],
                              "dimensions": [["a"]]}))
    assert c.declarations[0].matches_labels({"a": "x", "b": "y"})
    assert not c.declarations[0].matches_labels({"a": "x|y"})
    assert any("label_separator '|' is ignored" in w for w in c.warnings)


def test_regexes_are_unanchored() -> None:
    c = parse_emf_config(cfg({"source_labels": ["job"], "label_matcher": "dcgm",
                              "metric_selectors": ["http_requests"], "dimensions": [["job"]]}))
    d = c.declarations[0]
    assert d.selects("my_http_requests_total")
    assert d.matches_labels({"job": "nvidia-dcgm-exporter"})


def test_label_matcher_defaults_to_everything() -> None:
    c = parse_emf_config(cfg({"source_labels": ["nothere"], "metric_selectors": ["m"],
                              "dimensions": [["a"]]}))
    assert c.declarations[0].matches_labels({})


def test_union_and_dedup_of_dimension_sets_across_declarations() -> None:
    c = parse_emf_config(cfg(
        {"source_labels": ["job"], "metric_selectors": ["^m$"],
         "dimensions": [["job", "gpu"], ["job"], ["gpu", "job", "gpu"]]},
        {"source_labels": ["job"], "metric_selectors": ["^m$", "^n$"],
         "dimensions": [["job"], ["pod"], ["ClusterName"]]},
    ))
    labels = {"job": "j", "gpu": "0", "pod": "p"}
    # m is selected by both: union, de-duplicated, each set sorted; ClusterName set dropped
    assert dimension_sets(c, labels, "m") == (("gpu", "job"), ("job",), ("pod",))
    assert dimension_sets(c, labels, "n") == (("job",), ("pod",))
    assert dimension_sets(c, labels, "other") == ()


def test_set_naming_a_missing_label_is_dropped_not_the_declaration() -> None:
    c = parse_emf_config(cfg({"source_labels": ["job"], "metric_selectors": ["m"],
                              "dimensions": [["job", "pod"], ["job"]]}))
    assert dimension_sets(c, {"job": "j"}, "m") == (("job",),)
    only_pod = parse_emf_config(cfg({"source_labels": ["job"], "metric_selectors": ["m"],
                                     "dimensions": [["pod"]]}))
    assert dimension_sets(only_pod, {"job": "j"}, "m") == ()


def test_empty_dimension_set_means_no_dimensions() -> None:
    c = parse_emf_config(cfg({"source_labels": ["job"], "metric_selectors": ["m"],
                              "dimensions": [[]]}))
    assert dimension_sets(c, {"job": "j"}, "m") == ((),)


def test_declaration_without_selectors_is_skipped_with_a_warning() -> None:
    c = parse_emf_config(cfg({"source_labels": ["job"], "dimensions": [["job"]]},
                             {"source_labels": ["job"], "metric_selectors": ["m"],
                              "dimensions": [["job"]]}))
    assert [d.index for d in c.declarations] == [1]
    assert any("metric_declaration[0] has no metric_selectors" in w for w in c.warnings)


def test_sets_over_10_names_are_dropped_with_a_warning_counted_before_dedup() -> None:
    ten = [f"l{i}" for i in range(10)]
    c = parse_emf_config(cfg({"source_labels": ["job"], "metric_selectors": ["m"],
                              "dimensions": [ten, [*ten, "l0"], [f"l{i}" for i in range(11)]]}))
    assert c.declarations[0].dimensions == (tuple(sorted(ten)),)
    assert sum("the agent drops a dimension set of more than 10" in w for w in c.warnings) == 2


@pytest.mark.parametrize(("decl", "why"), [
    ({"source_labels": ["job"], "label_matcher": "", "metric_selectors": ["m"]},
     "label_matcher is empty"),
    ({"source_labels": ["job"], "label_matcher": "[", "metric_selectors": ["m"]}, "bad regex '['"),
    ({"source_labels": [], "metric_selectors": ["m"]}, "source_labels is empty"),
    ({"source_labels": ["job"], "metric_selectors": []}, "metric_selectors is empty"),
])
def test_declarations_the_agent_drops_are_dropped_with_a_warning(decl: dict[str, object],
                                                                  why: str) -> None:
    c = parse_emf_config(cfg(decl, {"source_labels": ["job"], "metric_selectors": ["n"]}))
    assert [d.index for d in c.declarations] == [1]
    assert any(why in w and "metric_declaration[0]" in w and "dropped" in w for w in c.warnings)


def test_what_the_agent_accepts_is_accepted() -> None:
    c = parse_emf_config(cfg({"source_labels": ["job"], "metric_selectors": ["m"],
                              "dimensions": [["", "job"]]},
                             metric_namespace="", metric_unit={"m": "Percentage", "n": "Count"}))
    assert c.namespace == "default"  # awsemf's namespace for an empty one
    assert c.units == {"n": "Count"}  # the unknown unit is dropped, as the agent drops it
    assert c.declarations[0].dimensions == (("", "job"),)  # accepted; never extracted
    assert dimension_sets(c, {"job": "j"}, "m") == ()
    assert any("'Percentage' is not a CloudWatch unit" in w for w in c.warnings)


def test_go_syntax_in_matchers_and_selectors() -> None:
    c = parse_emf_config(cfg({"source_labels": ["Service"], "label_matcher": "[[:alpha:]]+\\z",
                              "metric_selectors": ["^\\QDCGM_FI_DEV_GPU_UTIL\\E\\z"]}))
    d = c.declarations[0]
    assert d.matches_labels({"Service": "dcgm"}) and not d.matches_labels({"Service": "dcgm-"})
    assert d.selects("DCGM_FI_DEV_GPU_UTIL") and not d.selects("DCGM_FI_DEV_GPU_UTILX")


@pytest.mark.parametrize(("text", "expect"), [
    (cfg({"source_labels": ["job"], "metric_selectors": ["DCGM_(", "x"], "dimensions": []}),
     "metric_declaration[0].metric_selectors[0]: bad regex 'DCGM_('"),
    (cfg({"source_labels": ["job"], "metric_selectors": ["x"], "dimension": [["a"]]}),
     "metric_declaration[0]: unknown key 'dimension'"),
    (cfg({"source_labels": "job", "metric_selectors": ["x"]}),
     "metric_declaration[0].source_labels: expected a list, got a string"),
    (cfg({"source_labels": ["job"], "metric_selectors": [1]}),
     "metric_declaration[0].metric_selectors[0]: expected a string, got a number"),
    (cfg({"source_labels": ["job"], "metric_selectors": ["x"], "dimensions": ["job"]}),
     "metric_declaration[0].dimensions[0]: expected a list, got a string"),
    (json.dumps({"metric_declaration": {}}), "metric_declaration: expected a list, got an object"),
    (json.dumps({"logs": {"metrics_collected": {"prometheus": {"emf_processor": {},
                                                               "scrape_interval": 1}}}}),
     "logs.metrics_collected.prometheus: unknown key 'scrape_interval'"),
    (json.dumps({"logs": {"metrics_collected": {}}}), "has no logs.metrics_collected.prometheus"),
    (json.dumps({"cluster_name": "c"}), "has no emf_processor"),
    ("{\n  \"metric_declaration\": [,]\n}", "<config>:2:26: not valid JSON"),
    ("[1]", "expected a JSON object"),
    (cfg(metric_namespace="x" * 1025), "metric_namespace: longer than 1024 characters"),
])
def test_bad_configs_name_the_declaration_and_key(text: str, expect: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_emf_config(text)
    assert expect in str(err.value)


def test_unreadable_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_emf_config(str(tmp_path / "missing.json"))
    bad = tmp_path / "latin1.json"
    bad.write_bytes(b'{"metric_namespace": "\xe9"}')
    with pytest.raises(ConfigError, match="not UTF-8"):
        load_emf_config(str(bad))
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ConfigError, match=r"nested too deeply|expected a JSON object"):
        load_emf_config(str(deep))


def test_log_names_as_the_agent_fills_them() -> None:
    from podgpu.sinks.cloudwatch.declarations import (
        DEFAULT_LOG_GROUP,
        DEFAULT_LOG_STREAM,
        resolve_log_names,
    )

    labels = {"ClusterName": "prod", "job": "kubernetes-service-endpoints", "Namespace": "g"}
    group, stream, warnings = resolve_log_names(DEFAULT_LOG_GROUP, DEFAULT_LOG_STREAM, labels,
                                                per_event=False)
    assert (group, stream, warnings) == (
        "/aws/containerinsights/prod/prometheus", "kubernetes-service-endpoints", [])
    group, stream, warnings = resolve_log_names("/gpu/{NodeName}/{Other}", "{ServiceName}",
                                                labels, per_event=False)
    assert (group, stream) == ("/gpu/undefined/{Other}", "undefined")
    assert len(warnings) == 3 and any("braces" in w for w in warnings)
    assert resolve_log_names("/g", "{PodName}", labels, per_event=True)[1] == "{PodName}"
    with pytest.raises(ConfigError, match="names each series' pod"):
        resolve_log_names("/g", "{PodName}", labels, per_event=False)
