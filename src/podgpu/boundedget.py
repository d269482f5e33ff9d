"""One bounded HTTP GET for the peers podgpu reads as a client (the bridge's scrape targets,
`podgpu top`'s nodes): a peer can make it fail, never make it hang or grow.

- **One deadline for the whole request** (connect, headers, body), podgpu.peers.deadline's: a
  socket timeout alone bounds each read, so a peer trickling one byte a second would hold the
  reader forever.
- **A size cap after decompression**, podgpu.peers.capped's: gzip is inflated in steps and never
  past the cap; the compressed bytes and Content-Length are held to the cap too.
- **No redirects**: a 3xx is an error naming its Location, never followed, so a peer cannot send
  the client to another port, host or scheme.
- Peer-supplied text in errors (reason phrase, Location) is escaped and capped.

stdlib only (http.client), so `serve` and the bridge need no HTTP library for this.

Decision record: docs/decisions/0015-bounded-outbound-clients.md.
"""

from __future__ import annotations

import http.client
import ssl
import urllib.parse
from collections.abc import Container, Mapping
from dataclasses import dataclass

from podgpu.peers.capped import OverCap, Undecodable, read_capped
from podgpu.peers.deadline import Deadline, StartTimer, thread_timer

MAX_REASON = 120
"""Characters of a peer-supplied string kept in an error."""


class GetError(Exception):
    """The GET failed; the message is one line, safe to log and show."""


@dataclass(frozen=True, slots=True)
class Answer:
    status: int
    """One of the statuses the caller asked for (200 unless it asked for more)."""
    body: bytes
    """Decompressed, at most the cap."""
    content_type: str
    charset: str | None


def printable(text: object, limit: int = MAX_REASON) -> str:
    """A peer-supplied string for an error message: non-printable characters escaped, capped."""
    s = str(text)
    out = "".join(c if c.isprintable() else repr(c)[1:-1] for c in s[:limit])
    return out + ("…" if len(s) > limit else "")


def get(url: str, *, timeout: float, max_bytes: int, headers: Mapping[str, str] | None = None,
        context: ssl.SSLContext | None = None, statuses: Container[int] = (200,),
        start_timer: StartTimer = thread_timer) -> Answer:
    """GET `url` (http or https, with its ?query; userinfo is ignored: pass an Authorization
    header) within `timeout` seconds in all and `max_bytes` of body after decompression.
    GetError says why not. An answer whose status is in `statuses` is read and returned (an
    API's error answers carry their reason in the body); a 3xx never is. `start_timer` runs the
    deadline (tests pass one they fire by hand)."""
    parts = urllib.parse.urlsplit(url)
    host, port = parts.hostname or "", parts.port
    if parts.scheme == "https":
        conn: http.client.HTTPConnection = http.client.HTTPSConnection(
            host, port, timeout=timeout, context=context or ssl.create_default_context())
    else:
        conn = http.client.HTTPConnection(host, port, timeout=timeout)
    path = urllib.parse.urlunsplit(("", "", parts.path or "/", parts.query, ""))
    hdrs = {"Host": parts.netloc.rpartition("@")[2], **(headers or {})}
    deadline = Deadline(timeout, start_timer=start_timer)
    error = ""
    try:
        conn.connect()
        deadline.watch(conn.sock)
        conn.request("GET", path, headers=hdrs)
        resp = conn.getresponse()
        body = _body(resp, max_bytes, statuses, deadline)
        return Answer(resp.status, body, resp.getheader("Content-Type") or "",
                      resp.headers.get_content_charset())
    except (GetError, OverCap, Undecodable) as exc:
        error = str(exc)
    except (OSError, http.client.HTTPException, ValueError) as exc:  # refused, reset, TLS, ...
        error = printable(getattr(exc, "strerror", None) or str(exc) or type(exc).__name__)
    finally:
        deadline.cancel()
        conn.close()
    # Raised here, outside the handlers, so the error holds no traceback of the read (whose
    # frames hold up to `max_bytes` of body) and memory is returned at once, not by the GC.
    late = deadline.expired or error == "timed out"  # a socket timeout is this deadline too
    raise GetError(deadline.message if late else error)


def _body(resp: http.client.HTTPResponse, limit: int, statuses: Container[int],
          deadline: Deadline) -> bytes:
    status = resp.status
    if 300 <= status < 400:
        where = printable(resp.getheader("Location") or "nowhere")
        raise GetError(f"HTTP {status} redirect to {where} not followed (use that URL instead)")
    if status not in statuses:
        raise GetError(f"HTTP {status} {printable(resp.reason)}".rstrip())
    encoding = (resp.getheader("Content-Encoding") or "").strip().lower()
    if encoding not in ("", "identity", "gzip", "x-gzip"):
        raise GetError(f"unsupported Content-Encoding {printable(encoding)}")
    return read_capped(resp.read1, limit, length=resp.getheader("Content-Length"),
                       gzip=encoding in ("gzip", "x-gzip"), deadline=deadline)
