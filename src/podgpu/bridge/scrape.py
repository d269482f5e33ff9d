"""One scrape target: fetch its text over HTTP(S), parse it, keep its health.

urllib is enough for a handful of node-local targets scraped every few seconds, and keeps the
bridge free of an event loop. Each target is fetched on its own worker thread with a timeout, and
every failure (refused, timeout, HTTP status, oversized or undecodable body, bad text) is
recorded on that target alone: one target going away never stops the others.
"""

from __future__ import annotations

import gzip
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import zlib
from dataclasses import dataclass

from podgpu import __version__
from podgpu.bridge.parse import Family, ParseError, parse_exposition
from podgpu.errors import ConfigError

MAX_BODY_BYTES = 64 * 1024 * 1024
ACCEPT = "text/plain;version=0.0.4;q=0.9,*/*;q=0.1"


class ScrapeError(Exception):
    pass


def parse_url(text: str) -> tuple[str, str]:
    """(url, instance) for a --scrape value; ConfigError for anything that is not http(s)."""
    url = text.strip()
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"--scrape {text!r}: expected an http:// or https:// URL such as "
                          "http://127.0.0.1:9400/metrics")
    try:
        parts.port  # noqa: B018 - raises ValueError for a bad port
    except ValueError:
        raise ConfigError(f"--scrape {text!r}: the port is not a number in 1..65535") from None
    return url, parts.netloc.rpartition("@")[2]


@dataclass(frozen=True, slots=True)
class TargetStats:
    url: str
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

    def __init__(self, url: str, instance: str, timeout: float) -> None:
        self.url = url
        self.instance = instance
        self._timeout = timeout
        self._lock = threading.Lock()
        self._ok = self._failed = 0
        self._up = False
        self._error = "not scraped yet"
        self._last_success: float | None = None
        self._duration = 0.0
        self._samples = 0
        self._dropped_type = self._dropped_value = 0

    def fetch(self) -> str:
        """The body as text; ScrapeError says why not."""
        req = urllib.request.Request(self.url, headers={
            "Accept": ACCEPT, "Accept-Encoding": "gzip",
            "User-Agent": f"podgpu-emf/{__version__}"})
        try:
            with urllib.request.urlopen(req, timeout=self._timeout) as resp:
                body: bytes = resp.read(MAX_BODY_BYTES + 1)
                encoding = (resp.headers.get("Content-Encoding") or "").lower()
                charset = resp.headers.get_content_charset() or "utf-8"
        except urllib.error.HTTPError as exc:
            raise ScrapeError(f"HTTP {exc.code} {exc.reason}") from None
        except urllib.error.URLError as exc:
            raise ScrapeError(str(getattr(exc.reason, "strerror", None) or exc.reason)) from None
        except (OSError, ValueError) as exc:  # timeouts, resets, bad chunking
            raise ScrapeError(str(exc) or type(exc).__name__) from None
        if len(body) > MAX_BODY_BYTES:
            raise ScrapeError(f"answer larger than {MAX_BODY_BYTES} bytes")
        try:
            if encoding == "gzip":
                body = gzip.decompress(body)
            return body.decode(charset)
        except (OSError, EOFError, zlib.error, UnicodeDecodeError, LookupError) as exc:
            raise ScrapeError(f"undecodable answer: {exc}") from None

    def scrape(self) -> list[Family]:
        """Fetch and parse; on failure record it and raise ScrapeError."""
        t0 = time.perf_counter()
        try:
            families = parse_exposition(self.fetch())
        except (ScrapeError, ParseError) as exc:
            with self._lock:
                self._failed += 1
                self._up = False
                self._error = str(exc)
                self._duration = time.perf_counter() - t0
            raise ScrapeError(str(exc)) from None
        with self._lock:
            self._ok += 1
            self._up = True
            self._error = ""
            self._last_success = time.time()
            self._duration = time.perf_counter() - t0
            self._samples = sum(len(f.samples) for f in families)
        return families

    def failed_by_timeout(self, seconds: float) -> None:
        """The scrape did not finish within the tick; counted as a failure of this target."""
        with self._lock:
            self._failed += 1
            self._up = False
            self._error = f"no answer within {seconds:g} s"

    def count_dropped(self, by_type: int, by_value: int) -> None:
        with self._lock:
            self._dropped_type += by_type
            self._dropped_value += by_value

    def stats(self) -> TargetStats:
        with self._lock:
            return TargetStats(self.url, self._ok, self._failed, self._up, self._error,
                               self._last_success, self._duration, self._samples,
                               self._dropped_type, self._dropped_value)
