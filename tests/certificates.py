"""Throw-away certificates for the TLS tests, made at run time (no private key is ever kept in
the repository): a CA, a server certificate for 127.0.0.1 and localhost, client certificates
with a given common name, and the same from a CA the broker does not trust."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

Key = ec.EllipticCurvePrivateKey


def _name(common_name: str) -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Broker tests"),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
        ]
    )


def _builder(subject: x509.Name, issuer: x509.Name, key: Key) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
    )


@dataclass(frozen=True)
class Authority:
    """A CA that signs certificates into ``directory``."""

    directory: Path
    name: str
    key: Key
    certificate: x509.Certificate

    @classmethod
    def create(cls, directory: Path, name: str) -> Authority:
        key = ec.generate_private_key(ec.SECP256R1())
        certificate = (
            _builder(_name(name), _name(name), key)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True
            )
            .sign(key, hashes.SHA256())
        )
        authority = cls(directory, name, key, certificate)
        authority.ca_file.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
        return authority

    @property
    def ca_file(self) -> Path:
        return self.directory / f"{self.name}.pem"

    def issue(self, common_name: str, *, server: bool = False) -> tuple[Path, Path]:
        """(certificate file, unencrypted key file) for ``common_name``."""
        key = ec.generate_private_key(ec.SECP256R1())
        usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
        builder = _builder(_name(common_name), self.certificate.subject, key).add_extension(
            x509.ExtendedKeyUsage([usage]), critical=False
        )
        if server:
            names = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        certificate = builder.sign(self.key, hashes.SHA256())
        stem = self.directory / f"{self.name}-{common_name or 'no-cn'}"
        cert_file, key_file = stem.with_suffix(".crt"), stem.with_suffix(".key")
        cert_file.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
        key_file.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
        return cert_file, key_file


@dataclass(frozen=True)
class Certificates:
    """The trusted CA (it signs the server's and the clients' certificates) and a stranger."""

    trusted: Authority
    stranger: Authority
    server_cert: Path
    server_key: Path

    @property
    def ca(self) -> Path:
        return self.trusted.ca_file

    def client(self, common_name: str, *, trusted: bool = True) -> tuple[Path, Path]:
        return (self.trusted if trusted else self.stranger).issue(common_name)

    def environment(self, **listeners: str) -> dict[str, str]:
        """``BROKER_*`` settings for a broker process: these files and the listeners given
        (``mqtt_tls_listen="127.0.0.1:PORT"``, ...)."""
        return {
            "BROKER_TLS_CERT": str(self.server_cert),
            "BROKER_TLS_KEY": str(self.server_key),
            "BROKER_TLS_CLIENT_CA": str(self.ca),
        } | {f"BROKER_{name.upper()}": value for name, value in listeners.items()}


def make_certificates(directory: Path) -> Certificates:
    trusted = Authority.create(directory, "test-ca")
    stranger = Authority.create(directory, "stranger-ca")
    server_cert, server_key = trusted.issue("localhost", server=True)
    return Certificates(trusted, stranger, server_cert, server_key)
