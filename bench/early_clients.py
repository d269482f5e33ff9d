"""Clients that come while `podgpu serve` starts: each connects (retrying every 5 ms while the
port refuses), sends `GET /metrics` and reads the answer to its end; every answer must be a 200
with a GPU series (the first cycle's), never a 503 or a partial body.

    .venv/bin/python -m bench.early_clients --clients 1000 [--src DIR] [--fake-nvml]

podgpu listens before its first cycle ends and accepts once it is published, so clients that
come sooner wait in the kernel's backlog (128; beyond it the kernel drops their SYNs and they
retry). Prints how many got a complete /metrics, how many connects were refused while it
started, and when the first and the last answer came (seconds after spawn).
"""

from __future__ import annotations

import argparse
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import bench.startup
from bench.startup import SERIES, environment
from tests.harness import free_port

ROOT = Path(__file__).resolve().parents[1]


def client(port: int, t0: float, out: list[tuple[bool, float]], refused: list[int]) -> None:
    while time.perf_counter() - t0 < 30:
        try:
            sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        except ConnectionRefusedError:
            refused.append(1)
            time.sleep(0.005)
            continue
        with sock:
            sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: podgpu\r\nConnection: close\r\n\r\n")
            data = b""
            while chunk := sock.recv(65536):
                data += chunk
        out.append((data.startswith(b"HTTP/1.1 200 ") and SERIES["podgpu"] in data,
                    time.perf_counter() - t0))
        return


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, default=1000)
    ap.add_argument("--src", type=Path, default=ROOT / "src", help="the podgpu tree to start")
    ap.add_argument("--fake-nvml", action="store_true",
                    help="no GPU: podgpu over bench/slow_nvml's fake NVML")
    a = ap.parse_args()
    bench.startup.FAKE_NVML = a.fake_nvml
    port = free_port()
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "podgpu", "serve", "-a", f"127.0.0.1:{port}",
                             "-c", "1000"], env=environment(a.src.resolve()),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    out: list[tuple[bool, float]] = []
    refused: list[int] = []
    threads = [threading.Thread(target=client, args=(port, t0, out, refused))
               for _ in range(a.clients)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        proc.terminate()
        proc.wait(10)
    complete = [t for ok, t in out if ok]
    print(f"{a.clients} clients: {len(complete)} complete /metrics, {len(out) - len(complete)} "
          f"other answers, {a.clients - len(out)} none; {len(refused)} refused connects; "
          f"answers from {min(complete, default=0):.3f} to {max(complete, default=0):.3f} s")
    return 0 if len(complete) == a.clients else 1


if __name__ == "__main__":
    sys.exit(main())
