"""Basic auth under a distributed password-guessing flood: is a legitimate scraper still checked?

    .venv/bin/python -m bench.auth_flood --out bench/results/auth-flood-<date>.json \\
        [--src /tmp/before/src]     # another podgpu tree (a `git archive` of an older commit)

One `podgpu serve --simulate 1` with a web config holding one user (`prometheus`, a bcrypt hash
of `--cost`) on loopback plain HTTP. `--threads` guessing threads each loop: a fresh connection
from the next of `--addresses` loopback source addresses (127.0.0.2 upwards; 127.0.0.x only),
one `GET /metrics` with the right user and a wrong password, read the status, close. After
`--head-start` seconds of flood a scraper from 127.0.0.1 (an address the flood never uses),
whose password the agent has not checked yet, scrapes once per `--interval` s with the right
password and a `--timeout` (Prometheus' default scrape timeout is 10 s), a fresh connection
each time, until `--duration` s of flood have passed. Reported: the scraper's answers (200,
429, timeouts), the flood's answers, the password checks per source address the flood got
(401s; the per-address throttle allows 10 at once plus 1 a second), and the agent's own
counters from /metrics.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import socket
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

from tests.harness import Serve, scrape

RIGHT = b"prometheus:the right one"


def basic(pair: bytes) -> str:
    return "Basic " + base64.b64encode(pair).decode()


def one_get(source: str, port: int, auth: str, timeout: float) -> str:
    """Status of one GET /metrics from `source` on a fresh connection, or 'timeout' / 'error'."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout,
                                      source_address=(source, 0)) as s:
            s.sendall(f"GET /metrics HTTP/1.1\r\nHost: x\r\nAuthorization: {auth}\r\n"
                      "Connection: close\r\n\r\n".encode())
            head = b""
            while b"\r\n" not in head:
                chunk = s.recv(4096)
                if not chunk:
                    return "closed"
                head += chunk
            return head.split(b" ", 2)[1].decode()
    except TimeoutError:
        return "timeout"
    except OSError as exc:
        return f"error {exc.errno}"


def flood(port: int, addresses: list[str], threads: int, stop: threading.Event
          ) -> tuple[Counter[str], dict[str, Counter[str]]]:
    totals: Counter[str] = Counter()
    per_address: dict[str, Counter[str]] = {a: Counter() for a in addresses}
    lock = threading.Lock()
    cursor = [0]

    def guesser(n: int) -> None:
        i = 0
        while not stop.is_set():
            with lock:
                source = addresses[cursor[0] % len(addresses)]
                cursor[0] += 1
            status = one_get(source, port, basic(b"prometheus:guess-%d-%d" % (n, i)), 15.0)
            i += 1
            with lock:
                totals[status] += 1
                per_address[source][status] += 1

    workers = [threading.Thread(target=guesser, args=(n,), daemon=True) for n in range(threads)]
    for w in workers:
        w.start()
    stop.wait()
    for w in workers:
        w.join(20)
    return totals, per_address


def run(a: argparse.Namespace) -> dict[str, Any]:
    import bcrypt

    addresses = [f"127.0.0.{2 + i}" for i in range(a.addresses)]
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "web.yml"
        hashed = bcrypt.hashpw(RIGHT.split(b":", 1)[1], bcrypt.gensalt(a.cost)).decode()
        config.write_text(f"basic_auth_users:\n  prometheus: '{hashed}'\n")
        with Serve(["--simulate", "1", "--simulate-scenario", "none", "-c", "1000",
                    "--web-config-file", str(config)], src=a.src) as agent:
            stop = threading.Event()
            result: dict[str, Any] = {}
            flooder = threading.Thread(
                target=lambda: result.update(zip(("flood", "per_address"),
                                                 flood(agent.port, addresses, a.threads, stop),
                                                 strict=True)), daemon=True)
            t0 = time.monotonic()
            flooder.start()
            time.sleep(a.head_start)
            scrapes: list[dict[str, Any]] = []
            while time.monotonic() - t0 < a.duration:
                started = time.monotonic()
                status = one_get("127.0.0.1", agent.port, basic(RIGHT), a.timeout)
                scrapes.append({"at_s": round(started - t0, 2), "status": status,
                                "seconds": round(time.monotonic() - started, 3)})
                time.sleep(max(0.0, a.interval - (time.monotonic() - started)))
            stop.set()
            flooder.join(30)
            _, body = scrape(agent.url + "/metrics", headers={"Authorization": basic(RIGHT)},
                             timeout=30)
            counters = [line for line in body.decode().splitlines()
                        if line.startswith(("podgpu_http_auth", "podgpu_http_bcrypt",
                                                     "podgpu_http_requests_denied"))]
    load = os.getloadavg()[0]
    per_address = result["per_address"]
    checks = [c["401"] for c in per_address.values()]
    ok = sum(s["status"] == "200" for s in scrapes)
    return {
        "shape": {"threads": a.threads, "addresses": a.addresses, "cost": a.cost,
                  "duration_s": a.duration, "head_start_s": a.head_start,
                  "scrape_interval_s": a.interval, "scrape_timeout_s": a.timeout},
        "scraper": {"answered_200": ok, "scrapes": len(scrapes),
                    "statuses": dict(Counter(s["status"] for s in scrapes)),
                    "first_200_at_s": next((s["at_s"] for s in scrapes if s["status"] == "200"),
                                           None),
                    "slowest_s": max((s["seconds"] for s in scrapes), default=None),
                    "log": scrapes},
        "flood": dict(result["flood"]),
        "flood_checks_per_address": {"max": max(checks), "median": sorted(checks)[len(checks) // 2],
                                     "allowed_max": 10 + int(a.duration)},
        "agent_counters": counters,
        "load_average_1m_at_end": round(load, 1),  # this machine's, other work included
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=64)
    ap.add_argument("--addresses", type=int, default=250, help="127.0.0.2 upwards, at most 250")
    ap.add_argument("--cost", type=int, default=10)
    ap.add_argument("--duration", type=float, default=32.0)
    ap.add_argument("--head-start", type=float, default=3.0)
    ap.add_argument("--interval", type=float, default=1.0)
    ap.add_argument("--timeout", type=float, default=10.0)
    ap.add_argument("--src", type=Path, help="podgpu sources to run (e.g. an older commit's)")
    ap.add_argument("--out", type=Path)
    a = ap.parse_args()
    if not 1 <= a.addresses <= 250:
        ap.error("--addresses: 1 to 250 (127.0.0.2-127.0.0.251)")
    res = run(a)
    res["command"] = " ".join(sys.argv)
    res["src"] = str(a.src) if a.src else "this tree"
    summary = {k: v for k, v in res.items() if k != "scraper"}
    summary["scraper"] = {k: v for k, v in res["scraper"].items() if k != "log"}
    print(json.dumps(summary, indent=1))
    if a.out:
        a.out.write_text(json.dumps(res, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
