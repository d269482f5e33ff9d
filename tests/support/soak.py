"""Soak: `podgpu serve --simulate 8 -k` for an hour against the gRPC kubelet stand-in whose pods
churn, scraped every second; RSS, open descriptors, threads and series sampled every 10 s.

    .venv/bin/python -m bench.soak --duration 3600 --out bench/results/soak-<date>.json

What it holds podgpu to, after a warm-up (the first `--warmup` seconds):
- resident memory grows by at most `--rss-bound-mib` (default 4 MiB) from the first sample after
  warm-up to the last, and its least-squares slope stays under 1 MiB per hour;
- open file descriptors and threads stay within +-2 of their post-warm-up minimum;
- the series count never exceeds what the pods present at that moment explain (no series of a
  deleted pod outlives it), checked on every scrape: device series with pod labels are counted
  and compared with the kubelet's current allocations;
- zero failed scrapes.

The pods: every `--churn-every` seconds some GPUs lose their pod and others gain a new one (a new
name each time, so every generation is a new label set), exclusive or time-sliced (`::N` ids).
The short form runs in CI (tests/integration/test_soak_short.py): it checks counts, not time.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from podgpu.sim.backend import MODELS, SimulatedBackend
from tests.harness import ROOT, free_port, proc_sample
from tests.integration.kubelet_fake import FakeContainer, FakeKubelet, FakePod, socket_path


@dataclass
class Sample:
    t: float
    rss_kib: int
    fds: int
    threads: int
    series: int
    scrapes: int
    failed: int
    pods: int


@dataclass
class Result:
    command: list[str]
    duration_s: float
    samples: list[Sample] = field(default_factory=list)
    scrapes: int = 0
    failed_scrapes: int = 0
    failures: list[str] = field(default_factory=list)
    generations: int = 0
    stale_series_seen: int = 0
    scrapes_with_pods: int = 0
    """Scrapes that showed pod labels at all (the stale-series check is vacuous without them)."""
    commit: str = ""
    verdict: dict[str, object] = field(default_factory=dict)


class Churn:
    """Replaces some GPUs' pods every `every` seconds; knows which pods exist right now."""

    def __init__(self, kubelet: FakeKubelet, uuids: list[str], seed: int = 13) -> None:
        self.kubelet = kubelet
        self.uuids = uuids
        self.rng = random.Random(seed)
        self.generation = 0
        self.lock = threading.Lock()
        self.current: dict[str, FakePod] = {}
        self.recent: set[str] = set()
        """Pod names listed now or in the last three generations (a scrape shows a snapshot up to
        ~2 s old: kubelet poll, collect interval)."""
        self._history: list[set[str]] = []
        self.last_listed: dict[str, float] = {}
        """Pod name -> when it was last listed (monotonic s): accounting counters outlive a pod
        by the grace period."""

    def step(self) -> None:
        with self.lock:
            self.generation += 1
            before = set(self.current)
            pods: dict[str, FakePod] = {}
            for i, gpu in enumerate(self.uuids):
                kind = self.rng.random()
                if kind < 0.3:
                    continue  # idle GPU
                if kind < 0.8:
                    name = f"train-{self.generation}-{i}"
                    pods[name] = FakePod("soak", name, [FakeContainer("main", [
                        ("nvidia.com/gpu", [gpu])])])
                else:  # time-sliced: two pods, replicas 0 and 1
                    for r in (0, 1):
                        name = f"infer-{self.generation}-{i}-{r}"
                        pods[name] = FakePod("soak", name, [FakeContainer("server", [
                            ("nvidia.com/gpu", [f"{gpu}::{r}"])])])
            self.current = pods
            self._history = [*self._history[-2:], before]
            self.recent = set(pods).union(*self._history)
            now = time.monotonic()
            for name in before:
                self.last_listed[name] = now
            horizon = now - 3600.0
            self.last_listed = {k: t for k, t in self.last_listed.items() if t >= horizon}
            self.kubelet.set_pods(list(pods.values()))


ACCOUNTING = (b"podgpu_pod_gpu_allocated_seconds_total", b"podgpu_pod_gpu_used_seconds_total",
              b"podgpu_pod_gpu_energy_joules_total", b"podgpu_pod_gpu_memory_byte_seconds_total")
ACCOUNTING_GRACE_S = 2.0
"""The soak's --accounting-grace-period: a finished pod's counters must be gone within it plus
the accounting's prune cadence (accounting/integrate.py PRUNE_EVERY, 10 s)."""
ACCOUNTING_LINGER_S = ACCOUNTING_GRACE_S + 10.0 + 3.0  # + prune cadence + snapshot age


def count_series(body: bytes) -> tuple[int, set[str], set[str]]:
    """(sample lines, pod names on live series, pod names on accounting counters, which stay
    for the grace period after the pod is gone)."""
    n = 0
    pods: set[str] = set()
    counted: set[str] = set()
    for line in body.split(b"\n"):
        if not line or line.startswith(b"#"):
            continue
        n += 1
        i = line.find(b'pod="')
        if i >= 0:
            j = line.index(b'"', i + 5)
            (counted if line.startswith(ACCOUNTING) else pods).add(line[i + 5:j].decode())
    return n, pods, counted


def run_soak(*, duration: float, sample_every: float = 10.0, churn_every: float = 3.0,
             scrape_every: float = 1.0, gpus: int = 8, interval_ms: int = 1000,
             log: Path | None = None, progress: bool = False) -> Result:
    uuids = [d.uuid for d in SimulatedBackend(gpus, MODELS["H100"]).devices()]
    port = free_port()
    with socket_path() as sock:
        kubelet = FakeKubelet(sock).start()
        churn = Churn(kubelet, uuids)
        churn.step()
        cmd = [sys.executable, "-m", "podgpu", "serve", "--simulate", f"{gpus}xH100", "-k",
               "--pod-resources-kubelet-socket", sock, "-c", str(interval_ms),
               "--simulate-scenario", "none", "-a", f"127.0.0.1:{port}",
               "--accounting-grace-period", str(ACCOUNTING_GRACE_S)]
        env = {**os.environ, "NODE_NAME": "soak-node", "PYTHONPATH": str(ROOT / "src")}
        err = open(log, "w") if log else subprocess.DEVNULL  # noqa: SIM115
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, env=env)
        res = Result(command=cmd, duration_s=duration, commit=_commit())
        try:
            _wait_ready(port, proc)
            t0 = time.monotonic()
            next_scrape = next_sample = next_churn = t0
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            series = 0
            while (now := time.monotonic()) < t0 + duration:
                if proc.poll() is not None:
                    res.failures.append(f"podgpu exited {proc.returncode}")
                    break
                if now >= next_churn:
                    churn.step()
                    next_churn += churn_every
                if now >= next_scrape:
                    next_scrape += scrape_every
                    res.scrapes += 1
                    try:
                        conn.request("GET", "/metrics")
                        r = conn.getresponse()
                        body = r.read()
                        if r.status != 200:
                            raise OSError(f"status {r.status}")
                        with churn.lock:
                            allowed = set(churn.recent)
                            cutoff = time.monotonic() - ACCOUNTING_LINGER_S
                            counted_ok = allowed | {p for p, t in churn.last_listed.items()
                                                    if t >= cutoff}
                        series, pods, counted = count_series(body)
                        stale = (pods - allowed) | (counted - counted_ok)
                        res.scrapes_with_pods += bool(pods)
                        if stale:
                            res.stale_series_seen += 1
                            if len(res.failures) < 20:
                                res.failures.append(f"series of deleted pods {sorted(stale)[:3]}")
                    except (OSError, http.client.HTTPException) as exc:
                        res.failed_scrapes += 1
                        if len(res.failures) < 20:
                            res.failures.append(f"scrape: {type(exc).__name__}: {exc}")
                        conn.close()
                        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
                if now >= next_sample:
                    next_sample += sample_every
                    p = proc_sample(proc.pid)
                    res.samples.append(Sample(round(now - t0, 1), int(p["rss_kib"]), int(p["fds"]),
                                              int(p["threads"]), series, res.scrapes,
                                              res.failed_scrapes, len(churn.current)))
                    if progress:
                        print(json.dumps(asdict(res.samples[-1])), flush=True)
                time.sleep(max(0.0, min(next_scrape, next_sample, next_churn)
                               - time.monotonic()))
            conn.close()
        finally:
            res.generations = churn.generation
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    proc.kill()
            if proc.returncode not in (0, None):
                res.failures.append(f"podgpu exit status {proc.returncode}")
            kubelet.stop()
            if log:
                err.close()  # type: ignore[union-attr]
    return res


def _commit() -> str:
    try:
        out = subprocess.run(["git", "-C", str(ROOT), "describe", "--always", "--dirty"],
                             capture_output=True, text=True, timeout=10).stdout
    except OSError:
        return ""
    return out.strip()


def _wait_ready(port: int, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"podgpu exited {proc.returncode} before serving")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError("podgpu did not listen within 30 s")


def verdict(res: Result, *, warmup: float, rss_bound_mib: float) -> dict[str, object]:
    after = [s for s in res.samples if s.t >= warmup]
    out: dict[str, object] = {"warmup_s": warmup, "rss_bound_mib": rss_bound_mib,
                              "samples_after_warmup": len(after)}
    ok = res.failed_scrapes == 0 and res.stale_series_seen == 0 and not res.failures \
        and res.scrapes_with_pods > res.scrapes // 2
    if len(after) >= 2:
        rss = [s.rss_kib for s in after]
        ts = [s.t for s in after]
        mean_t, mean_r = sum(ts) / len(ts), sum(rss) / len(rss)
        var = sum((t - mean_t) ** 2 for t in ts) or 1.0
        slope = sum((t - mean_t) * (r - mean_r) for t, r in zip(ts, rss, strict=True)) / var
        growth = (rss[-1] - rss[0]) / 1024
        fds, thr = [s.fds for s in after], [s.threads for s in after]
        out.update(rss_first_mib=round(rss[0] / 1024, 2), rss_last_mib=round(rss[-1] / 1024, 2),
                   rss_max_mib=round(max(rss) / 1024, 2), rss_growth_mib=round(growth, 2),
                   rss_slope_mib_per_hour=round(slope * 3600 / 1024, 3),
                   fds_min=min(fds), fds_max=max(fds), threads_min=min(thr),
                   threads_max=max(thr), series_max=max(s.series for s in after))
        ok = ok and growth <= rss_bound_mib and slope * 3600 / 1024 < 1.0 \
            and max(fds) - min(fds) <= 2 and max(thr) - min(thr) <= 2
    out["ok"] = ok
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--duration", type=float, default=3600.0)
    ap.add_argument("--sample-every", type=float, default=10.0)
    ap.add_argument("--churn-every", type=float, default=3.0)
    ap.add_argument("--scrape-every", type=float, default=1.0)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--warmup", type=float, default=300.0)
    ap.add_argument("--rss-bound-mib", type=float, default=4.0)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--log", type=Path, help="podgpu's stderr goes here")
    args = ap.parse_args()
    res = run_soak(duration=args.duration, sample_every=args.sample_every,
                   churn_every=args.churn_every, scrape_every=args.scrape_every, gpus=args.gpus,
                   log=args.log, progress=True)
    res.verdict = verdict(res, warmup=args.warmup, rss_bound_mib=args.rss_bound_mib)
    doc = asdict(res)
    if args.out:
        args.out.write_text(json.dumps(doc, indent=1) + "\n")
    print(json.dumps({k: v for k, v in doc.items() if k != "samples"}, indent=1))
    return 0 if res.verdict["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
