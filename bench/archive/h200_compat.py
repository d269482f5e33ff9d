"""dcgm-exporter compatibility on a real GPU: every metric list dcgm-exporter ships, and a list of every DCGM field
name, through `podgpu serve` on NVML; which rows are exported, which are unavailable and why.

For each list (dcgm-exporter's default, dcp-metrics-included and 1.x lists with every commented
row enabled, the 1.x list with -o, and one row per DCGM name go-dcgm knows) it starts podgpu,
scrapes /metrics twice 2 s apart and /health, and classifies every row: exported under its own
name (with the first value seen), or named in podgpu_field_unavailable (with the reason), or
UNEXPLAINED (a bug). It also records the backend stage time per cycle of each list (the every-
field list includes nvmlDeviceGetPcieThroughput, ~20 ms per direction per GPU) and, from the
every-field run, the values of the fields added for compatibility (enforced power limit, temperature
thresholds, compute/persistence mode, PCIe link and throughput, per-link NVLink, HMMA/IMMA/DFMA/
INT pipes, GPU health, P2P status).

Writes one JSON document ($OUT/h200-compat.json, or argv[1]) and prints a summary; exit 1 when a
row is unexplained or a list did not start. `--dry-run` runs on a simulated H200 (no GPU needed).
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "src"))
FIXTURES = ROOT / "tests" / "fixtures" / "dcgm-exporter"
_SAMPLE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(?:\{(.*)\})?\s+(\S+)$")
_LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')
_COMMENTED = re.compile(r"^#\s*((?:DCGM_|dcgm_)\w+\s*,.*)$")
ISSUE9_FIELDS = (
    "DCGM_FI_DEV_ENFORCED_POWER_LIMIT", "DCGM_FI_DEV_POWER_MGMT_LIMIT_MIN",
    "DCGM_FI_DEV_POWER_MGMT_LIMIT_MAX", "DCGM_FI_DEV_POWER_MGMT_LIMIT_DEF",
    "DCGM_FI_DEV_GPU_MAX_OP_TEMP", "DCGM_FI_DEV_MEM_MAX_OP_TEMP", "DCGM_FI_DEV_SLOWDOWN_TEMP",
    "DCGM_FI_DEV_SHUTDOWN_TEMP", "DCGM_FI_DEV_COMPUTE_MODE", "DCGM_FI_DEV_PERSISTENCE_MODE",
    "DCGM_FI_DEV_MIG_MODE", "DCGM_FI_DEV_PCIE_TX_THROUGHPUT", "DCGM_FI_DEV_PCIE_RX_THROUGHPUT",
    "DCGM_FI_DEV_PCIE_LINK_GEN", "DCGM_FI_DEV_PCIE_LINK_WIDTH", "DCGM_FI_DEV_NVLINK_BANDWIDTH_L0",
    "DCGM_FI_PROF_PIPE_TENSOR_HMMA_ACTIVE", "DCGM_FI_PROF_PIPE_TENSOR_IMMA_ACTIVE",
    "DCGM_FI_PROF_PIPE_TENSOR_DFMA_ACTIVE", "DCGM_FI_PROF_PIPE_INT_ACTIVE",
    "DCGM_EXP_GPU_HEALTH_STATUS", "DCGM_EXP_P2P_STATUS", "DCGM_EXP_XID_ERRORS_COUNT",
    "DCGM_EXP_CLOCK_EVENTS_COUNT", "DCGM_FI_DEV_XID_ERRORS")


def parse(text: str) -> dict[str, list[tuple[dict[str, str], str]]]:
    out: dict[str, list[tuple[dict[str, str], str]]] = {}
    for line in text.splitlines():
        if line and not line.startswith("#") and (m := _SAMPLE.match(line)):
            out.setdefault(m[1], []).append((dict(_LABEL.findall(m[2] or "")), m[3]))
    return out


def rows(text: str) -> list[str]:
    return [ln.split(",")[0].strip() for ln in text.splitlines()
            if ln.strip() and not ln.strip().startswith("#")]


def lists(tmp: Path) -> list[tuple[str, Path, list[str]]]:
    from podgpu.fields import names

    out = []
    for name in ("default-counters.csv", "dcp-metrics-included.csv",
                 "1.x-compatibility-metrics.csv"):
        text = (FIXTURES / name).read_text()
        enabled = "\n".join(m[1] if (m := _COMMENTED.match(ln)) else ln
                            for ln in text.splitlines()) + "\n"
        p = tmp / f"all-{name}"
        p.write_text(enabled)
        out.append((f"{name} (all rows)", p, ["-o"] if name.startswith("1.x") else []))
    every = tmp / "every-field.csv"
    every.write_text("".join(f"{n}, gauge, every name\n" for n in sorted(names.ids())))
    out.append(("every DCGM name", every, []))
    return out


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def run_list(label: str, path: Path, extra: list[str], dry: bool, port: int) -> dict[str, Any]:
    args = [sys.executable, "-m", "podgpu", "serve", "-a", f"127.0.0.1:{port}", "-c", "1000",
            "-f", str(path), *extra, *(["--simulate", "2xH200"] if dry else [])]
    log = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 - closed in finally; not a pipe
    proc = subprocess.Popen(args, cwd=ROOT, stdout=log, stderr=log, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
    result: dict[str, Any] = {"list": label, "args": args[3:]}
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                if get(f"http://127.0.0.1:{port}/metrics")[0] == 200:
                    break
            except OSError:
                time.sleep(0.2)
        if proc.poll() is not None or time.monotonic() >= deadline:
            log.seek(0)
            result["started"] = False
            result["stderr"] = log.read()[-4000:]
            return result
        time.sleep(2.0)
        _, body = get(f"http://127.0.0.1:{port}/metrics")
        health = get(f"http://127.0.0.1:{port}/health")
        got = parse(body)
        unavailable = {s[0].get("field"): s[0].get("reason")
                       for s in got.get("podgpu_field_unavailable", [])}
        exported, unexplained, why = {}, [], {}
        for name in rows(path.read_text()):
            if name in got:
                exported[name] = got[name][0][1]
            elif name in unavailable:
                why[name] = unavailable[name]
            elif any(name in labels for fam in got.values() for labels, _ in fam):
                exported[name] = "(label)"
            else:
                unexplained.append(name)
        backend = [float(v) for labels, v in got.get("podgpu_collect_duration_seconds", [])
                   if labels.get("stage") == "backend"]
        result.update(started=True, health=health[0], exported=len(exported),
                      unavailable=len(why), unexplained=unexplained,
                      reasons=sorted(set(why.values())), backend_seconds=backend,
                      issue9_values={n: got[n][:4] for n in ISSUE9_FIELDS if n in got},
                      issue9_unavailable={n: why[n] for n in ISSUE9_FIELDS if n in why})
        return result
    finally:
        if proc.poll() is None:
            proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
        result["exit"] = proc.returncode
        log.close()


def main(argv: list[str]) -> int:
    dry = "--dry-run" in argv
    paths = [a for a in argv if not a.startswith("--")]
    out = Path(paths[0]) if paths else Path(os.environ.get("OUT", ".")) / "h200-compat.json"
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for label, path, extra in lists(Path(tmp)):
            r = run_list(label, path, extra, dry, free_port())
            results.append(r)
            print(f"{label:40} started={r.get('started')} exported={r.get('exported')} "
                  f"unavailable={r.get('unavailable')} unexplained={len(r.get('unexplained', []))}"
                  f" health={r.get('health')} backend_s={r.get('backend_seconds')}")
    doc = {"dry_run": dry, "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "results": results}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=1))
    print(f"wrote {out}")
    bad = [r for r in results if not r.get("started") or r.get("unexplained")]
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
