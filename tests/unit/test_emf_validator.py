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
])
def test_violations_are_named(path: list[object], value: object, message: str) -> None:
    with pytest.raises(EmfError, match=message):
        validate(mutate(path, value))
