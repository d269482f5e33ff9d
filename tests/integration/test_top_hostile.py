"""`podgpu top --once` as a real process against hostile nodes beside good ones:
no byte below 0x20 but newline, no C1 or bidi control reaches the terminal, every malformed or
misbehaving node is one BAD/DEAD line, the good nodes render, and the whole run stays within
the per-node deadline.

The nodes are real HTTP servers on loopback (tests/hostile_peers.py) serving a good snapshot
document built by podgpu's own view code, and damaged copies of it."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from typing import Any

import pytest

from tests.hostile_peers import HostilePeers
from tests.unit.test_top import GIB, view

pytestmark = pytest.mark.integration
TOP = [sys.executable, "-m", "podgpu", "top"]

EVIL = "\x1b]0;pwned\x07\x1b[2J\x9b31m\u202eevil\u2066\x85\r\t\x00"
BIDI_AND_C1 = [chr(c) for c in range(0x80, 0xa0)] + ["\u202a", "\u202b", "\u202c", "\u202d",
                                                     "\u202e", "\u2066", "\u2067", "\u2068",
                                                     "\u2069", "\u200e", "\u200f", "\u061c"]


def doc(node: str, **changes: Any) -> dict[str, Any]:
    d: dict[str, Any] = {**view(node, {"train": (0.9, 2 * GIB), "infer": (0.1, GIB)},
                                taken_at=time.time())}
    d.update(changes)
    return d


def enc(d: Any) -> bytes:
    return json.dumps(d).encode()


def test_top_once_against_hostile_nodes() -> None:
    peers = HostilePeers()
    try:
        evil = doc(f"evil{EVIL}")
        evil["pods"][0]["pod"] = f"pod{EVIL}"
        evil["pods"][0]["namespace"] = "\u202ens"
        evil["health"]["status"] = f"ok{EVIL}"
        evil["health"]["reasons"] = [EVIL]
        evil["devices"][0]["model"] = EVIL
        evil["devices"][0]["holders"][0]["pod"] = EVIL
        peers.set_body("/good1", enc(doc("good-one")))
        peers.set_body("/good2", enc(doc("good-two")))
        peers.set_body("/evil", enc(evil))
        peers.set_body("/deep", b'{"schema": ' + b"[" * 200_000 + b"]" * 200_000 + b"}")
        missing = doc("missing")
        del missing["pods"][1]["container"]
        peers.set_body("/missing", enc(missing))
        peers.set_body("/wrongtype", enc(doc("wrong", devices="all of them")))
        peers.set_body("/infinity", enc(doc("inf")).replace(b'"cycle": 4', b'"cycle": Infinity'))
        peers.set_body("/errorpage", b"\x1b[2J<html>\x9b</html>", "500 \x1b[2Jboom",
                       "text/html")
        # top drops a URL's query: /huge is endless, /bomb 64 MiB, /redirect goes to ftp://
        urls = [peers.url(p) for p in (
            "/good1", "/evil", "/deep", "/missing", "/wrongtype", "/infinity", "/errorpage",
            "/huge", "/bomb", "/trickle", "/redirect",
            "/good2")]
        proc = subprocess.run([*TOP, "--once", "--timeout", "3",
                               "--width", "400", *urls], capture_output=True, timeout=60)
    finally:
        peers.close()
    out = proc.stdout
    assert proc.returncode == 1, proc.stderr.decode()  # some nodes are bad
    assert proc.stderr == b""
    assert not [b for b in out if b < 0x20 and b != 0x0A], "a control byte reached the terminal"
    text = out.decode("utf-8")
    assert not [c for c in text if c in BIDI_AND_C1 or c == "\x7f"]
    # one deadline for the whole poll, not one per node: the nodes are asked at once (the slow
    # ones, /trickle and /huge, were answering together with the others), and /trickle's line
    # below names the deadline that ended it
    assert peers.max_in_flight >= 2, peers.max_in_flight  # one at a time would be 1
    lines = text.splitlines()

    def line_of(word: str) -> str:
        return next(line for line in lines if word in line)

    assert "good-one  simulated  cycle 4" in text and "good-two  simulated  cycle 4" in text
    for node in ("good-one", "good-two"):  # each good node's two pods in the pod table
        assert [w[2] for w in map(str.split, lines) if w[:2] == [node, "ns"]] == ["train", "infer"]
    assert "\\x1b]0;pwned\\x07\\x1b[2J\\x9b31m\\u202eevil\\u2066\\x85\\x0d\\x09\\x00" in text
    assert "BAD: JSON nested deeper than 32" in line_of("/deep")
    assert "BAD: pods[1].container: missing" in line_of("/missing")
    assert "BAD: devices: expected a list, got str" in line_of("/wrongtype")
    assert "BAD: not JSON: Infinity is not a JSON number" in line_of("/infinity")
    assert "DEAD: HTTP 500 \\x1b[2Jboom" in line_of("/errorpage")
    assert "DEAD: answer over the 8388608-byte limit" in line_of("/huge")
    assert "DEAD: answer over the 8388608-byte limit after gzip decompression" in line_of("/bomb")
    assert "DEAD: no complete answer within 3 s" in line_of("/trickle")
    assert "DEAD: HTTP 302 redirect to ftp://127.0.0.1/ not followed" in line_of("/redirect")


def test_top_once_against_a_node_sending_escaped_quotes() -> None:
    """An unterminated string of escaped quotes made the depth check's string pattern rescan
    from every quote (quadratic): 200 KB never drew the screen. Now the body is one BAD line
    and the good node renders; the subprocess deadline is the check that the run ends."""
    peers = HostilePeers()
    try:
        peers.set_body("/quotes", b'{"schema": "' + b'\\"' * 100_000)
        peers.set_body("/good", enc(doc("good-one")))
        proc = subprocess.run([*TOP, "--once", "--timeout", "3", "--width", "400",
                               peers.url("/quotes"), peers.url("/good")],
                              capture_output=True, timeout=60)
    finally:
        peers.close()
    text = proc.stdout.decode("utf-8")
    assert proc.returncode == 1 and proc.stderr == b"", proc.stderr.decode()
    assert "good-one  simulated  cycle 4" in text
    assert "BAD: not JSON" in next(line for line in text.splitlines() if "/quotes" in line)
