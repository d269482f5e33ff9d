"""Open the NVML backend on a real GPU and read every catalog field a few times.

Usage: PYTHONPATH=src python3 -m bench.archive.nvml_smoke [OUT.json]
Prints each field as value or missing reason, per-read wall/CPU time, and GPU processes; with a
path, writes the same as JSON. A first look at a new GPU/driver before the full proof.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
import time

from podgpu.backends.nvml import NvmlBackend
from podgpu.fields.catalog import CATALOG


def _load(stop: threading.Event) -> None:
    """A little GPU work so processes and utilisation have something to show."""
    try:
        import torch
    except ImportError:
        return
    a = torch.randn(4096, 4096, device="cuda")
    while not stop.is_set():
        for _ in range(20):
            a @ a
        torch.cuda.synchronize()


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    backend = NvmlBackend()
    t0 = time.perf_counter()
    backend.open()
    out: dict[str, object] = {"open_seconds": time.perf_counter() - t0, "info": backend.info(),
                              "devices": [str(d) for d in backend.devices()],
                              "unavailable": backend.unavailable_fields()}
    stop = threading.Event()
    loader = threading.Thread(target=_load, args=(stop,), daemon=True)
    loader.start()
    reads = []
    for i in range(4):
        w0, c0 = time.perf_counter(), time.process_time()
        reading = backend.read(CATALOG, processes=True)
        w1, c1 = time.perf_counter(), time.process_time()
        reads.append({"wall_ms": (w1 - w0) * 1e3, "cpu_ms": (c1 - c0) * 1e3,
                      "lost": reading.lost, "errors": reading.errors})
        if i < 3:
            time.sleep(1.0)
    stop.set()
    for s in reading.samples:
        out.setdefault("samples", []).append({  # type: ignore[union-attr]
            "device": s.device.key,
            "values": dict(s.values),
            "missing": dict(s.missing),
            "labeled": [(lv.field, lv.labels, lv.value) for lv in s.labeled],
        })
    out["reads"] = reads
    out["processes"] = [p.__repr__() for p in reading.processes]
    backend.close()
    for s in reading.samples:
        print(f"== {s.device}")
        for f in CATALOG:
            if f.name in s.values:
                print(f"  {f.name:48s} = {s.values[f.name]!r}")
            elif f.name in s.missing:
                print(f"  {f.name:48s} - {s.missing[f.name]}")
        for lv in s.labeled:
            print(f"  {lv.field}{dict(lv.labels)} = {lv.value}")
    print("reads:", json.dumps(reads))
    print("processes:", out["processes"])
    if len(sys.argv) > 1:
        with open(sys.argv[1], "w", encoding="utf-8") as fh:
            json.dump(out, fh, indent=1, default=str)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
