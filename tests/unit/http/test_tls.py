"""TLS contexts from the web config and rotation without a restart, against podgpu's TLS listener
(ssl.MemoryBIO under http.conn) on loopback and Python's ssl client (certificates generated per
test)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import socket
import ssl
from collections.abc import AsyncIterator, Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest

from podgpu.http.app import App, Request, Response
from podgpu.http.tls import TlsReloader, build_context
from podgpu.http.webconfig import TlsServerConfig, WebConfigError
from tests.tlsutil import Pki, serial_of
from tests.unit.http.loopback import serving


@pytest.fixture
def pki(tmp_path: Path) -> tuple[Pki, Pki]:
    return Pki(tmp_path, "good"), Pki(tmp_path, "other")


def cfg(pki: Pki, **kw: Any) -> TlsServerConfig:
    server = pki.dir / "server"
    base = {"cert_file": str(server.with_suffix(".crt")), "key_file": str(server.with_suffix(".key"))}
    return TlsServerConfig(**{**base, **kw})


@contextlib.asynccontextmanager
async def listener(context: ssl.SSLContext) -> AsyncIterator[int]:
    app = App()

    def hello(request: Request) -> Response:
        peer = request.peercert
        return Response.text(200, f"peer={dict(x[0] for x in peer['subject'])['commonName'] if peer else '-'}")

    app.add_get("/", hello)
    async with serving(app, ssl_context=context) as (port, _guard):
        yield port


def fetch(port: int, ca: Path, *, client: tuple[Path, Path] | None = None,
          version: ssl.TLSVersion | None = None) -> tuple[str, int, str]:
    """(response first line + body tail, server cert serial, TLS version) or raises."""
    ctx = ssl.create_default_context(cafile=str(ca))
    if client:
        ctx.load_cert_chain(str(client[0]), str(client[1]))
    if version:
        ctx.minimum_version = ctx.maximum_version = version
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw, \
            ctx.wrap_socket(raw, server_hostname="localhost") as s:
        der = s.getpeercert(binary_form=True)
        assert der is not None
        s.sendall(b"GET / HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        data = b""
        while chunk := s.recv(65536):
            data += chunk
        if not data:  # TLS 1.3: a refused client certificate shows after the handshake
            raise ConnectionError("closed without an answer")
        return data.split(b"\r\n")[0].decode() + " " + data.split(b"\r\n\r\n")[-1].decode(), \
            serial_of(der), str(s.version())


def refused(call: Callable[[], Any]) -> str:
    with pytest.raises((ssl.SSLError, ConnectionError, OSError)) as exc:
        call()
    return type(exc.value).__name__


def drive(test: Callable[[], Coroutine[Any, Any, None]]) -> None:
    asyncio.run(test())


@pytest.mark.filterwarnings("ignore:ssl.TLSVersion.TLSv1_1 is deprecated")
def test_tls12_and_tls13_and_minimum_version(pki: tuple[Pki, Pki]) -> None:
    good, _ = pki
    leaf = good.leaf("server", server=True)
    reloader = TlsReloader(cfg(good), "web.yml")

    async def main() -> None:
        loop = asyncio.get_running_loop()
        async with listener(reloader.front) as port:
            for v, name in ((ssl.TLSVersion.TLSv1_2, "TLSv1.2"), (ssl.TLSVersion.TLSv1_3, "TLSv1.3")):
                text, serial, got = await loop.run_in_executor(
                    None, functools.partial(fetch, port, good.ca, version=v))
                assert text.startswith("HTTP/1.1 200") and serial == leaf.serial and got == name
            # TLS 1.1 is below the default minimum (TLS12)
            refused(lambda: fetch(port, good.ca, version=ssl.TLSVersion.TLSv1_1))
            reloader.replace(cfg(good, min_version="TLS13"), "web.yml")
            await loop.run_in_executor(None, lambda: refused(
                lambda: fetch(port, good.ca, version=ssl.TLSVersion.TLSv1_2)))
            assert (await loop.run_in_executor(None, lambda: fetch(port, good.ca)))[2] == "TLSv1.3"

    drive(main)


def test_mtls_good_wrong_and_no_client_certificate(pki: tuple[Pki, Pki]) -> None:
    good, other = pki
    good.leaf("server", server=True)
    mine = good.leaf("scraper", server=False)
    theirs = other.leaf("intruder", server=False)
    reloader = TlsReloader(cfg(good, client_auth_type="RequireAndVerifyClientCert",
                               client_ca_file=str(good.ca)), "web.yml")

    async def main() -> None:
        loop = asyncio.get_running_loop()
        async with listener(reloader.front) as port:
            ok = await loop.run_in_executor(None, lambda: fetch(port, good.ca,
                                                                client=(mine.cert, mine.key)))
            assert ok[0].endswith("peer=scraper")
            await loop.run_in_executor(None, lambda: refused(lambda: fetch(port, good.ca)))
            await loop.run_in_executor(None, lambda: refused(
                lambda: fetch(port, good.ca, client=(theirs.cert, theirs.key))))
            # rotate the client CA: the other CA's clients get in, the old CA's do not
            reloader.replace(cfg(good, client_auth_type="RequireAndVerifyClientCert",
                                 client_ca_file=str(other.ca)), "web.yml")
            ok = await loop.run_in_executor(None, lambda: fetch(port, good.ca,
                                                                client=(theirs.cert, theirs.key)))
            assert ok[0].endswith("peer=intruder")
            await loop.run_in_executor(None, lambda: refused(
                lambda: fetch(port, good.ca, client=(mine.cert, mine.key))))
            # and back to no client certificates at all, without re-opening the socket
            reloader.replace(cfg(good), "web.yml")
            assert (await loop.run_in_executor(None, lambda: fetch(port, good.ca)))[0].endswith("peer=-")

    drive(main)


def test_certificate_rotation_applies_to_new_connections(pki: tuple[Pki, Pki]) -> None:
    good, other = pki
    first = good.leaf("server", server=True)
    reloader = TlsReloader(cfg(good), "web.yml")

    async def main() -> None:
        loop = asyncio.get_running_loop()
        async with listener(reloader.front) as port:
            assert (await loop.run_in_executor(None, lambda: fetch(port, good.ca)))[1] == first.serial
            second = good.leaf("server", server=True)  # same files, new certificate
            reloader.replace(cfg(good), "web.yml")
            assert (await loop.run_in_executor(None, lambda: fetch(port, good.ca)))[1] == second.serial
            # a new CA altogether: clients trusting the old one now fail, as they should
            moved = other.leaf("server", server=True)
            reloader.replace(cfg(other), "web.yml")
            await loop.run_in_executor(None, lambda: refused(lambda: fetch(port, good.ca)))
            assert (await loop.run_in_executor(None, lambda: fetch(port, other.ca)))[1] == moved.serial

    drive(main)


def test_cipher_suites_for_tls12(pki: tuple[Pki, Pki]) -> None:
    good, _ = pki
    good.leaf("server", server=True)  # an EC key: ECDSA suites
    only = cfg(good, cipher_suites=("TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",), max_version="TLS12")
    reloader = TlsReloader(only, "web.yml")

    def with_cipher(port: int, cipher: str) -> str:
        ctx = ssl.create_default_context(cafile=str(good.ca))
        ctx.maximum_version = ssl.TLSVersion.TLSv1_2
        ctx.set_ciphers(cipher)
        with socket.create_connection(("127.0.0.1", port), timeout=5) as raw, \
                ctx.wrap_socket(raw, server_hostname="localhost") as s:
            return str(s.cipher()[0])  # type: ignore[index]

    async def main() -> None:
        loop = asyncio.get_running_loop()
        async with listener(reloader.front) as port:
            assert await loop.run_in_executor(None, with_cipher, port,
                                              "ECDHE-ECDSA-AES256-GCM-SHA384") == \
                "ECDHE-ECDSA-AES256-GCM-SHA384"
            await loop.run_in_executor(None, lambda: refused(
                lambda: with_cipher(port, "ECDHE-ECDSA-AES128-GCM-SHA256")))

    drive(main)


def test_bad_files_name_the_key(pki: tuple[Pki, Pki], tmp_path: Path) -> None:
    good, other = pki
    good.leaf("server", server=True)
    other.leaf("elsewhere", server=True)

    def err(c: TlsServerConfig) -> str:
        with pytest.raises(WebConfigError) as exc:
            build_context(c, "web.yml")
        assert "\n" not in str(exc.value)
        return str(exc.value)

    assert "tls_server_config.cert_file" in err(cfg(good, cert_file=str(tmp_path / "missing.crt")))
    assert "cannot read" in err(cfg(good, key_file=str(tmp_path / "missing.key")))
    mismatch = err(cfg(good, key_file=str(other.dir / "elsewhere.key")))
    assert "cannot be used together" in mismatch and "KEY_VALUES_MISMATCH" in mismatch
    assert "no PEM certificate" in err(cfg(good, cert_file=str(good.dir / "server.key")))
    assert "no PEM private key" in err(cfg(good, key_file=str(good.dir / "server.crt")))
    assert "not a PEM CA certificate" in err(cfg(good, client_auth_type="RequireAndVerifyClientCert",
                                                 client_ca_file=str(good.dir / "server.key")))
    locked = good.leaf("locked", server=True, password=b"hunter2")
    msg = err(cfg(good, cert_file=str(locked.cert), key_file=str(locked.key)))
    assert "encrypted" in msg and "hunter2" not in msg


def test_inline_pem(pki: tuple[Pki, Pki]) -> None:
    good, _ = pki
    leaf = good.leaf("server", server=True)
    inline = TlsServerConfig(cert=leaf.cert.read_text(), key=leaf.key.read_text(),
                             client_ca=good.ca.read_text(), client_auth_type="VerifyClientCertIfGiven")
    ctx = build_context(inline, "web.yml")
    assert ctx.verify_mode == ssl.CERT_OPTIONAL
    assert len(ctx.get_ca_certs()) == 1
