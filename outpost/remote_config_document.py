"""The remote configuration's signed document, the `[remote_config]` section, the keyring.

How this works: the cloud publishes on `outpost-cmd/<gateway_id>/config` an envelope

    {"key": "<key id>", "document": "<base64 of the document's JSON>",
     "signature": "<base64 ed25519 signature of those document bytes>"}

and the document is

    {"gateway_id": "plant-7", "version": 12, "id": "map-2026-11", "issued": "...Z",
     "part": "devices", "config": "<a TOML fragment holding the part's arrays>"}

where `part` is "all" (the default when absent: `config` is the whole outpost.toml) or a named
part, "devices" or "forward", whose fragment is merged into the running file
(outpost/remote_config_parts.py).

The signature covers the exact bytes of the document (never a re-encoding of them), made with
the private key whose public key is `<key id>.pem` in the gateway's keyring folder. The
document names its gateway (a document signed for one gateway is refused by every other) and
carries a version, a number the cloud increases per gateway: one not above the highest this
gateway ever took is a replay and is refused. `parse_signed` checks all of that except the
version, which needs the gateway's state (outpost/remote_config.py).
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, ClassVar

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import load_pem_public_key
from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator

from gateway.base.config_paths import existing_file
from outpost.remote_config_parts import WHOLE, Part
from outpost.update_command import CommandSection, check_request_id, problems_of

DEFAULT_COMMAND_TOPIC = "outpost-cmd/{gateway_id}/config"
STATUS_SUBTOPIC = "config"  # <status topic>/config: retained, the latest document's fate
DEFAULT_MAX_BYTES = 256 * 1024
_KEY_ID = re.compile(r"[A-Za-z0-9._-]{1,64}")
_REQUEST_ID = re.compile(r"[A-Za-z0-9._:-]{1,64}")


class RemoteConfigConfig(CommandSection):
    """The `[remote_config]` section: configurations sent from the cloud, signed."""

    DEFAULT_TOPIC: ClassVar[str] = DEFAULT_COMMAND_TOPIC

    keyring: Path | None = Field(
        default=None, description="folder of the public keys (ed25519, PEM) a configuration "
        "may be signed with; the file name without .pem is the key id; required when enabled",
    )
    max_bytes: Annotated[int, Field(ge=1024, le=1 << 20)] = Field(
        default=DEFAULT_MAX_BYTES, description="a larger message is refused unread")
    health_deadline: Annotated[float, Field(gt=0, le=3600)] = Field(
        default=60.0, description="seconds the gateway may take after applying a "
        "configuration to be healthy again (listeners, uplink, devices) before it rolls back")
    keep: Annotated[int, Field(ge=2, le=1000)] = Field(
        default=20, description="configuration versions kept in the state directory")

    @field_validator("keyring")
    @classmethod
    def _keyring(cls, value: Path | None, info: ValidationInfo) -> Path | None:
        if value is None:
            return None
        base = (info.context or {}).get("base_dir")
        folder = value if value.is_absolute() or base is None else Path(base) / value
        if not folder.is_dir():
            raise ValueError(f"{folder}: no such folder")
        keys = sorted(folder.glob("*.pem"))
        if not keys:
            raise ValueError(f"{folder}: holds no public key (<key id>.pem)")
        for key in keys:
            load_key(existing_file(key, info))  # a bad key fails here, at load time
        return folder


class DocumentError(ValueError):
    """A configuration refused before it was looked at as a configuration; says why."""

    def __init__(self, message: str, version: int | None = None,
                 request_id: str | None = None) -> None:
        super().__init__(message)
        self.version = version
        self.request_id = request_id


class ConfigDocument(BaseModel):
    """What the cloud signed."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    gateway_id: str
    version: Annotated[int, Field(ge=1, lt=1 << 63)]
    id: str
    issued: Annotated[str, Field(max_length=40)] = ""
    part: Part = WHOLE
    config: str

    @field_validator("id")
    @classmethod
    def _id(cls, value: str) -> str:
        return check_request_id(value)


@dataclass(frozen=True)
class SignedDocument:
    """A document whose signature verified, and the key that made it."""

    document: ConfigDocument
    key_id: str
    raw: bytes  # the signed bytes


def load_key(path: Path) -> Ed25519PublicKey:
    """An ed25519 public key from a PEM file; ValueError saying why not."""
    try:
        key = load_pem_public_key(path.read_bytes())
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path}: not a PEM public key ({exc})") from None
    if not isinstance(key, Ed25519PublicKey):
        raise ValueError(f"{path}: not an ed25519 public key")
    return key


def parse_signed(payload: bytes, keyring: Path, gateway_id: str, max_bytes: int
                 ) -> SignedDocument:
    """The verified document in `payload`, or DocumentError: too large, not an envelope,
    unknown key, bad signature, not a document, or a document for another gateway."""
    if len(payload) > max_bytes:
        raise DocumentError(f"the message is {len(payload)} bytes, at most {max_bytes} are "
                            "read ([remote_config] max_bytes)")
    try:
        envelope = json.loads(payload)
    except (UnicodeDecodeError, ValueError) as exc:
        raise DocumentError(f"not JSON: {exc}") from None
    if not isinstance(envelope, dict) or set(envelope) != {"key", "document", "signature"}:
        raise DocumentError('not a signed document: expected exactly "key", "document" and '
                            '"signature"')
    key_id, document_b64, signature_b64 = (envelope["key"], envelope["document"],
                                           envelope["signature"])
    if not isinstance(key_id, str) or not _KEY_ID.fullmatch(key_id):
        raise DocumentError("key: must be 1 to 64 of A-Z a-z 0-9 . _ -")
    try:
        raw = base64.b64decode(str(document_b64), validate=True)
        signature = base64.b64decode(str(signature_b64), validate=True)
    except (binascii.Error, ValueError):
        raise DocumentError("document and signature must be base64") from None
    # Only to name the refused document in the report: nothing of it is trusted yet.
    claimed_version, claimed_id = _claimed(raw)
    key_file = keyring / f"{key_id}.pem"
    if not key_file.is_file():
        raise DocumentError(f"unknown key {key_id!r}: not in the keyring {keyring}",
                            claimed_version, claimed_id)
    try:
        load_key(key_file).verify(signature, raw)
    except ValueError as exc:
        raise DocumentError(f"key {key_id!r}: {exc}", claimed_version, claimed_id) from None
    except InvalidSignature:
        raise DocumentError(f"bad signature: the document does not verify with key "
                            f"{key_id!r}", claimed_version, claimed_id) from None
    return SignedDocument(_document(raw, gateway_id), key_id, raw)


def _claimed(raw: bytes) -> tuple[int | None, str | None]:
    """The version and id a document says it has (unchecked)."""
    try:
        data = json.loads(raw)
    except (UnicodeDecodeError, ValueError):
        return None, None
    if not isinstance(data, dict):
        return None, None
    version, raw_id = data.get("version"), data.get("id")
    return (version if isinstance(version, int) and not isinstance(version, bool) else None,
            raw_id if isinstance(raw_id, str) and _REQUEST_ID.fullmatch(raw_id) else None)


def _document(raw: bytes, gateway_id: str) -> ConfigDocument:
    try:
        data = json.loads(raw)
    except (UnicodeDecodeError, ValueError) as exc:
        raise DocumentError(f"the signed document is not JSON: {exc}") from None
    version, raw_id = _claimed(raw)
    try:
        document = ConfigDocument.model_validate(data)
    except ValidationError as exc:
        raise DocumentError(problems_of(exc, "document"), version, raw_id) from None
    if document.gateway_id != gateway_id:
        raise DocumentError(f"the document is for gateway {document.gateway_id!r}, this is "
                            f"{gateway_id!r}", document.version, document.id)
    return document
