"""Certificates for the TLS tests, generated with the `cryptography` package (nothing checked in).

A `Pki` is one CA with server and client leaves written as PEM files; two `Pki`s give a
"wrong CA" for the negative cases, and `rotate` re-issues the server certificate in place.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass
class Leaf:
    cert: Path
    key: Path
    serial: int


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey, password: bytes | None = None) -> None:
    enc = (serialization.BestAvailableEncryption(password) if password
           else serialization.NoEncryption())
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                       serialization.PrivateFormat.PKCS8, enc))


class Pki:
    def __init__(self, directory: Path, name: str) -> None:
        self.dir = directory
        self.name = name
        directory.mkdir(parents=True, exist_ok=True)
        self._key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        self._cert = (
            x509.CertificateBuilder().subject_name(_name(f"{name} CA")).issuer_name(_name(f"{name} CA"))
            .public_key(self._key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=2))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False,
                                         data_encipherment=False, key_agreement=False,
                                         encipher_only=False, decipher_only=False), critical=True)
            .sign(self._key, hashes.SHA256()))
        self.ca = directory / f"{name}-ca.crt"
        self.ca.write_bytes(self._cert.public_bytes(serialization.Encoding.PEM))

    def leaf(self, stem: str, *, server: bool, dns: tuple[str, ...] = ("localhost",),
             ips: tuple[str, ...] = ("127.0.0.1",), password: bytes | None = None) -> Leaf:
        """Write `<stem>.crt` and `<stem>.key` (overwriting: that is how rotation is tested)."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        serial = x509.random_serial_number()
        sans: list[x509.GeneralName] = [x509.DNSName(d) for d in dns]
        sans += [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
        cert = (
            x509.CertificateBuilder().subject_name(_name(stem)).issuer_name(self._cert.subject)
            .public_key(key.public_key()).serial_number(serial)
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName(sans), critical=False)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH if server
                                                  else ExtendedKeyUsageOID.CLIENT_AUTH]),
                           critical=False)
            .sign(self._key, hashes.SHA256()))
        leaf = Leaf(self.dir / f"{stem}.crt", self.dir / f"{stem}.key", serial)
        tmp_c, tmp_k = leaf.cert.with_suffix(".crt.tmp"), leaf.key.with_suffix(".key.tmp")
        tmp_c.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        _write_key(tmp_k, key, password)
        tmp_k.replace(leaf.key)  # key first, then cert: a reader may see a mismatched pair briefly
        tmp_c.replace(leaf.cert)
        return leaf


def serial_of(pem_or_der: bytes) -> int:
    """Serial number of a certificate (PEM or DER), e.g. what a TLS client was shown."""
    if pem_or_der.startswith(b"-----"):
        return int(x509.load_pem_x509_certificate(pem_or_der).serial_number)
    return int(x509.load_der_x509_certificate(pem_or_der).serial_number)
