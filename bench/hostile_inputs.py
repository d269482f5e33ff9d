"""What podgpu reads, fed by hostile peers and files: memory, time and outcome per case, for a
before/after table (bench/RESULTS.md "Bounded inputs").

Each case runs in a child process whose podgpu comes from `--src` (a checkout's src/, e.g. an
older commit unpacked with `git archive`); the stand-ins come from this checkout's tests/
(hostile_peers.py, kubelet_fake.py, kubelet_hostile.py). The parent caps each case's wall time
and reports the child's peak RSS growth over its own start (sampled every 50 ms) and outcome.

    .venv/bin/python -m bench.hostile_inputs --src src            # this tree
    .venv/bin/python -m bench.hostile_inputs --src /tmp/old/src   # another tree
    .venv/bin/python -m bench.hostile_inputs --src src --only top-quotes,kubelet-2gib
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MIB = 1 << 20


def vmrss(pid: int | str = "self") -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) << 10
    except OSError:
        pass
    return 0


class Peak:
    """Samples a process's RSS every 50 ms; `growth` is the peak over the first sample."""

    def __init__(self, pid: int | str = "self") -> None:
        self.pid, self.base, self.peak = pid, vmrss(pid), 0
        self._stop = threading.Event()
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            self.peak = max(self.peak, vmrss(self.pid))

    def growth(self) -> float:
        self._stop.set()
        return max(0, self.peak - self.base) / MIB


# --- the cases, run in the child (podgpu from --src) -------------------------------------------

def case_podlist_endless() -> str:
    from tests.hostile_peers import hostile_peers

    from podgpu.attribution.kubeapi import KubeConfig
    from podgpu.attribution.podwatch import PODS_PATH, PodWatcher

    with hostile_peers() as peers:
        peers.aliases[PODS_PATH] = "/huge?mib=0"
        peak = Peak()
        w = PodWatcher("n1", configuration=KubeConfig(peers.url("")), max_backoff_seconds=30)
        w.start(wait_seconds=0)
        time.sleep(8)
        grown = peak.growth()
        w.close(timeout=0.5)
        return f"+{grown:.0f} MiB in 8 s; {w.errors} failed list(s)"


def case_kubelet_2gib() -> str:
    from tests.integration.kubelet_hostile import HostileKubelet

    from podgpu.attribution.kubelet import PodResourcesClient

    k = HostileKubelet(tempfile.mkdtemp() + "/k.sock", "huge")
    peak = Peak()
    st = PodResourcesClient(k.path, timeout_seconds=5).poll_once()
    grown = peak.growth()
    k.close()
    return f"+{grown:.0f} MiB; {st.reason[:60]}"


def case_kubelet_legal() -> str:
    code = ("import sys, time\n"  # tests/ from PYTHONPATH
            "from tests.integration.kubelet_fake import FakeKubelet, gpu_pod\n"
            "U = 'GPU-0a1b2c3d-1111-2222-3333-444455556666'\n"
            "k = FakeKubelet(sys.argv[1]); k.set_pods([gpu_pod('ns', f'p{i}', 'c', "
            "'nvidia.com/gpu', *(f'{U}::{i * 1000 + j}' for j in range(1000))) "
            "for i in range(300)]); k.start(); print('up', flush=True); time.sleep(600)\n")
    path = tempfile.mkdtemp() + "/k.sock"
    server = subprocess.Popen([sys.executable, "-c", code, path], stdout=subprocess.PIPE,
                              text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert server.stdout is not None
    server.stdout.readline()
    from podgpu.attribution.kubelet import PodResourcesClient

    client = PodResourcesClient(path)
    peak = Peak()
    ok = all(client.poll_once().ok for _ in range(6))
    grown = peak.growth()
    server.kill()
    return f"+{grown:.0f} MiB peak over 6 polls of a 15 MiB answer (300,000 ids); ok={ok}"


def case_bridge_sample() -> str:
    from tests.hostile_peers import hostile_peers

    from podgpu.bridge.scrape import ScrapeError, Target, parse_url

    labels = b",".join(b'l%d="v"' % i for i in range(330_000))[:3_900_000]
    with hostile_peers() as peers:
        peers.set_body("/one", b"# TYPE m gauge\nm{" + labels + b'x="y"} 1\n',
                       ctype="text/plain; version=0.0.4")
        u, instance = parse_url(peers.url("/one"))
        peak = Peak()
        t0 = time.perf_counter()
        try:
            Target(u, instance, 30.0).scrape()
            out = "parsed"
        except ScrapeError as exc:
            out = str(exc)[:60]
        return f"+{peak.growth():.0f} MiB, {time.perf_counter() - t0:.2f} s: {out}"


def _spool_name(ts: int, seq: int) -> str:
    try:
        from podgpu.sinks.cloudwatch.spool import segment_name
    except ImportError:  # an older tree: <ms>-<pid>-<seq>.jsonl
        return f"{ts:015d}-1-{seq:06d}.jsonl"
    return segment_name(ts, 1, seq)


def case_spool_tiny() -> str:
    from podgpu.sinks.cloudwatch.queue import EventQueue

    d = Path(tempfile.mkdtemp())
    for i in range(64):  # 64 MiB of 16-byte events
        (d / _spool_name(1000 + i, i + 1)).write_bytes(b'{"Timestamp":1}\n' * (MIB // 16))
    bound = 64 * MIB
    peak = Peak()
    q = EventQueue(bound, str(d))
    grown = peak.growth()
    return f"+{grown:.0f} MiB for a {bound // MIB} MiB bound ({grown * MIB / bound:.1f}x), {len(q)} events"


def case_spool_foreign() -> str:
    from podgpu.sinks.cloudwatch.queue import EventQueue

    d = Path(tempfile.mkdtemp())
    (d / "1700000000000-backup.jsonl").write_text('{"Timestamp":1,"theirs":1}\n' * 3)
    (d / "session.tmp").write_text("x")
    (d / "000000000001000-1-000001.jsonl").write_text('{"Timestamp":1}\n')
    q = EventQueue(MIB, str(d))
    left = sorted(p.name for p in d.iterdir())
    return f"{len(q)} foreign event(s) queued to send, {3 - len(left)} of 3 foreign files deleted"


def case_hpc() -> str:
    from podgpu.attribution.hpcjobs import HpcJobMapper

    d = Path(tempfile.mkdtemp())
    for gpu in range(8):
        (d / str(gpu)).write_text("".join(f"{i}\n" for i in range(13_000))[: 64 * 1024 - 8])
    jobs = HpcJobMapper(str(d)).read()
    n = sum(len(v) for v in jobs.values())
    return f"{n} jobs kept: x{n} copies of the GPUs' series (~40 each: {40 * n:,} series)"


def case_hpc_long() -> str:
    """8 mapping files of 64 job ids of 1,000 characters each, on a simulated 8-GPU node."""
    from podgpu.attribution.hpcjobs import HpcJobMapper
    from podgpu.collect import Collector
    from podgpu.fields.metriclist import load_default
    from podgpu.sim.backend import MODELS, SimulatedBackend
    from podgpu.sinks.prometheus.exposition import RenderOptions, render
    from podgpu.sinks.prometheus.labels import LabelOptions

    d = Path(tempfile.mkdtemp())
    for gpu in range(8):
        (d / str(gpu)).write_text("".join(f"{i:04d}{'x' * 996}\n" for i in range(64)))
    metrics = load_default()
    backend = SimulatedBackend(8, MODELS["H100"])
    backend.open()
    snap = Collector(backend, metrics.fields, hpc_jobs=HpcJobMapper(str(d)).read).cycle()
    text = render(snap, metrics, RenderOptions(LabelOptions(hostname="n")))
    return f"/metrics {len(text):,} bytes, {text.count(b'hpc_job=')} series with hpc_job"


def case_pod_events() -> str:
    from podgpu.attribution.podwatch import PodWatcher, parse_pod

    w = PodWatcher("n1")
    t0 = time.perf_counter()
    for i in range(9000):
        pod = parse_pod({"metadata": {
            "uid": f"u{i}", "namespace": "ns", "name": f"p{i}", "resourceVersion": str(i),
            "creationTimestamp": "2026-01-01T00:00:00Z"}})
        assert pod is not None
        w.apply("ADDED", pod)
    return (f"9,000 ADDED events applied in {time.perf_counter() - t0:.2f} s, "
            f"{len(w.index.by_uid)} pods kept")


INNER = {"podlist-endless": case_podlist_endless, "kubelet-2gib": case_kubelet_2gib,
         "kubelet-legal": case_kubelet_legal, "bridge-sample": case_bridge_sample,
         "spool-tiny": case_spool_tiny, "spool-foreign": case_spool_foreign, "hpc": case_hpc,
         "hpc-long": case_hpc_long,
         "pod-events": case_pod_events}


# --- the parent -------------------------------------------------------------------------------

AS_LIMIT = 3 << 30
"""Address space per child: a case that grows without bound ends in MemoryError at 3 GiB
instead of taking the machine."""


def _cap_memory() -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (AS_LIMIT, AS_LIMIT))


def run_child(argv: list[str], env: dict[str, str], cap: float,
              during: object = None) -> tuple[str, str, float, float, int | None]:
    """(stdout, stderr, seconds, peak RSS MiB, exit status or None when capped)."""
    t0 = time.monotonic()
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, preexec_fn=_cap_memory)
    peak = Peak(proc.pid)
    if callable(during):
        during(proc)
    try:
        out, err = proc.communicate(timeout=cap)
        rc: int | None = proc.returncode
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        rc = None
    peak.growth()
    return out, err, time.monotonic() - t0, peak.peak / MIB, rc


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--src", default=str(ROOT / "src"))
    ap.add_argument("--only", default="")
    ap.add_argument("--inner", default="")
    args = ap.parse_args()
    if args.inner:
        print(INNER[args.inner]())
        return 0
    src = str(Path(args.src).resolve())
    env = {**os.environ, "PYTHONPATH": f"{src}:{ROOT}", "NODE_NAME": "n1",
           "AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "x", "AWS_DEFAULT_REGION": "us-east-1"}
    py = [sys.executable]
    serve = [*py, "-m", "podgpu", "serve", "--simulate", "1", "-a", "127.0.0.1:0"]
    fifo = tempfile.mkdtemp() + "/fifo"
    os.mkfifo(fifo)
    from tests.hostile_peers import HostilePeers

    peers = HostilePeers()
    peers.set_body("/quotes", b'{"schema": "' + b'\\"' * 100_000)
    cw = ["--cloudwatch-config", str(ROOT / "deploy/cloudwatch/podgpu-declarations.json"),
          "--emf-endpoint-url", peers.url("/huge?mib=0"), "--aws-region", "us-east-1",
          "--cluster-name", "e2e", "--emf-interval", "1", "--emf-label",
          "Service=nvidia-dcgm-exporter", "--emf-namespace", "gpu-operator"]

    def storm(proc: subprocess.Popen[str]) -> None:
        time.sleep(4)
        for sig in [signal.SIGHUP] * 5000 + [signal.SIGTERM] * 2000:
            try:
                os.kill(proc.pid, sig)
            except ProcessLookupError:
                break

    outer: dict[str, tuple[list[str], float, object]] = {
        "config-zero": ([*serve, "--cloudwatch-config", "/dev/zero", "--emf-destination",
                         "stdout"], 12, None),
        "scenario-fifo": ([*serve, "--simulate-scenario", fifo], 10, None),
        "list-proc-mem": ([*serve, "-f", "/proc/self/mem"], 20, None),
        "top-quotes": ([*py, "-m", "podgpu", "top", "--once", "--timeout", "3",
                        peers.url("/quotes")], 60, None),
        "cw-endless": ([*serve, *cw], 25, None),
        "signal-storm": ([*serve, "-c", "100"], 60, storm),
    }
    names = [*outer, *INNER]
    if args.only:
        names = [n for n in names if n in args.only.split(",")]
    print(f"| case | outcome | seconds | peak RSS (MiB) |  ({src})")
    print("|---|---|---|---|")
    for name in names:
        if name in outer:
            argv, cap, during = outer[name]
            out, err, secs, grown, rc = run_child(argv, env, cap, during)
            text = out + err
            tracebacks = text.count("Traceback")
            last = text.strip().splitlines()[-1][:90] if text.strip() else ""
            what = (f"still running at {cap:g} s (killed)" if rc is None else f"exit {rc}") + \
                f"; {tracebacks} traceback(s); last line: {last}"
        else:
            text, err, secs, grown, rc = run_child([*py, __file__, "--inner", name, "--src", src],
                                                   env, 120)
            what = text.strip().splitlines()[-1][:140] if rc == 0 and text.strip() else \
                f"exit {rc}: {err.strip()[-140:]}" if rc is not None else "still running at 120 s"
        print(f"| {name} | {what.replace('|', '/')} | {secs:.1f} | {grown:.0f} |", flush=True)
    peers.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
