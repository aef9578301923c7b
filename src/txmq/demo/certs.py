"""Throwaway certificates for TLS on one machine: a CA, a server certificate (also valid as the
client certificate a broker presents to its cluster peers), a client one.

Owns: generating them with the ``cryptography`` package (a dev/demo dependency: import this
module only when certificates are wanted) and writing them as PEM files, private keys at mode
600. Used by ``txmq demo --secure`` and the TLS tests. Must not: serve a real deployment (the
certificates live one day; docs/security.md says how to bring your own).
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

# A demo or a test run lasts minutes; a day leaves room for clock skew and slow machines.
VALIDITY = datetime.timedelta(days=1)
CA_NAME = "txmq throwaway CA"


@dataclass(frozen=True, slots=True)
class Bundle:
    """Paths of one throwaway PKI."""

    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _certificate(
    subject: str,
    key: ec.EllipticCurvePrivateKey,
    ca_key: ec.EllipticCurvePrivateKey,
    *,
    hosts: tuple[str, ...] = (),
    usage: tuple[x509.ObjectIdentifier, ...] = (),
) -> x509.Certificate:
    """A certificate for ``key`` signed by ``ca_key``, for the extended key ``usage``s; a CA
    certificate when ``usage`` is empty."""
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(subject))
        .issuer_name(_name(CA_NAME))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + VALIDITY)
        .add_extension(x509.BasicConstraints(ca=not usage, path_length=None), critical=True)
    )
    if hosts:
        names: list[x509.GeneralName] = []
        for host in hosts:
            try:
                names.append(x509.IPAddress(ipaddress.ip_address(host)))
            except ValueError:
                names.append(x509.DNSName(host))
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    if usage:
        builder = builder.add_extension(x509.ExtendedKeyUsage(list(usage)), critical=False)
    return builder.sign(ca_key, hashes.SHA256())


def _write(path: Path, data: bytes, mode: int) -> Path:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "wb") as out:
        out.write(data)
    os.chmod(path, mode)
    return path


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


class Authority:
    """A throwaway CA kept in memory, its certificate written to ``directory/ca.pem``: it
    issues certificates on demand (a peer certificate naming one member, in the tests)."""

    def __init__(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.directory = directory
        self._key = ec.generate_private_key(ec.SECP256R1())
        ca = _certificate(CA_NAME, self._key, self._key)
        self.ca = _write(directory / "ca.pem", ca.public_bytes(serialization.Encoding.PEM), 0o644)

    def issue(
        self,
        stem: str,
        subject: str,
        *,
        hosts: tuple[str, ...] = (),
        usage: tuple[x509.ObjectIdentifier, ...] = (ExtendedKeyUsageOID.CLIENT_AUTH,),
    ) -> tuple[Path, Path]:
        """A certificate for ``subject`` (its CN) naming ``hosts`` (SAN: IP addresses and DNS
        names) for ``usage``: (``stem``.pem, ``stem``.key) in the CA's directory."""
        key = ec.generate_private_key(ec.SECP256R1())
        cert = _certificate(subject, key, self._key, hosts=hosts, usage=usage)
        pem = serialization.Encoding.PEM
        return (
            _write(self.directory / f"{stem}.pem", cert.public_bytes(pem), 0o644),
            _write(self.directory / f"{stem}.key", _key_pem(key), 0o600),
        )


def make_bundle(directory: Path, *, hosts: tuple[str, ...] = ("127.0.0.1", "localhost")) -> Bundle:
    """Write a CA, a server certificate for ``hosts`` and a client certificate into
    ``directory`` (keys mode 600, certificates 644). The server certificate is a cluster
    member's: valid for serverAuth and clientAuth, since a member started with
    ``--tls-client-ca`` presents it to its peers (``--tls-peer-cert`` defaults to it)."""
    assert hosts, "a server certificate names at least one host"
    authority = Authority(directory)
    member = (ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH)
    server_cert, server_key = authority.issue("server", hosts[0], hosts=hosts, usage=member)
    client_cert, client_key = authority.issue("client", "txmq client")
    return Bundle(authority.ca, server_cert, server_key, client_cert, client_key)
