"""The API server's objects are a peer's input: the pod, Service and Node parsers take any JSON
object (wrong types anywhere, fields missing) without raising; a field of the wrong type counts
as absent, so one odd object cannot fail a whole list (property-based, hypothesis)."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from podgpu.attribution.nodeinfo import NodeObject, parse_node
from podgpu.attribution.podstore import PodInfo
from podgpu.attribution.podwatch import parse_pod
from podgpu.attribution.services import ServiceInfo, parse_service

FUZZ = settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])

SCALARS = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(
    max_size=8)
JSON = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
    st.text(max_size=8), inner, max_size=3), max_leaves=12)
FIELDS = ["metadata", "spec", "status", "uid", "name", "namespace", "labels", "selector",
          "containers", "resources", "requests", "limits", "nvidia.com/gpu", "phase",
          "containerStatuses", "initContainerStatuses", "containerID", "ownerReferences",
          "controller", "kind", "creationTimestamp", "providerID", "capacity",
          "node.kubernetes.io/instance-type"]
# objects built from the fields the parsers read, each holding any JSON value
SHAPED: st.SearchStrategy[Any] = st.recursive(
    SCALARS, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
        st.sampled_from(FIELDS), inner, max_size=4), max_leaves=16)
OBJECTS = st.dictionaries(st.sampled_from(FIELDS) | st.text(max_size=4), SHAPED | JSON,
                          max_size=4)


@FUZZ
@given(OBJECTS)
def test_any_object_parses_without_raising(obj: dict[str, Any]) -> None:
    assert isinstance(parse_pod(obj), PodInfo | None)
    assert isinstance(parse_service(obj), ServiceInfo | None)
    assert isinstance(parse_node(obj), NodeObject)


def test_a_field_of_the_wrong_type_counts_as_absent() -> None:
    pod = parse_pod({"metadata": {"uid": "u", "name": "p", "labels": ["a"]},
                     "spec": {"containers": [{"resources": {"limits": [1]}}]},
                     "status": {"containerStatuses": ["x", {"containerID": 5}]}})
    assert pod == PodInfo("u", "", "p")
    assert parse_node({"metadata": [], "spec": "x", "status": {"capacity": 8}}) == NodeObject()
    assert parse_service({"metadata": {"name": "s", "namespace": "ns"}, "spec": []}) == \
        ServiceInfo("ns", "s", ())
