"""TLS for the broker's listeners: one server context from the ``tls_*`` settings, shared by
MQTT over TLS, MQTT over secure WebSockets and the admin API's HTTPS, so that every encrypted
port presents the same certificate and accepts the same clients.

The context is built at start-up, before anything listens: a missing file or a key that does not
match its certificate is one :class:`~broker.service.config.ConfigError` line, never a listener
that fails on its first client.
"""

from __future__ import annotations

import ssl
from typing import Any

from broker.service.config import ConfigError, Settings

MINIMUM_VERSION = ssl.TLSVersion.TLSv1_2


def server_context(settings: Settings) -> ssl.SSLContext:
    """The server side of TLS 1.2 and later: ``tls_cert`` (a PEM chain, the server's own
    certificate first) with its unencrypted PEM key ``tls_key``; with ``tls_client_ca``, client
    certificates signed by that CA are asked for and verified. Presenting one is optional (a
    client without one authenticates with its password, or is anonymous), but a certificate that
    does not verify fails the handshake."""
    if not settings.tls_cert or not settings.tls_key:
        raise ConfigError("TLS needs both tls_cert and tls_key (PEM files; --tls-cert, --tls-key)")
    for name, path in (("tls_cert", settings.tls_cert), ("tls_key", settings.tls_key)):
        _readable(name, path)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = MINIMUM_VERSION
    try:
        context.load_cert_chain(settings.tls_cert, settings.tls_key, password=_no_password)
    except _Encrypted:
        raise ConfigError(
            f"tls_key {settings.tls_key} is encrypted: give it unencrypted (openssl pkey -in KEY -out PLAIN)"
        ) from None
    except ssl.SSLError as exc:
        if exc.reason == "KEY_VALUES_MISMATCH":
            raise ConfigError(
                f"tls_key {settings.tls_key} does not match the certificate in tls_cert {settings.tls_cert}"
            ) from None
        raise ConfigError(
            f"tls_cert {settings.tls_cert} and tls_key {settings.tls_key} must be a PEM certificate "
            f"and its unencrypted PEM private key ({exc.reason or exc})"
        ) from None
    if settings.tls_client_ca:
        _readable("tls_client_ca", settings.tls_client_ca)
        try:
            context.load_verify_locations(cafile=settings.tls_client_ca)
        except ssl.SSLError as exc:
            raise ConfigError(
                f"tls_client_ca {settings.tls_client_ca} holds no PEM CA certificate ({exc.reason or exc})"
            ) from None
        context.verify_mode = ssl.CERT_OPTIONAL
    return context


def _readable(name: str, path: str) -> None:
    try:
        with open(path, "rb"):
            pass
    except OSError as exc:
        raise ConfigError(f"cannot read {name} {path}: {exc.strerror or exc}") from None


class _Encrypted(Exception):
    """The key asks for a pass phrase."""


def _no_password() -> str:
    """OpenSSL would otherwise ask for the pass phrase on the terminal of a daemon."""
    raise _Encrypted


def certificate_principal(certificate: dict[str, Any] | None) -> str | None:
    """The principal a verified client certificate names: the common name (CN) of its subject,
    the last one if there are several (the most specific); ``""`` for a certificate without
    one; ``None`` when no certificate was presented (``ssl.SSLObject.getpeercert()``'s
    answer: an empty dict when the certificate was not verified, which cannot happen with
    CERT_OPTIONAL, where a certificate that does not verify fails the handshake)."""
    if not certificate:
        return None
    names = [value for rdn in certificate.get("subject", ()) for key, value in rdn if key == "commonName"]
    return names[-1] if names else ""
