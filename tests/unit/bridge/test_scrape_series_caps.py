"""Bytes per series and labels per sample in the bridge's scrapes: one 3.9 MB sample with 330 k
labels counted as one sample, pinned a core and never finished. Targets are tests/hostile_peers.py
servers; the checks are the failure named on the target and the parser's allocations."""

from __future__ import annotations

import tracemalloc
from collections.abc import Iterator

import pytest

from podgpu.bridge.scrape import (
    DEFAULT_MAX_BODY_BYTES,
    MAX_LABELS,
    MAX_SERIES_BYTES,
    ScrapeError,
    Target,
    parse_url,
)
from tests.hostile_peers import HostilePeers


@pytest.fixture(scope="module")
def peers() -> Iterator[HostilePeers]:
    srv = HostilePeers()
    yield srv
    srv.close()


def scrape_error(peers: HostilePeers, path: str, body: bytes) -> str:
    peers.set_body(path, body, ctype="text/plain; version=0.0.4")
    u, instance = parse_url(peers.url(path))
    t = Target(u, instance, 30.0)
    with pytest.raises(ScrapeError) as info:
        t.scrape()
    assert not t.stats().up and t.stats().last_error == str(info.value)
    return str(info.value)


def labels(n: int) -> bytes:
    return b",".join(b'l%d="v"' % i for i in range(n))


def test_one_huge_sample_fails_before_parsing(peers: HostilePeers) -> None:
    body = b"# TYPE m gauge\nm{" + labels(330_000)[:3_900_000] + b'x="y"} 1\n'
    tracemalloc.start()
    why = scrape_error(peers, "/onehuge", body)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert why == f"a line over the limit of {MAX_SERIES_BYTES} bytes per series"
    assert peak < 4 * len(body)  # the body and its decoded copy, never the parser's objects


def test_a_sample_with_too_many_labels_fails(peers: HostilePeers) -> None:
    body = b"# TYPE m gauge\nm{" + labels(MAX_LABELS + 1) + b"} 1\n"
    assert len(body) < MAX_SERIES_BYTES
    why = scrape_error(peers, "/manylabels", body)
    assert f"with {MAX_LABELS + 1} labels, over the limit of {MAX_LABELS}" in why


def test_a_body_of_label_heavy_samples_at_every_cap_is_parsed_and_ends(
        peers: HostilePeers) -> None:
    """The worst legal scrape: the size cap full of samples at the label cap, each line under
    the series cap. It parses (the call ends; the parser's CPU is bounded by the size cap)."""
    parts, size, i = [b"# TYPE m gauge\n"], 15, 0
    while True:
        line = b'm{i="%d",' % i + labels(MAX_LABELS - 1) + b"} 1\n"
        if size + len(line) > DEFAULT_MAX_BODY_BYTES:
            break
        parts.append(line)
        size += len(line)
        i += 1
    n, body = i, b"".join(parts)
    peers.set_body("/heavy", body, ctype="text/plain; version=0.0.4")
    u, instance = parse_url(peers.url("/heavy"))
    families = Target(u, instance, 60.0).scrape()
    assert sum(len(f.samples) for f in families) == n
    assert max(len(s.labels) for f in families for s in f.samples) <= MAX_LABELS
