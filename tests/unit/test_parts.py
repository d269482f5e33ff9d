"""parts.py: what a part is made of follows from the settings alone, not from the environment it
reads on its own."""

from __future__ import annotations

from podgpu.config import parse_serve_args
from podgpu.parts import make_insights

INSIGHTS = ["--simulate", "1", "--emf-container-insights", "--cluster-name", "c"]
IN_A_POD = {"NODE_NAME": "n", "KUBERNETES_SERVICE_HOST": "10.0.0.1",
            "KUBERNETES_SERVICE_PORT": "443"}
OFF = {"status": "off (no Kubernetes API)"}


def test_a_simulated_node_lists_services_only_in_a_pod() -> None:
    outside = parse_serve_args(INSIGHTS, {"NODE_NAME": "n"})
    inside = parse_serve_args(INSIGHTS, IN_A_POD)
    assert not outside.kubernetes.in_cluster and inside.kubernetes.in_cluster
    assert make_insights(outside, "c", None).health()["services"] == OFF
    services = make_insights(inside, "c", None).health()["services"]
    assert isinstance(services, dict), services
    assert services != OFF and "services" in services, services  # the Service watch, not started
