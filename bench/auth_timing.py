"""Basic auth timing: known against unknown users for passwords of 1 to 200 bytes.

    .venv/bin/python -m bench.auth_timing --cost 10 --repeat 15 --out bench/results/auth-timing-<date>.json

Runs `BasicAuthChecker.check` as the web config's middleware calls it (a real bcrypt hash of
`--cost`, the worker thread, the caches), for each password length, `--repeat` distinct wrong
passwords (so no cache answers) for a configured user and for an unknown one, interleaved, each
from its own client address (so the failure throttle does not answer either). Reports the median
time per (length, user) and the ratio known/unknown per length, measured in the same run.
Before the fix a 73-byte password took 1.1 ms for a known user and 70.6 ms for an unknown one.
The CI form (cost 6, ratios only): tests/unit/http/test_auth_oracles.py.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path

from bench.sources import run_from

LENGTHS = (1, 8, 32, 71, 72, 73, 100, 200)


async def measure(cost: int, repeat: int) -> dict[str, object]:
    import bcrypt

    try:
        from podgpu.http.authcheck import BasicAuthChecker
    except ImportError:  # older trees: the checker lived in http.auth
        from podgpu.http.auth import BasicAuthChecker
    users = {"prometheus": bcrypt.hashpw(b"the right one", bcrypt.gensalt(cost)).decode()}
    checker = BasicAuthChecker()
    rows = []
    for length in LENGTHS:
        times: dict[str, list[float]] = {"known": [], "unknown": []}
        for i in range(repeat):
            order = ("known", "unknown") if i % 2 else ("unknown", "known")
            for who in order:
                user = b"prometheus" if who == "known" else b"mallory"
                tag = bytes([65 + 2 * i + (who == "known")])  # distinct, so no cache answers
                password = (tag + f"{i}:{who}:".encode() + b"x" * length)[:length]
                t0 = time.perf_counter()
                try:
                    ok = await checker.check(users, user, password,
                                             client=f"{who}-{length}-{i}")
                except TypeError:  # older trees: no client (and no throttle)
                    ok = await checker.check(users, user, password)
                times[who].append((time.perf_counter() - t0) * 1000)
                assert ok is False
        known, unknown = statistics.median(times["known"]), statistics.median(times["unknown"])
        rows.append({"length": length, "known_ms": round(known, 2),
                     "unknown_ms": round(unknown, 2), "ratio": round(known / unknown, 3),
                     "known_spread_ms": [round(min(times["known"]), 2),
                                         round(max(times["known"]), 2)],
                     "unknown_spread_ms": [round(min(times["unknown"]), 2),
                                           round(max(times["unknown"]), 2)]})
        print(json.dumps(rows[-1]), flush=True)
    checker.close()
    return {"cost": cost, "repeat": repeat, "bcrypt_runs": checker.bcrypt_runs, "rows": rows}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cost", type=int, default=10)
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--src", type=Path, help="podgpu sources to measure (e.g. an older commit's)")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    run_from(args.src, "bench.auth_timing")
    res = asyncio.run(measure(args.cost, args.repeat))
    res["command"] = sys.argv
    if args.out:
        args.out.write_text(json.dumps(res, indent=1) + "\n")
    rows = res["rows"]
    assert isinstance(rows, list)
    ratios = [float(r["ratio"]) for r in rows]
    return 0 if all(0.8 <= r <= 1.25 for r in ratios) else 1


if __name__ == "__main__":
    sys.exit(main())
