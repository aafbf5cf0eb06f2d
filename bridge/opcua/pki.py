"""The OPC UA client's certificates: its own application certificate and the servers it trusts.

How this works: the bridge keeps its OPC UA material under `<state_dir>/opcua/`:

- `client-key.pem` + `client-cert.der`: the client's application instance certificate, made
  on first start (RSA 2048, self-signed, one year; its URI is `APPLICATION_URI`, its DNS name
  the host name) and made again when it is missing, expired, unreadable, for another
  application URI, or not the certificate of the key beside it. Servers that check clients
  (most PLCs) list it as rejected until an operator trusts it there.
- `trusted/<device>.der`: a server certificate pinned by trust on first use.

The pair is made once however many devices start at the same moment: `client_certificate`
checks and makes it under one lock (a lock of the process for its threads and event loops,
and an flock on `.client-cert.lock` for other processes, e.g. `outpost opcua probe` next to the
daemon), in a worker thread, since making an RSA key takes a while. Each file is written to a
temporary file, fsynced and renamed over its name, key first, and the directory fsynced: a
reader sees an old file or a new one, never half of one. A crash between the two renames
leaves a key and a certificate that do not match, which the check at the next start finds
(the pair is made again, with a warning). Every device gets the pair as bytes read and checked
under the lock, so no session ever loads a file while it is being replaced.

`check_server` decides about the certificate a server presents before any secure channel is
opened: it must not be expired or not yet valid, and it must be one of the device's
`trusted_certificates`, or its pinned certificate, or (with `trust_on_first_use` and nothing
pinned yet) it is pinned now. Anything else raises `UntrustedServerError` with a message
that says what to do.

I/O: reads and writes files under the state directory (small, once per connection).
"""

from __future__ import annotations

import asyncio
import fcntl
import hashlib
import logging
import os
import socket
import threading
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from asyncua.crypto import cert_gen
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    NoEncryption,
    PrivateFormat,
    PublicFormat,
    load_pem_private_key,
)
from cryptography.x509.oid import ExtendedKeyUsageOID

log = logging.getLogger("outpost.bridge.opcua")
APPLICATION_URI = "urn:outpost:bridge:opcua-client"
_MAKING = threading.Lock()  # one check-and-make at a time in this process (any loop, thread)


@dataclass(frozen=True, slots=True)
class ClientCertificate:
    """The client's application certificate (DER) and its private key (DER, PKCS #8)."""

    certificate: bytes
    key: bytes


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

    async def client_certificate(self) -> ClientCertificate:
        """The client's certificate and key, checked to be a pair, made when they are not."""
        return await asyncio.to_thread(self.ensure_client_certificate)

    def ensure_client_certificate(self, now: datetime | None = None) -> ClientCertificate:
        """`client_certificate` for a thread that may block: check, and make when needed."""
        self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        with _MAKING, open(self.directory / ".client-cert.lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file is closed
            problem, pair = self._load(now or datetime.now(UTC))
            if pair is not None:
                return pair
            if problem is not None:
                log.warning("opcua: the client certificate %s %s: making a new one (trust "
                            "the new one on the servers that check clients)", self.cert_file,
                            problem)
            return self._make()

    def _load(self, now: datetime) -> tuple[str | None, ClientCertificate | None]:
        """The pair on disk, or why it cannot be used (None: there is none yet)."""
        if not self.key_file.exists() and not self.cert_file.exists():
            return None, None
        try:
            key = load_pem_private_key(self.key_file.read_bytes(), None)
            certificate = load_certificate(self.cert_file)
        except (OSError, ValueError, TypeError) as exc:
            return f"cannot be read ({type(exc).__name__}: {exc})", None
        if not isinstance(key, rsa.RSAPrivateKey):
            return "has a key that is not RSA", None
        if _public(certificate) != key.public_key().public_bytes(
                Encoding.DER, PublicFormat.SubjectPublicKeyInfo):
            return f"does not match its key {self.key_file}", None
        if certificate.not_valid_after_utc <= now:
            return f"expired on {certificate.not_valid_after_utc:%Y-%m-%d}", None
        try:
            names = certificate.extensions.get_extension_for_class(
                x509.SubjectAlternativeName).value
            uris = names.get_values_for_type(x509.UniformResourceIdentifier)
        except x509.ExtensionNotFound:
            uris = []
        if APPLICATION_URI not in uris:
            return f"is not for the application URI {APPLICATION_URI}", None
        if self.key_file.stat().st_mode & 0o077:
            self.key_file.chmod(0o600)
        return None, ClientCertificate(certificate.public_bytes(Encoding.DER), key.private_bytes(
            Encoding.DER, PrivateFormat.PKCS8, NoEncryption()))

    def _make(self) -> ClientCertificate:
        """A new key and certificate, written as a pair (see the module's comment)."""
        key = cert_gen.generate_private_key()
        names: list[x509.GeneralName] = [x509.UniformResourceIdentifier(APPLICATION_URI),
                                         x509.DNSName(socket.gethostname())]
        certificate = cert_gen.generate_self_signed_app_certificate(
            key, APPLICATION_URI, {"organizationName": "outpost"}, names,
            extended=[ExtendedKeyUsageOID.CLIENT_AUTH], days=365)
        key_pem = key.private_bytes(Encoding.PEM, PrivateFormat.TraditionalOpenSSL,
                                    NoEncryption())
        der = certificate.public_bytes(Encoding.DER)
        write_atomically(self.key_file, key_pem, 0o600)
        write_atomically(self.cert_file, der, 0o644)
        log.info("opcua: made the client certificate %s (thumbprint %s): trust it on the "
                 "servers that check clients", self.cert_file, fingerprint(certificate))
        return ClientCertificate(der, key.private_bytes(Encoding.DER, PrivateFormat.PKCS8,
                                                        NoEncryption()))

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
            write_atomically(pinned, der, 0o644)
            log.warning("opcua: %s: trusting the server certificate %s on first use (pinned "
                        "in %s)", device, thumb, pinned, extra={"device": device})
            return
        raise UntrustedServerError(
            f"server certificate {thumb} ({presented.subject.rfc4514_string()}) is not "
            f"trusted: add it to trusted_certificates (e.g. export it with `outpost opcua "
            f"probe`) or set trust_on_first_use = true")


def _public(certificate: x509.Certificate) -> bytes:
    return certificate.public_key().public_bytes(Encoding.DER, PublicFormat.SubjectPublicKeyInfo)


def write_atomically(path: Path, data: bytes, mode: int) -> None:
    """Replace `path` with `data`: a temporary file, fsync, rename, fsync of the directory."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        with os.fdopen(fd, "wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)
