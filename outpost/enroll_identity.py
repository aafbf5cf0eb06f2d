"""The gateway's own identity: its key pair, its CSR, its device certificate, its id.

How this works: the private key is made on the device (EC P-256) and written once, mode
0600, into the state directory's `identity/` folder; it never leaves the device: only the
CSR (the public key, the gateway id as the subject's common name, signed with the key) is
sent. The certificate that comes back is checked before it is kept: issued by the fleet CA,
for this gateway id, for this key, valid now. Files are replaced atomically, so a power cut
leaves the old identity or the new one.

The gateway id is the provisioning file's, or made from the machine: the Raspberry Pi's
serial number (`/proc/cpuinfo`), else `/etc/machine-id`, after a prefix.
"""

from __future__ import annotations

import datetime
import re
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from outpost.config_store import atomic_write

IDENTITY_DIR = "identity"
CPUINFO = Path("/proc/cpuinfo")
MACHINE_ID = Path("/etc/machine-id")
_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


class IdentityError(Exception):
    """A certificate or key that cannot be used; the text says why."""


def derive_gateway_id(prefix: str, cpuinfo: Path = CPUINFO, machine_id: Path = MACHINE_ID
                      ) -> str:
    """`<prefix><Pi serial>` (its last 8 hex digits), else `<prefix><machine-id[:12]>`."""
    try:
        for line in cpuinfo.read_text(encoding="ascii", errors="replace").splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "Serial" and value.strip().strip("0"):
                return f"{prefix}{value.strip()[-8:].lower()}"
    except OSError:
        pass
    try:
        text = machine_id.read_text(encoding="ascii").strip()
    except OSError:
        text = ""
    if not re.fullmatch(r"[0-9a-f]{12,}", text):
        raise IdentityError(f"no gateway id: none in the provisioning file, no serial number in "
                            f"{cpuinfo} and no {machine_id}")
    return f"{prefix}{text[:12]}"


def valid_gateway_id(value: str) -> str:
    """The id when it can name a gateway (a topic level, a certificate's CN); ValueError."""
    if not _ID.fullmatch(value):
        raise ValueError(f"{value!r}: a gateway id is 1 to 64 of A-Z a-z 0-9 . _ - "
                         "(starting with a letter or digit)")
    return value


@dataclass(frozen=True)
class Identity:
    """The files of the gateway's identity in the state directory."""

    folder: Path

    @property
    def key(self) -> Path:
        return self.folder / "device.key"

    @property
    def certificate(self) -> Path:
        return self.folder / "device.pem"

    @property
    def ca(self) -> Path:
        return self.folder / "fleet-ca.pem"

    def private_key(self) -> ec.EllipticCurvePrivateKey:
        """The device's key, made now if there is none yet (kept across retries)."""
        self.folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        if self.key.exists():
            loaded = serialization.load_pem_private_key(self.key.read_bytes(), password=None)
            if not isinstance(loaded, ec.EllipticCurvePrivateKey):
                raise IdentityError(f"{self.key}: not an EC private key")
            return loaded
        key = ec.generate_private_key(ec.SECP256R1())
        atomic_write(self.key, key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption()), 0o600)
        return key


def make_csr(key: ec.EllipticCurvePrivateKey, gateway_id: str) -> bytes:
    """A CSR (PEM) for `gateway_id`, signed with `key`."""
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, gateway_id)])
    csr = x509.CertificateSigningRequestBuilder().subject_name(name).sign(key, hashes.SHA256())
    return csr.public_bytes(serialization.Encoding.PEM)


def new_key() -> ec.EllipticCurvePrivateKey:
    """A fresh key pair (for a renewal: the old one stays in use until the new certificate
    is in place)."""
    return ec.generate_private_key(ec.SECP256R1())


def key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def check_certificate(pem: bytes, ca_pem: bytes, gateway_id: str,
                      key: ec.EllipticCurvePrivateKey) -> x509.Certificate:
    """The certificate, when it is the fleet CA's, for `gateway_id`, for `key`, valid now."""
    try:
        cert = x509.load_pem_x509_certificate(pem)
        ca = x509.load_pem_x509_certificate(ca_pem)
    except ValueError as exc:
        raise IdentityError(f"not a PEM certificate: {exc}") from None
    try:
        cert.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature):
        raise IdentityError("the certificate is not signed by the fleet CA") from None
    names = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    if [n.value for n in names] != [gateway_id]:
        raise IdentityError(f"the certificate is for {[n.value for n in names]}, not "
                            f"{gateway_id!r}")
    if cert.public_key() != key.public_key():
        raise IdentityError("the certificate is for another key")
    now = datetime.datetime.now(datetime.UTC)
    if not cert.not_valid_before_utc <= now <= cert.not_valid_after_utc:
        raise IdentityError(f"the certificate is not valid now (from "
                            f"{cert.not_valid_before_utc:%Y-%m-%dT%H:%M:%SZ} to "
                            f"{cert.not_valid_after_utc:%Y-%m-%dT%H:%M:%SZ})")
    return cert


def certificate_expiry(path: Path) -> datetime.datetime | None:
    """When the certificate in `path` expires (UTC), None when there is none or it is not a
    certificate."""
    try:
        return x509.load_pem_x509_certificate(path.read_bytes()).not_valid_after_utc
    except (OSError, ValueError):
        return None
