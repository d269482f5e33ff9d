"""`podgpu emf` as a real process against hostile targets beside a good one (the
short form of bench/hostile_clients.py): a gzip bomb, an endless body, too many series, a target
trickling one byte a second, a redirect to ftp://, and a target behind basic auth. The good
target never misses a scrape, /health names each bad one and why, the password never shows, the
process stays small, SIGHUP does not kill it and SIGTERM stops it.

The targets are real TCP servers on loopback misbehaving on purpose (tests/hostile_peers.py);
EMF goes to stdout (no AWS needed for what is tested here)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.conftest import free_port, http_get, wait_for
from tests.hostile_peers import HostilePeers, gzip_bomb

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
SEED_CONFIG = ROOT / "tests" / "fixtures" / "seed" / "cwagent-config.json"
RSS_LIMIT_MIB = 150


def get(url: str) -> tuple[int, str]:
    status, _, body = http_get(url)
    return status, body.decode()


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM")


def scrapes(metrics: str, target: str, result: str) -> int:
    for line in metrics.splitlines():
        if line.startswith(f'podgpu_emf_scrapes_total{{target="{target}",result="{result}"}} '):
            return int(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no scrape counter for {target} {result}")


def test_bridge_against_hostile_targets_beside_a_good_one() -> None:
    peers = HostilePeers()
    peers.bombs[64] = gzip_bomb(64)  # built before the bridge starts, not on its first scrape
    port = free_port()
    bad = {
        "bomb": peers.url("/bomb?mib=64"),
        "huge": peers.url("/huge?mib=0"),
        "series": peers.url("/series?n=20000"),
        "trickle": peers.url("/trickle"),
        "redirect": peers.url("/redirect?to=ftp://127.0.0.1/metrics"),
    }
    good = peers.url("/good")
    auth = peers.url("/auth", "user:pa55")
    cmd = [sys.executable, "-m", "podgpu", "emf", "--scrape", good, "--scrape", auth,
           *[a for u in bad.values() for a in ("--scrape", u)],
           "--scrape-interval", "1.5", "--scrape-timeout", "1.5", "--emf-interval", "3",
           "--cloudwatch-config", str(SEED_CONFIG), "--cluster-name", "hostile",
           "--emf-destination", "stdout", "-a", f"127.0.0.1:{port}"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "NODE_NAME": "hostile-node"})
    base = f"http://127.0.0.1:{port}"
    assert proc.stderr is not None
    err_lines: list[str] = []
    reader = threading.Thread(target=lambda: err_lines.extend(proc.stderr), daemon=True)  # type: ignore[arg-type]
    reader.start()
    try:
        def six_good_scrapes() -> bool:
            assert proc.poll() is None, "".join(err_lines)
            try:
                return scrapes(get(f"{base}/metrics")[1], good, "ok") >= 6
            except (OSError, AssertionError):
                return False

        wait_for(six_good_scrapes, timeout=30, what="six good scrapes", interval=0.5)
        os.kill(proc.pid, signal.SIGHUP)  # must not kill it (nothing to reload)
        # the reload it starts is logged; the bridge is still running after it
        wait_for(lambda: any("SIGHUP received" in line for line in err_lines), timeout=10,
                 what="the SIGHUP logged")
        assert proc.poll() is None, "SIGHUP killed the bridge"
        status, body = get(f"{base}/health")
        health = json.loads(body)
        metrics = get(f"{base}/metrics")[1]
        rss = peak_rss_mib(proc.pid)
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(20)  # a deadline for a hang: no scrape in flight holds the shutdown
        reader.join(10)
        stderr = "".join(err_lines)
    finally:
        if proc.poll() is None:
            proc.kill()
        peers.close()
    assert rc == 0, stderr
    assert status == 200
    print(f"bridge peak RSS {rss:.0f} MiB")
    assert rss <= RSS_LIMIT_MIB, f"peak RSS {rss:.0f} MiB"
    assert scrapes(metrics, good, "ok") >= 6 and scrapes(metrics, good, "error") == 0
    shown_auth = peers.url("/auth", "user:<secret>")
    assert health["targets"][good] == "ok" and health["targets"][shown_auth] == "ok"
    targets = health["targets"]
    assert targets[bad["bomb"]] == (
        f"failing: answer over the {4 << 20}-byte limit after gzip decompression")
    assert targets[bad["huge"]] == f"failing: answer over the {4 << 20}-byte limit"
    assert targets[bad["series"]] == "failing: 20000 samples, over the limit of 10000 per scrape"
    assert targets[bad["trickle"]] in ("failing: no complete answer within 1.5 s",
                                       "failing: the previous scrape is still running")
    assert targets[bad["redirect"]] == ("failing: HTTP 302 redirect to ftp://127.0.0.1/metrics "
                                        "not followed (use that URL instead)")
    for name in bad:
        assert scrapes(metrics, bad[name], "ok") == 0
    for text in (metrics, json.dumps(health), stderr):
        assert "pa55" not in text
    assert "Traceback" not in stderr
