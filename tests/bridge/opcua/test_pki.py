"""The OPC UA client certificate: made once when devices start together, always a matching pair.

Several secured devices of one bridge open their first sessions at the same moment, each with
its own `Pki` on the same state directory (as `OpcUaFamily.open` makes them), and a command
(`outpost opcua probe --state-dir`) may run in another thread or process. Whatever the
interleaving, one key pair is made, the certificate on disk is the one of the key on disk,
and every device gets that pair. A pair left mismatched or half-written by an older version or
a crash is found at the next start and made again, with a warning.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    PublicFormat,
    load_pem_private_key,
)

from bridge.opcua.pki import Pki, fingerprint

MADE = "made the client certificate"


def public(key_or_cert: object) -> bytes:
    key = key_or_cert.public_key()  # type: ignore[attr-defined]
    return bytes(key.public_bytes(Encoding.DER, PublicFormat.SubjectPublicKeyInfo))


def on_disk(directory: Path) -> tuple[str, bool]:
    """The thumbprint of the certificate on disk and whether it belongs to the key on disk."""
    cert = x509.load_der_x509_certificate((directory / "client-cert.der").read_bytes())
    key = load_pem_private_key((directory / "client-key.pem").read_bytes(), None)
    return fingerprint(cert), public(cert) == public(key)


def made(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if MADE in r.getMessage()]


def test_devices_starting_together_make_one_matching_pair(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "outpost.bridge.opcua")
    directory = tmp_path / "opcua"
    got: list[object] = []

    def command() -> None:  # e.g. `outpost opcua probe` on the same state directory
        got.append(asyncio.run(Pki(directory).client_certificate()))

    async def devices() -> list[object]:
        return list(await asyncio.gather(*(Pki(directory).client_certificate()
                                           for _ in range(6))))

    threads = [threading.Thread(target=command) for _ in range(2)]
    for thread in threads:
        thread.start()
    got += asyncio.run(devices())
    for thread in threads:
        thread.join()

    thumbprint, matches = on_disk(directory)
    assert matches, "the certificate on disk is not the one of the key on disk"
    assert len(made(caplog)) == 1, made(caplog)
    assert {fingerprint(x509.load_der_x509_certificate(pair.certificate))  # type: ignore[attr-defined]
            for pair in got} == {thumbprint}
    assert (directory / "client-key.pem").stat().st_mode & 0o077 == 0
    assert not [p for p in directory.iterdir() if p.name.endswith(".tmp")]


def test_a_later_start_keeps_the_pair(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "outpost.bridge.opcua")
    first = asyncio.run(Pki(tmp_path).client_certificate())
    again = asyncio.run(Pki(tmp_path).client_certificate())
    assert again == first and len(made(caplog)) == 1


@pytest.mark.parametrize("damage", ["mismatched", "half-written certificate", "half-written key"])
def test_a_broken_pair_on_disk_is_made_again(tmp_path: Path, damage: str,
                                             caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "outpost.bridge.opcua")
    asyncio.run(Pki(tmp_path / "a").client_certificate())
    asyncio.run(Pki(tmp_path / "b").client_certificate())
    directory = tmp_path / "b"
    if damage == "mismatched":  # the key of one making, the certificate of another
        (directory / "client-key.pem").write_bytes((tmp_path / "a" / "client-key.pem")
                                                   .read_bytes())
    else:
        name = "client-cert.der" if "certificate" in damage else "client-key.pem"
        whole = (directory / name).read_bytes()
        (directory / name).write_bytes(whole[:len(whole) // 2])
    caplog.clear()
    pair = asyncio.run(Pki(directory).client_certificate())
    thumbprint, matches = on_disk(directory)
    assert matches and fingerprint(x509.load_der_x509_certificate(pair.certificate)) == \
        thumbprint
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "trust the new one" in warnings[0], warnings
    assert ("does not match its key" if damage == "mismatched" else "cannot be read") \
        in warnings[0]
