"""The enrollment service's decisions and its signing: who gets a device certificate.

How this works: the registry (a JSON file, replaced atomically on every change) holds the
claim tokens (when each expires, how many gateways it may enroll, the allow list of gateway
id patterns) and the enrolled devices (the sha256 of their public key, the certificate's
serial and expiry, revoked or not). `decide` is pure: a request (its topic's gateway id, the
CSR, the token) and the registry in, a refusal reason or None out. A request for an id that
is already enrolled with the same key gets its certificate again without using the token
again (a device that lost the answer asks again); with another key it is refused, so nobody
takes over an enrolled gateway's id. A renewal comes from the device itself (the cloud
broker's ACL lets only the certificate with that id publish on its renewal topic) and needs
no token, only an enrolled, not revoked id.
"""

from __future__ import annotations

import datetime
import fnmatch
import hashlib
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

DEFAULT_LIFETIME = 365 * 24 * 3600.0


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def _text(moment: datetime.datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _parse(text: str) -> datetime.datetime:
    return datetime.datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.UTC)


class Registry:
    """Tokens and devices, kept in one JSON file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            self.data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            self.data = {}
        self.data.setdefault("tokens", {})
        self.data.setdefault("devices", {})

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{self.path.name}.", dir=self.path.parent)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(self.data, f, indent=1, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)

    def add_token(self, token: str, uses: int, expires: datetime.datetime,
                  allow: list[str]) -> None:
        self.data["tokens"][token] = {"max_uses": uses, "expires": _text(expires),
                                      "allow": allow or ["*"], "enrolled": []}
        self.save()

    def revoke(self, gateway_id: str) -> bool:
        device = self.data["devices"].get(gateway_id)
        if device is None:
            return False
        device["revoked"] = _text(_now())
        self.save()
        return True


@dataclass(frozen=True)
class Request:
    """An enrollment or renewal request as it arrived."""

    topic_id: str  # the gateway id in the topic it was published on
    gateway_id: str
    csr_pem: str
    token: str
    nonce: str


def key_fingerprint(csr: x509.CertificateSigningRequest) -> str:
    return hashlib.sha256(csr.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)).hexdigest()


def check_csr(request: Request) -> tuple[x509.CertificateSigningRequest | None, str | None]:
    """The CSR when it is well formed, signed and for the id of the request and its topic."""
    try:
        csr = x509.load_pem_x509_csr(request.csr_pem.encode())
    except ValueError:
        return None, "the CSR is not a PEM certificate request"
    if not csr.is_signature_valid:
        return None, "the CSR's signature does not verify"
    names = [str(n.value) for n in csr.subject.get_attributes_for_oid(NameOID.COMMON_NAME)]
    if request.gateway_id != request.topic_id:
        return None, (f"the request is for gateway {request.gateway_id!r} but came on the "
                      f"topic of {request.topic_id!r}")
    if names != [request.topic_id]:
        return None, f"the CSR is for {names}, not for gateway {request.topic_id!r}"
    if not isinstance(csr.public_key(), ec.EllipticCurvePublicKey | rsa.RSAPublicKey
                      | ed25519.Ed25519PublicKey):
        return None, "the CSR's key type is not accepted"
    return csr, None


def decide_enrollment(registry: Registry, request: Request,
                      now: datetime.datetime | None = None) -> str | None:
    """None when the request may be signed, else why not."""
    now = now or _now()
    csr, problem = check_csr(request)
    if csr is None:
        return problem
    token = registry.data["tokens"].get(request.token)
    if token is None:
        return "unknown token"
    if now > _parse(token["expires"]):
        return f"the token expired at {token['expires']}"
    if not any(fnmatch.fnmatchcase(request.gateway_id, p) for p in token["allow"]):
        return (f"gateway id {request.gateway_id!r} is not on the token's allow list "
                f"({', '.join(token['allow'])})")
    device = registry.data["devices"].get(request.gateway_id)
    if device is not None:
        if device.get("revoked"):
            return f"gateway {request.gateway_id!r} was revoked at {device['revoked']}"
        if device["key"] != key_fingerprint(csr):
            return f"gateway id {request.gateway_id!r} is already enrolled with another key"
        return None  # the same device asking again: the same answer, the token not used again
    if len(token["enrolled"]) >= token["max_uses"]:
        return f"the token is used up ({len(token['enrolled'])} of {token['max_uses']})"
    return None


def decide_renewal(registry: Registry, request: Request) -> str | None:
    """None when an enrolled, not revoked device may have a new certificate."""
    csr, problem = check_csr(request)
    if csr is None:
        return problem
    device = registry.data["devices"].get(request.gateway_id)
    if device is None:
        return f"gateway {request.gateway_id!r} is not enrolled"
    if device.get("revoked"):
        return f"gateway {request.gateway_id!r} was revoked at {device['revoked']}"
    return None


class CertificateAuthority:
    """The fleet CA's certificate and key, signing device certificates."""

    def __init__(self, cert_file: Path, key_file: Path, lifetime: float = DEFAULT_LIFETIME
                 ) -> None:
        self.cert = x509.load_pem_x509_certificate(cert_file.read_bytes())
        key = serialization.load_pem_private_key(key_file.read_bytes(), password=None)
        if not isinstance(key, ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey):
            raise ValueError(f"{key_file}: an EC or RSA CA key is needed")
        self.key = key
        self.lifetime = lifetime

    def sign(self, csr: x509.CertificateSigningRequest) -> x509.Certificate:
        now = _now()
        return (x509.CertificateBuilder()
                .subject_name(csr.subject)
                .issuer_name(self.cert.subject)
                .public_key(csr.public_key())
                .serial_number(x509.random_serial_number())
                .not_valid_before(now - datetime.timedelta(seconds=60))
                .not_valid_after(now + datetime.timedelta(seconds=self.lifetime))
                .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]),
                               critical=False)
                .sign(self.key, hashes.SHA256()))


def issue(registry: Registry, ca: CertificateAuthority, request: Request,
          renewal: bool = False) -> x509.Certificate:
    """Sign the (decided) request and record the device."""
    csr = x509.load_pem_x509_csr(request.csr_pem.encode())
    cert = ca.sign(csr)
    devices = registry.data["devices"]
    entry = devices.setdefault(request.gateway_id, {"enrolled": _text(_now())})
    entry.update(key=key_fingerprint(csr), serial=f"{cert.serial_number:x}",
                 not_after=_text(cert.not_valid_after_utc))
    if renewal:
        entry["renewed"] = _text(_now())
    else:
        entry["token"] = request.token[:8]
        enrolled = registry.data["tokens"][request.token]["enrolled"]
        if request.gateway_id not in enrolled:
            enrolled.append(request.gateway_id)
    registry.save()
    return cert
