"""podgpu's own Kubernetes API access (attribution/kubeapi.py) against the pod API
stand-in: in-cluster configuration, the service-account token re-read so bound tokens rotate, a
401 that re-reads it, bookmarks, 410 Gone as an HTTP answer, and an IPv6 API address over TLS."""

from __future__ import annotations

import json
import ssl
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from podgpu.attribution.kubeapi import (
    Connection,
    KubeApiError,
    KubeConfig,
    NotInCluster,
    in_cluster,
)
from podgpu.attribution.podwatch import PodWatcher
from tests.harness import wait_for
from tests.integration.kube_api_fake import FakeKubeApi, pod


@pytest.fixture
def api() -> Iterator[FakeKubeApi]:
    a = FakeKubeApi().start()
    yield a
    a.stop()


def sa_dir(tmp: Path, token: str = "tok-A") -> Path:
    d = tmp / "sa"
    d.mkdir()
    (d / "token").write_text(token)
    (d / "ca.crt").write_text("")
    return d


def watcher(api: FakeKubeApi, token_file: Path) -> PodWatcher:
    return PodWatcher("n1", configuration=KubeConfig(api.url, token_file=str(token_file)),
                      watch_timeout_seconds=30, max_backoff_seconds=0.2)


def test_in_cluster_reads_the_service_env_and_the_mounted_account(tmp_path: Path) -> None:
    d = sa_dir(tmp_path)
    cfg = in_cluster({"KUBERNETES_SERVICE_HOST": "10.100.0.1", "KUBERNETES_SERVICE_PORT": "443"},
                     str(d))
    assert cfg == KubeConfig("https://10.100.0.1:443", token_file=str(d / "token"),
                             ca_file=str(d / "ca.crt"))
    v6 = in_cluster({"KUBERNETES_SERVICE_HOST": "fd00:10:96::1",
                     "KUBERNETES_SERVICE_PORT": "6443"}, str(d))
    assert v6.host == "https://[fd00:10:96::1]:6443"


@pytest.mark.parametrize(("env", "why"), [
    ({}, "KUBERNETES_SERVICE_HOST/KUBERNETES_SERVICE_PORT are not set"),
    ({"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "https"},
     "KUBERNETES_SERVICE_PORT 'https' is not a port number"),
])
def test_in_cluster_says_what_is_missing(tmp_path: Path, env: dict[str, str], why: str) -> None:
    with pytest.raises(NotInCluster, match=why):
        in_cluster(env, str(sa_dir(tmp_path)))


def test_in_cluster_without_a_mounted_token_says_so(tmp_path: Path) -> None:
    env = {"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443"}
    with pytest.raises(NotInCluster, match=r"no service-account token at .*/token "
                                           r"\(automountServiceAccountToken: false\?\)"):
        in_cluster(env, str(tmp_path))


def test_a_rotated_token_is_used_from_the_next_request_on(api: FakeKubeApi, tmp_path: Path) -> None:
    token = sa_dir(tmp_path) / "token"
    api.tokens = {"tok-A"}
    api.put(pod("u1", "ml", "a"))
    w = watcher(api, token)
    w.start()
    try:
        wait_for(lambda: any(r.get("watch") == ["true"] for r in api.requests))
        assert set(api.auth) == {"Bearer tok-A"}
        # The kubelet rotates the bound token (atomically, as its projected volume does); the
        # old one stops being accepted and the open watch ends.
        (tmp_path / "new").write_text("tok-B\n")
        (tmp_path / "new").replace(token)
        api.tokens = {"tok-B"}
        seen = len(api.auth)
        api.close_watches()
        wait_for(lambda: len(api.auth) > seen)
        assert api.auth[seen] == "Bearer tok-B"  # the very next request
        api.put(pod("u2", "ml", "b"))
        wait_for(lambda: "u2" in w.index.by_uid)
        assert w.errors == 0
    finally:
        w.close()


def test_a_401_rereads_the_token_and_retries_at_once(api: FakeKubeApi, tmp_path: Path) -> None:
    token = sa_dir(tmp_path) / "token"
    api.tokens = {"tok-B"}
    api.on_unauthorized = lambda: token.write_text("tok-B")  # rotated just after it was read
    api.put(pod("u1", "ml", "a"))
    w = watcher(api, token)
    w.start()
    try:
        wait_for(lambda: "u1" in w.index.by_uid)
        assert api.auth[:2] == ["Bearer tok-A", "Bearer tok-B"]
        assert w.errors == 0  # answered within the same call: no backoff, nothing counted
    finally:
        w.close()


def test_a_refused_token_is_counted_said_and_recovers_once_rotated(
        api: FakeKubeApi, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    token = sa_dir(tmp_path) / "token"
    api.tokens = {"tok-B"}
    api.put(pod("u1", "ml", "a"))
    w = watcher(api, token)
    w.start(wait_seconds=0.3)
    try:
        wait_for(lambda: w.errors >= 2)
        assert "401 Unauthorized: the service-account token was refused" in caplog.text
        assert w.index.by_uid == {}
        token.write_text("tok-B")
        wait_for(lambda: "u1" in w.index.by_uid)
    finally:
        w.close()


def test_bookmarks_advance_the_version_a_watch_resumes_from(api: FakeKubeApi,
                                                             tmp_path: Path) -> None:
    api.put(pod("u1", "ml", "a"))
    w = watcher(api, sa_dir(tmp_path) / "token")
    w.start()
    try:
        wait_for(lambda: any(r.get("watch") == ["true"] for r in api.requests))
        first = next(r for r in api.requests if r.get("watch") == ["true"])
        assert first["allowWatchBookmarks"] == ["true"] and first["timeoutSeconds"] == ["30"]
        api.bookmark()
        bookmark_rv = str(api.rv)
        wait_for(lambda: w.resource_version == bookmark_rv)
        api.close_watches()
        wait_for(lambda: len([r for r in api.requests if r.get("watch") == ["true"]]) >= 2)
        again = [r for r in api.requests if r.get("watch") == ["true"]][1]
        assert again["resourceVersion"] == [bookmark_rv]
        assert len(api.list_requests()) == 1  # resumed, not re-listed
        assert set(w.index.by_uid) == {"u1"}  # a bookmark is not a pod
    finally:
        w.close()


def test_410_gone_as_the_answer_relists(api: FakeKubeApi, tmp_path: Path) -> None:
    api.put(pod("u1", "ml", "a"))
    w = watcher(api, sa_dir(tmp_path) / "token")
    w.start()
    try:
        wait_for(lambda: any(r.get("watch") == ["true"] for r in api.requests))
        api.gone_below = api.rv + 1  # everything this watch could resume from is compacted
        api.pods.pop("u1")
        api.pods["u3"] = pod("u3", "ml", "c")
        api.rv += 1
        api.close_watches()
        wait_for(lambda: set(w.index.by_uid) == {"u3"})
        assert len(api.list_requests()) == 2
        assert w.errors == 0
    finally:
        w.close()


def test_an_error_answer_carries_the_status_message(api: FakeKubeApi) -> None:
    api.fail_status = 403
    conn = Connection(KubeConfig(api.url, token="t"))
    with pytest.raises(KubeApiError) as info:
        conn.get_json("/api/v1/pods", timeout=5)
    assert info.value.status == 403 and info.value.message == "injected"
    conn.close()


def test_ipv6_api_address_over_tls_with_the_service_account(tmp_path: Path) -> None:
    """KUBERNETES_SERVICE_HOST=::1 (an IPv6 cluster): bracketed URL, TLS verified against
    ca.crt for the IP in the certificate, the bearer token sent."""
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
         "-nodes", "-keyout", str(key), "-out", str(cert), "-days", "2", "-subj", "/CN=api",
         "-addext", "subjectAltName=IP:::1"], check=True, capture_output=True, timeout=60)
    d = sa_dir(tmp_path, "tok-6")
    (d / "ca.crt").write_bytes(cert.read_bytes())
    fake = FakeKubeApi(bind="::1")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    fake._server.socket = ctx.wrap_socket(fake._server.socket, server_side=True)
    fake.tokens = {"tok-6"}
    fake.start()
    try:
        fake.put(pod("u6", "ml", "six"))
        cfg = in_cluster({"KUBERNETES_SERVICE_HOST": "::1",
                          "KUBERNETES_SERVICE_PORT": str(fake._server.server_address[1])}, str(d))
        body = Connection(cfg).get_json("/api/v1/pods", {"fieldSelector": "spec.nodeName=n1"},
                                        timeout=10)
        assert [p["metadata"]["name"] for p in body["items"]] == ["six"]
        assert json.loads(json.dumps(fake.auth)) == ["Bearer tok-6"]
    finally:
        fake.stop()


def test_a_silent_watch_is_cut_at_its_read_timeout_and_reopened(api: FakeKubeApi,
                                                                 tmp_path: Path) -> None:
    """The server-side timeout (1 s here) plus the read margin (1 s) bounds how long a watch
    that receives nothing is trusted; then the watch is counted as failed and re-listed."""
    api.put(pod("u1", "ml", "a"))
    api.silent_watches = True
    w = PodWatcher("n1", configuration=KubeConfig(api.url, token_file=str(sa_dir(tmp_path) / "token")),
                   watch_timeout_seconds=1, watch_read_margin_seconds=1.0,
                   max_backoff_seconds=0.2)
    w.start()
    try:
        wait_for(lambda: w.errors >= 1, timeout=10)
        assert "TimeoutError" in w.reason or "timed out" in w.reason, w.reason
        api.silent_watches = False
        api.put(pod("u2", "ml", "b"))
        wait_for(lambda: set(w.index.by_uid) == {"u1", "u2"}, timeout=15)
        assert len(api.list_requests()) >= 2  # re-listed after the cut watch
    finally:
        api.silent_watches = False
        w.close()


def test_an_error_event_is_a_failed_watch_with_its_message_cut(
        api: FakeKubeApi, tmp_path: Path) -> None:
    """An ERROR event that is not 410 ends the watch as a failure: counted, its Status message
    the reason (the reason is cut to 300 characters), and the pods listed again."""
    api.put(pod("u1", "ml", "a"))
    w = watcher(api, sa_dir(tmp_path) / "token")
    w.start()
    try:
        wait_for(lambda: any(r.get("watch") == ["true"] for r in api.requests))
        api.watch_error(500, "etcd is sad " + "x" * 1000)
        wait_for(lambda: w.errors == 1)
        assert w.reason == ("RuntimeError: watch error: etcd is sad " + "x" * 1000)[:300]
        assert str(w.health()["status"]).startswith("failing: RuntimeError: watch error")
        api.put(pod("u2", "ml", "b"))
        wait_for(lambda: set(w.index.by_uid) == {"u1", "u2"})
        assert len(api.list_requests()) == 2
        wait_for(lambda: w.health()["status"] == "ok")
    finally:
        w.close()
