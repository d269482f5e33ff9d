"""The listener's counts as a MetricSource (sinks/prometheus/source.py): the connection guard's
(closed at the cap, past the request deadline, refused) and the web config's access control's
(401, 403, 429, failed basic-auth attempts, bcrypt runs). Kept by http.guard and http.auth,
exported here; read without locks (ints written on the event loop thread)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from podgpu.sinks.prometheus.source import Family, Sample, counter

if TYPE_CHECKING:
    from podgpu.http.auth import AccessControl
    from podgpu.http.guard import ConnectionGuard


class HttpStats:
    """Attach the guard once it listens (`serve_until_stopped`'s ready callback)."""

    def __init__(self, access: AccessControl | None = None) -> None:
        self.guard: ConnectionGuard | None = None
        self.access = access

    def families(self) -> list[Family]:
        out: list[Family] = []
        g = self.guard
        if g is not None:
            out.append(Family("podgpu_http_open_connections", "HTTP connections open now.",
                              "gauge", (Sample((), g.open_connections),)))
            out.append(counter(
                "podgpu_http_connections_closed_total",
                "HTTP connections podgpu closed: evicted (the oldest without a completed request, "
                "at --http-max-connections), refused (at the cap with none to evict), timed_out "
                "(no complete request and answer within --http-request-timeout), memory (holding "
                "the most when the listener's memory budget was reached).", "reason",
                (("evicted", g.evicted), ("refused", g.refused), ("timed_out", g.timed_out),
                 ("memory", g.budget.evicted))))
            out.append(Family("podgpu_http_held_bytes",
                              "Bytes the listener holds for its peers now (handshakes, request "
                              "bytes, unsent answer copies), against its memory budget.",
                              "gauge", (Sample((), g.budget.total),)))
        if self.access is not None:
            c = self.access.counters()
            out.append(counter(
                "podgpu_http_requests_denied_total",
                "Requests answered without their content: unauthorized (401), forbidden (403, "
                "client certificate SAN), rate_limited (429, web config rate_limit), throttled "
                "(429, repeated basic-auth failures from one client), busy (429, the line of "
                "waiting bcrypt checks was full of better-ranked ones).", "reason",
                (("unauthorized", c["unauthorized"]), ("forbidden", c["forbidden"]),
                 ("rate_limited", c["rate_limited"]), ("throttled", c["auth_throttled"]),
                 ("busy", c["auth_busy"]))))
            out.append(Family("podgpu_http_auth_failures_total",
                              "Basic-auth attempts with an unknown user or a wrong password.",
                              "counter", (Sample((), c["auth_failures"]),)))
            out.append(Family("podgpu_http_bcrypt_runs_total",
                              "bcrypt verifications run (cache misses; each costs the hash's "
                              "work factor in CPU).", "counter", (Sample((), c["bcrypt_runs"]),)))
        return out
