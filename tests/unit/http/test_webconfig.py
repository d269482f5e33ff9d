"""The web config parser: exporter-toolkit's keys and defaults, and one-line errors naming file,
line and key, with no secret in any message."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from podgpu.http.webconfig import (
    WebConfigError,
    load_web_config,
    parse_go_duration,
    parse_web_config,
)

HASH = "$2y$10$X0h1gDsPszWURQaxFh.zoubFi6DXncSjhoQNJgRrnGs7EsimhC7zG"  # the toolkit docs' example
PATH = "/etc/podgpu/web-config.yml"


def parse(text: str):  # type: ignore[no-untyped-def]
    return parse_web_config(textwrap.dedent(text), PATH)


def error(text: str) -> str:
    with pytest.raises(WebConfigError) as exc:
        parse(text)
    msg = str(exc.value)
    assert "\n" not in msg
    return msg


def test_dcgm_exporter_style_file_with_toolkit_defaults() -> None:
    cfg = parse(f"""
        tls_server_config:
          cert_file: tls/server.crt
          key_file: /abs/server.key
          client_auth_type: RequireAndVerifyClientCert
          client_ca_file: ca.crt
        basic_auth_users:
          alice: {HASH}
        """)
    assert cfg.tls is not None
    # relative paths resolve against the config file's directory, as the toolkit does
    assert cfg.tls.cert_file == "/etc/podgpu/tls/server.crt"
    assert cfg.tls.key_file == "/abs/server.key"
    assert cfg.tls.client_ca_file == "/etc/podgpu/ca.crt"
    assert (cfg.tls.min_version, cfg.tls.max_version) == ("TLS12", "TLS13")
    assert cfg.tls.prefer_server_cipher_suites is True
    assert cfg.http2 is True and cfg.headers == ()
    assert cfg.users == {"alice": HASH}
    assert cfg.files == (PATH, "/etc/podgpu/tls/server.crt", "/abs/server.key",
                         "/etc/podgpu/ca.crt")


def test_empty_file_and_basic_auth_only_serve_plain_http() -> None:
    assert parse("").tls is None
    assert parse("# nothing\n").users == {}
    cfg = parse(f"basic_auth_users: {{bob: '{HASH}'}}\n")
    assert cfg.tls is None and cfg.users == {"bob": HASH}


def test_every_optional_key() -> None:
    cfg = parse(f"""
        tls_server_config:
          cert: "-----BEGIN CERTIFICATE-----"
          key: "-----BEGIN PRIVATE KEY-----"
          client_ca: "-----BEGIN CERTIFICATE-----"
          client_auth_type: RequireAndVerifyClientCert
          client_allowed_sans: [scraper.example, 10.0.0.1]
          min_version: TLS13
          max_version: TLS13
          cipher_suites: [TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256, TLS_AES_128_GCM_SHA256]
          prefer_server_cipher_suites: false
          curve_preferences: [CurveP384]
        http_server_config:
          http2: false
          headers:
            X-Frame-Options: sameorigin
            X-Content-Type-Options: nosniff
            Strict-Transport-Security: max-age=31536000
            Content-Security-Policy: ""
        basic_auth_users:
          123: {HASH}
        rate_limit:
          interval: 1m30s
          burst: 3
        """)
    assert cfg.tls is not None and cfg.tls.client_allowed_sans == ("scraper.example", "10.0.0.1")
    assert cfg.tls.cipher_suites[0] == "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"
    assert cfg.tls.prefer_server_cipher_suites is False and cfg.http2 is False
    # a blank header value means unset, as in the toolkit
    assert dict(cfg.headers) == {"X-Frame-Options": "sameorigin", "X-Content-Type-Options": "nosniff",
                                 "Strict-Transport-Security": "max-age=31536000"}
    assert cfg.users == {"123": HASH}  # Go reads a numeric key into a string map as its text
    assert (cfg.rate_limit_interval, cfg.rate_limit_burst) == (90.0, 3)
    assert "key=" not in repr(cfg.tls)  # the inline key never shows in a repr


@pytest.mark.parametrize(("text", "line", "expected"), [
    ("tls_server_config:\n  cert_file: a\n  key_file: b\n  clientauth: x\n", 4,
     "tls_server_config.clientauth: unknown key"),
    ("tls_server_config:\n  cert_file: a\n", 2, "tls_server_config: missing key_file"),
    ("tls_server_config:\n  key_file: a\n", 2, "tls_server_config: missing cert_file"),
    ("tls_server_config:\n  cert_file: a\n  key_file: b\n  client_auth_type: Maybe\n", 4,
     "tls_server_config.client_auth_type: 'Maybe' is not one of"),
    ("tls_server_config:\n  cert_file: a\n  key_file: b\n  client_auth_type: RequireAnyClientCert\n",
     4, "cannot be served by Python's ssl"),
    ("tls_server_config:\n  cert_file: a\n  key_file: b\n  client_ca_file: c\n", 2,
     "client_auth_type: a client CA is given but client_auth_type is NoClientCert"),
    ("tls_server_config:\n  cert_file: a\n  key_file: b\n  client_auth_type: RequireAndVerifyClientCert\n",
     4, "needs client_ca_file"),
    ("tls_server_config:\n  cert_file: a\n  key_file: b\n  client_allowed_sans: [x]\n", 4,
     "client_allowed_sans: needs client_auth_type RequireAndVerifyClientCert"),
    ("tls_server_config:\n  cert_file: a\n  key_file: b\n  min_version: TLS14\n", 4,
     "min_version: 'TLS14' is not one of TLS10, TLS11, TLS12, TLS13"),
    ("tls_server_config:\n  cert_file: a\n  key_file: b\n  min_version: TLS13\n  max_version: TLS12\n",
     4, "min_version: TLS13 is above max_version TLS12"),
    ("tls_server_config:\n  cert_file: a\n  key_file: b\n  cipher_suites:\n    - TLS_RSA_WITH_RC4_128_SHA\n",
     5, "cipher_suites[0]: unknown cipher suite 'TLS_RSA_WITH_RC4_128_SHA'"),
    ("tls_server_config:\n  cert_file: a\n  key_file: b\n  curve_preferences: [P-256]\n", 4,
     "curve_preferences[0]: unknown curve 'P-256'"),
    ("tls_server_config:\n  cert_file: a\n  cert: x\n  key_file: b\n", 3,
     "tls_server_config.cert: give either cert (inline PEM) or cert_file, not both"),
    ("tls_server_config:\n  cert_file: a\n  key_file: b\n  prefer_server_cipher_suites: maybe\n", 4,
     "expected true or false"),
    ("http_server_config:\n  headers:\n    X-Custom: 1\n", 3,
     "http_server_config.headers.X-Custom: this header cannot be configured"),
    ("http_server_config:\n  headers:\n    X-Frame-Options: allow\n", 3,
     "'allow' is not one of deny, sameorigin"),
    ("http_server_config:\n  http3: true\n", 2, "http_server_config.http3: unknown key"),
    ("basic_auth_users:\n  alice: plaintext\n", 2, "basic_auth_users.alice: not a bcrypt hash"),
    ("basic_auth_users:\n  'a:b': " + HASH + "\n", 2, "cannot contain ':'"),
    ("basic_auth_users:\n  alice: " + HASH.replace("$10$", "$03$") + "\n", 2, "cost 03 is outside 4-31"),
    ("rate_limit:\n  interval: fast\n  burst: 1\n", 2, "rate_limit.interval: 'fast' is not a duration"),
    ("rate_limit:\n  interval: 1s\n", 2, "rate_limit.burst: must be at least 1"),
    ("rate_limit:\n  interval: 1s\n  burst: -1\n", 3, "rate_limit.burst: expected an integer"),
    ("tls_server_config: [a, b]\n", 1, "tls_server_config: expected a mapping"),
    ("basic_auth_users:\n  alice: " + HASH + "\n  alice: " + HASH + "\n", 3,
     "basic_auth_users.alice: given twice"),
    ("users:\n  alice: x\n", 1, "users: unknown key"),
    ("- a\n- b\n", 1, "top level: expected a mapping"),
])
def test_errors_name_file_line_and_key(text: str, line: int, expected: str) -> None:
    msg = error(text)
    assert msg.startswith(f"{PATH}:{line}: "), msg
    assert expected in msg, msg


# Header values the listener cannot send as written (it writes the head in ASCII; a CR or LF
# would split it, RFC 9110 section 5.5 allows no control character but tab), each given as a YAML
# escape in a double-quoted scalar, which the file-level control-character check cannot see.
@pytest.mark.parametrize(("escaped", "named"), [
    ("\\r", '"\\r" (position 2)'), ("\\n", '"\\n" (position 2)'), ("\\0", "control characters"),
    ("\\t", '"\\t" (position 2)'), ("\\u2028", '"\\u2028" (position 2)'),
    ("\\u00e9", '"\\u00e9" (position 2)'), ("\\u263a", '"\\u263a" (position 2)'),
])
def test_a_header_value_that_cannot_be_sent_is_refused_naming_it(escaped: str, named: str) -> None:
    msg = error(f'http_server_config:\n  headers:\n    Content-Security-Policy: "a{escaped}b"\n')
    assert msg.startswith(f"{PATH}:3: http_server_config.headers.Content-Security-Policy: "), msg
    assert named in msg, msg
    assert len(msg.splitlines()) == 1


@pytest.mark.parametrize(("key", "shown"), [
    ('"X-Frame-Options\\r\\nX-Evil: 1"', 'the key "X-Frame-Options\\r\\nX-Evil: 1" has control'),
    ('"X-Frame-Options\\u2028"', 'headers."X-Frame-Options\\u2028": this header cannot'),
    ('"X-Frame-Options "', 'headers."X-Frame-Options ": this header cannot'),
])
def test_a_header_name_that_cannot_be_sent_is_refused_naming_it(key: str, shown: str) -> None:
    msg = error(f"http_server_config:\n  headers:\n    {key}: deny\n")
    assert msg.startswith(f"{PATH}:3: "), msg
    assert shown in msg, msg
    assert len(msg.splitlines()) == 1


def test_a_user_name_with_control_characters_is_not_shown() -> None:
    msg = error(f'basic_auth_users:\n  "al\\rice": {HASH}\n')
    assert "a key has control characters" in msg and "al" not in msg.split(": ", 2)[2]


def test_secrets_never_appear_in_messages() -> None:
    secret_key = "-----BEGIN PRIVATE KEY-----\\nMIIsecretsecret\\n"
    msg = error(f'tls_server_config:\n  cert_file: a\n  key: "{secret_key}"\n  key_file: b\n')
    assert "MIIsecret" not in msg and "not both" in msg
    msg = error("basic_auth_users:\n  alice: $2y$10$tooshortbutsecret\n")
    assert "tooshortbutsecret" not in msg
    # a YAML syntax error inside a secret: PyYAML would print the line; the message must not
    msg = error('tls_server_config:\n  key: "MIIsecret\n  cert_file: [\n')
    assert "MIIsecret" not in msg and "not valid YAML" in msg


def test_toolkit_style_warnings() -> None:
    cfg = parse("tls_server_config:\n  min_version: TLS13\n")
    assert cfg.tls is None and "no certificate" in cfg.warnings[0]
    cfg = parse("tls_server_config:\n  cert_file: a\n  key_file: b\n  curve_preferences: [X25519, CurveP256]\n")
    assert "one curve only" in cfg.warnings[0] and "CurveP256" in cfg.warnings[0]
    cfg = parse("tls_server_config:\n  cert_file: a\n  key_file: b\n  client_auth_type: RequestClientCert\n")
    assert "same as NoClientCert" in cfg.warnings[0]


def test_go_durations() -> None:
    assert parse_go_duration("0") == 0.0
    assert parse_go_duration("250ms") == pytest.approx(0.25)
    assert parse_go_duration("1h2m3.5s") == pytest.approx(3723.5)
    assert parse_go_duration("1.5us") == pytest.approx(1.5e-6)
    for bad in ("", "1", "s", "1x", "1s junk", "-1s"):
        assert parse_go_duration(bad) is None, bad


def test_load_reads_files_and_reports_problems(tmp_path: Path) -> None:
    p = tmp_path / "web.yml"

    def load_error() -> str:
        with pytest.raises(WebConfigError) as exc:
            load_web_config(str(p))
        return str(exc.value)

    assert "cannot read the web config" in load_error()
    p.write_bytes(b"basic_auth_users:\n  \xff: x\n")
    assert "not UTF-8" in load_error()
    p.write_bytes(b"#" * (2 << 20))
    assert "larger than" in load_error()
    p.write_text(f"basic_auth_users:\n  alice: '{HASH}'\n")
    assert load_web_config(str(p)).users == {"alice": HASH}
