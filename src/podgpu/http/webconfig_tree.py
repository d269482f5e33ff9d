"""The web config's YAML node tree to `WebConfig`: every key, its type and its allowed values.

Walks PyYAML's node tree (not loaded values) so every error can name its line, and so string
fields take the raw scalar text as Go's yaml does (`123` is the string "123"). Values that may be
secret (inline keys, password hashes) are described, never printed.
"""

from __future__ import annotations

import importlib
import json
import os
import re
from typing import Any

from podgpu.http.webconfig_model import (
    ALLOWED_HEADERS,
    CLIENT_AUTH_TYPES,
    GO_CIPHERS,
    GO_CURVES,
    TLS_VERSIONS,
    TlsServerConfig,
    WebConfig,
    WebConfigError,
    parse_go_duration,
)

_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
_UNSENDABLE = re.compile(r"[^\x20-\x7e]")
"""What a response header value from the file cannot hold: anything but printable ASCII and
space (RFC 9110 section 5.5 allows tab too; the toolkit's values never need one)."""
_BCRYPT = re.compile(r"\$2[abxy]?\$(?P<cost>\d\d)\$[./A-Za-z0-9]{53}")


class TreeParser:
    """Walks PyYAML's node tree (not loaded values) so every error can name its line, and so
    string fields take the raw scalar text as Go's yaml does (`123` is the string "123")."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.base = os.path.dirname(os.path.abspath(path))
        self.warnings: list[str] = []

    def fail(self, node: Any, key: str, problem: str) -> WebConfigError:
        where = f"{self.path}:{node.start_mark.line + 1}"
        public = "basic_auth_users.<user>" if key.startswith("basic_auth_users.") else key
        return WebConfigError(f"{where}: {key}: {problem}", f"{where}: {public}: {problem}")

    def mapping(self, node: Any, key: str, allowed: tuple[str, ...] | None) -> dict[str, Any]:
        """Key -> value node; unknown or repeated keys are errors (the toolkit is strict too)."""
        yaml = _yaml()
        if _is_null(node):
            return {}
        if not isinstance(node, yaml.MappingNode):
            raise self.fail(node, key or "top level", "expected a mapping")
        out: dict[str, Any] = {}
        for k, v in node.value:
            if not isinstance(k, yaml.ScalarNode):
                raise self.fail(k, key or "top level", "keys must be plain strings")
            name = str(k.value)
            if _CONTROL.search(name) or "\n" in name or "\r" in name:
                shown = "a key" if key == "basic_auth_users" else f"the key {_shown(name)}"
                raise self.fail(k, key or "top level", f"{shown} has control characters")
            where = f"{key}.{_shown(name)}" if key else _shown(name)
            if allowed is not None and name not in allowed:
                raise self.fail(k, where, f"unknown key (allowed: {', '.join(allowed)})")
            if name in out:
                raise self.fail(k, where, "given twice")
            out[name] = v
        return out

    def string(self, node: Any, key: str) -> str | None:
        yaml = _yaml()
        if _is_null(node):
            return None
        if not isinstance(node, yaml.ScalarNode):
            raise self.fail(node, key, "expected a string")
        value = str(node.value)
        if _CONTROL.search(value):  # a YAML escape such as "\x01" or "\0" (never printed)
            raise self.fail(node, key, "control characters are not allowed")
        return value

    def strings(self, node: Any, key: str) -> tuple[str, ...]:
        yaml = _yaml()
        if _is_null(node):
            return ()
        if not isinstance(node, yaml.SequenceNode):
            raise self.fail(node, key, "expected a list of strings")
        out = []
        for i, item in enumerate(node.value):
            s = self.string(item, f"{key}[{i}]")
            if s is None:
                raise self.fail(item, f"{key}[{i}]", "empty entry")
            out.append(s)
        return tuple(out)

    def boolean(self, node: Any, key: str, default: bool) -> bool:
        text = self.string(node, key)
        if text is None:
            return default
        t = text.lower()
        if t in ("true", "yes", "on", "y"):
            return True
        if t in ("false", "no", "off", "n"):
            return False
        raise self.fail(node, key, f"expected true or false, got {text!r}")

    def file(self, node: Any, key: str) -> str | None:
        value = self.string(node, key)
        if not value:
            return None
        return value if os.path.isabs(value) else os.path.join(self.base, value)

    def config(self, root: Any) -> WebConfig:
        top = self.mapping(root, "", ("tls_server_config", "http_server_config",
                                      "basic_auth_users", "rate_limit"))
        tls = self.tls(top["tls_server_config"]) if "tls_server_config" in top else None
        http2, headers = True, tuple[tuple[str, str], ...]()
        if "http_server_config" in top:
            http2, headers = self.http(top["http_server_config"])
        users = self.users(top["basic_auth_users"]) if "basic_auth_users" in top else {}
        interval, burst = self.rate_limit(top["rate_limit"]) if "rate_limit" in top else (0.0, 0)
        return WebConfig(self.path, tls, http2, headers, users, interval, burst,
                         tuple(self.warnings))

    def tls(self, node: Any) -> TlsServerConfig | None:
        keys = ("cert", "key", "client_ca", "cert_file", "key_file", "client_auth_type",
                "client_ca_file", "client_allowed_sans", "min_version", "max_version",
                "cipher_suites", "prefer_server_cipher_suites", "curve_preferences")
        m = self.mapping(node, "tls_server_config", keys)
        k = "tls_server_config."
        v: dict[str, Any] = {}
        for name in ("cert_file", "key_file", "client_ca_file"):
            if name in m:
                v[name] = self.file(m[name], k + name)
        for name in ("cert", "key", "client_ca", "client_auth_type", "min_version", "max_version"):
            if name in m:
                v[name] = self.string(m[name], k + name) or None
        if not any(v.get(n) for n in ("cert", "key", "client_ca", "cert_file", "key_file",
                                       "client_ca_file", "client_auth_type")):
            if m:  # only version/cipher settings: the toolkit serves plain HTTP then, say so
                self.warnings.append(f"{self.path}: tls_server_config has no certificate: "
                                     "serving plain HTTP")
            return None
        for inline, filed in (("cert", "cert_file"), ("key", "key_file"),
                              ("client_ca", "client_ca_file")):
            if v.get(inline) and v.get(filed):
                raise self.fail(m[inline], k + inline,
                                f"give either {inline} (inline PEM) or {filed}, not both")
        if not (v.get("cert") or v.get("cert_file")):
            raise self.fail(node, "tls_server_config", "missing cert_file (or cert)")
        if not (v.get("key") or v.get("key_file")):
            raise self.fail(node, "tls_server_config", "missing key_file (or key)")
        auth = v.pop("client_auth_type", None) or "NoClientCert"
        if auth not in CLIENT_AUTH_TYPES:
            raise self.fail(m["client_auth_type"], k + "client_auth_type",
                            f"{auth!r} is not one of {', '.join(CLIENT_AUTH_TYPES)}")
        if auth in ("RequireAnyClientCert", "RequireClientCert"):
            raise self.fail(m["client_auth_type"], k + "client_auth_type",
                            f"{auth} (a certificate nobody verifies) cannot be served by Python's "
                            "ssl; use RequireAndVerifyClientCert with client_ca_file")
        has_ca = bool(v.get("client_ca") or v.get("client_ca_file"))
        if has_ca and auth == "NoClientCert":
            raise self.fail(node, k + "client_auth_type",
                            "a client CA is given but client_auth_type is NoClientCert; use "
                            "RequireAndVerifyClientCert to require client certificates")
        if auth in ("VerifyClientCertIfGiven", "RequireAndVerifyClientCert") and not has_ca:
            raise self.fail(m["client_auth_type"], k + "client_auth_type",
                            f"{auth} needs client_ca_file (or client_ca) to verify against")
        if auth == "RequestClientCert":
            self.warnings.append(
                f"{self.path}: client_auth_type RequestClientCert: an unverified client "
                "certificate grants nothing, so this is the same as NoClientCert")
        sans = self.strings(m["client_allowed_sans"], k + "client_allowed_sans") \
            if "client_allowed_sans" in m else ()
        if sans and auth != "RequireAndVerifyClientCert":
            raise self.fail(m["client_allowed_sans"], k + "client_allowed_sans",
                            "needs client_auth_type RequireAndVerifyClientCert")
        versions = {}
        for name, default in (("min_version", "TLS12"), ("max_version", "TLS13")):
            ver = v.pop(name, None) or default
            if ver not in TLS_VERSIONS:
                raise self.fail(m[name], k + name,
                                f"{ver!r} is not one of {', '.join(TLS_VERSIONS)}")
            versions[name] = ver
        if TLS_VERSIONS.index(versions["min_version"]) > TLS_VERSIONS.index(
                versions["max_version"]):
            raise self.fail(m.get("min_version", node), k + "min_version",
                            f"{versions['min_version']} is above max_version "
                            f"{versions['max_version']}")
        if versions["min_version"] in ("TLS10", "TLS11"):
            self.warnings.append(f"{self.path}: min_version {versions['min_version']}: the "
                                 "system OpenSSL may refuse TLS below 1.2 anyway")
        ciphers = self.strings(m["cipher_suites"], k + "cipher_suites") \
            if "cipher_suites" in m else ()
        for i, c in enumerate(ciphers):
            if c not in GO_CIPHERS:
                raise self.fail(m["cipher_suites"].value[i], f"{k}cipher_suites[{i}]",
                                f"unknown cipher suite {c!r} (Go crypto/tls names, e.g. "
                                "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256)")
        plain_rsa = [c for c in ciphers if c.startswith("TLS_RSA_")]
        if plain_rsa:
            self.warnings.append(f"{self.path}: cipher_suites: {', '.join(plain_rsa)} have no "
                                 "forward secrecy (RSA key exchange)")
        curves = self.strings(m["curve_preferences"], k + "curve_preferences") \
            if "curve_preferences" in m else ()
        for i, c in enumerate(curves):
            if c not in GO_CURVES:
                raise self.fail(m["curve_preferences"].value[i], f"{k}curve_preferences[{i}]",
                                f"unknown curve {c!r} (one of {', '.join(GO_CURVES)})")
        if len(curves) > 1:
            self.warnings.append(
                f"{self.path}: curve_preferences: Python's ssl can set one curve only; using "
                f"{curves[0]}, clients offering only {', '.join(curves[1:])} are refused")
        prefer = self.boolean(m["prefer_server_cipher_suites"], k + "prefer_server_cipher_suites",
                              True) if "prefer_server_cipher_suites" in m else True
        return TlsServerConfig(client_auth_type=auth, client_allowed_sans=sans,
                               cipher_suites=ciphers, prefer_server_cipher_suites=prefer,
                               curve_preferences=curves, **versions, **v)

    def http(self, node: Any) -> tuple[bool, tuple[tuple[str, str], ...]]:
        m = self.mapping(node, "http_server_config", ("http2", "headers"))
        http2 = self.boolean(m["http2"], "http_server_config.http2", True) if "http2" in m \
            else True
        headers: list[tuple[str, str]] = []
        if "headers" in m:
            hm = self.mapping(m["headers"], "http_server_config.headers", None)
            for name, vnode in hm.items():
                where = f"http_server_config.headers.{_shown(name)}"
                if name not in ALLOWED_HEADERS:
                    raise self.fail(vnode, where, f"this header cannot be configured (allowed: "
                                    f"{', '.join(ALLOWED_HEADERS)})")
                value = self.string(vnode, where) or ""
                allowed = ALLOWED_HEADERS[name]
                if value and allowed is not None and value not in allowed:
                    raise self.fail(vnode, where,
                                    f"{value!r} is not one of {', '.join(allowed)}")
                bad = _UNSENDABLE.search(value)
                if bad is not None:  # the listener writes heads in ASCII, as the toolkit's do
                    raise self.fail(vnode, where, f"character {_shown(bad.group())} (position "
                                    f"{bad.start() + 1}) cannot be sent in a response header: "
                                    "printable ASCII and spaces only")
                if value:  # blank means unset, as in the toolkit
                    headers.append((name, value))
        return http2, tuple(headers)

    def users(self, node: Any) -> dict[str, str]:
        m = self.mapping(node, "basic_auth_users", None)
        out: dict[str, str] = {}
        for user, vnode in m.items():
            where = f"basic_auth_users.{user}"
            if ":" in user:
                raise self.fail(vnode, where, "a user name cannot contain ':' (basic auth "
                                "splits user and password there)")
            hashed = self.string(vnode, where) or ""
            cost = _BCRYPT.fullmatch(hashed)
            if not cost:  # the value is secret-ish: describe it, never print it
                raise self.fail(vnode, where, "not a bcrypt hash (expected $2y$, $2b$ or $2a$ "
                                "with 53 characters of salt and hash, e.g. from htpasswd -nBC 10)")
            if not 4 <= int(cost["cost"]) <= 31:
                raise self.fail(vnode, where, f"bcrypt cost {cost['cost']} is outside 4-31")
            out[user] = hashed
        return out

    def rate_limit(self, node: Any) -> tuple[float, int]:
        m = self.mapping(node, "rate_limit", ("interval", "burst"))
        interval = 0.0
        if "interval" in m:
            text = self.string(m["interval"], "rate_limit.interval") or "0"
            seconds = parse_go_duration(text)
            if seconds is None:
                raise self.fail(m["interval"], "rate_limit.interval",
                                f"{text!r} is not a duration such as 100ms, 1s or 1m")
            interval = seconds
        burst = 0
        if "burst" in m:
            text = self.string(m["burst"], "rate_limit.burst") or "0"
            if not text.isdigit() or int(text) > 1_000_000:
                raise self.fail(m["burst"], "rate_limit.burst",
                                f"expected an integer from 0 to 1000000, got {text!r}")
            burst = int(text)
        if interval > 0 and burst < 1:
            raise self.fail(m.get("burst", node), "rate_limit.burst",
                            "must be at least 1 when interval is set (0 would refuse every "
                            "request)")
        return interval, burst


def _yaml() -> Any:
    """PyYAML (untyped, so imported as Any); only this module and scenarios parse YAML."""
    return importlib.import_module("yaml")


def _shown(text: str) -> str:
    """`text` as it is when it is printable ASCII without blanks at its ends, else JSON-quoted,
    so a message stays one readable line (U+2028 is a line break to `str.splitlines`)."""
    if text.isascii() and text.isprintable() and text.strip() == text:
        return text
    return json.dumps(text)


def _is_null(node: Any) -> bool:
    return node is None or bool(node.tag == "tag:yaml.org,2002:null")
