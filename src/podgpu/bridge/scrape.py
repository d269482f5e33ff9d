"""One scrape target: fetch its text over HTTP(S), parse it, keep its health.

A target is a peer the bridge does not control, so every scrape is bounded,
through podgpu.boundedget:

- **one deadline for the whole scrape** (connect, headers, body): a target trickling one byte a
  second cannot hold its worker past `--scrape-timeout`;
- **one scrape in flight per target**: a tick that finds the previous scrape still running counts
  a failure for that target and starts none, so a stuck target never takes the workers of the
  others;
- **a size cap after decompression** (gzip is inflated in steps, never past the cap: a 4.7 MB gzip
  bomb costs the cap, not 8.6 GB), also applied to the compressed bytes and to Content-Length;
- **a sample cap**, counted on the raw bytes before the (slow, memory-hungry) parser runs: past it
  the scrape fails, like Prometheus' `sample_limit`;
- **bytes per series and labels per sample**: a line over MAX_SERIES_BYTES fails the scrape
  before parsing (found in one pass), a sample with more than MAX_LABELS labels while parsing;
  one 3.9 MB sample of 330 k labels counted as one sample and pinned a core. With the size cap
  this bounds the parser's CPU per scrape (see docs/limits.md);
- **no redirects**: a target is a fixed endpoint on this node; a 3xx is reported with its
  Location, never followed (same-origin ones neither: the target URL is the user's to fix);
- **credentials** in `--scrape http://user:pass@host/...` are sent as basic auth and never shown:
  the URL in /metrics, /health and the log has `<secret>` for the password.

Parsing is separate (parse.py); the scrape's failure, whatever it is, is counted on its target
alone.
"""

from __future__ import annotations

import base64
import re
import threading
import time
import urllib.parse
from dataclasses import dataclass

from podgpu import __version__
from podgpu.boundedget import GetError, get, printable
from podgpu.bridge.parse import Family, ParseError, parse_exposition
from podgpu.errors import ConfigError
from podgpu.options import go_int_between
from podgpu.peers.deadline import StartTimer, thread_timer

DEFAULT_MAX_BODY_BYTES = 4 * 1024 * 1024
"""Bytes of text after decompression (4 MiB; dcgm-exporter's answer for 8 GPUs is ~100 KB)."""
DEFAULT_MAX_SAMPLES = 10_000
"""Samples per scrape (a 56-instance MIG node with 60 fields is ~3,400). The text parser needs
~2.8 KiB and ~90 µs per sample, so this bounds one scrape to ~30 MiB and ~1 s of CPU."""
MAX_SERIES_BYTES = 32 * 1024
"""Bytes of one sample line (a dcgm-exporter series with pod labels is under 1 KiB)."""
MAX_LABELS = 128
"""Labels of one sample (dcgm-exporter's carry about 15)."""
_LONG_LINE = re.compile(rb"(?:\A|\n)[^\n]{%d}" % (MAX_SERIES_BYTES + 1))
"""A line over MAX_SERIES_BYTES; anchored at a line start, so each line is scanned once."""
ACCEPT = "text/plain;version=0.0.4;q=0.9,*/*;q=0.1"
SECRET = "<secret>"


class ScrapeError(Exception):
    pass


def parse_url(text: str) -> tuple[str, str]:
    """(url, instance) for a --scrape value; ConfigError for anything that is not http(s).

    The instance is host:port without credentials; the URL is returned as given (with its
    credentials, for Target); show `redact(url)`, never the URL itself."""
    url = text.strip()
    try:
        parts = urllib.parse.urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a bad port
    except ValueError:
        raise ConfigError(f"--scrape {redact(text)!r}: the port is not a number in 1..65535"
                          ) from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"--scrape {redact(text)!r}: expected an http:// or https:// URL such "
                          "as http://127.0.0.1:9400/metrics")
    return url, parts.netloc.rpartition("@")[2]


parse_sample_limit = go_int_between(1, 10_000_000, "a number of samples")
"""--scrape-sample-limit: a count in 1..10,000,000 in Go's integer syntax."""


def redact(url: str) -> str:
    """The URL with any password replaced by `<secret>` (the user name stays, to tell targets
    apart), for /metrics, /health and the log."""
    try:
        parts = urllib.parse.urlsplit(url.strip())
    except ValueError:
        parts = None
    if parts is None or "@" not in parts.netloc:
        return url.strip() if "@" not in url else SECRET + "@" + url.rpartition("@")[2]
    userinfo, _, hostport = parts.netloc.rpartition("@")
    user, has_password, _ = userinfo.partition(":")
    shown = f"{user}:{SECRET}@{hostport}" if has_password else f"{user}@{hostport}"
    return urllib.parse.urlunsplit(parts._replace(netloc=shown))


def count_samples(body: bytes) -> int:
    """Sample lines in a text exposition, counted at C speed on the bytes (not exact for
    indented comments, which only makes it count more)."""
    if not body:
        return 0
    lines = body.count(b"\n") + (0 if body.endswith(b"\n") else 1)
    comments = body.count(b"\n#") + (1 if body.startswith(b"#") else 0)
    blank = body.count(b"\n\n") + (1 if body.startswith(b"\n") else 0)
    return max(0, lines - comments - blank)


@dataclass(frozen=True, slots=True)
class TargetStats:
    url: str
    """Redacted: safe to show."""
    ok: int
    failed: int
    up: bool
    last_error: str
    last_success: float | None
    last_duration: float
    last_samples: int
    dropped_type: int
    dropped_value: int


class Target:
    """A scrape target and its counters (written by one scrape at a time, read by /metrics)."""

    def __init__(self, url: str, instance: str, timeout: float, *,
                 max_bytes: int = DEFAULT_MAX_BODY_BYTES,
                 max_samples: int = DEFAULT_MAX_SAMPLES,
                 start_timer: StartTimer = thread_timer) -> None:
        """`start_timer` runs each scrape's deadline (boundedget.get's; tests fire it by
        hand)."""
        parts = urllib.parse.urlsplit(url.strip())
        self.url = redact(url)
        """Shown in /metrics, /health and the log: never the password."""
        self.instance = instance
        self._timeout = timeout
        self._start_timer = start_timer
        self.max_bytes = max_bytes
        self.max_samples = max_samples
        self._plain_url = urllib.parse.urlunsplit(
            parts._replace(netloc=parts.netloc.rpartition("@")[2]))
        self._headers = {"Accept": ACCEPT, "Accept-Encoding": "gzip",
                         "User-Agent": f"podgpu-emf/{__version__}"}
        if parts.username is not None:
            pair = (f"{urllib.parse.unquote(parts.username)}:"
                    f"{urllib.parse.unquote(parts.password or '')}")
            self._headers["Authorization"] = "Basic " + base64.b64encode(pair.encode()).decode()
        self._busy = threading.Lock()
        self._lock = threading.Lock()
        self._ok = self._failed = 0
        self._up = False
        self._error = "not scraped yet"
        self._last_success: float | None = None
        self._duration = 0.0
        self._samples = 0
        self._dropped_type = self._dropped_value = 0

    # --- fetching ----------------------------------------------------------------------------

    def fetch(self) -> str:
        """The answer as text, decompressed and within the caps; ScrapeError says why not."""
        try:
            answer = get(self._plain_url, timeout=self._timeout, max_bytes=self.max_bytes,
                         headers=self._headers, start_timer=self._start_timer)
        except GetError as exc:
            error = str(exc)
        else:
            return self._text(answer.body, answer.charset or "utf-8")
        raise ScrapeError(error)  # outside the handler: no chain back to the read's frames

    def _text(self, body: bytes, charset: str) -> str:
        n = count_samples(body)
        if n > self.max_samples:
            raise ScrapeError(f"{n} samples, over the limit of {self.max_samples} per scrape")
        if _LONG_LINE.search(body):
            raise ScrapeError(f"a line over the limit of {MAX_SERIES_BYTES} bytes per series")
        try:
            return body.decode(charset)
        except (UnicodeDecodeError, LookupError) as exc:
            raise ScrapeError(f"undecodable answer: {printable(exc)}") from None

    # --- one scrape --------------------------------------------------------------------------

    def scrape(self) -> list[Family]:
        """Fetch and parse; on failure record it and raise ScrapeError. At most one scrape of
        this target runs at a time: a second one fails at once."""
        if not self._busy.acquire(blocking=False):
            self._fail("the previous scrape is still running", 0.0)
            raise ScrapeError("the previous scrape is still running")
        t0 = time.perf_counter()
        error = ""
        try:
            families = parse_exposition(self.fetch(), max_labels=MAX_LABELS)
        except (ScrapeError, ParseError) as exc:
            error = str(exc)
        finally:
            self._busy.release()
        if error:  # raised outside the handler, so no frame holding the body stays referenced
            self._fail(error, time.perf_counter() - t0)
            raise ScrapeError(error)
        with self._lock:
            self._ok += 1
            self._up = True
            self._error = ""
            self._last_success = time.time()
            self._duration = time.perf_counter() - t0
            self._samples = sum(len(f.samples) for f in families)
        return families

    def _fail(self, why: str, seconds: float) -> None:
        with self._lock:
            self._failed += 1
            self._up = False
            self._error = why
            if seconds:
                self._duration = seconds

    def failed_by_timeout(self, seconds: float) -> None:
        """The scrape did not finish within the tick; counted as a failure of this target."""
        self._fail(f"no answer within {seconds:g} s", 0.0)

    def count_dropped(self, by_type: int, by_value: int) -> None:
        with self._lock:
            self._dropped_type += by_type
            self._dropped_value += by_value

    def stats(self) -> TargetStats:
        with self._lock:
            return TargetStats(self.url, self._ok, self._failed, self._up, self._error,
                               self._last_success, self._duration, self._samples,
                               self._dropped_type, self._dropped_value)
