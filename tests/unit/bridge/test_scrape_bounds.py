"""The bridge's scrape client against hostile targets on loopback: every answer
is cut at its cap or deadline, the failure is named on that target, credentials never show.

The targets are real TCP servers (tests/hostile_peers.py) misbehaving on purpose."""

from __future__ import annotations

import resource
import threading
from collections.abc import Callable, Iterator

import pytest

from podgpu.boundedget import GetError, get
from podgpu.bridge import scrape
from podgpu.bridge.parse import Family, parse_exposition
from podgpu.bridge.scrape import ScrapeError, Target, count_samples, parse_url, redact
from podgpu.peers.deadline import StartTimer, thread_timer
from tests.conftest import wait_for
from tests.hostile_peers import HostilePeers

MIB = 1 << 20


@pytest.fixture(scope="module")
def peers() -> Iterator[HostilePeers]:
    srv = HostilePeers()
    yield srv
    srv.close()


def target(url: str, timeout: float = 3.0, start_timer: StartTimer = thread_timer,
           **kw: int) -> Target:
    u, instance = parse_url(url)
    return Target(u, instance, timeout, start_timer=start_timer, **kw)


def failure(t: Target) -> str:
    with pytest.raises(ScrapeError) as info:
        t.scrape()
    assert t.stats().last_error == str(info.value)
    assert not t.stats().up
    return str(info.value)


def rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def test_a_good_target_scrapes(peers: HostilePeers) -> None:
    fams = target(peers.url("/good")).scrape()
    assert {s.name for f in fams for s in f.samples} == {"up_gauge", "scrapes_total"}


def test_a_gzip_bomb_is_cut_at_the_cap_after_decompression(peers: HostilePeers) -> None:
    # 64 MiB of zeros in ~64 KB of gzip: under the cap compressed, 16 times over it inflated.
    before = rss_mib()
    why = failure(target(peers.url("/bomb?mib=64"), max_bytes=4 * MIB))
    assert "after gzip decompression" in why and str(4 * MIB) in why
    assert rss_mib() - before < 32  # the cap (4 MiB) plus slack, not 64 MiB


def test_an_endless_body_is_cut_at_the_cap(peers: HostilePeers) -> None:
    why = failure(target(peers.url("/huge?mib=0"), max_bytes=2 * MIB))
    assert f"over the {2 * MIB}-byte limit" in why


def test_too_many_samples_fail_before_parsing(peers: HostilePeers,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    parsed: list[int] = []

    def counting_parse(text: str, **kw: int) -> list[Family]:
        parsed.append(len(text))
        return parse_exposition(text, **kw)

    monkeypatch.setattr(scrape, "parse_exposition", counting_parse)
    t = target(peers.url("/series?n=20000"), max_samples=10_000)
    why = failure(t)
    assert why == "20000 samples, over the limit of 10000 per scrape"
    # a parse of 20k samples takes seconds: the count on the bytes refused them, no parse ran
    assert parsed == []
    assert len(target(peers.url("/series?n=500"), max_samples=500).scrape()[0].samples) == 500
    assert len(parsed) == 1


def test_count_samples_on_bytes() -> None:
    text = b"# HELP a x\n# TYPE a gauge\na 1\n\na{b=\"#\"} 2\n#x\nc 3"
    assert count_samples(text) == 3
    assert count_samples(b"") == 0


class HandTimer:
    """The deadline's timer, fired by the test instead of by the clock."""

    def __init__(self) -> None:
        self.armed: list[float] = []
        self.fire: Callable[[], None] = lambda: None
        self.cancelled = False

    def __call__(self, seconds: float, fire: Callable[[], None]) -> Callable[[], None]:
        self.armed.append(seconds)
        self.fire = fire
        return self.cancel

    def cancel(self) -> None:
        self.cancelled = True


def test_a_trickling_target_is_cut_at_its_deadline(peers: HostilePeers) -> None:
    timer = HandTimer()
    errors: list[str] = []

    def fetch() -> None:
        try:
            get(peers.url("/trickle"), timeout=30, max_bytes=MIB, start_timer=timer)
        except GetError as exc:
            errors.append(str(exc))

    getting = threading.Thread(target=fetch, daemon=True)
    getting.start()
    wait_for(lambda: peers.trickled >= 3, what="three trickled bytes")
    assert getting.is_alive() and timer.armed == [30]  # the peer keeps it busy, not the deadline
    timer.fire()  # the deadline passes
    getting.join(30)
    assert not getting.is_alive()
    assert errors == ["no complete answer within 30 s"]
    assert timer.cancelled


def test_a_trickling_target_says_which_deadline(peers: HostilePeers) -> None:
    timer = HandTimer()
    t = target(peers.url("/trickle"), timeout=1.5, start_timer=timer)
    errors: list[str] = []
    getting = threading.Thread(target=lambda: errors.append(failure(t)), daemon=True)
    getting.start()
    wait_for(lambda: timer.armed, what="the scrape's deadline armed")
    assert timer.armed == [1.5]
    timer.fire()  # the deadline passes
    getting.join(30)
    assert errors == ["no complete answer within 1.5 s"]


def test_one_scrape_in_flight_per_target(peers: HostilePeers) -> None:
    timer = HandTimer()
    t = target(peers.url("/trickle"), timeout=2.0, start_timer=timer)
    errors: list[str] = []

    def slow() -> None:
        try:
            t.scrape()
        except ScrapeError as exc:
            errors.append(str(exc))

    first = threading.Thread(target=slow)
    first.start()
    wait_for(lambda: timer.armed, what="the first scrape's deadline armed")
    assert failure(t) == "the previous scrape is still running"
    assert timer.armed == [2.0]  # the second scrape started no request
    timer.fire()  # the first scrape's deadline passes
    first.join(30)
    assert errors == ["no complete answer within 2 s"]
    assert t.stats().failed == 2


@pytest.mark.parametrize("to", ["ftp://127.0.0.1/x", "http://127.0.0.1:1/metrics", "/good"])
def test_redirects_are_reported_not_followed(peers: HostilePeers, to: str) -> None:
    before = peers.hits.get("/good", 0)
    why = failure(target(peers.url(f"/redirect?to={to}")))
    assert why == f"HTTP 302 redirect to {to} not followed (use that URL instead)"
    assert peers.hits.get("/good", 0) == before


def test_credentials_are_sent_and_never_shown(peers: HostilePeers) -> None:
    t = target(peers.url("/auth", "user:pa55"))
    assert t.scrape()
    assert "pa55" not in t.url and t.url == peers.url("/auth", "user:<secret>")
    assert "pa55" not in repr(t.stats())
    wrong = target(peers.url("/auth", "user:nope"))
    assert failure(wrong) == "HTTP 401 Unauthorized"
    assert redact("http://u:p%40ss@h:1/m?x=1") == "http://u:<secret>@h:1/m?x=1"
    assert redact("http://h:1/m") == "http://h:1/m"
    assert redact("https://tok@h/") == "https://tok@h/"


def test_refused_and_bad_status_are_one_line(peers: HostilePeers) -> None:
    assert failure(target(peers.url("/nothing"))) == "HTTP 404 Not Found"
    why = failure(target("http://127.0.0.1:1/metrics"))
    assert "refused" in why.lower()


def test_the_limits_are_flags() -> None:
    from pathlib import Path

    from podgpu.bridge.options import parse_args

    seed = Path(__file__).resolve().parents[2] / "fixtures" / "seed" / "cwagent-config.json"
    base = ["--scrape", "http://127.0.0.1:9400/metrics", "--cloudwatch-config", str(seed)]
    s = parse_args([*base, "--scrape-body-limit", "64K", "--scrape-sample-limit", "5"], env={})
    assert (s.scrape_body_limit, s.scrape_sample_limit) == (64 * 1024, 5)
    d = parse_args(base, env={"PODGPU_EMF_SCRAPE_SAMPLE_LIMIT": "20_000"})
    assert (d.scrape_body_limit, d.scrape_sample_limit) == (4 * MIB, 20_000)
    with pytest.raises(Exception, match="--scrape-sample-limit: expected a number of samples"):
        parse_args([*base, "--scrape-sample-limit", "-1"], env={})
