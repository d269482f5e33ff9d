"""Long forms of the hostile-peer tests: the clients podgpu runs against hostile peers on loopback.

    .venv/bin/python -m bench.hostile_clients bridge --seconds 60 --out bench/results/...json
    .venv/bin/python -m bench.hostile_clients top --out ...
    .venv/bin/python -m bench.hostile_clients emf --seconds 80 --out ...
    .venv/bin/python -m bench.hostile_clients spool --spool-mib 287 --out ...

Add `--src DIR` to run another checkout's `src/` (e.g. `git archive <rev> src | tar -x -C DIR`)
for the before figures; every podgpu process runs under an address-space limit (`--as-limit-gib`,
default 3) so a before run that would take gigabytes fails instead of taking the machine.

- bridge: `podgpu emf` scraping a good target beside a gzip bomb (2 GiB of zeros, ~2 MB),
  a 100 MB body, 750,000 series and a target trickling 1 byte/s (choose with `--bad`), 1 s
  interval: peak RSS, the good target's ok/error scrapes, /health's code and each target's status,
  the time SIGTERM takes.
- top: `podgpu top --once --timeout 10` against two good nodes, a node with 400,000 pods (~140 MB
  of snapshot), and hostile ones (escape sequences, deep JSON, missing key, wrong type, Infinity,
  a trickle, a gzip bomb); wall time, peak RSS, control bytes in the output, good nodes rendered.
- emf: `podgpu serve --simulate 2` sending EMF to a CloudWatch endpoint that trickles its answer:
  /health's emf status every second, and the shutdown's accounting line.
- spool: `podgpu serve --simulate 1` starting on a spool of `--spool-mib` of valid events (plus a
  FIFO and a symlink to /dev/zero with `--traps`): peak RSS at start and the start-up time.

The peers are tests/hostile_peers.py (a real TCP server misbehaving on purpose).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

from tests.harness import free_port  # noqa: E402
from tests.hostile_peers import HostilePeers, gzip_bomb  # noqa: E402

SEED = ROOT / "tests" / "fixtures" / "seed" / "cwagent-config.json"
BAD = {"bomb": "/bomb?mib=2048", "huge": "/huge?mib=100", "series": "/series?n=750000",
       "trickle": "/trickle"}
CREDS = {"AWS_ACCESS_KEY_ID": "AKIDEXAMPLE", "AWS_SECRET_ACCESS_KEY": "secret",
         "AWS_EC2_METADATA_DISABLED": "true"}


def podgpu(args: list[str], src: str | None, limit_gib: float, **kw: Any) -> subprocess.Popen[str]:
    env = {**os.environ, "NODE_NAME": "bench-node", **kw.pop("env", {})}
    if src:
        env["PYTHONPATH"] = src
    limit = int(limit_gib * (1 << 30))

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    return subprocess.Popen([sys.executable, "-m", "podgpu", *args], env=env, text=True,
                            preexec_fn=cap, **kw)


def get(url: str, timeout: float = 3.0) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except OSError as exc:
        return 0, str(exc)


def proc_kib(pid: int, key: str) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def stop(proc: subprocess.Popen[str], sig: int = signal.SIGTERM) -> dict[str, Any]:
    t0 = time.monotonic()
    if proc.poll() is None:
        proc.send_signal(sig)
    try:
        _, err = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
        return {"rc": "killed after 30 s", "stop_seconds": None, "stderr_tail": (err or "")[-2000:]}
    return {"rc": proc.returncode, "stop_seconds": round(time.monotonic() - t0, 2),
            "stderr_tail": (err or "")[-2000:]}


def scrape_counts(metrics: str, target: str) -> tuple[int, int]:
    out = {"ok": 0, "error": 0}
    for line in metrics.splitlines():
        for r in out:
            if line.startswith(f'podgpu_emf_scrapes_total{{target="{target}",result="{r}"}} '):
                out[r] = int(float(line.rsplit(" ", 1)[1]))
    return out["ok"], out["error"]


def bench_bridge(a: argparse.Namespace) -> dict[str, Any]:
    peers = HostilePeers()
    bad = {k: peers.url(BAD[k]) for k in a.bad.split(",") if k}
    good = peers.url("/good")
    if "bomb" in bad:
        peers.bombs[2048] = gzip_bomb(2048)  # built before the clock starts
    if "series" in bad:
        peers.series[750_000] = ("# TYPE many gauge\n" + "".join(
            f'many{{i="{i}"}} {i}\n' for i in range(750_000))).encode()
    port = free_port()
    args = ["emf", "--scrape", good, *[x for u in bad.values() for x in ("--scrape", u)],
            "--scrape-interval", "1", "--scrape-timeout", "1", "--emf-interval", "10",
            "--cloudwatch-config", str(SEED), "--cluster-name", "bench", "--emf-destination",
            "stdout", "-a", f"127.0.0.1:{port}"]
    proc = podgpu(args, a.src, a.as_limit_gib, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    base = f"http://127.0.0.1:{port}"
    samples: list[dict[str, Any]] = []
    t0 = time.monotonic()
    while time.monotonic() - t0 < a.seconds and proc.poll() is None:
        code, _body = get(base + "/health", timeout=5)
        mcode, metrics = get(base + "/metrics", timeout=5)
        ok, err = scrape_counts(metrics, good) if mcode == 200 else (None, None)
        samples.append({"t": round(time.monotonic() - t0, 1), "health": code,
                        "rss_mib": round(proc_kib(proc.pid, "VmRSS") / 1024, 1),
                        "good_ok": ok, "good_error": err})
        time.sleep(1.0)
    health = get(base + "/health")[1]
    metrics = get(base + "/metrics")[1]
    peak = proc_kib(proc.pid, "VmHWM") / 1024
    alive = proc.poll() is None
    result = stop(proc)
    peers.close()
    ok, err = scrape_counts(metrics, good)
    try:
        targets = json.loads(health).get("targets", {})
    except ValueError:
        targets = {"unparsable": health[:200]}
    return {"bad": list(bad), "seconds": a.seconds, "alive_at_end": alive,
            "peak_rss_mib": round(peak, 1), "good_ok": ok, "good_error": err,
            "health_codes": {str(c): sum(1 for s in samples if s["health"] == c)
                             for c in sorted({s["health"] for s in samples})},
            "targets": targets, **result, "samples": samples}


def snapshot_doc(node: str, pods: int) -> bytes:
    from tests.unit.test_top import GIB, view

    d = view(node, {f"p{i}": (0.5, GIB) for i in range(min(pods, 4))}, taken_at=time.time())
    if pods > 4:
        pod = json.dumps(d["pods"][0])
        body = json.dumps({**d, "pods": []}).encode()
        many = ",".join(pod for _ in range(pods)).encode()
        return body.replace(b'"pods": []', b'"pods": [' + many + b"]")
    return json.dumps(d).encode()


def bench_top(a: argparse.Namespace) -> dict[str, Any]:
    peers = HostilePeers()
    evil = json.loads(snapshot_doc("evil\x1b]0;pwned\x07\x1b[2J\x9b\u202e", 2))
    evil["pods"][0]["pod"] = "\x1b[31m\u202epod\x85"
    docs = {"/good1": snapshot_doc("good-one", 2), "/good2": snapshot_doc("good-two", 2),
            "/evil": json.dumps(evil).encode(),
            "/many": snapshot_doc("many-pods", a.pods),
            "/deep": b'{"schema": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
            "/infinity": snapshot_doc("inf", 2).replace(b'"cycle": 4', b'"cycle": Infinity')}
    for path, body in docs.items():
        peers.set_body(path, body)
    names = [n for n in a.nodes.split(",") if n]
    urls = [peers.url("/" + n) for n in names]
    t0 = time.monotonic()
    proc = podgpu(["top", "--once", "--timeout", "10", "--width", "200", *urls], a.src,
                  a.as_limit_gib, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        out, err = proc.communicate(timeout=a.seconds)
        rc: Any = proc.returncode
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        rc = f"killed after {a.seconds} s"
    wall = time.monotonic() - t0
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    peers.close()
    raw = out.encode("utf-8", "surrogateescape")
    controls = sum(1 for b in raw if b < 0x20 and b != 0x0A)
    c1_bidi = sum(1 for c in out if 0x80 <= ord(c) < 0xA0 or 0x202A <= ord(c) <= 0x202E
                  or 0x2066 <= ord(c) <= 0x2069)
    lines = out.splitlines()
    return {"nodes": names, "many_pods": a.pods, "many_body_mb": round(len(docs["/many"]) / 1e6, 1),
            "rc": rc, "wall_seconds": round(wall, 2), "peak_rss_mib_children": round(peak, 1),
            "control_bytes": controls, "c1_or_bidi_chars": c1_bidi,
            "good_rendered": [n for n in ("good-one", "good-two")
                              if any(line.startswith(n + "  ") for line in lines)],
            "node_lines": [line[:160] for line in lines if "DEAD" in line or "BAD" in line],
            "stderr_tail": err[-1500:]}


def bench_emf(a: argparse.Namespace) -> dict[str, Any]:
    peers = HostilePeers()
    port = free_port()
    args = ["serve", "--simulate", "2", "-a", f"127.0.0.1:{port}", "--cloudwatch-config",
            str(SEED), "--cluster-name", "bench", "--aws-region", "us-east-1",
            "--emf-endpoint-url", peers.url("/trickle"), "--emf-interval", "5",
            "--emf-keep-unmatched"]
    proc = podgpu(args, a.src, a.as_limit_gib, stdout=subprocess.DEVNULL,
                  stderr=subprocess.PIPE, env=CREDS)
    base = f"http://127.0.0.1:{port}"
    seen: list[dict[str, Any]] = []
    t0 = time.monotonic()
    while time.monotonic() - t0 < a.seconds and proc.poll() is None:
        _code, body = get(base + "/health")
        try:
            emf = json.loads(body).get("sinks", json.loads(body)).get("emf", {})
        except (ValueError, AttributeError):
            emf = {}
        status = str(emf.get("status", ""))[:120]
        if not seen or seen[-1]["status"] != status:
            seen.append({"t": round(time.monotonic() - t0, 1), "status": status,
                         "queued_events": emf.get("queued_events")})
        time.sleep(1.0)
    result = stop(proc)
    peers.close()
    lines = [line for line in result["stderr_tail"].splitlines()
             if "shutdown" in line or "unsent" in line]
    return {"seconds": a.seconds, "status_changes": seen, "shutdown_lines": lines,
            "rc": result["rc"], "stop_seconds": result["stop_seconds"]}


def bench_spool(a: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="podgpu-spool-") as tmp:
        line = json.dumps({"_aws": {"Timestamp": int(time.time() * 1000), "CloudWatchMetrics": [
            {"Namespace": "bench", "Dimensions": [["gpu"]], "Metrics": [{"Name": "m"}]}]},
            "gpu": "0", "m": 1, "pad": "x" * 900}) + "\n"
        per_file = (1 << 20) // len(line)
        files = max(1, (a.spool_mib << 20) // (per_file * len(line)))
        ts = int(time.time() * 1000) - files * 1000
        for i in range(files):
            Path(tmp, f"{ts + i * 1000:015d}-1-{i:06d}.jsonl").write_text(line * per_file)
        if a.traps:
            os.mkfifo(Path(tmp, f"{ts - 1:015d}-1-999998.jsonl"))
            Path(tmp, f"{ts - 2:015d}-1-999999.jsonl").symlink_to("/dev/zero")
        port = free_port()
        t0 = time.monotonic()
        proc = podgpu(["serve", "--simulate", "1", "-a", f"127.0.0.1:{port}",
                       "--cloudwatch-config", str(SEED), "--cluster-name", "bench",
                       "--emf-destination", "stdout", "--emf-spool-dir", tmp], a.src,
                      a.as_limit_gib, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        ready = None
        while time.monotonic() - t0 < a.seconds and proc.poll() is None:
            if get(f"http://127.0.0.1:{port}/metrics", timeout=1)[0] == 200:
                ready = round(time.monotonic() - t0, 2)
                break
            time.sleep(0.1)
        time.sleep(2.0)
        peak = proc_kib(proc.pid, "VmHWM") / 1024
        result = stop(proc)
        left = len(list(Path(tmp).glob("*.jsonl")))
    return {"spool_mib": a.spool_mib, "files": files, "events": files * per_file,
            "traps": a.traps, "ready_seconds": ready, "peak_rss_mib": round(peak, 1),
            "files_left": left, "rc": result["rc"],
            "log": [x for x in result["stderr_tail"].splitlines() if "spool" in x.lower()][-5:]}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("what", choices=("bridge", "top", "emf", "spool"))
    p.add_argument("--seconds", type=float, default=60.0)
    p.add_argument("--src", default=None, help="a checkout's src/ to run instead of this one's")
    p.add_argument("--as-limit-gib", type=float, default=3.0)
    p.add_argument("--bad", default="bomb,huge,series,trickle")
    p.add_argument("--nodes", default="good1,evil,many,deep,infinity,trickle,bomb,huge,good2")
    p.add_argument("--pods", type=int, default=400_000)
    p.add_argument("--spool-mib", type=int, default=287)
    p.add_argument("--traps", action="store_true")
    p.add_argument("--out", default=None)
    a = p.parse_args()
    fn = {"bridge": bench_bridge, "top": bench_top, "emf": bench_emf, "spool": bench_spool}
    result = {"what": a.what, "src": a.src or "working tree", "argv": sys.argv[1:],
              "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
              **fn[a.what](a)}
    text = json.dumps(result, indent=1)
    if a.out:
        Path(a.out).write_text(text + "\n")
    print(text if len(text) < 6000 else json.dumps({k: v for k, v in result.items()
                                                    if k != "samples"}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
