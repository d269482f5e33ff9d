"""What the pod watch's Kubernetes client costs: RSS steady and
peak, start-up, installed bytes. One client per run, in this interpreter: on top of what
`podgpu serve -k` already loads (h11, pynvml, ssl), it lists this node's pods from the pod
API stand-in over TLS with a bearer token and follows a watch through 20 changes, as podgpu's pod
watch does. Prints one JSON line.

    PYTHONPATH=src .venv/bin/python -m bench.archive.podwatch_clients podgpu      # kubeapi.py (http.client)
    PYTHONPATH=src:/tmp/ah .venv/bin/python -m bench.archive.podwatch_clients aiohttp  # pip install --target /tmp/ah aiohttp
    PYTHONPATH=src .venv/bin/python -m bench.archive.podwatch_clients urllib3
    PYTHONPATH=src .venv/bin/python -m bench.archive.podwatch_clients kubernetes
    PYTHONPATH=src:/tmp/lk .venv/bin/python -m bench.archive.podwatch_clients lightkube  # pip install --target /tmp/lk lightkube
    PYTHONPATH=src:/tmp/kr .venv/bin/python -m bench.archive.podwatch_clients kr8s       # pip install --target /tmp/kr kr8s

`start_s` is from the first import of the client to the first list decoded; `installed_mib` the
files of the client's distribution and of every dependency it pulls in that podgpu's core
dependencies do not already bring. podgpu's listener was aiohttp's when the recorded numbers
(bench/RESULTS.md, docs/decisions/0010) were taken, so aiohttp was counted as already loaded
then; it no longer is a dependency, and its client now counts its own import.
"""

from __future__ import annotations

import importlib.metadata
import json
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "src")]

import h11  # noqa: E402,F401  - what podgpu -k has loaded before its pod watch starts
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


def rss_kib(field: str = "VmRSS") -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"no {field}")


CORE = ("h11", "nvidia-ml-py", "bcrypt", "PyYAML", "google-re2")
"""podgpu's core dependencies: what they pull in is not counted against a client."""


def _closure(names: tuple[str, ...] | list[str]) -> set[str]:
    """Distribution names reachable from `names` through their (unconditional) requirements."""
    from packaging.requirements import Requirement

    seen: set[str] = set()
    todo = list(names)
    while todo:
        name = todo.pop().lower().replace("_", "-")
        if name in seen:
            continue
        try:
            dist = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            continue
        seen.add(name)
        for text in dist.requires or ():
            req = Requirement(text)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(req.name)
    return seen


def installed_mib(dist: str) -> float:
    """Bytes of `dist` and the dependencies it adds to podgpu's core set, in MiB."""
    extra = _closure([dist]) - _closure(list(CORE))
    total = 0
    for name in extra:
        d = importlib.metadata.distribution(name)
        for f in d.files or ():
            p = Path(str(d.locate_file(f)))
            if p.is_file():
                total += p.stat().st_size
    return round(total / 2**20, 1)


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


def with_podgpu(api: KubeApi, seen: list[str]) -> None:
    """podgpu's own: attribution/kubeapi.py over http.client, as podwatch.py calls it."""
    from podgpu.attribution.kubeapi import Connection, KubeConfig, lines

    conn = Connection(KubeConfig(f"https://127.0.0.1:{api.port}", token=TOKEN,
                                 ca_file=str(api.sa_dir / "ca.crt")))
    sel = {"fieldSelector": f"spec.nodeName={NODE}"}
    body = conn.get_json("/api/v1/pods", sel, timeout=30)
    seen.extend(p["metadata"]["name"] for p in body["items"])
    resp = conn.open("/api/v1/pods", {**sel, "watch": "true", "timeoutSeconds": "30",
                                      "resourceVersion": body["metadata"]["resourceVersion"]},
                     timeout=60)
    for line in lines(resp):
        seen.append(json.loads(line)["object"]["metadata"]["name"])
        if len(seen) >= 1 + CHANGES:
            break
    conn.close()


def with_aiohttp(api: KubeApi, seen: list[str]) -> None:
    """aiohttp's client on an event loop of this thread (podgpu's server loop is another)."""
    import asyncio
    import ssl

    import aiohttp

    async def run() -> None:
        ctx = ssl.create_default_context(cafile=str(api.sa_dir / "ca.crt"))
        base = f"https://127.0.0.1:{api.port}/api/v1/pods"
        sel = {"fieldSelector": f"spec.nodeName={NODE}"}
        headers = {"Authorization": f"Bearer {TOKEN}"}
        async with aiohttp.ClientSession(headers=headers) as session:
            async with session.get(base, params=sel, ssl=ctx) as r:
                body = await r.json()
            seen.extend(p["metadata"]["name"] for p in body["items"])
            params = {**sel, "watch": "true", "timeoutSeconds": "30",
                      "resourceVersion": body["metadata"]["resourceVersion"]}
            async with session.get(base, params=params, ssl=ctx) as r:
                async for line in r.content:
                    if line.strip():
                        seen.append(json.loads(line)["object"]["metadata"]["name"])
                    if len(seen) >= 1 + CHANGES:
                        break

    asyncio.run(run())


def with_kr8s(api: KubeApi, seen: list[str]) -> None:
    """kr8s's synchronous API, configured from the service-account directory and env."""
    import os

    os.environ.update(api.env())
    import kr8s

    k = kr8s.api(serviceaccount=str(api.sa_dir), kubeconfig="/nonexistent")
    for p in k.get("pods", namespace=kr8s.ALL, field_selector={"spec.nodeName": NODE}):
        seen.append(p.name)
    for _kind, p in k.watch("pods", namespace=kr8s.ALL, field_selector={"spec.nodeName": NODE}):
        if p.name not in seen:
            seen.append(p.name)
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
    run = {"kubernetes": with_kubernetes, "lightkube": with_lightkube, "urllib3": with_urllib3,
           "podgpu": with_podgpu, "aiohttp": with_aiohttp, "kr8s": with_kr8s}[which]
    api = KubeApi().start()
    api.fake.put(full_pod("u-0", "first"))
    time.sleep(0.2)
    before = rss_kib()
    seen: list[str] = []
    t0 = time.perf_counter()
    t = threading.Thread(target=run, args=(api, seen), daemon=True)
    t.start()
    while not seen and t.is_alive() and time.perf_counter() - t0 < 30:
        time.sleep(0.002)
    start_s = time.perf_counter() - t0
    time.sleep(1.0)
    for i in range(CHANGES):
        api.fake.put(full_pod(f"u-{i + 1}", f"p{i + 1}"))
        time.sleep(0.05)
    t.join(30)
    assert len(seen) >= 1 + CHANGES, seen
    after = rss_kib()
    peak = rss_kib("VmHWM")
    api.stop()
    dist = {"kubernetes": "kubernetes", "lightkube": "lightkube", "urllib3": "urllib3",
            "podgpu": "", "aiohttp": "aiohttp", "kr8s": "kr8s"}[which]
    print(json.dumps({"client": which,
                      "version": importlib.metadata.version(dist) if dist else "stdlib",
                      "installed_mib": installed_mib(dist) if dist else 0.0,
                      "start_s": round(start_s, 3),
                      "rss_before_mib": round(before / 1024, 1),
                      "rss_after_mib": round(after / 1024, 1),
                      "delta_mib": round((after - before) / 1024, 1),
                      "peak_delta_mib": round((peak - before) / 1024, 1),
                      "events_seen": len(seen)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
