"""Production memory of `podgpu serve`: RSS, threads, open fds and CPU every
`--sample-every` s for `--duration` s, for four configurations run side by side so the cost of
each part is known:

  production        -k (real gRPC kubelet stand-in), the pod watch (pod API stand-in over TLS,
                    in-cluster config with a service-account token), the EMF sink with the
                    cloudwatch overlay's declarations sending PutLogEvents (botocore-signed,
                    sinks/cloudwatch/logsapi.py) to a CloudWatch Logs stand-in; the DaemonSet's
                    args (tests/deploy/test_prod_memory_smoke.py keeps them equal to the rendered
                    overlay's)
  kubelet+podwatch  the same without the EMF sink
  kubelet           -k only (no NODE_NAME, so the pod watch stays off)
  bare              neither

All at a 1 s collect interval, each scraped every second with gzip like Prometheus. NVML when a
driver is present (the kubelet stand-in gives GPU 0's real UUID to a pod), else `--simulate 8`.
The stand-ins churn a non-GPU pod every 15 s so the pod watch and the join see changes.

    PYTHONPATH=src python3 -m bench.prod_memory --duration 600 --out bench/results/prod-memory.json

podgpu itself needs what the image has (requirements.lock: h11, nvidia-ml-py, bcrypt, PyYAML,
google-re2, grpclib, protobuf, botocore and their dependencies); the stand-ins need grpcio (the
kubelet stand-in is a real grpcio server, in this process, not in podgpu's) and the `openssl`
command (the API stand-in's certificate). Compile podgpu's bytecode first
(`python3 -m compileall -q src`), as the image has it, or the first imports compile and count.
The summary's `emf_put_log_events` says whether the EMF path was exercised at all.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

from tests.deploy.standins import DUMMY_AWS, SHIM, KubeApi, LogsStandIn, environ_without_aws
from tests.harness import ROOT, free_port, proc_sample
from tests.integration.kube_api_fake import pod, service
from tests.integration.kubelet_fake import FakeContainer, FakeKubelet, FakePod, gpu_pod

NODE = "ip-10-0-1-5.ec2.internal"
CW_CONFIG = ROOT / "deploy/kubernetes/components/cloudwatch/cwagent-config.json"
TRAIN_UID = "0b7c5a1e-3f2d-4c6b-9a8e-1d2c3b4a5f60"
# The base DaemonSet's args after `serve` with mount paths left as placeholders, then the
# cloudwatch overlay's; the smoke test compares them with `kubectl kustomize` output.
DAEMONSET_ARGS = ["--collectors", "{default_counters}", "--address", ":9400",
                  "--collect-interval", "1000", "--kubernetes",
                  "--pod-resources-kubelet-socket", "{socket}", "--proc-root", "{proc}",
                  "--log-format", "json"]
EMF_ARGS = ["--cloudwatch-config", "{cw_config}", "--cluster-name", "bench",
            "--emf-namespace", "gpu-operator",
            "--emf-service", "nvidia-dcgm-exporter",
            "--emf-service-labels", "app=nvidia-dcgm-exporter",
            "--emf-container-name", "nvidia-dcgm-exporter", "--emf-spool-dir", "{spool}"]
VARIANTS = ("production", "kubelet+podwatch", "kubelet", "bare")
INSIGHTS = "production+insights"
"""Not run by default: production with --emf-container-insights (its Node object served by the
API stand-in), for `--variants production,production+insights`."""


def gpu_uuids() -> list[str]:
    """GPU UUIDs from NVML, or [] without a driver."""
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            return [pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(i))
                    for i in range(pynvml.nvmlDeviceGetCount())]
        finally:
            pynvml.nvmlShutdown()
    except Exception:
        return []




def summarise(samples: list[dict[str, float]], warmup: float) -> dict[str, Any]:
    """RSS after warm-up, at the end, max; growth as a least-squares slope after warm-up."""
    after = [s for s in samples if s["t"] >= warmup] or samples[-1:]
    xs, ys = [s["t"] for s in after], [s["rss_kib"] / 1024 for s in after]
    n = len(xs)
    slope = 0.0
    if n >= 2:
        mx, my = sum(xs) / n, sum(ys) / n
        den = sum((x - mx) ** 2 for x in xs)
        slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / den if den else 0.0
    span = samples[-1]["t"] - samples[0]["t"] if len(samples) > 1 else 0.0
    cpu = (samples[-1]["cpu_s"] - samples[0]["cpu_s"]) / span * 100 if span else 0.0
    return {"rss_mib_after_warmup": round(ys[0], 1), "rss_mib_end": round(ys[-1], 1),
            "rss_mib_max": round(max(s["rss_kib"] for s in samples) / 1024, 1),
            "hwm_mib_end": round(samples[-1]["hwm_kib"] / 1024, 1),
            "growth_mib_per_hour": round(slope * 3600, 2), "cpu_percent": round(cpu, 2),
            "threads_max": max(int(s["threads"]) for s in samples),
            "fds_first": int(samples[0]["fds"]), "fds_last": int(samples[-1]["fds"])}


class Scraper(threading.Thread):
    """GET /metrics every second with gzip, as Prometheus does."""

    def __init__(self, port: int, stop: threading.Event) -> None:
        super().__init__(daemon=True)
        self.url, self.stop, self.ok, self.errors = f"http://127.0.0.1:{port}/metrics", stop, 0, 0

    def run(self) -> None:
        while not self.stop.wait(1.0):
            try:
                req = urllib.request.Request(self.url, headers={"Accept-Encoding": "gzip"})
                with urllib.request.urlopen(req, timeout=5) as r:
                    r.read()
                self.ok += 1
            except (OSError, http.client.HTTPException):  # refused, timed out, cut short
                self.errors += 1




def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--duration", type=float, default=600.0)
    ap.add_argument("--sample-every", type=float, default=10.0)
    ap.add_argument("--warmup", type=float, default=60.0, help="seconds before growth is fitted")
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--simulate", action="store_true", help="simulated GPUs even with a driver")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    variants = [v for v in args.variants.split(",") if v]
    assert set(variants) <= {*VARIANTS, INSIGHTS}, variants
    uuids = [] if args.simulate else gpu_uuids()
    if uuids:
        backend = []
    else:
        from podgpu.sim.backend import MODELS, SimulatedBackend

        uuids = [d.uuid for d in SimulatedBackend(8, MODELS["H100"]).devices()]
        backend = ["--simulate", "8", "--simulate-scenario", "none"]
    work = Path(tempfile.mkdtemp(prefix="pgmem"))
    kubelet = FakeKubelet(str(work / "kubelet.sock")).start()
    api = KubeApi().start()
    api.fake.nodes[NODE] = {"metadata": {"name": NODE, "labels": {
        "node.kubernetes.io/instance-type": "p5.48xlarge"}},
        "spec": {"providerID": "aws:///us-east-1a/i-0123456789abcdef0"},
        "status": {"capacity": {"nvidia.com/gpu": "8"}}}
    logs = LogsStandIn().start()
    others = [FakePod("kube-system", f"daemon-{i}", [FakeContainer("c")]) for i in range(25)]
    kubelet.set_pods([gpu_pod("default", "gpu-burn-6c9d8f7b5-x2x7q", "main", "nvidia.com/gpu",
                              uuids[0]), *others])
    api.fake.put(pod(TRAIN_UID, "default", "gpu-burn-6c9d8f7b5-x2x7q", node=NODE,
                     labels={"app.kubernetes.io/name": "gpu-burn",
                             "pod-template-hash": "6c9d8f7b5"},
                     containers={"main": "ab" * 32}))
    # The cluster's Services (listed and watched with --emf-container-insights): 1,000 in 100
    # namespaces, with the usual two-label selectors; one selects the GPU pod.
    api.fake.put_service(service("default", "gpu-burn", {"app.kubernetes.io/name": "gpu-burn"}))
    for i in range(999):
        api.fake.put_service(service(f"team-{i % 100:03d}", f"svc-{i:04d}", {
            "app.kubernetes.io/name": f"app-{i:04d}", "app.kubernetes.io/instance": "prod"}))
    for i, other in enumerate(others):
        api.fake.put(pod(f"00000000-0000-4000-8000-{i:012d}", other.namespace, other.name,
                         node=NODE))
    shutil.copytree(ROOT / "tests/fixtures/proc", work / "proc")
    paths = {"default_counters": str(ROOT / "etc/default-counters.csv"),
             "socket": str(work / "kubelet.sock"), "proc": str(work / "proc"),
             "cw_config": str(CW_CONFIG), "spool": str(work / "spool")}
    base_env = {**environ_without_aws(),
                "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT),
                                               os.environ.get("PYTHONPATH", "")])}
    procs: dict[str, subprocess.Popen[bytes]] = {}
    scrapers: dict[str, Scraper] = {}
    stop = threading.Event()
    logf = open(work / "serve.log", "wb")  # noqa: SIM115 - closed below
    for v in variants:
        port = free_port()
        argv = [a.format(**paths) for a in DAEMONSET_ARGS]
        env = dict(base_env)
        if v != "bare":
            env["NODE_NAME"] = NODE
        if v in ("production", INSIGHTS):
            argv += [a.format(**paths) for a in EMF_ARGS]
            env.update(DUMMY_AWS, AWS_REGION="us-east-1", PODGPU_EMF_ENDPOINT_URL=logs.url)
        if v == INSIGHTS:
            env["PODGPU_EMF_CONTAINER_INSIGHTS"] = "true"
        if v in ("kubelet", "bare"):
            env.pop("NODE_NAME", None)
            cmd = [sys.executable, "-m", "podgpu", "serve"]
        else:
            env.update(api.env())
            cmd = [sys.executable, str(SHIM), str(api.sa_dir), "serve"]
        if v == "bare":
            i = argv.index("--kubernetes")
            argv = argv[:i] + argv[i + 1:]
        procs[v] = subprocess.Popen([*cmd, *argv, *backend, "--address", f"127.0.0.1:{port}"],
                                    env=env, stdout=logf, stderr=logf)
        scrapers[v] = Scraper(port, stop)
    deadline = time.monotonic() + 90  # the clock starts once every variant serves /metrics
    for v, s in scrapers.items():
        while True:
            try:
                with urllib.request.urlopen(s.url, timeout=2) as r:
                    r.read()
                break
            except (OSError, http.client.HTTPException):
                if procs[v].poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"{v} did not start; see {work / 'serve.log'}") from None
                time.sleep(0.1)
    for s in scrapers.values():
        s.start()
    samples: dict[str, list[dict[str, float]]] = {v: [] for v in variants}
    t0 = time.monotonic()
    next_churn, churn = 15.0, 0
    try:
        while True:
            t = time.monotonic() - t0
            for v, p in procs.items():
                if p.poll() is not None:
                    raise SystemExit(f"{v} exited {p.returncode}; see {work / 'serve.log'}")
                samples[v].append({"t": round(t, 1), **proc_sample(p.pid)})
            if t >= args.duration:
                break
            while t >= next_churn:  # replace one non-GPU pod (a Job finishing, another starting)
                churn += 1
                old = others[churn % len(others)]
                api.fake.delete(f"00000000-0000-4000-8000-{churn % len(others):012d}")
                api.fake.put(pod(f"00000000-0000-4000-8000-{churn % len(others):012d}",
                                 old.namespace, f"{old.name}-r{churn}", node=NODE))
                next_churn += 15.0
            time.sleep(max(0.0, min(args.sample_every, args.duration - t)))
    finally:
        stop.set()
        for s in scrapers.values():  # a scrape in flight ends before its server is stopped
            if s.is_alive():
                s.join(10.0)
        for p in procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs.values():
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
        logf.close()
        kubelet.stop()
        api.stop()
    warmup = min(args.warmup, args.duration / 3)
    result = {
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "started_unix": int(time.time() - (time.monotonic() - t0)),
        "duration_s": args.duration, "sample_every_s": args.sample_every, "warmup_s": warmup,
        "backend": "simulated" if backend else "nvml", "gpus": len(uuids),
        "python": platform.python_version(), "node_pods": 1 + len(others), "pod_churns": churn,
        "emf_put_log_events": logs.calls.count("PutLogEvents"),
        "emf_documents": len(logs.messages),
        "variants": {v: {"summary": summarise(samples[v], warmup),
                         "scrapes_ok": scrapers[v].ok, "scrape_errors": scrapers[v].errors,
                         "samples": samples[v]} for v in variants},
    }
    logs.stop()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    for v in variants:
        print(v, json.dumps(result["variants"][v]["summary"]))
    print(f"emf: {result['emf_put_log_events']} PutLogEvents, {result['emf_documents']} documents; "
          f"{churn} pod replacements")
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
