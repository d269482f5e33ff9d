"""`podgpu serve --web-config-file` as a real process, with real clients: curl and Python over
TLS 1.2 and 1.3, client certificates good, wrong and missing, basic auth right, wrong and missing,
certificate rotation and bad edits while running, bad files at start, SIGHUP, and a real Prometheus
scraping over mutual TLS with basic auth. Certificates are generated per test (tests/tlsutil.py).
"""

from __future__ import annotations

import base64
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import bcrypt
import pytest

from tests.conftest import ServeProcess, wait_for
from tests.integration.prometheus_peer import Prometheus
from tests.tlsutil import Pki, serial_of

PASSWORD = "s3cret-for-tests"


def bhash(password: str) -> str:
    return bcrypt.hashpw(password.encode(), bcrypt.gensalt(4)).decode()


class Setup:
    """A CA with server and client certificates, a foreign CA with a client, and a web config."""

    def __init__(self, tmp: Path) -> None:
        self.dir = tmp
        self.pki = Pki(tmp / "pki", "cluster")
        self.other = Pki(tmp / "pki", "foreign")
        self.server = self.pki.leaf("server", server=True)
        self.client = self.pki.leaf("prometheus", server=False, dns=("prometheus.monitoring",))
        self.intruder = self.other.leaf("intruder", server=False)
        self.config = tmp / "web-config.yml"

    def write(self, *, mtls: bool = True, password: str = PASSWORD, extra: str = "") -> None:
        # relative paths: resolved against the config file's directory, like the toolkit
        text = ("tls_server_config:\n  cert_file: pki/server.crt\n  key_file: pki/server.key\n")
        if mtls:
            text += ("  client_auth_type: RequireAndVerifyClientCert\n"
                     "  client_ca_file: pki/cluster-ca.crt\n")
        text += extra
        text += ("http_server_config:\n  headers:\n    X-Frame-Options: deny\n"
                 f"basic_auth_users:\n  prometheus: '{bhash(password)}'\n")
        tmp = self.config.with_suffix(".tmp")
        tmp.write_text(text)
        tmp.replace(self.config)

    def curl(self, url: str, *args: str, client: bool = True, auth: str | None = PASSWORD
             ) -> tuple[int, str, bytes]:
        """(curl exit code, HTTP status or '', body)."""
        cmd = ["curl", "-sS", "--max-time", "5", "--cacert", str(self.pki.ca), "-o", "-",
               "-w", "\n%{http_code}", *args]
        if client:
            cmd += ["--cert", str(self.client.cert), "--key", str(self.client.key)]
        if auth is not None:
            cmd += ["-u", f"prometheus:{auth}"]
        r = subprocess.run([*cmd, url], capture_output=True, timeout=15)
        body, _, code = r.stdout.rpartition(b"\n")
        return r.returncode, code.decode(), body

    def served_serial(self, port: int) -> int:
        """Serial of the certificate the server shows to a fresh connection (Python's ssl)."""
        ctx = ssl.create_default_context(cafile=str(self.pki.ca))
        ctx.load_cert_chain(str(self.client.cert), str(self.client.key))
        with socket.create_connection(("127.0.0.1", port), timeout=5) as raw, \
                ctx.wrap_socket(raw, server_hostname="localhost") as s:
            der = s.getpeercert(binary_form=True)
            assert der is not None
            return serial_of(der)


# polls 0.1 s apart, as a person retrying would: a password poll any faster trips the per-address
# throttle of failed checks (429) before the reload it waits for lands
def start(serve: Any, setup: Setup, *args: str, env: dict[str, str] | None = None,
          flag: bool = True) -> ServeProcess:
    extra = ("--web-config-file", str(setup.config)) if flag else ()
    p: ServeProcess = serve("--simulate", "2", "-c", "200", "--simulate-scenario", "none",
                            *extra, *args, env=env)

    def answers_over_tls() -> bool:
        if p.proc.poll() is not None:
            raise AssertionError(f"podgpu exited {p.proc.returncode}: {p.stderr}")
        return setup.curl(f"https://localhost:{p.port}/health")[1] == "200"

    wait_for(answers_over_tls, timeout=15, what="podgpu to answer over TLS", interval=0.1)
    return p


def test_real_clients_over_mutual_tls_with_basic_auth(serve: Any, tmp_path: Path) -> None:
    s = Setup(tmp_path)
    s.write()
    p = start(serve, s)
    url = f"https://localhost:{p.port}"
    # curl over TLS 1.2 and TLS 1.3 with a good client certificate and the right password
    for version in (("--tlsv1.2", "--tls-max", "1.2"), ("--tlsv1.3",)):
        rc, code, body = s.curl(url + "/metrics", *version)
        assert (rc, code) == (0, "200"), version
        assert b"DCGM_FI_DEV_GPU_UTIL{" in body
    # basic auth: wrong and missing password -> 401, on every route but /health
    for path in ("/metrics", "/", "/nope"):
        assert s.curl(url + path, auth="wrong")[1] == "401", path
        assert s.curl(url + path, auth=None)[1] == "401", path
    rc, code, body = s.curl(url + "/health", auth=None)
    assert code == "200"
    entry = json.loads(body)["web_config"]
    assert entry["status"] == "ok" and entry["tls"] is True
    assert entry["client_auth_type"] == "RequireAndVerifyClientCert"
    rc, _, headers = s.curl(url + "/metrics", "-D", "-", "-o", "/dev/null")
    assert b"X-Frame-Options: deny" in headers
    # no client certificate, or one from another CA: refused in the TLS handshake
    rc, code, _ = s.curl(url + "/metrics", client=False)
    assert rc != 0 and code in ("", "000")
    rc, code, _ = s.curl(url + "/metrics", "--cert", str(s.intruder.cert), "--key",
                         str(s.intruder.key), client=False)
    assert rc != 0 and code in ("", "000")
    # plain HTTP on the TLS port gets no HTTP answer
    r = subprocess.run(["curl", "-sS", "--max-time", "5", "-o", "/dev/null", "-w", "%{http_code}",
                        f"http://127.0.0.1:{p.port}/health"], capture_output=True, timeout=15)
    assert r.returncode != 0 and r.stdout in (b"", b"000")
    # Python's client (urllib + ssl) with a client certificate and basic auth
    ctx = ssl.create_default_context(cafile=str(s.pki.ca))
    ctx.load_cert_chain(str(s.client.cert), str(s.client.key))
    token = base64.b64encode(f"prometheus:{PASSWORD}".encode()).decode()
    req = urllib.request.Request(url + "/metrics", headers={"Authorization": f"Basic {token}"})
    with urllib.request.urlopen(req, context=ctx, timeout=5) as r:
        assert r.status == 200 and b"DCGM_FI_DEV_GPU_UTIL" in r.read()
    code_, err = p.stop()
    assert code_ == 0
    assert PASSWORD not in err and "BEGIN" not in err  # no secret in the log


def test_rotation_password_change_and_a_bad_edit_while_running(serve: Any, tmp_path: Path) -> None:
    s = Setup(tmp_path)
    s.write()
    # the environment variable form of the flag
    p = start(serve, s, env={"DCGM_EXPORTER_WEB_CONFIG_FILE": str(s.config)}, flag=False)
    url = f"https://localhost:{p.port}"
    pid = p.proc.pid
    assert s.served_serial(p.port) == s.server.serial
    # rotate the server certificate in place: new connections see it, no restart
    rotated = s.pki.leaf("server", server=True)
    wait_for(lambda: s.served_serial(p.port) == rotated.serial, interval=0.1)
    assert s.curl(url + "/metrics")[1] == "200"
    # change the password: the old one stops working, the new one works
    s.write(password="n3w-password")
    wait_for(lambda: s.curl(url + "/metrics", auth="n3w-password")[1] == "200", interval=0.1)
    assert s.curl(url + "/metrics")[1] == "401"
    # a bad edit: the last good config keeps serving; the log and /health say why
    s.write(password="n3w-password", extra="  client_auth_typo: x\n")

    def health() -> dict[str, Any]:
        return dict(json.loads(s.curl(url + "/health", auth=None)[2])["web_config"])

    wait_for(lambda: health()["status"] == "reload failed", interval=0.1)
    h = health()
    assert "tls_server_config.client_auth_typo: unknown key" in h["error"]
    assert h["generation"] == 3 and h["failed_reloads"] >= 1
    assert s.curl(url + "/metrics", auth="n3w-password")[1] == "200"
    assert s.curl(url + "/metrics", auth="wrong")[1] == "401"
    assert s.curl(url + "/metrics", client=False)[0] != 0  # still mutual TLS
    # a certificate that does not match its key is a bad edit too
    s.write(password="n3w-password")
    wait_for(lambda: health()["status"] == "ok", interval=0.1)
    (tmp_path / "pki" / "server.key").write_text((tmp_path / "pki" / "intruder.key").read_text())
    wait_for(lambda: health()["status"] == "reload failed", interval=0.1)
    assert "cannot be used together" in health()["error"]
    assert s.served_serial(p.port) == rotated.serial
    fixed = s.pki.leaf("server", server=True)
    wait_for(lambda: health()["status"] == "ok", interval=0.1)
    assert s.served_serial(p.port) == fixed.serial
    # turning TLS off is refused while running (it would need a new socket)
    s.config.write_text(f"basic_auth_users:\n  prometheus: '{bhash(PASSWORD)}'\n")
    wait_for(lambda: health()["status"] == "reload failed", interval=0.1)
    assert "needs a restart" in health()["error"]
    assert p.proc.pid == pid and p.proc.poll() is None
    code, err = p.stop()
    assert code == 0
    assert err.count("web config reload failed") == 3, err
    assert "n3w-password" not in err and PASSWORD not in err and "$2b$" not in err


@pytest.mark.parametrize(("text", "expected"), [
    ("tls_server_config:\n  cert_file: pki/server.crt\n  key_file: pki/server.key\n  bogus: 1\n",
     "web-config.yml:4: tls_server_config.bogus: unknown key"),
    ("tls_server_config:\n  cert_file: pki/missing.crt\n  key_file: pki/server.key\n",
     "tls_server_config.cert_file"),
    ("basic_auth_users:\n  alice: hunter2\n", "web-config.yml:2: basic_auth_users.alice: not a bcrypt hash"),
    ("tls_server_config:\n  cert_file: pki/server.crt\n  key_file: pki/server.key\n"
     "  client_auth_type: RequireAndVerifyClientCert\n", "needs client_ca_file"),
])
def test_a_bad_file_at_start_is_exit_2_naming_the_key(tmp_path: Path, text: str, expected: str) -> None:
    s = Setup(tmp_path)
    s.config.write_text(text)
    for args, env in ((["--web-config-file", str(s.config)], {}),
                      ([], {"DCGM_EXPORTER_WEB_CONFIG_FILE": str(s.config)})):
        r = subprocess.run([sys.executable, "-m", "podgpu", "serve", "--simulate", "1", "-a", "127.0.0.1:0", *args],
                           capture_output=True, text=True, timeout=30,
                           env={**os.environ, **env})
        assert r.returncode == 2, r.stderr
        last = r.stderr.strip().splitlines()[-1]
        assert last.startswith("podgpu: ") and expected in last, r.stderr
        assert "hunter2" not in r.stderr and "Traceback" not in r.stderr


def test_sighup_reloads_the_metric_list_and_never_kills(serve: Any, tmp_path: Path) -> None:
    counters = tmp_path / "counters.csv"
    counters.write_text("DCGM_FI_DEV_GPU_TEMP, gauge, temperature\n")
    p = serve("--simulate", "1", "-c", "200", "-f", str(counters))
    p.wait_ready()
    body = p.get("/metrics")[2]
    assert b"DCGM_FI_DEV_GPU_TEMP{" in body and b"DCGM_FI_DEV_POWER_USAGE{" not in body
    counters.write_text("DCGM_FI_DEV_GPU_TEMP, gauge, temperature\n"
                        "DCGM_FI_DEV_POWER_USAGE, gauge, power\n")
    p.proc.send_signal(signal.SIGHUP)
    wait_for(lambda: b"DCGM_FI_DEV_POWER_USAGE{" in p.get("/metrics")[2], interval=0.1)
    # a bad list is refused; the list in use stays
    counters.write_text("DCGM_FI_NOT_A_FIELD, gauge, nope\n")
    p.proc.send_signal(signal.SIGHUP)
    p.wait_log("metric list not reloaded")  # the refusal is logged: then nothing else changed
    body = p.get("/metrics")[2]
    assert b"DCGM_FI_DEV_POWER_USAGE{" in body and p.proc.poll() is None
    code, err = p.stop()
    assert code == 0
    assert "metric list not reloaded" in err and "DCGM_FI_NOT_A_FIELD" in err


def test_real_prometheus_scrapes_over_mutual_tls_with_basic_auth(serve: Any, tmp_path: Path) -> None:
    s = Setup(tmp_path)
    s.write()
    p = start(serve, s)
    target = f"localhost:{p.port}"
    pw = tmp_path / "password"
    pw.write_text(PASSWORD)

    def job(name: str, *, scheme: str = "https", cert: bool = True, password: str | None = None
            ) -> str:
        text = (f"  - job_name: {name}\n    scheme: {scheme}\n"
                f"    static_configs: [{{targets: ['{target}']}}]\n"
                f"    tls_config:\n      ca_file: {s.pki.ca}\n")
        if cert:
            text += f"      cert_file: {s.client.cert}\n      key_file: {s.client.key}\n"
        text += "    basic_auth:\n      username: prometheus\n"
        text += f"      password: {password}\n" if password else f"      password_file: {pw}\n"
        return text

    jobs = (job("good") + job("wrong-password", password="guess") + job("no-client-cert", cert=False)
            + job("plain-http", scheme="http"))
    (tmp_path / "prom").mkdir()
    prom = Prometheus(tmp_path / "prom", [], scrape_configs=jobs)
    try:
        prom.wait_ready()
        health: dict[str, dict[str, Any]] = {}

        def scraped() -> bool:
            for t in prom.api("targets")["activeTargets"]:
                health[t["labels"]["job"]] = t
            return len(health) == 4 and all(t["health"] != "unknown" for t in health.values()) \
                and health["good"]["health"] == "up"

        wait_for(scraped, 30, interval=0.1)
        assert health["good"]["lastError"] == ""
        assert health["wrong-password"]["health"] == "down"
        assert "401" in health["wrong-password"]["lastError"]
        # refused before HTTP: in the handshake (no certificate), or no HTTP answer at all
        for job_name in ("no-client-cert", "plain-http"):
            assert health[job_name]["health"] == "down"
            assert "HTTP status" not in health[job_name]["lastError"], health[job_name]
        result = prom.api("query", query='DCGM_FI_DEV_GPU_UTIL{job="good"}')["result"]
        assert sorted(r["metric"]["gpu"] for r in result) == ["0", "1"]
        # rotate the server certificate while Prometheus scrapes: scrapes keep succeeding
        rotated = s.pki.leaf("server", server=True)
        wait_for(lambda: s.served_serial(p.port) == rotated.serial, interval=0.1)
        before = time.time()
        wait_for(lambda: any(t["labels"]["job"] == "good" and t["health"] == "up"
                          and t["lastScrape"] > time.strftime("%Y-%m-%dT%H:%M:%S",
                                                              time.gmtime(before + 1))
                          for t in prom.api("targets")["activeTargets"]), 15)
    finally:
        prom.stop()
