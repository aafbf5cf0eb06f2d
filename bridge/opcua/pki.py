"""The OPC UA client's certificates: its own application certificate and the servers it trusts.

How this works: the bridge keeps its OPC UA material under `<state_dir>/opcua/`:

- `client-key.pem` + `client-cert.der`: the client's application instance certificate, made
  on first start (RSA 2048, self-signed, one year; its URI is `APPLICATION_URI`, its DNS name
  the host name) and made again when it is missing, expired or no longer matches. Servers that
  check clients (most PLCs) list it as rejected until an operator trusts it there.
- `trusted/<device>.der`: a server certificate pinned by trust on first use.

`check_server` decides about the certificate a server presents before any secure channel is
opened: it must not be expired or not yet valid, and it must be one of the device's
`trusted_certificates`, or its pinned certificate, or (with `trust_on_first_use` and nothing
pinned yet) it is pinned now. Anything else raises `UntrustedServerError` with a message
that says what to do.

I/O: reads and writes files under the state directory (small, once per connection).
"""

from __future__ import annotations

import hashlib
import logging
import socket
from datetime import UTC, datetime
from pathlib import Path

from asyncua.crypto import cert_gen
from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding
from cryptography.x509.oid import ExtendedKeyUsageOID

log = logging.getLogger("outpost.bridge.opcua")
APPLICATION_URI = "urn:outpost:bridge:opcua-client"


class UntrustedServerError(Exception):
    """The server's certificate is not trusted (or expired): no connection is made."""


def fingerprint(certificate: x509.Certificate) -> str:
    """SHA-1 thumbprint as OPC UA tools show it (hex pairs)."""
    digest = hashlib.sha1(certificate.public_bytes(Encoding.DER), usedforsecurity=False)
    return ":".join(f"{byte:02X}" for byte in digest.digest())


def load_certificate(path: Path) -> x509.Certificate:
    """A certificate file, PEM or DER."""
    data = path.read_bytes()
    if data.lstrip().startswith(b"-----BEGIN"):
        return x509.load_pem_x509_certificate(data)
    return x509.load_der_x509_certificate(data)


class Pki:
    """The client's certificate and pinned server certificates under one directory."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.key_file = directory / "client-key.pem"
        self.cert_file = directory / "client-cert.der"

    async def client_certificate(self) -> tuple[Path, Path]:
        """(certificate, key) of the client, made on first use."""
        self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        made = not self.cert_file.exists()
        await cert_gen.setup_self_signed_certificate(
            self.key_file, self.cert_file, APPLICATION_URI, socket.gethostname(),
            [ExtendedKeyUsageOID.CLIENT_AUTH], {"organizationName": "outpost"})
        self.key_file.chmod(0o600)
        if made:
            log.info("opcua: made the client certificate %s (thumbprint %s): trust it on the "
                     "servers that check clients", self.cert_file,
                     fingerprint(load_certificate(self.cert_file)))
        return self.cert_file, self.key_file

    def pinned_path(self, device: str) -> Path:
        """Where the certificate pinned for `device` is kept."""
        return self.directory / "trusted" / f"{device}.der"

    def check_server(self, device: str, presented: x509.Certificate, trusted: list[Path],
                     trust_on_first_use: bool, now: datetime | None = None) -> None:
        """Accept the certificate a server presents or raise UntrustedServerError."""
        now = now or datetime.now(UTC)
        thumb = fingerprint(presented)
        if presented.not_valid_after_utc < now:
            raise UntrustedServerError(
                f"server certificate {thumb} expired on "
                f"{presented.not_valid_after_utc:%Y-%m-%d}: renew it on the server")
        if presented.not_valid_before_utc > now:
            raise UntrustedServerError(
                f"server certificate {thumb} is not valid before "
                f"{presented.not_valid_before_utc:%Y-%m-%d} (check the clocks)")
        der = presented.public_bytes(Encoding.DER)
        for path in trusted:
            if load_certificate(path).public_bytes(Encoding.DER) == der:
                return
        pinned = self.pinned_path(device)
        if pinned.exists():
            if pinned.read_bytes() == der:
                return
            raise UntrustedServerError(
                f"server certificate {thumb} differs from the one pinned at first use "
                f"({pinned}): if the server's certificate was renewed on purpose, delete that "
                f"file or add the new certificate to trusted_certificates")
        if trust_on_first_use:
            pinned.parent.mkdir(parents=True, exist_ok=True)
            pinned.write_bytes(der)
            log.warning("opcua: %s: trusting the server certificate %s on first use (pinned "
                        "in %s)", device, thumb, pinned, extra={"device": device})
            return
        raise UntrustedServerError(
            f"server certificate {thumb} ({presented.subject.rfc4514_string()}) is not "
            f"trusted: add it to trusted_certificates (e.g. export it with `outpost opcua "
            f"probe`) or set trust_on_first_use = true")
