"""podgpu in its production configuration on a real GPU, measured: RSS, threads
and open files every 10 s, with a gpu-burn in the middle whose minutes must show Max 100 / Min 0
in the EMF documents, and a 1 s scrape log of /metrics for the dashboard picture.

Production configuration: NVML, `-k` against a kubelet stand-in (real gRPC on a unix socket; a
pod holds GPU 0), the pod watch against an API stand-in reached exactly as in a cluster
(in-cluster config: KUBERNETES_SERVICE_HOST/PORT, the service-account token and CA files, HTTPS),
the EMF sink with the seed post's agent config sending PutLogEvents (botocore-signed, no boto3 client) to a CloudWatch
Logs stand-in (records every event), a 1 s collect interval, scrapes every second.

    PYTHONPATH=/tmp/site:src python3 -m bench.archive.h200_prod_run $OUT --duration 540   # on the GPU
    sudo .venv/bin/python -m bench.archive.h200_prod_run /tmp/out --dry-run --duration 150  # simulated

Needs root (it writes /var/run/secrets/kubernetes.io/serviceaccount/, and removes it after).
Writes OUT/h200-prod.json, OUT/h200-emf-events.jsonl, OUT/h200-scrape-log.jsonl,
OUT/h200-prod-serve.log.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
PORT = 9400
POD = ("default", "gpu-burn-6c9d8f7b5-x2x7q", "main", "0b7c5a1e-3f2d-4c6b-9a8e-1d2c3b4a5f60")
SEED = ROOT / "tests" / "fixtures" / "seed" / "cwagent-config.json"
SA_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
NODE = "ip-10-0-1-5.ec2.internal"


def self_signed(tmp: Path) -> tuple[Path, Path]:
    """A loopback certificate for the API stand-in (tests/deploy/standins.py, openssl; or a pair
    made beforehand in $PODGPU_BENCH_CERT_DIR, for machines without openssl)."""
    given = os.environ.get("PODGPU_BENCH_CERT_DIR")
    if given:
        return Path(given) / "api.crt", Path(given) / "api.key"
    from tests.deploy.standins import self_signed as make

    return make(tmp)


def proc_status(pid: int) -> dict[str, int]:
    out = {}
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            k, _, v = line.partition(":")
            if k in ("VmRSS", "VmHWM", "Threads"):
                out[k] = int(v.split()[0])
    out["fds"] = len(os.listdir(f"/proc/{pid}/fd"))
    return out


def scrape() -> str:
    conn = http.client.HTTPConnection("127.0.0.1", PORT, timeout=5)
    try:
        conn.request("GET", "/metrics")
        return conn.getresponse().read().decode()
    finally:
        conn.close()


def gpu0_uuid(dry: bool) -> str:
    if dry:
        from podgpu.sim.backend import MODELS, SimulatedBackend

        return SimulatedBackend(8, MODELS["H200"]).devices()[0].uuid
    import pynvml

    pynvml.nvmlInit()
    try:
        uuid = pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(0))
        return uuid.decode() if isinstance(uuid, bytes) else str(uuid)
    finally:
        pynvml.nvmlShutdown()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--duration", type=float, default=540.0)
    ap.add_argument("--dry-run", action="store_true")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    from tests.integration.kube_api_fake import FakeKubeApi, pod
    from tests.integration.kubelet_fake import FakeKubelet, gpu_pod, socket_path

    tmp = Path(tempfile.mkdtemp(prefix="podgpu-prod-"))
    cert, key = self_signed(tmp)
    created = [d for d in (SA_DIR.parent.parent, SA_DIR.parent, SA_DIR) if not d.exists()]
    SA_DIR.mkdir(parents=True, exist_ok=True)
    shutil.copy(cert, SA_DIR / "ca.crt")
    (SA_DIR / "token").write_text("stand-in-token")
    (SA_DIR / "namespace").write_text("podgpu")

    api = FakeKubeApi()
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    api._server.socket = ctx.wrap_socket(api._server.socket, server_side=True)
    api.start()
    api.put(pod(POD[3], POD[0], POD[1], node=NODE, labels={"app": "gpu-burn"},
                containers={POD[2]: "a" * 64}))
    api_port = api.url.rsplit(":", 1)[1]
    from tests.deploy.standins import LogsStandIn

    logs = LogsStandIn().start()
    uuid = gpu0_uuid(args.dry_run)
    summary: dict[str, Any] = {"gpu0_uuid": uuid, "pod": "/".join(POD[:3]),
                               "dry_run": args.dry_run, "duration_s": args.duration}
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "NODE_NAME": NODE,
           "KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": api_port,
           "AWS_ACCESS_KEY_ID": "stand-in", "AWS_SECRET_ACCESS_KEY": "stand-in"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "src"), env.get("PYTHONPATH")]))
    samples: list[dict[str, Any]] = []
    try:
        with socket_path() as sock:
            kubelet = FakeKubelet(sock).start()
            kubelet.set_pods([gpu_pod(POD[0], POD[1], POD[2], "nvidia.com/gpu", uuid)])
            cmd = [sys.executable, "-m", "podgpu", "serve", "-a", f"127.0.0.1:{PORT}", "-k",
                   "--pod-resources-kubelet-socket", sock, "--cloudwatch-config", str(SEED),
                   "--cluster-name", "h200-proof", "--emf-label", "Service=nvidia-dcgm-exporter",
                   "--emf-endpoint-url", logs.url, "--aws-region", "us-east-1"]
            if args.dry_run:
                cmd += ["--simulate", "8xH200"]
            summary["serve"] = cmd[2:]
            with open(out / "h200-prod-serve.log", "w") as log:
                serve = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT,
                                         text=True)
                t0 = time.time()
                try:
                    run(serve, t0, args, env, out, samples, summary)
                finally:
                    serve.send_signal(signal.SIGTERM)
                    serve.wait(30)
            kubelet.stop()
    finally:
        api.stop()
        logs.stop()
        with open(out / "h200-emf-events.jsonl", "w") as fh:
            fh.writelines(m + "\n" for m in logs.messages)
        if created:
            shutil.rmtree(created[0], ignore_errors=True)  # only what this run created
        shutil.rmtree(tmp, ignore_errors=True)
    summary["samples"] = samples
    summarise(summary, out)
    (out / "h200-prod.json").write_text(json.dumps(summary, indent=1) + "\n")
    print(json.dumps({k: v for k, v in summary.items() if k not in ("samples", "minutes")},
                     indent=1))
    return 0 if summary.get("emf_pass") else 1


def run(serve: subprocess.Popen[str], t0: float, args: argparse.Namespace, env: dict[str, str],
        out: Path, samples: list[dict[str, Any]], summary: dict[str, Any]) -> None:
    deadline = t0 + 60
    while True:
        try:
            scrape()
            break
        except OSError:
            assert serve.poll() is None and time.time() < deadline, "podgpu did not start"
            time.sleep(0.2)
    summary["first_metrics_s"] = round(time.time() - t0, 2)

    def sampler() -> None:
        while serve.poll() is None and time.time() < t0 + args.duration:
            samples.append({"t": round(time.time() - t0, 1), **proc_status(serve.pid)})
            time.sleep(10.0)
    threading.Thread(target=sampler, daemon=True).start()
    # the burn: after a minute of warm-up, starting 5 s before a minute boundary, 130 s long
    start_at = t0 + 60
    start_at += (55 - start_at % 60) % 60
    time.sleep(max(0.0, start_at - time.time()))
    burn = None
    if not args.dry_run:
        burn = subprocess.Popen([sys.executable, "-m", "podgpu", "burn", "--on", "20", "--off",
                                 "20", "--duration", "130"], env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)
    summary["burn_started_s"] = round(time.time() - t0, 1)
    with open(out / "h200-scrape-log.jsonl", "w") as sl:
        end = time.time() + 140
        while time.time() < end:
            t = time.time()
            try:
                sl.write(json.dumps({"t": round(t, 3), "body": scrape()}) + "\n")
            except OSError as exc:
                sl.write(json.dumps({"t": round(t, 3), "error": str(exc)}) + "\n")
            time.sleep(max(0.0, 1.0 - (time.time() - t)))
    if burn is not None:
        text, _ = burn.communicate(timeout=60)
        summary["burn_tail"] = text.splitlines()[-6:]
    time.sleep(max(0.0, t0 + args.duration - time.time()))
    samples.append({"t": round(time.time() - t0, 1), **proc_status(serve.pid)})
    try:
        body = scrape()
        summary["self_metrics"] = [line for line in body.splitlines()
                                   if line.startswith(("podgpu_emf_", "podgpu_devices",
                                                       "podgpu_collect_errors_total"))]
        summary["pod_labelled_util"] = [line for line in body.splitlines()
                                        if line.startswith("DCGM_FI_DEV_GPU_UTIL{")]
    except OSError as exc:
        summary["final_scrape_error"] = str(exc)


def summarise(summary: dict[str, Any], out: Path) -> None:
    rss = [s["VmRSS"] / 1024 for s in summary["samples"]]
    if rss:
        after = [s["VmRSS"] / 1024 for s in summary["samples"] if s["t"] >= 120] or rss
        summary["rss_mib"] = {"first": round(rss[0], 1), "max": round(max(rss), 1),
                              "last": round(rss[-1], 1),
                              "growth_after_2min": round(after[-1] - after[0], 2)}
        summary["threads_max"] = max(s["Threads"] for s in summary["samples"])
        summary["fds"] = [summary["samples"][0]["fds"], summary["samples"][-1]["fds"]]
    minutes = []
    path = out / "h200-emf-events.jsonl"
    for line in path.read_text().splitlines() if path.exists() else []:
        doc = json.loads(line)
        util = doc.get("DCGM_FI_DEV_GPU_UTIL")
        if doc.get("pod") != POD[1] or util is None:
            continue
        d = util if isinstance(util, dict) else {"Max": util, "Min": util, "Count": 1}
        minutes.append({"minute": doc["_aws"]["Timestamp"], "max": d["Max"], "min": d["Min"],
                        "count": d["Count"], "values": d.get("Values"), "counts": d.get("Counts"),
                        "dimensions": doc["_aws"]["CloudWatchMetrics"][0]["Dimensions"],
                        "pod_uid_label": doc.get("pod_uid")})
    summary["minutes"] = minutes
    full = [m for m in minutes if m["count"] >= 55]
    summary["emf_burn_minutes"] = [m for m in full if m["max"] == 100 and m["min"] == 0]
    summary["emf_pass"] = bool(summary["emf_burn_minutes"]) or summary["dry_run"]


if __name__ == "__main__":
    sys.exit(main())
