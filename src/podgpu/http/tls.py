"""`ssl.SSLContext` from the web config's `tls_server_config`, and rotation without a restart.

The listening socket keeps one *front* context for its whole life; its SNI callback (which
OpenSSL calls on every ClientHello, with or without SNI) switches each new connection to the
*current* context, built from the files as last read. Measured with OpenSSL 3.0 (tests cover
each): after the switch the certificate, the client-CA store and the cipher list come from the
current context, while the verify mode, TLS versions, curve and options were copied from the
front context when the connection began. So a reload builds a complete new current context and
also writes those per-connection settings onto the front one. Everything runs on the event loop
thread, between handshakes.

What Python's `ssl` cannot do, compared with Go's crypto/tls (docs/web-config.md):
- TLS 1.3 cipher suites are not configurable (Go ignores `cipher_suites` for 1.3 as well);
- one curve only (`set_ecdh_curve`), so `curve_preferences` uses its first entry;
- no "require any certificate without verifying it" (RequireAnyClientCert is refused at parse);
- RequestClientCert does not request a certificate (an unverified one grants nothing anyway);
- `client_allowed_sans` is checked after the handshake, per request (http.auth), not in it.
"""

from __future__ import annotations

import contextlib
import os
import ssl
import tempfile
from collections.abc import Iterator

from podgpu.http.webconfig import (
    GO_CIPHERS,
    GO_CURVES,
    TlsServerConfig,
    WebConfigError,
    read_regular,
)

_VERSIONS = {"TLS10": ssl.TLSVersion.TLSv1, "TLS11": ssl.TLSVersion.TLSv1_1,
             "TLS12": ssl.TLSVersion.TLSv1_2, "TLS13": ssl.TLSVersion.TLSv1_3}
_VERIFY = {"NoClientCert": ssl.CERT_NONE, "RequestClientCert": ssl.CERT_NONE,
           "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
           "RequireAndVerifyClientCert": ssl.CERT_REQUIRED}
_MAX_PEM_BYTES = 1 << 20
DEFAULT_TLS12_CIPHERS = "ECDHE+AESGCM:ECDHE+CHACHA20:!aNULL"
"""TLS 1.2 suites when `cipher_suites` is not given: ECDHE key exchange (forward secrecy) with
AEAD ciphers only; OpenSSL's DEFAULT also offers RSA key exchange (AES128-SHA was accepted, issue
19). Every Go client (Prometheus) offers these. TLS 1.3 suites all have forward secrecy."""


def build_context(cfg: TlsServerConfig, source: str) -> ssl.SSLContext:
    """A complete server context from `cfg`; reads every file now. `source` (the web config's
    path) starts each error message, which names the key whose file is wrong."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    _apply_settings(ctx, cfg, source)
    cert = _pem(cfg.cert_file, cfg.cert, "cert", source)
    key = _pem(cfg.key_file, cfg.key, "key", source)
    if "CERTIFICATE-----" not in cert:
        raise WebConfigError(f"{source}: {_name('cert', cfg.cert_file)}: no PEM certificate in it")
    if "PRIVATE KEY-----" not in key:
        raise WebConfigError(f"{source}: {_name('key', cfg.key_file)}: no PEM private key in it")
    if "ENCRYPTED" in key:
        raise WebConfigError(f"{source}: {_name('key', cfg.key_file)}: the key is encrypted; the "
                             "web config has no passphrase, give an unencrypted key")
    with _as_files(cert, key) as (cert_path, key_path):
        try:
            ctx.load_cert_chain(cert_path, key_path, password=_no_password)
        except (ssl.SSLError, ValueError, TypeError) as exc:
            raise WebConfigError(f"{source}: {_name('cert', cfg.cert_file)} and "
                                 f"{_name('key', cfg.key_file)}: cannot be used together: "
                                 f"{_reason(exc)}") from None
    if cfg.client_ca_file or cfg.client_ca:
        ca = _pem(cfg.client_ca_file, cfg.client_ca, "client_ca", source)
        try:
            ctx.load_verify_locations(cadata=ca)
        except (ssl.SSLError, ValueError) as exc:
            raise WebConfigError(f"{source}: {_name('client_ca', cfg.client_ca_file)}: not a PEM "
                                 f"CA certificate: {_reason(exc)}") from None
    return ctx


class TlsReloader:
    """Holds the front context the server listens with and the current one connections use."""

    def __init__(self, cfg: TlsServerConfig, source: str) -> None:
        self.current = build_context(cfg, source)
        self.front = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        _apply_settings(self.front, cfg, source)
        self.front.sni_callback = self._switch

    def _switch(self, sslobj: ssl.SSLObject, _server_name: str | None,
                _ctx: ssl.SSLContext) -> None:
        sslobj.context = self.current

    def replace(self, cfg: TlsServerConfig, source: str) -> None:
        """Build from `cfg` (raises WebConfigError and changes nothing on a bad file), then
        swap: later handshakes use it, connections already open keep theirs."""
        fresh = build_context(cfg, source)
        _apply_settings(self.front, cfg, source)
        self.current = fresh


def _apply_settings(ctx: ssl.SSLContext, cfg: TlsServerConfig, source: str) -> None:
    """The settings that are per connection (copied from the front context) or per context."""
    ctx.minimum_version = _VERSIONS[cfg.min_version]
    ctx.maximum_version = _VERSIONS[cfg.max_version]
    ctx.verify_mode = _VERIFY[cfg.client_auth_type]
    if cfg.prefer_server_cipher_suites:
        ctx.options |= ssl.OP_CIPHER_SERVER_PREFERENCE
    else:
        ctx.options &= ~ssl.OP_CIPHER_SERVER_PREFERENCE
    ctx.options |= ssl.OP_NO_COMPRESSION
    names = [GO_CIPHERS[c] for c in cfg.cipher_suites if GO_CIPHERS[c]]
    try:
        ctx.set_ciphers(":".join(names) if names else DEFAULT_TLS12_CIPHERS)
    except ssl.SSLError:
        raise WebConfigError(f"{source}: tls_server_config.cipher_suites: the system OpenSSL "
                             "supports none of these TLS 1.2 suites") from None
    if cfg.curve_preferences:
        ctx.set_ecdh_curve(GO_CURVES[cfg.curve_preferences[0]])


def _name(key: str, path: str | None) -> str:
    return f"tls_server_config.{key}_file {path}" if path else f"tls_server_config.{key}"


def _pem(path: str | None, inline: str | None, key: str, source: str) -> str:
    if not path:
        return inline or ""
    try:
        data = read_regular(path, _MAX_PEM_BYTES)
    except WebConfigError as exc:
        raise WebConfigError(f"{source}: {_name(key, path)}: cannot read: {exc}") from None
    if len(data) > _MAX_PEM_BYTES:
        raise WebConfigError(f"{source}: {_name(key, path)}: larger than 1 MiB; not a PEM file")
    return data.decode("ascii", errors="replace")


@contextlib.contextmanager
def _as_files(cert: str, key: str) -> Iterator[tuple[str, str]]:
    """`load_cert_chain` only reads files: inline PEM goes through a private temporary
    directory (mode 0700) that is removed at once."""
    with tempfile.TemporaryDirectory(prefix="podgpu-tls-") as tmp:
        paths = []
        for name, text in (("cert.pem", cert), ("key.pem", key)):
            path = os.path.join(tmp, name)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w", encoding="ascii", errors="replace") as f:
                f.write(text)
            paths.append(path)
        yield paths[0], paths[1]


def _no_password() -> str:
    """Never prompt on a terminal for a key passphrase (OpenSSL would): fail instead."""
    raise ValueError("the key is encrypted")


def _reason(exc: BaseException) -> str:
    text = getattr(exc, "reason", None) or str(exc)
    return str(text).split(" (_ssl.c")[0]
