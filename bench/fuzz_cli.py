"""Fuzz `podgpu serve` through its CLI with hostile input files, counting tracebacks.

    .venv/bin/python -m bench.fuzz_cli --seconds 120 --out bench/results/fuzz-cli-<date>.json

Three targets, `--seconds` each: the web config (`--web-config-file`), the simulation scenario
(`--simulate-scenario`, JSON and YAML) and the metric list (`-f`). Each case is a file made from a
valid document by 1-4 random mutations (a value replaced by a hostile one: control characters,
escapes, bidi marks, huge numbers, NaN, deep nesting, long strings, wrong types; bytes inserted,
deleted or truncated; invalid UTF-8), or random bytes. Each case runs `podgpu.cli.main(argv)` in a
forked child (the modules are imported once, so a case costs milliseconds), with stderr captured:

- a traceback: "Traceback" in stderr, or an exception escaping main() (goal: 0);
- a hang: no exit within `--case-timeout` seconds (the child is killed);
- otherwise the exit status (2: refused as bad input, with a one-line `podgpu: ` message).

A case that `podgpu serve` accepts would serve forever, so every argv also carries a listen
address that is not on this machine (`-a 192.0.2.1:9400`): a valid input then ends at the bind
with exit 2 after the whole start-up ran. Reproducers of every traceback and hang are kept in the
result (the file's bytes, base64). The hypothesis form runs in CI:
tests/unit/http/test_fuzz_webconfig.py and tests/unit/test_fuzz_parsers.py.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import random
import signal
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from bench.sources import run_from

ROOT = Path(__file__).resolve().parents[1]

HASH = "$2y$10$X0h1gDsPszWURQaxFh.zoubFi6DXncSjhoQNJgRrnGs7EsimhC7zG"
NASTY: list[Any] = [
    "\x00", "\x01", "\x1b]0;title\x07", "\x1b[2J", "\x7f", "\x85", "\u202e", "\u2028", "\ufeff",
    "a" * 5000, "9" * 5000, "-1", "1e309", "NaN", "Infinity", "", " ", "../../etc/passwd",
    "/dev/zero", "/proc/self/fd/0", "*a", "&a", "!!python/object/apply:os.system", "{{", "]]",
    "%", "\\", "'", '"', 10**30, -(10**30), 1e308, float("nan"), True, None, [], {},
    {"a": {"b": {"c": 1}}},
]
NASTY.append(json.loads("[" * 40 + "1" + "]" * 40))
WEB_CONFIG: dict[str, Any] = {
    "tls_server_config": {"cert_file": "tls.crt", "key_file": "tls.key",
                          "client_auth_type": "RequireAndVerifyClientCert",
                          "client_ca_file": "ca.crt", "client_allowed_sans": ["a.example"],
                          "min_version": "TLS12", "max_version": "TLS13",
                          "cipher_suites": ["TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"],
                          "curve_preferences": ["X25519"], "prefer_server_cipher_suites": True},
    "http_server_config": {"headers": {"X-Frame-Options": "deny",
                                       "Content-Security-Policy": "default-src 'self'"},
                           "http2": True},
    "basic_auth_users": {"prometheus": HASH, "alice": HASH},
    "rate_limit": {"interval": "1s", "burst": 2},
}
SCENARIO: dict[str, Any] = {
    "pods": [
        {"namespace": "ml", "name": "train-0", "labels": {"app": "trainer"},
         "containers": [{"name": "trainer", "gpus": [{"gpu": 0, "processes": 2}]}]},
        {"namespace": "inference", "name": "infer-a",
         "containers": [{"name": "server", "gpus": [{"gpu": 1, "replica": 0, "share": 0.6,
                                                     "resource": "nvidia.com/gpu"}]}]},
    ],
    "lost_gpus": [{"gpu": 0, "at": 30}, {"gpu": 1, "at": 60, "xid": 79, "back_at": 120}],
}


def metric_list_text() -> str:
    return (ROOT / "src/podgpu/fields/default-counters.csv").read_text()


def mutate_doc(doc: Any, rng: random.Random) -> Any:
    """`doc` with one node (picked by a random walk) replaced, deleted or wrapped."""
    if isinstance(doc, dict) and doc and rng.random() < 0.8:
        key = rng.choice(list(doc))
        out = dict(doc)
        roll = rng.random()
        if roll < 0.1:
            del out[key]
        elif roll < 0.2:
            out[str(rng.choice(NASTY)) if rng.random() < 0.5 else "extra"] = rng.choice(NASTY)
        else:
            out[key] = mutate_doc(doc[key], rng)
        return out
    if isinstance(doc, list) and doc and rng.random() < 0.8:
        out_list = list(doc)
        i = rng.randrange(len(doc))
        out_list[i] = mutate_doc(doc[i], rng)
        if rng.random() < 0.1:
            out_list = out_list * rng.randint(2, 50)
        return out_list
    return rng.choice(NASTY)


def mutate_bytes(data: bytes, rng: random.Random) -> bytes:
    roll = rng.random()
    pos = rng.randrange(len(data) + 1)
    if roll < 0.3:
        return data[:pos]
    if roll < 0.6:
        return data[:pos] + bytes(rng.randrange(256) for _ in range(rng.randint(1, 8))) + data[pos:]
    if roll < 0.8:
        return data[:pos] + data[pos + rng.randint(1, 20):]
    depth = rng.choice([20, 100, 5000, 100_000])
    return data[:pos] + b"[" * depth + b"]" * depth + data[pos:]


def dump(doc: Any, kind: str, rng: random.Random) -> bytes:
    import yaml

    try:
        if kind == "json":
            return json.dumps(doc, allow_nan=True, default=str).encode()
        text: str = yaml.safe_dump(doc, allow_unicode=rng.random() < 0.5)
        return text.encode("utf-8", "surrogatepass")
    except (ValueError, TypeError, yaml.YAMLError, RecursionError):
        return repr(doc).encode("utf-8", "surrogatepass")


def make_case(target: str, rng: random.Random) -> bytes:
    if rng.random() < 0.05:
        return bytes(rng.randrange(256) for _ in range(rng.randint(0, 400)))
    if target == "metric-list":
        lines = metric_list_text().splitlines()
        for _ in range(rng.randint(1, 4)):
            i = rng.randrange(len(lines))
            fields = lines[i].split(",")
            fields[rng.randrange(len(fields))] = str(rng.choice(NASTY))
            lines[i] = ",".join(fields)
        data = "\n".join(lines).encode("utf-8", "surrogatepass")
    else:
        doc: Any = WEB_CONFIG if target == "web-config" else SCENARIO
        for _ in range(rng.randint(1, 4)):
            doc = mutate_doc(doc, rng)
        data = dump(doc, "json" if target == "scenario" and rng.random() < 0.5 else "yaml", rng)
    return mutate_bytes(data, rng) if rng.random() < 0.3 else data


def argv_for(target: str, path: str) -> list[str]:
    base = ["serve", "-a", "192.0.2.1:9400"]
    if target == "web-config":
        return [*base, "--simulate", "1", "--web-config-file", path]
    if target == "scenario":
        return [*base, "--simulate", "2", "--simulate-scenario", path]
    return [*base, "--simulate", "1", "-f", path]


def run_case(argv: list[str], timeout: float, err_path: str) -> tuple[str, int | None]:
    """('exit', status) | ('traceback', None) | ('hang', None), from a forked child."""
    pid = os.fork()
    if pid == 0:  # the child: run the CLI with stderr to a file, exit with its status
        status = 70
        try:
            fd = os.open(err_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            os.dup2(fd, 2)
            os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
            from podgpu.cli import main

            status = int(main(argv))
        except SystemExit as exc:
            status = exc.code if isinstance(exc.code, int) else 2
        except BaseException:
            import traceback

            traceback.print_exc()
            status = 70
        finally:
            sys.stderr.flush()
            os._exit(status)
    deadline = time.monotonic() + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return "hang", None
        time.sleep(0.002)
    err = Path(err_path).read_text(errors="replace")
    if "Traceback" in err:
        return "traceback", None
    return "exit", os.waitstatus_to_exitcode(status)


def fuzz(target: str, seconds: float, seed: int, case_timeout: float,
         workdir: Path) -> dict[str, Any]:
    rng = random.Random(seed)
    (workdir / "tls.crt").write_text("")
    end = time.monotonic() + seconds
    counts: Counter[str] = Counter()
    reproducers: list[dict[str, str]] = []
    path = workdir / ("case.json" if target == "scenario" else "case.yml")
    err_path = str(workdir / "stderr")
    cases = 0
    while time.monotonic() < end:
        data = make_case(target, rng)
        path.write_bytes(data)
        kind, status = run_case(argv_for(target, str(path)), case_timeout, err_path)
        cases += 1
        counts[kind if kind != "exit" else f"exit {status}"] += 1
        if kind != "exit" and len(reproducers) < 20:
            tail = Path(err_path).read_text(errors="replace").strip().splitlines()[-3:]
            reproducers.append({"kind": kind, "argv": " ".join(argv_for(target, "FILE")),
                                "file_base64": base64.b64encode(data[:20000]).decode(),
                                "stderr_tail": "\n".join(tail)[:600]})
    return {"target": target, "seconds": seconds, "cases": cases,
            "tracebacks": counts["traceback"], "hangs": counts["hang"],
            "outcomes": dict(counts), "reproducers": reproducers}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=120.0, help="per target")
    ap.add_argument("--targets", default="web-config,scenario,metric-list")
    ap.add_argument("--seed", type=int, default=19)
    ap.add_argument("--case-timeout", type=float, default=20.0)
    ap.add_argument("--src", type=Path, help="podgpu sources to fuzz (e.g. an older commit's)")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    run_from(args.src, "bench.fuzz_cli")
    import yaml  # noqa: F401

    import podgpu.cli  # noqa: F401 - imported once, before the forks

    results = []
    with tempfile.TemporaryDirectory(prefix="podgpu-fuzz-") as tmp:
        for target in args.targets.split(","):
            res = fuzz(target, args.seconds, args.seed, args.case_timeout, Path(tmp))
            results.append(res)
            print(json.dumps({k: v for k, v in res.items() if k != "reproducers"}), flush=True)
    doc = {"command": sys.argv, "results": results}
    if args.out:
        args.out.write_text(json.dumps(doc, indent=1) + "\n")
    return 0 if all(r["tracebacks"] == 0 and r["hangs"] == 0 for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
