"""`-m NAMESPACE:NAME`: the metric list from a ConfigMap through the Kubernetes API, against the
pod API stand-in."""

from __future__ import annotations

import json
import socketserver
import threading
from collections.abc import Iterator

import pytest

from podgpu.attribution.configmap import read_configmap
from podgpu.attribution.kubeapi import KubeConfig
from podgpu.config import parse_serve_args
from podgpu.errors import AttributionError, ConfigError
from podgpu.parts import load_metrics
from tests.integration.kube_api_fake import FakeKubeApi

LIST = "# from a ConfigMap\nDCGM_FI_DEV_GPU_UTIL, gauge, util\ndcgm_fb_used, gauge, fb\n"


@pytest.fixture
def api() -> Iterator[FakeKubeApi]:
    a = FakeKubeApi().start()
    a.configmaps[("gpu-operator", "exporter-metrics")] = {"metrics": LIST, "other": "x"}
    a.configmaps[("gpu-operator", "wrong-key")] = {"dcgm-metrics.csv": LIST}
    yield a
    a.stop()


def cfg(api: FakeKubeApi) -> KubeConfig:
    return KubeConfig(host=api.url)


def test_list_comes_from_the_configmap_and_wins_over_f(api: FakeKubeApi) -> None:
    s = parse_serve_args(["-m", "gpu-operator:exporter-metrics", "-f", "/nonexistent.csv"], {})
    ml = load_metrics(s.collect, cfg(api))
    assert [r.out for r in ml.metrics] == ["DCGM_FI_DEV_GPU_UTIL", "dcgm_fb_used"]
    assert ml.path == "configmap gpu-operator/exporter-metrics (key metrics)"
    assert any(r["path"] == ["/api/v1/namespaces/gpu-operator/configmaps/exporter-metrics"]
               for r in api.requests)


def test_env_spelling_and_none() -> None:
    s = parse_serve_args([], {"DCGM_EXPORTER_CONFIGMAP_DATA": "ns:cm"})
    assert s.collect.configmap == ("ns", "cm")
    assert parse_serve_args(["-m", "none"], {}).collect.configmap is None


@pytest.mark.parametrize("value", ["justname", ":cm", "ns:", "a:b:c"])
def test_malformed_value_is_a_one_line_config_error(value: str) -> None:
    with pytest.raises(ConfigError, match=r"^--configmap-data: expected NAMESPACE:NAME"):
        parse_serve_args(["-m", value], {})


def test_missing_configmap_or_key_is_a_config_error(api: FakeKubeApi) -> None:
    with pytest.raises(ConfigError, match="ConfigMap 'absent' not found in namespace 'ns'"):
        load_metrics(parse_serve_args(["-m", "ns:absent"], {}).collect, cfg(api))
    with pytest.raises(ConfigError, match=r"has no 'metrics' key \(keys: dcgm-metrics.csv\)"):
        load_metrics(parse_serve_args(["-m", "gpu-operator:wrong-key"], {}).collect, cfg(api))


def test_forbidden_or_unreachable_api_is_a_runtime_error(api: FakeKubeApi) -> None:
    api.fail_status = 403
    with pytest.raises(AttributionError, match="needs get on configmaps"):
        load_metrics(parse_serve_args(["-m", "gpu-operator:exporter-metrics"], {}).collect, cfg(api))
    with pytest.raises(AttributionError, match="cannot read it"):
        load_metrics(parse_serve_args(["-m", "a:b"], {}).collect,
                     KubeConfig(host="http://127.0.0.1:9"))


def test_sighup_with_m_re_reads_the_configmap(api: FakeKubeApi) -> None:
    """With -m, the reload SIGHUP triggers reads the ConfigMap again (before, it
    logged "embedded default; nothing to reload"); a broken edit keeps the list in use. The
    loader is the one the agent wires for -m (agent.py: load_metrics(settings.collect))."""
    from podgpu.reload import MetricListSwitch

    s = parse_serve_args(["-m", "gpu-operator:exporter-metrics"], {})
    switch = MetricListSwitch(load_metrics(s.collect, cfg(api)),
                              lambda: load_metrics(s.collect, cfg(api)))
    api.configmaps[("gpu-operator", "exporter-metrics")] = {
        "metrics": LIST + "DCGM_FI_DEV_SM_CLOCK, gauge, clock\n"}
    assert switch.request()

    class Target:
        fields: tuple[object, ...] = ()

        def use_fields(self, fields: tuple[object, ...]) -> None:
            self.fields = fields

    target = Target()
    switch.apply(target)
    assert [r.out for r in switch.current.metrics][-1] == "DCGM_FI_DEV_SM_CLOCK"
    assert len(target.fields) == 3
    api.configmaps[("gpu-operator", "exporter-metrics")] = {"metrics": "DCGM_FI_NOPE, gauge, x\n"}
    assert not switch.request() and len(switch.current.metrics) == 3


class _Breaking(socketserver.ThreadingTCPServer):
    """Closes the first `breaks` connections after reading the request head; then answers the
    ConfigMap."""

    daemon_threads = True

    def __init__(self, breaks: int) -> None:
        self.breaks, self.connections = breaks, 0
        body = json.dumps({"data": {"metrics": LIST}}).encode()
        answer = (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
                  + str(len(body)).encode() + b"\r\nConnection: close\r\n\r\n" + body)
        server = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                server.connections += 1
                head = b""
                while b"\r\n\r\n" not in head and (data := self.request.recv(4096)):
                    head += data
                if server.connections > server.breaks:
                    self.request.sendall(answer)

        super().__init__(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.serve_forever, daemon=True).start()


@pytest.mark.parametrize(("breaks", "connections", "ok"), [(0, 1, True), (1, 2, True),
                                                           (2, 2, False)])
def test_a_broken_connection_is_tried_once_more(breaks: int, connections: int, ok: bool) -> None:
    srv = _Breaking(breaks)
    try:
        config = KubeConfig(host=f"http://127.0.0.1:{srv.server_address[1]}")
        if ok:
            assert read_configmap("ns", "m", configuration=config) == LIST
        else:
            with pytest.raises(AttributionError, match="--configmap-data ns:m: cannot read it"):
                read_configmap("ns", "m", configuration=config)
    finally:
        srv.shutdown()
        srv.server_close()
    assert srv.connections == connections
