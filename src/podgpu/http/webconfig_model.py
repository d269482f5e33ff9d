"""The web config's model: exporter-toolkit's names and values, and the validated result.

Split from http.webconfig (the module passed 400 lines). Pure data, no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from podgpu.errors import ConfigError

# Go TLS cipher suite names the toolkit accepts (crypto/tls CipherSuites()) and the OpenSSL names
# of the same suites. TLS 1.3 suites are accepted and, as in Go, not configurable.
GO_CIPHERS: Mapping[str, str] = {
    "TLS_RSA_WITH_AES_128_CBC_SHA": "AES128-SHA",
    "TLS_RSA_WITH_AES_256_CBC_SHA": "AES256-SHA",
    "TLS_RSA_WITH_AES_128_GCM_SHA256": "AES128-GCM-SHA256",
    "TLS_RSA_WITH_AES_256_GCM_SHA384": "AES256-GCM-SHA384",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA": "ECDHE-ECDSA-AES128-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA": "ECDHE-ECDSA-AES256-SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA": "ECDHE-RSA-AES128-SHA",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA": "ECDHE-RSA-AES256-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256": "ECDHE-ECDSA-AES128-GCM-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384": "ECDHE-ECDSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256": "ECDHE-RSA-AES128-GCM-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384": "ECDHE-RSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-RSA-CHACHA20-POLY1305",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-ECDSA-CHACHA20-POLY1305",
    "TLS_AES_128_GCM_SHA256": "",
    "TLS_AES_256_GCM_SHA384": "",
    "TLS_CHACHA20_POLY1305_SHA256": "",
}
# Go curve names -> OpenSSL group names.
GO_CURVES: Mapping[str, str] = {
    "CurveP256": "prime256v1", "CurveP384": "secp384r1", "CurveP521": "secp521r1",
    "X25519": "X25519",
}
TLS_VERSIONS = ("TLS10", "TLS11", "TLS12", "TLS13")
CLIENT_AUTH_TYPES = ("NoClientCert", "RequestClientCert", "RequireAnyClientCert",
                     "RequireClientCert", "VerifyClientCertIfGiven", "RequireAndVerifyClientCert")
# http_server_config.headers: the only headers the toolkit lets a file set, with the values it
# accepts (None: any value). Values are matched exactly, as the toolkit does.
ALLOWED_HEADERS: Mapping[str, tuple[str, ...] | None] = {
    "Strict-Transport-Security": None,
    "X-Content-Type-Options": ("nosniff",),
    "X-Frame-Options": ("deny", "sameorigin"),
    "X-XSS-Protection": None,
    "Content-Security-Policy": None,
}
_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")
_DURATION_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0,
                   "m": 60.0, "h": 3600.0}

class WebConfigError(ConfigError):
    """The web config file is unreadable or invalid; the message names file, line and key.

    `public` is the same message without user names (`basic_auth_users.<user>`), for /health,
    which is served without authentication."""

    def __init__(self, message: str, public: str | None = None) -> None:
        super().__init__(message)
        self.public = public if public is not None else message


@dataclass(frozen=True, slots=True)
class TlsServerConfig:
    """`tls_server_config`, with relative paths already resolved against the file's directory."""

    cert_file: str | None = None
    key_file: str | None = None
    cert: str | None = None
    key: str | None = field(default=None, repr=False)  # secret: never in a repr or a log
    client_ca_file: str | None = None
    client_ca: str | None = None
    client_auth_type: str = "NoClientCert"
    client_allowed_sans: tuple[str, ...] = ()
    min_version: str = "TLS12"
    max_version: str = "TLS13"
    cipher_suites: tuple[str, ...] = ()
    prefer_server_cipher_suites: bool = True
    curve_preferences: tuple[str, ...] = ()

    @property
    def files(self) -> tuple[str, ...]:
        """Files this part reads; a change to any of them triggers a reload."""
        return tuple(f for f in (self.cert_file, self.key_file, self.client_ca_file) if f)

    @property
    def verifies_clients(self) -> bool:
        """Client certificates are verified against a CA (they authenticate)."""
        return self.client_auth_type in ("VerifyClientCertIfGiven", "RequireAndVerifyClientCert")


@dataclass(frozen=True, slots=True)
class WebConfig:
    path: str
    tls: TlsServerConfig | None = None
    http2: bool = True
    headers: tuple[tuple[str, str], ...] = ()
    users: Mapping[str, str] = field(default_factory=dict, repr=False)  # user -> bcrypt hash
    rate_limit_interval: float = 0.0  # seconds between requests; 0 = no limit
    rate_limit_burst: int = 0
    warnings: tuple[str, ...] = ()

    @property
    def files(self) -> tuple[str, ...]:
        return (self.path, *(self.tls.files if self.tls else ()))


def parse_go_duration(text: str) -> float | None:
    """Seconds from a Go duration string ("1s", "1m30s", "250ms", "0"); None when invalid."""
    t = text.strip()
    if t == "0":
        return 0.0
    pos, total = 0, 0.0
    while pos < len(t):
        m = _DURATION_PART.match(t, pos)
        if not m:
            return None
        total += float(m.group(1)) * _DURATION_UNITS[m.group(2)]
        pos = m.end()
    return total if t else None
