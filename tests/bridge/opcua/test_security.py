"""OPC UA security against asyncua's server: every policy and mode, every user identity, trust.

One pair of servers serves the module (tests/bridge/opcua/asyncua_server.py). Each case is a
device of one bridge, so the slow RSA handshakes run side by side.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bridge.opcua.pki import APPLICATION_URI
from tests.bridge.opcua.asyncua_server import SecureServers, make_certificate
from tests.bridge.opcua.support import Harness, until

POINT = [{"name": "value", "node": "ns=2;s=Value", "type": "float64"}]
# A bound for a stuck run: on a loaded machine a handshake may time out once (25 s) before
# the retry gets through.
HANDSHAKES = 90.0  # (pytest-timeout stops a test at 120 s)


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureServers]:
    pair = SecureServers(tmp_path_factory.mktemp("asyncua-server")).start()
    yield pair
    pair.stop()


def good(value: Any) -> Any:
    return value if value is not None and value["quality"] == "good" else None


def opcua(name: str, endpoint: str, policy: str = "None", mode: str = "None",
          **extra: Any) -> dict[str, Any]:
    return {"name": name, "endpoint": endpoint, "security_policy": policy,
            "security_mode": mode, "keepalive": 1.0, "reconnect_initial": 0.5,
            "reconnect_max": 2.0, "request_timeout": 10.0, "points": POINT, **extra}


def test_every_policy_mode_and_identity_works(servers: SecureServers, tmp_path: Path) -> None:
    trusted = {"trusted_certificates": [str(servers.server_cert)]}
    user = {"user_certificate": str(servers.user_cert), "user_key": str(servers.user_key)}
    login = {"username": "operator", "password": "secret"}
    devices = [
        opcua("none-anonymous", servers.endpoint),
        opcua("none-password", servers.endpoint, **login),
        opcua("b256-sign", servers.endpoint, "Basic256Sha256", "Sign", **trusted, **login),
        opcua("b256-encrypt", servers.endpoint, "Basic256Sha256", "SignAndEncrypt", **trusted,
              **user),
        opcua("aes128-encrypt", servers.endpoint, "Aes128_Sha256_RsaOaep", "SignAndEncrypt",
              **trusted),
        opcua("aes256-sign", servers.endpoint, "Aes256_Sha256_RsaPss", "Sign", **trusted,
              **login),
    ]

    async def main() -> None:
        h = Harness({"opcua": devices}, state_dir=tmp_path)
        await h.bridge.start()
        for device in devices:  # (a handshake that times out on a busy machine is retried)
            value = await until(lambda d=device: good(h.last(f"devices/{d['name']}/value")),
                                HANDSHAKES)
            assert value["value"] == 12.5, device["name"]
            assert h.last(f"devices/{device['name']}/status") == "online"
        await h.bridge.stop()

    asyncio.run(main())
    # the client's application certificate was made on first start, in the state directory
    certificate = tmp_path / "opcua" / "client-cert.der"
    assert certificate.exists() and (tmp_path / "opcua" / "client-key.pem").stat().st_mode \
        & 0o077 == 0
    assert APPLICATION_URI.encode() in certificate.read_bytes()


def test_untrusted_expired_and_changed_certificates_and_bad_logins_are_refused(
        servers: SecureServers, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, "outpost.bridge.opcua")
    other, _ = make_certificate(tmp_path, "other", "urn:other")
    pinned = tmp_path / "state" / "opcua" / "trusted" / "changed.der"
    pinned.parent.mkdir(parents=True)
    pinned.write_bytes(other.read_bytes())  # pinned earlier: a different server certificate
    devices = [
        opcua("untrusted", servers.endpoint, "Basic256Sha256", "SignAndEncrypt"),
        opcua("wrong-trust", servers.endpoint, "Basic256Sha256", "Sign",
              trusted_certificates=[str(other)]),
        opcua("expired", servers.expired_endpoint, "Basic256Sha256", "SignAndEncrypt",
              trusted_certificates=[str(servers.expired_cert)]),
        opcua("changed", servers.endpoint, "Basic256Sha256", "SignAndEncrypt",
              trust_on_first_use=True),
        opcua("first-use", servers.endpoint, "Aes128_Sha256_RsaOaep", "Sign",
              trust_on_first_use=True),
        opcua("bad-password", servers.endpoint, username="operator", password="guess"),
    ]
    expected = {
        "untrusted": "is not trusted: add it to trusted_certificates",
        "wrong-trust": "is not trusted",
        "expired": "expired on",
        "changed": "differs from the one pinned at first use",
        "bad-password": "Bad",
    }

    async def main() -> None:
        h = Harness({"opcua": devices}, state_dir=tmp_path / "state")
        await h.bridge.start()
        refused = {name: h.bridge.devices[name] for name in expected}
        for name, reason in expected.items():
            await until(lambda n=name, r=reason: r in (refused[n].last_error or ""),  # type: ignore[attr-defined]
                        HANDSHAKES)
            assert h.last(f"devices/{name}/status") == "offline"
            assert h.last(f"devices/{name}/value")["quality"] == "bad"
        # trust on first use pins the certificate and connects
        await until(lambda: good(h.last("devices/first-use/value")), HANDSHAKES)
        assert (tmp_path / "state" / "opcua" / "trusted" / "first-use.der").read_bytes() == \
            servers.server_cert.read_bytes()
        await h.bridge.stop()

    asyncio.run(main())
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert any("untrusted" in e and "refused" in e and "trusted_certificates" in e
               for e in errors), errors
