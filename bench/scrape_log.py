#!/usr/bin/env python3
"""Record a scrape log: GET a podgpu /metrics every second for N seconds (standard library only,
so it runs on a GPU machine with nothing installed).

Output, one JSON object per line (the format bench/archive/h200_prod_run.py at commit 2fed943 also
writes, and bench/scrape_picture.py reads):

    {"t": <unix seconds, float>, "body": "<the /metrics text exactly as served>"}
    {"t": <unix seconds, float>, "error": "<why the scrape failed>"}

    python3 -m bench.scrape_log http://127.0.0.1:9400/metrics 180 h200-scrape-log.jsonl
"""

from __future__ import annotations

import json
import sys
import time
import urllib.request


def scrape(url: str, timeout: float) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return str(r.read().decode("utf-8"))


def record(url: str, seconds: float, path: str, interval: float = 1.0) -> int:
    """Scrape on a fixed 1 s grid (a slow scrape skips ticks, as Prometheus would); returns the
    number of lines written."""
    n = 0
    start = time.time()
    with open(path, "w", encoding="utf-8") as out:
        tick = 0
        while True:
            due = start + tick * interval
            if due > start + seconds:
                break
            time.sleep(max(0.0, due - time.time()))
            t = time.time()
            try:
                line = {"t": round(t, 3), "body": scrape(url, timeout=interval)}
            except OSError as exc:
                line = {"t": round(t, 3), "error": str(exc)}
            out.write(json.dumps(line) + "\n")
            out.flush()
            n += 1
            tick = int((time.time() - start) // interval) + 1
    return n


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    url, seconds, path = argv
    try:
        secs = float(seconds)
    except ValueError:
        print(f"scrape_log.py: SECONDS {seconds!r} is not a number", file=sys.stderr)
        return 2
    n = record(url, secs, path)
    print(f"scrape_log.py: {n} scrapes of {url} written to {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
