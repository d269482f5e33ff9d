"""Production memory in the built image: the cloudwatch overlay's DaemonSet
container, run by podman as the kubelet would run it, against the stand-ins of
tests/deploy/standins.py; RSS, its high-water mark, threads and CPU of the container's podgpu
process every `--sample-every` s for `--duration` s.

As in the cluster: the image's interpreter and its compiled bytecode, `--read-only`, every
capability dropped, no-new-privileges, UID 0 (the DaemonSet's runAsUser), the rendered args and
env ($(CLUSTER_NAME) expanded from the overlay's ConfigMap, filled in as a user does), the cloudwatch ConfigMap, a tmpfs
/tmp, the kubelet's pod-resources directory (a real gRPC kubelet stand-in on a unix socket), the
/proc fixture as the host's /proc, the service-account token and CA at the in-cluster path (the
pod API stand-in over TLS), EMF PutLogEvents to a CloudWatch Logs stand-in (botocore-signed with
dummy keys). Different: host networking (the stand-ins listen on loopback), the listen address,
`--simulate 8` (no GPU here; the kubelet stand-in gives GPU 0 to a pod), and the EMF endpoint.
Scraped every second with gzip, like Prometheus at the seed post's 1 s.

    scripts/image    # builds localhost/podgpu:test
    .venv/bin/python -m bench.image_memory --duration 300 --out bench/results/image-memory.json
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from tests.conftest import FIXTURES
from tests.deploy.contract import prepare
from tests.deploy.podman import IMAGE, image_present, main_pid, podman
from tests.deploy.render import configured, container
from tests.deploy.standins import DUMMY_AWS, KubeApi, LogsStandIn
from tests.harness import free_port, proc_sample
from tests.integration.kube_api_fake import pod
from tests.integration.kubelet_fake import FakeContainer, FakeKubelet, FakePod, gpu_pod
from tests.support.prod_memory import Scraper, summarise

NODE = "test-node"  # what prepare() gives NODE_NAME
SA_PATH = "/var/run/secrets/kubernetes.io/serviceaccount"
_VAR = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")


def listening(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2):
            return True
    except urllib.error.HTTPError:
        return True
    except OSError:
        return False


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--duration", type=float, default=300.0)
    ap.add_argument("--sample-every", type=float, default=5.0)
    ap.add_argument("--warmup", type=float, default=60.0)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    image_present()
    from podgpu.sim.backend import MODELS, SimulatedBackend

    uuids = [d.uuid for d in SimulatedBackend(8, MODELS["H100"]).devices()]
    objs = list(configured("overlays/cloudwatch"))  # its CLUSTER_NAME set, as a user sets it
    c = container(objs)
    work = Path(tempfile.mkdtemp(prefix="pgimgmem"))
    (work / "pr").mkdir()
    kubelet = FakeKubelet(str(work / "pr" / "kubelet.sock")).start()
    api = KubeApi().start()
    logs = LogsStandIn().start()
    others = [FakePod("kube-system", f"daemon-{i}", [FakeContainer("c")]) for i in range(25)]
    kubelet.set_pods([gpu_pod("default", "gpu-burn-6c9d8f7b5-x2x7q", "main", "nvidia.com/gpu",
                              uuids[0]), *others])
    api.fake.put(pod("0b7c5a1e-3f2d-4c6b-9a8e-1d2c3b4a5f60", "default",
                     "gpu-burn-6c9d8f7b5-x2x7q", node=NODE, containers={"main": "ab" * 32}))
    for i, p in enumerate(others):
        api.fake.put(pod(f"00000000-0000-4000-8000-{i:012d}", p.namespace, p.name, node=NODE))
    launch = prepare(objs, work, pod_resources_dir=work / "pr", proc_fixture=FIXTURES / "proc")
    env = {**launch.env, **api.env(), **DUMMY_AWS, "PODGPU_EMF_ENDPOINT_URL": logs.url}
    argv = [_VAR.sub(lambda m: env.get(m.group(1), m.group(0)), a) for a in c["args"]]
    port = free_port()
    name = f"podgpu-memory-{port}"
    run = ["run", "-d", "--name", name, "--network", "host", "--read-only", "--cap-drop", "ALL",
           "--security-opt", "no-new-privileges", "--user", "0:0",
           "--tmpfs", "/tmp:rw,size=16m", "-v", f"{api.sa_dir}:{SA_PATH}:ro"]
    for path, local in launch.mounts.items():
        ro = "" if path in ("/tmp", "/var/lib/podgpu/emf-spool") else ":ro"
        if path != "/tmp":
            run += ["-v", f"{local}:{path}{ro}"]
    for k, v in env.items():
        run += ["-e", f"{k}={v}"]
    run += [IMAGE, *argv, "--simulate", "8", "--simulate-scenario", "none",
            "--address", f"127.0.0.1:{port}"]
    podman(*run)
    stop = threading.Event()
    scraper = Scraper(port, stop)
    samples: list[dict[str, Any]] = []
    try:
        pid = main_pid(name)
        t0 = time.monotonic()
        while time.monotonic() - t0 < args.duration:
            s = proc_sample(pid)
            s["t"] = round(time.monotonic() - t0, 1)
            samples.append(s)
            if not scraper.is_alive() and listening(port):  # scrape from the first answer on
                scraper.start()
            time.sleep(args.sample_every)
        health = json.loads(podman("exec", name, "python3.13", "-c",
                                   "import urllib.request; print(urllib.request.urlopen("
                                   f"'http://127.0.0.1:{port}/health').read().decode())").stdout)
    finally:
        stop.set()
        log = podman("logs", name, check=False)
        podman("rm", "-f", name, check=False)
        kubelet.stop()
        api.stop()
        logs.stop()
    size = int(podman("image", "inspect", "--format", "{{.Size}}", IMAGE).stdout)
    result = {
        "image": IMAGE, "image_mb": round(size / 1e6, 1), "args": argv,
        "gpus": 8, "backend": "simulated", "duration_s": args.duration,
        "scrapes_ok": scraper.ok, "scrape_errors": scraper.errors,
        "emf_put_log_events": len(logs.messages), "health": health,
        "summary": summarise(samples, args.warmup), "samples": samples,
        "log_tail": (log.stdout + log.stderr).splitlines()[-5:],
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: result[k] for k in ("image_mb", "scrapes_ok", "scrape_errors",
                                             "emf_put_log_events", "summary")}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
