"""The agent identity's target labels (AgentTarget) against the restated service-endpoints job
(agent_oracle.py): the Service's labels through the job's labelmap, the Service's name, the
exporter's container and pod, and the rules that win over a mapped label of the same name."""

from __future__ import annotations

import re

import pytest

from podgpu.config import parse_serve_args
from podgpu.config.values import service_labels
from podgpu.errors import ConfigError
from podgpu.sinks.cloudwatch.series import AgentTarget
from tests.unit.sinks.cloudwatch import agent_oracle as oracle


def oracle_target(labels: dict[str, str], service: str, container: str) -> dict[str, str]:
    meta = {"__address__": "10.0.0.7:9400", "__meta_kubernetes_namespace": "gpu-operator",
            "__meta_kubernetes_service_annotation_prometheus_io_scrape": "true",
            "__meta_kubernetes_pod_name": "podgpu-abcde", "__meta_kubernetes_pod_node_name": "n1",
            "__meta_kubernetes_service_name": service,
            "__meta_kubernetes_pod_container_name": container}
    for key, value in labels.items():  # Prometheus' discovery sanitises the label key
        meta["__meta_kubernetes_service_label_" + re.sub(r"[^a-zA-Z0-9_]", "_", key)] = value
    out = oracle.target_labels(oracle.load_job(oracle.SERVICE_ENDPOINTS_JOB), meta)
    assert out is not None
    return out


@pytest.mark.parametrize("labels", [
    {},
    {"app.kubernetes.io/name": "podgpu", "app.kubernetes.io/part-of": "gpu-monitoring"},
    {"Service": "not-the-name", "Namespace": "x", "container_name": "y", "team": "ml"},
])
@pytest.mark.parametrize(("service", "container"), [("nvidia-dcgm-exporter", "podgpu"),
                                                    ("", "podgpu"), ("podgpu", "")])
def test_target_labels_are_the_agent_jobs(labels: dict[str, str], service: str,
                                          container: str) -> None:
    text = ",".join(f"{k}={v}" for k, v in labels.items())
    mine = AgentTarget(instance="10.0.0.7:9400", namespace="gpu-operator", pod_name="podgpu-abcde",
                       container_name=container, node_name="n1", service=service,
                       service_labels=service_labels(text) if text else ())
    assert mine.target_labels() == oracle_target(labels, service, container)


def test_flags_and_environment() -> None:
    s = parse_serve_args(["--cloudwatch-config", "x.json", "--emf-service", "podgpu",
                          "--emf-service-labels", "app.kubernetes.io/name=podgpu",
                          "--emf-service-labels", "team=ml,empty="], {})
    assert s.emf is not None
    assert (s.emf.container_name, s.emf.service, s.emf.podgpu_series) == (
        "podgpu", "podgpu", "auto")  # the shipped manifests' container name by default
    assert s.emf.service_labels == (("app_kubernetes_io_name", "podgpu"), ("team", "ml"))
    s = parse_serve_args(["--cloudwatch-config", "x.json"], {
        "PODGPU_EMF_CONTAINER_NAME": "nvidia-dcgm-exporter", "PODGPU_EMF_PODGPU_SERIES": "true",
        "PODGPU_EMF_SERVICE_LABELS": "app=dcgm"})
    assert s.emf is not None and s.emf.container_name == "nvidia-dcgm-exporter"
    assert s.emf.podgpu_series == "true" and s.emf.service_labels == (("app", "dcgm"),)
    # set by the manifests whether or not EMF is on: not an error without --cloudwatch-config
    assert parse_serve_args([], {"PODGPU_EMF_SERVICE": "podgpu"}).emf is None
    with pytest.raises(ConfigError, match="--emf-service-labels: expected KEY=VALUE"):
        parse_serve_args(["--cloudwatch-config", "x.json", "--emf-service-labels", "a b=c"], {})
    with pytest.raises(ConfigError, match="--emf-podgpu-series: use auto or true or false"):
        parse_serve_args(["--cloudwatch-config", "x.json", "--emf-podgpu-series", "yes"], {})


def test_dashboard_and_alarms_take_the_same_identity_flags() -> None:
    """cloudwatch-dashboard/-alarms filter on the labels serve sends: the same three flags."""
    from podgpu.cwassets.cli import _constant, parse_args

    args = parse_args("cloudwatch-alarms", [
        "--emf-namespace", "gpu-operator", "--emf-service", "nvidia-dcgm-exporter",
        "--emf-service-labels", "app.kubernetes.io/name=podgpu"])
    constant = _constant(args)
    assert (constant["Service"], constant["app_kubernetes_io_name"],
            constant["container_name"]) == ("nvidia-dcgm-exporter", "podgpu", "podgpu")
    args = parse_args("cloudwatch-dashboard", ["--emf-container-name", "nvidia-dcgm-exporter"])
    assert _constant(args)["container_name"] == "nvidia-dcgm-exporter"
