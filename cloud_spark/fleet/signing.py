"""Signed configuration documents, as the gateway's `[remote_config]` takes them.

The envelope is `{"key": KEY_ID, "document": base64(DOC), "signature": base64(ed25519(DOC))}`
and DOC is the JSON `{"gateway_id", "version", "id", "issued", "config"}` and, for a named
part of the file rather than the whole, `"part"` ("devices", "forward"; left out for the whole
file, so that gateways that know no parts take it as before, and refuse a part). See
outpost/remote_config_document.py on the gateway's side. The private key is an ed25519 key
in a PEM file named `<key id>.key`; its public half, `<key id>.pem`, goes into every gateway's
keyring folder.
"""

from __future__ import annotations

import base64
import json
import os
import time
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

WHOLE = "all"  # the part that is the whole file
PARTS = (WHOLE, "devices", "forward")  # as outpost/remote_config_parts.py names them


def generate_key(folder: Path, key_id: str) -> tuple[Path, Path]:
    """A new signing key: `<key_id>.key` (private, mode 0600) and `<key_id>.pem` (public)."""
    folder.mkdir(parents=True, exist_ok=True)
    private, public = folder / f"{key_id}.key", folder / f"{key_id}.pem"
    if private.exists():
        raise FileExistsError(f"{private} exists: a key is never overwritten")
    key = Ed25519PrivateKey.generate()
    fd = os.open(private, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(key.private_bytes(serialization.Encoding.PEM,
                                  serialization.PrivateFormat.PKCS8,
                                  serialization.NoEncryption()))
    public.write_bytes(key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    return private, public


def load_signing_key(path: Path) -> Ed25519PrivateKey:
    """The ed25519 private key in `path` (PEM); ValueError when it is not one."""
    key = serialization.load_pem_private_key(path.read_bytes(), password=None)
    if not isinstance(key, Ed25519PrivateKey):
        raise ValueError(f"{path}: not an ed25519 private key")
    return key


def sign_config(key: Ed25519PrivateKey, key_id: str, gateway_id: str, version: int,
                request_id: str, config: str, part: str = WHOLE) -> bytes:
    """The MQTT payload carrying `config` (the whole file, or the fragment of `part`) for
    `gateway_id`, signed."""
    issued = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    fields = {"gateway_id": gateway_id, "version": version, "id": request_id,
              "issued": issued, "config": config}
    if part != WHOLE:
        fields["part"] = part
    document = json.dumps(fields, sort_keys=True).encode()
    envelope = {"key": key_id, "document": base64.b64encode(document).decode(),
                "signature": base64.b64encode(key.sign(document)).decode()}
    return json.dumps(envelope).encode()
