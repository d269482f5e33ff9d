"""Fault figures: the kubelet gone for minutes and back, against
`podgpu serve --simulate 8 -k` and the gRPC kubelet stand-in, scraped every second.

    .venv/bin/python -m bench.faults kubelet --outage 300 --out bench/results/faults-kubelet-<date>.json

Reported: scrapes during the outage that lacked any GPU's DCGM_FI_DEV_GPU_UTIL (target 0), the
collect cycles that advanced during the outage (target: one per interval), the scrape at which the
pod labels were gone after the kubelet left and back after it returned (in collect intervals,
target within two intervals and one collect cycle), `podgpu_collect_errors_total{source="kubelet"}` over the outage (the backoff
keeps it small), and RSS before and after. The short form is tests/integration/test_faults.py.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path

from podgpu.sim.backend import MODELS, SimulatedBackend
from tests.harness import ROOT, Serve, rss_fds, wait_for
from tests.integration.kubelet_fake import FakeKubelet, gpu_pod, socket_path


@dataclass
class KubeletOutage:
    outage_s: float
    interval_ms: int
    gpus: int
    scrapes: int = 0
    scrapes_missing_gpus: int = 0
    failed_scrapes: int = 0
    cycles_before: int = 0
    cycles_after_outage: int = 0
    outage_measured_s: float = 0.0
    labels_gone_after_intervals: float | None = None
    labels_back_after_intervals: float | None = None
    labels_back_after_cycles: int | None = None
    """Collect cycles between the kubelet's return and the first scrape with labels again."""
    kubelet_errors_during_outage: int = 0
    rss_mib_before: float = 0.0
    rss_mib_after: float = 0.0
    notes: list[str] = field(default_factory=list)


def scrape(url: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(url, timeout=5) as r:
        body = r.read().decode()
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for fam in text_string_to_metric_families(body):
        for s in fam.samples:  # by sample name: the parser drops _total from family names
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


def kubelet_outage(outage: float, interval_ms: int = 1000, gpus: int = 8,
                   port: int = 0) -> KubeletOutage:
    uuids = [d.uuid for d in SimulatedBackend(gpus, MODELS["H100"]).devices()]
    res = KubeletOutage(outage, interval_ms, gpus)
    interval = interval_ms / 1000
    with socket_path() as sock:
        kubelet = FakeKubelet(sock).start()
        kubelet.set_pods([gpu_pod("ml", "train-0", "main", "nvidia.com/gpu", uuids[0])])
        agent = Serve(["--simulate", f"{gpus}xH100", "-k", "--pod-resources-kubelet-socket", sock,
                       "-c", str(interval_ms), "--simulate-scenario", "none"],
                      port=port or None, src=ROOT / "src", node_name="faults")
        url = agent.url + "/metrics"
        try:
            agent.wait_ready()

            def labelled() -> bool:
                try:
                    util = scrape(url)["DCGM_FI_DEV_GPU_UTIL"]
                except OSError:
                    return False
                return any(lb.get("pod") == "train-0" for lb, _ in util)

            wait_for(labelled, timeout=30, what="train-0's labels", interval=0.1)
            res.rss_mib_before = round(rss_fds(agent.pid)[0], 1)

            def observe() -> tuple[bool, int, int] | None:
                res.scrapes += 1
                try:
                    m = scrape(url)
                except OSError:
                    res.failed_scrapes += 1
                    return None
                util = m.get("DCGM_FI_DEV_GPU_UTIL", [])
                if len({lb["gpu"] for lb, _ in util}) != gpus:
                    res.scrapes_missing_gpus += 1
                labelled = any(lb.get("pod") == "train-0" for lb, _ in util)
                cycles = int(m["podgpu_collect_cycles_total"][0][1])
                errs = int(next(v for lb, v in m["podgpu_collect_errors_total"]
                                if lb["source"] == "kubelet"))
                return labelled, cycles, errs

            first = observe()
            assert first is not None
            res.cycles_before = first[1]
            errs_before = first[2]
            kubelet.stop()
            t_stop = time.monotonic()
            while time.monotonic() - t_stop < outage:
                o = observe()
                if o is not None and not o[0] and res.labels_gone_after_intervals is None:
                    res.labels_gone_after_intervals = round((time.monotonic() - t_stop)
                                                            / interval, 1)
                time.sleep(interval)
            o = observe()
            assert o is not None
            res.outage_measured_s = round(time.monotonic() - t_stop, 1)
            res.cycles_after_outage = o[1]
            res.kubelet_errors_during_outage = o[2] - errs_before
            cycles_at_return = o[1]
            kubelet.start()
            t_back = time.monotonic()
            while time.monotonic() - t_back < 30:
                o = observe()
                if o is not None and o[0]:
                    res.labels_back_after_intervals = round((time.monotonic() - t_back)
                                                            / interval, 1)
                    res.labels_back_after_cycles = o[1] - cycles_at_return
                    break
                time.sleep(interval / 10)
            res.rss_mib_after = round(rss_fds(agent.pid)[0], 1)
        finally:
            agent.stop()
            kubelet.stop()
    return res


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("fault", choices=["kubelet"])
    ap.add_argument("--outage", type=float, default=300.0)
    ap.add_argument("--interval-ms", type=int, default=1000)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    res = kubelet_outage(args.outage, args.interval_ms)
    doc = asdict(res)
    if args.out:
        args.out.write_text(json.dumps(doc, indent=1) + "\n")
    print(json.dumps(doc, indent=1))
    return 0 if res.scrapes_missing_gpus == 0 and res.failed_scrapes == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
