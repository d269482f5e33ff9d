"""The test-side EMF validator rejects what the specification forbids (hand-written documents:
these tests are about the validator)."""

from __future__ import annotations

import json

import pytest

from tests.emf_validator import EmfError, extract, validate

GOOD = {"_aws": {"Timestamp": 1718000000123, "CloudWatchMetrics": [
    {"Namespace": "GPU", "Dimensions": [["ClusterName", "gpu"], []],
     "Metrics": [{"Name": "util", "Unit": "Percent"}, {"Name": "d"}]}]},
    "ClusterName": "prod", "gpu": "0", "util": 97,
    "d": {"Values": [1, 2], "Counts": [2, 1], "Max": 2, "Min": 1, "Count": 3, "Sum": 4}}


def test_good_document_extracts_one_metric_per_dimension_set() -> None:
    got = extract(json.dumps(GOOD))
    assert len(got) == 4
    util = [m for m in got if m.name == "util"]
    assert {m.dimensions for m in util} == {(("ClusterName", "prod"), ("gpu", "0")), ()}
    d = next(m for m in got if m.name == "d")
    assert d.values == (1.0, 1.0, 2.0) and d.unit == "None" and d.timestamp_ms == 1718000000123


def test_plain_json_is_a_log_event_without_metrics() -> None:
    assert extract('{"Timestamp": 1, "x": 2}') == []


def mutate(path: list[object], value: object) -> str:
    doc = json.loads(json.dumps(GOOD))
    node = doc
    for key in path[:-1]:
        node = node[key]
    if value is KeyError:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    return json.dumps(doc)


@pytest.mark.parametrize(("path", "value", "message"), [
    (["_aws", "Timestamp"], "1718000000123", "Timestamp"),
    (["_aws", "CloudWatchMetrics"], KeyError, "CloudWatchMetrics"),
    (["_aws", "CloudWatchMetrics", 0, "Namespace"], "", "Namespace"),
    (["_aws", "CloudWatchMetrics", 0, "Dimensions"], [], "Dimensions"),
    (["_aws", "CloudWatchMetrics", 0, "Dimensions", 0], [f"k{i}" for i in range(31)], "30 keys"),
    (["gpu"], 0, "root member holding a string"),
    (["_aws", "CloudWatchMetrics", 0, "Metrics", 0, "Unit"], "Percentage", "unit"),
    (["_aws", "CloudWatchMetrics", 0, "Metrics", 0, "StorageResolution"], 5, "StorageResolution"),
    (["_aws", "CloudWatchMetrics", 0, "Metrics", 0, "Name"], "absent", "root member"),
    (["_aws", "CloudWatchMetrics", 0, "Metrics"], [{"Name": "util"}] * 101, "at most 100"),
    (["util"], [1] * 101, "1 to 100"),
    (["util"], "97", "metric value"),
    (["d", "Count"], 4, "summing to Count"),
    (["d", "Max"], 1.5, "Min..Max"),
    (["d", "Counts"], [2], "same length"),
    (["d", "Counts"], [2, 0], "positive numbers"),
    (["d", "Min"], 3, "Min..Max"),
    (["d", "Values"], [1, float("nan")], "finite"),
    (["d", "Sum"], KeyError, "exactly the keys"),
    (["util"], True, "metric value"),
    (["util"], [], "1 to 100"),
    (["_aws", "Timestamp"], 1718000000, "seconds sent"),
    (["_aws", "Timestamp"], True, "Timestamp"),
    (["_aws"], [], "_aws must be an object"),
    (["_aws", "CloudWatchMetrics", 0, "Namespace"], "n" * 1025, "Namespace"),
    (["_aws", "CloudWatchMetrics", 0, "Dimensions", 0], [["gpu"]], "dimension key"),
    (["_aws", "CloudWatchMetrics", 0, "Dimensions", 0], ["k" * 251], "dimension key"),
    (["gpu"], "g" * 1025, "1 to 1024"),
    (["gpu"], "", "1 to 1024"),
    (["_aws", "CloudWatchMetrics", 0, "Metrics", 0, "StorageResolution"], True,
     "StorageResolution"),
    (["_aws", "CloudWatchMetrics", 0, "Metrics", 0, "Unit"], ["Percent"], "unit"),
])
def test_violations_are_named(path: list[object], value: object, message: str) -> None:
    with pytest.raises(EmfError, match=message):
        validate(mutate(path, value))


def test_not_json_or_not_an_object_is_refused() -> None:
    with pytest.raises(EmfError, match="not JSON"):
        validate('{"_aws": ')
    with pytest.raises(EmfError, match="JSON object"):
        validate("[1, 2]")


def test_limits_are_inclusive() -> None:
    """30 keys, 100 metrics, 100 array values, 1024-character values are all allowed."""
    doc = json.loads(json.dumps(GOOD))
    keys = [f"k{i}" for i in range(30)]
    doc.update({k: "v" * 1024 for k in keys})
    doc.update({f"m{i}": [float(i)] * 100 for i in range(100)})
    doc["_aws"]["CloudWatchMetrics"] = [{"Namespace": "n" * 1024, "Dimensions": [keys],
                                         "Metrics": [{"Name": f"m{i}"} for i in range(100)]}]
    got = extract(json.dumps(doc))
    assert len(got) == 100 and all(len(m.values) == 100 and len(m.dimensions) == 30
                                   for m in got)


def test_distribution_extracts_declared_statistics_and_every_sample() -> None:
    doc = json.loads(json.dumps(GOOD))
    doc["d"] = {"Values": [0, 100], "Counts": [20, 40], "Max": 100, "Min": 0, "Count": 60,
                "Sum": 4000}
    (d,) = [m for m in extract(json.dumps(doc)) if m.name == "d" and m.dimensions == ()]
    assert d.stats == (0.0, 100.0, 4000.0, 60.0)
    assert sorted(d.values) == [0.0] * 20 + [100.0] * 40


def test_two_directives_and_a_plain_field_extract_independently() -> None:
    doc = json.loads(json.dumps(GOOD))
    doc["note"] = "not a metric"
    doc["_aws"]["CloudWatchMetrics"].append(
        {"Namespace": "Other", "Dimensions": [["gpu"]],
         "Metrics": [{"Name": "util", "StorageResolution": 1}]})
    got = extract(json.dumps(doc))
    other = [m for m in got if m.namespace == "Other"]
    assert [(m.name, m.dimensions, m.storage_resolution, m.values) for m in other] == \
        [("util", (("gpu", "0"),), 1, (97.0,))]
    assert "note" not in {m.name for m in got}
