"""Reloading the web config: an edit that removes authentication is refused
with one WARNING; a hostile edit (control characters, 5,000-deep nesting, a FIFO) is one log line,
never a traceback; /health, served without authentication, names no user; TLS 1.2 offers only
forward-secret suites by default. Real files, real bcrypt hashes, real TLS handshakes."""

from __future__ import annotations

import json
import logging
import os
import socket
import ssl
import threading
from pathlib import Path

import bcrypt
import pytest

from podgpu.http.tls import build_context
from podgpu.http.webconfig import WebConfigError, load_web_config, parse_web_config
from podgpu.http.websecurity import WebSecurity
from tests.tlsutil import Pki

HASH = bcrypt.hashpw(b"pw", bcrypt.gensalt(4)).decode()


def write(path: Path, text: str) -> None:
    path.write_text(text)


def security(tmp_path: Path, text: str) -> tuple[WebSecurity, Path]:
    path = tmp_path / "web.yml"
    write(path, text)
    return WebSecurity(str(path)), path


def lines(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name.startswith("podgpu.http")]


def test_removing_basic_auth_in_a_live_edit_is_refused_with_one_warning(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    sec, path = security(tmp_path, f"basic_auth_users:\n  prometheus: {HASH}\n")
    caplog.clear()
    with caplog.at_level(logging.INFO):
        write(path, "http_server_config:\n  headers:\n    X-Frame-Options: deny\n")
        assert sec.check() is False
    recs = lines(caplog)
    assert [r.levelno for r in recs] == [logging.WARNING], [r.getMessage() for r in recs]
    assert "removes basic_auth_users" in recs[0].getMessage()
    assert "needs a restart" in recs[0].getMessage()
    assert sec.access.policy.users  # still protected
    health = sec.health()
    assert health["status"] == "reload failed" and health["basic_auth"] is True
    # a changed user list is an ordinary edit
    write(path, f"basic_auth_users:\n  other: {HASH}\n")
    assert sec.check() is True and list(sec.access.policy.users) == ["other"]


def test_health_names_no_user_in_a_reload_error(tmp_path: Path) -> None:
    sec, path = security(tmp_path, f"basic_auth_users:\n  prometheus: {HASH}\n")
    write(path, f"basic_auth_users:\n  prometheus: {HASH}\n  secret-admin-name: not-a-hash\n")
    assert sec.check() is False
    assert "secret-admin-name" in (sec.last_error or "")  # the log keeps it for the operator
    body = json.dumps(sec.health())
    assert "secret-admin-name" not in body and "prometheus" not in body
    assert "basic_auth_users.<user>: not a bcrypt hash" in body


@pytest.mark.parametrize("text", [
    "basic_auth_users:\n  al\x01ice: x\n",
    'http_server_config:\n  headers:\n    X-XSS-Protection: "1\\x1b[2J"\n',
    'tls_server_config:\n  cert_file: "a\\0b"\n  key_file: k\n',
    "a: " + "[" * 5000 + "]" * 5000 + "\n",
    "a: " + "{b: " * 3000 + "}" * 3000 + "\n",
])
def test_a_hostile_edit_is_one_log_line_and_shows_in_health(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, text: str) -> None:
    sec, path = security(tmp_path, f"basic_auth_users:\n  prometheus: {HASH}\n")
    caplog.clear()
    with caplog.at_level(logging.INFO):
        write(path, text)
        assert sec.check() is False
    recs = lines(caplog)
    assert len(recs) == 1 and recs[0].exc_info is None, [r.getMessage() for r in recs]
    assert "\n" not in recs[0].getMessage()
    assert sec.health()["status"] == "reload failed"
    # the same file at start: a one-line WebConfigError (exit 2), no other exception
    with pytest.raises(WebConfigError) as exc:
        load_web_config(str(path))
    assert "\n" not in str(exc.value) and str(path) in str(exc.value)


def test_non_regular_files_are_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "web.yml"
    os.mkfifo(fifo)
    with pytest.raises(WebConfigError, match="not a regular file"):
        load_web_config(str(fifo))
    with pytest.raises(WebConfigError, match="not a regular file"):
        load_web_config(str(tmp_path))
    pki = Pki(tmp_path / "pki", "t")
    leaf = pki.leaf("server", server=True)
    os.mkfifo(tmp_path / "cert.fifo")
    cfg = parse_web_config(f"tls_server_config:\n  cert_file: {tmp_path / 'cert.fifo'}\n"
                           f"  key_file: {leaf.key}\n", str(tmp_path / "w.yml")).tls
    assert cfg is not None
    with pytest.raises(WebConfigError, match=r"cert_file .*not a regular file"):
        build_context(cfg, "w.yml")


def _handshake(server_ctx: ssl.SSLContext, client_ciphers: str) -> str | None:
    """The TLS 1.2 suite negotiated over a real socket pair, or None when refused."""
    client_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    client_ctx.check_hostname, client_ctx.verify_mode = False, ssl.CERT_NONE
    client_ctx.maximum_version = ssl.TLSVersion.TLSv1_2
    client_ctx.set_ciphers(client_ciphers)
    a, b = socket.socketpair()
    result: list[str | None] = []

    def serve() -> None:
        try:
            with server_ctx.wrap_socket(a, server_side=True):
                pass
        except (ssl.SSLError, OSError):
            pass

    t = threading.Thread(target=serve)
    t.start()
    try:
        with client_ctx.wrap_socket(b) as s:
            result.append((s.cipher() or ("",))[0])
    except (ssl.SSLError, OSError):
        result.append(None)
    t.join(5)
    return result[0]


def _rsa_cert(tmp_path: Path) -> tuple[Path, Path]:
    """A self-signed RSA certificate: RSA key exchange (no forward secrecy) needs an RSA key,
    so only with one does refusing AES128-SHA show anything."""
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import rsa
    from cryptography.x509.oid import NameOID

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(1)
            .not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=1)).sign(key, hashes.SHA256()))
    cert_path, key_path = tmp_path / "rsa.crt", tmp_path / "rsa.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path


def test_tls12_defaults_to_forward_secret_suites_only(tmp_path: Path) -> None:
    cert, key = _rsa_cert(tmp_path)
    text = f"tls_server_config:\n  cert_file: {cert}\n  key_file: {key}\n"
    cfg = parse_web_config(text, str(tmp_path / "w.yml")).tls
    assert cfg is not None
    ctx = build_context(cfg, "w.yml")
    assert all("ECDHE" in c["name"] for c in ctx.get_ciphers()
               if c["protocol"] == "TLSv1.2"), [c["name"] for c in ctx.get_ciphers()]
    assert _handshake(ctx, "AES128-SHA:AES256-GCM-SHA384") is None  # RSA key exchange: refused
    assert _handshake(ctx, "ECDHE-RSA-AES128-GCM-SHA256") == "ECDHE-RSA-AES128-GCM-SHA256"
    # asked for by name, the RSA suite is served, with a warning at load
    explicit = parse_web_config(text + "  cipher_suites: [TLS_RSA_WITH_AES_128_CBC_SHA]\n",
                                str(tmp_path / "w.yml"))
    assert any("no forward secrecy" in w for w in explicit.warnings)
    assert explicit.tls is not None
    assert _handshake(build_context(explicit.tls, "w.yml"), "AES128-SHA") == "AES128-SHA"
