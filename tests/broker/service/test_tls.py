"""The listeners' TLS context from the settings: the errors an operator sees at start-up, the
protocol floor, client certificates and the principal they name."""

from __future__ import annotations

import socket
import ssl
import subprocess
import threading
from pathlib import Path

import pytest

from broker.service.config import ConfigError, Settings
from broker.service.tls import MINIMUM_VERSION, certificate_principal, server_context
from tests.certificates import Certificates


def settings(certificates: Certificates, **changes: str) -> Settings:
    files = {
        "tls_cert": str(certificates.server_cert),
        "tls_key": str(certificates.server_key),
        "tls_client_ca": str(certificates.ca),
    }
    return Settings(**(files | changes))  # type: ignore[arg-type]


def test_a_context_for_tls_1_2_and_later_asking_for_optional_client_certificates(
    certificates: Certificates,
) -> None:
    context = server_context(settings(certificates))
    assert context.minimum_version == MINIMUM_VERSION == ssl.TLSVersion.TLSv1_2
    assert context.verify_mode == ssl.CERT_OPTIONAL
    assert server_context(settings(certificates, tls_client_ca="")).verify_mode == ssl.CERT_NONE


def _handshake(server: ssl.SSLContext, client: ssl.SSLContext) -> dict[str, object] | None:
    """The client certificate as the server sees it, after a real handshake over a socket pair."""
    left, right = socket.socketpair()
    seen: list[dict[str, object] | None] = []

    def serve() -> None:
        with server.wrap_socket(right, server_side=True) as tls:
            seen.append(tls.getpeercert())  # type: ignore[arg-type]
            tls.sendall(b"ok")

    thread = threading.Thread(target=serve)
    thread.start()
    with client.wrap_socket(left, server_hostname="localhost") as tls:
        assert tls.recv(2) == b"ok"
    thread.join()
    return seen[0]


def test_the_principal_of_a_client_certificate_is_its_common_name(certificates: Certificates) -> None:
    server = server_context(settings(certificates))
    client = ssl.create_default_context(cafile=str(certificates.ca))
    assert certificate_principal(_handshake(server, client)) is None  # no certificate presented
    client.load_cert_chain(*certificates.client("carol"))
    assert certificate_principal(_handshake(server, client)) == "carol"


def test_a_certificate_without_a_common_name_names_no_principal() -> None:
    assert certificate_principal({"subject": ((("organizationName", "Broker tests"),),)}) == ""
    several = ((("commonName", "ops"),), (("commonName", "dave"),))
    assert certificate_principal({"subject": several}) == "dave"  # the most specific


def _error(certificates: Certificates, **changes: str) -> str:
    with pytest.raises(ConfigError) as raised:
        server_context(settings(certificates, **changes))
    return str(raised.value)


def test_each_mistake_in_the_tls_files_is_one_clear_line(certificates: Certificates, tmp_path: Path) -> None:
    other_key = certificates.client("other")[1]
    encrypted = tmp_path / "encrypted.key"
    subprocess.run(
        ["openssl", "pkey", "-in", str(other_key), "-aes256", "-passout", "pass:x", "-out", str(encrypted)],
        check=True,
    )
    missing = str(tmp_path / "missing.pem")
    assert _error(certificates, tls_key="") == (
        "TLS needs both tls_cert and tls_key (PEM files; --tls-cert, --tls-key)"
    )
    assert _error(certificates, tls_cert=missing) == (
        f"cannot read tls_cert {missing}: No such file or directory"
    )
    assert _error(certificates, tls_key=str(other_key)) == (
        f"tls_key {other_key} does not match the certificate in tls_cert {certificates.server_cert}"
    )
    assert _error(certificates, tls_key=str(encrypted)).startswith(f"tls_key {encrypted} is encrypted")
    assert _error(certificates, tls_cert=str(other_key)).startswith(
        f"tls_cert {other_key} and tls_key {certificates.server_key} must be a PEM certificate"
    )
    assert _error(certificates, tls_client_ca=str(other_key)).startswith(
        f"tls_client_ca {other_key} holds no PEM CA certificate"
    )
