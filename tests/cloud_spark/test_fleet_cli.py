"""`python -m cloud_spark.fleet`: the key pair it makes, and that it never overwrites one."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import load_pem_public_key

from cloud_spark.fleet.signing import load_signing_key

ROOT = Path(__file__).resolve().parents[2]


def fleet(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "cloud_spark.fleet", *args],
                          capture_output=True, text=True, cwd=ROOT, timeout=60, check=False)


def test_keygen_makes_a_key_pair_once(tmp_path: Path) -> None:
    keys = tmp_path / "keys"
    out = fleet("keygen", "--out", str(keys), "--key-id", "fleet-1")
    assert out.returncode == 0, out.stderr
    assert "keep it in the cloud" in out.stdout
    private = load_signing_key(keys / "fleet-1.key")
    public = load_pem_public_key((keys / "fleet-1.pem").read_bytes())
    assert isinstance(public, Ed25519PublicKey)
    public.verify(private.sign(b"x"), b"x")
    assert (keys / "fleet-1.key").stat().st_mode & 0o777 == 0o600
    again = fleet("keygen", "--out", str(keys), "--key-id", "fleet-1")
    assert again.returncode != 0 and "never overwritten" in again.stderr


def test_token_add_records_a_token(tmp_path: Path) -> None:
    registry = tmp_path / "registry.json"
    out = fleet("token", "add", "--registry", str(registry), "--uses", "200", "--valid-days",
                "30", "--allow", "plant-*")
    assert out.returncode == 0, out.stderr
    token = out.stdout.split()[1].rstrip(":")
    entry = json.loads(registry.read_text())["tokens"][token]
    assert (entry["max_uses"], entry["allow"], entry["enrolled"]) == (200, ["plant-*"], [])
    assert "200 gateway(s) until " in out.stdout and "allowed: plant-*" in out.stdout
