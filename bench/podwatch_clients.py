"""What the pod watch's Kubernetes client costs in RSS (issue 8 item 5: "if the Kubernetes client
library is the cost, measure a lighter maintained client"). One client per run, in this
interpreter: on top of what `podgpu serve -k` already loads (aiohttp, grpc, pynvml, ssl), it
lists this node's pods from the pod API stand-in over TLS with a bearer token and follows a watch
through 20 changes, as podgpu's pod watch does. Prints one JSON line.

    PYTHONPATH=src .venv/bin/python bench/podwatch_clients.py kubernetes
    PYTHONPATH=src .venv/bin/python bench/podwatch_clients.py urllib3
    PYTHONPATH=src VENV_WITH_LIGHTKUBE/bin/python bench/podwatch_clients.py lightkube
"""

from __future__ import annotations

import importlib.metadata
import json
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "src")]

import aiohttp  # noqa: E402,F401  - what podgpu -k has loaded before its pod watch starts
import grpc  # noqa: E402,F401
import pynvml  # noqa: E402,F401
from tests.deploy.standins import TOKEN, KubeApi  # noqa: E402
from tests.integration.kube_api_fake import pod  # noqa: E402

NODE = "n1"
CHANGES = 20


def full_pod(uid: str, name: str) -> dict[str, object]:
    """The stand-in's pod plus spec.containers, which lightkube's typed decoding requires."""
    p = pod(uid, "default", name, node=NODE, containers={"main": "ab" * 32})
    p["spec"]["containers"] = [{"name": "main", "image": "registry.example/app:1"}]
    for cs in p["status"]["containerStatuses"]:
        cs.update(image="registry.example/app:1", imageID="sha256:" + "cd" * 32, ready=True,
                  restartCount=0)
    return p


def rss_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def with_kubernetes(api: KubeApi, seen: list[str]) -> None:
    from kubernetes import client
    from kubernetes.watch import watch

    cfg = client.Configuration()
    cfg.host = f"https://127.0.0.1:{api.port}"
    cfg.ssl_ca_cert = str(api.sa_dir / "ca.crt")
    cfg.api_key = {"authorization": f"Bearer {TOKEN}"}
    core = client.CoreV1Api(client.ApiClient(cfg))
    body = json.loads(core.list_pod_for_all_namespaces(
        field_selector=f"spec.nodeName={NODE}", _preload_content=False).data)
    seen.extend(p["metadata"]["name"] for p in body["items"])
    resp = core.list_pod_for_all_namespaces(
        field_selector=f"spec.nodeName={NODE}", watch=True,
        resource_version=body["metadata"]["resourceVersion"], timeout_seconds=30,
        _preload_content=False)
    for line in watch.iter_resp_lines(resp):
        seen.append(json.loads(line)["object"]["metadata"]["name"])
        if len(seen) >= 1 + CHANGES:
            break


def with_lightkube(api: KubeApi, seen: list[str]) -> None:
    from lightkube import Client, KubeConfig
    from lightkube.resources.core_v1 import Pod

    config = KubeConfig.from_dict({
        "clusters": [{"name": "c", "cluster": {"server": f"https://127.0.0.1:{api.port}",
                                               "certificate-authority": str(api.sa_dir / "ca.crt")}}],
        "users": [{"name": "u", "user": {"token": TOKEN}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x"})
    c = Client(config=config)
    for p in c.list(Pod, namespace="*", fields={"spec.nodeName": NODE}):
        seen.append(p.metadata.name)
    for _op, p in c.watch(Pod, namespace="*", fields={"spec.nodeName": NODE}):
        if p.metadata.name not in seen:
            seen.append(p.metadata.name)
        if len(seen) >= 1 + CHANGES:
            break


def with_urllib3(api: KubeApi, seen: list[str]) -> None:
    """Raw list/watch, no client library (urllib3 is already there: botocore depends on it)."""
    import urllib3

    http = urllib3.PoolManager(ca_certs=str(api.sa_dir / "ca.crt"))
    base = f"https://127.0.0.1:{api.port}/api/v1/pods?fieldSelector=spec.nodeName%3D{NODE}"
    headers = {"Authorization": f"Bearer {TOKEN}"}
    body = json.loads(http.request("GET", base, headers=headers).data)
    seen.extend(p["metadata"]["name"] for p in body["items"])
    rv = body["metadata"]["resourceVersion"]
    resp = http.request("GET", f"{base}&watch=true&resourceVersion={rv}&timeoutSeconds=30",
                        headers=headers, preload_content=False)
    buf = b""
    for chunk in resp.stream(4096):
        buf += chunk
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            seen.append(json.loads(line)["object"]["metadata"]["name"])
        if len(seen) >= 1 + CHANGES:
            break
    resp.release_conn()


def main() -> int:
    which = sys.argv[1]
    run = {"kubernetes": with_kubernetes, "lightkube": with_lightkube,
           "urllib3": with_urllib3}[which]
    api = KubeApi().start()
    api.fake.put(full_pod("u-0", "first"))
    time.sleep(0.2)
    before = rss_kib()
    seen: list[str] = []
    t = threading.Thread(target=run, args=(api, seen), daemon=True)
    t.start()
    time.sleep(1.0)
    for i in range(CHANGES):
        api.fake.put(full_pod(f"u-{i + 1}", f"p{i + 1}"))
        time.sleep(0.05)
    t.join(30)
    assert len(seen) >= 1 + CHANGES, seen
    after = rss_kib()
    api.stop()
    dist = {"kubernetes": "kubernetes", "lightkube": "lightkube", "urllib3": "urllib3"}[which]
    print(json.dumps({"client": which, "version": importlib.metadata.version(dist),
                      "rss_before_mib": round(before / 1024, 1),
                      "rss_after_mib": round(after / 1024, 1),
                      "delta_mib": round((after - before) / 1024, 1),
                      "events_seen": len(seen)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
