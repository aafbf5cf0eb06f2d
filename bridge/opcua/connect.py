"""Opening an OPC UA session for a device configuration: security, identity, trust.

How this works: `open_client` makes an asyncua `Client` for the endpoint, sets the user
identity (anonymous, username/password, or an X.509 user certificate) and, for a security
policy other than None, first asks the server for its endpoints over an unsecured channel
(GetEndpoints is always allowed), picks the one with the configured policy and mode, checks
the server certificate it carries against the trust list (bridge/opcua/pki.py) and only then
opens the secure channel with the client's application certificate. `connect` gives up after
`request_timeout` twice over, so a host that swallows packets costs one bounded wait.

asyncua's own reconnect is off: the device (bridge/opcua/device.py) opens a new session after
a loss, which re-creates its subscription and monitored items from scratch.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

from asyncua import Client, ua
from asyncua.crypto import security_policies
from cryptography import x509

from bridge.opcua.config import OpcUaDeviceConfig
from bridge.opcua.pki import APPLICATION_URI, Pki, UntrustedServerError

log = logging.getLogger("outpost.bridge.opcua")
POLICIES: dict[str, type[security_policies.SecurityPolicy]] = {
    "Basic256Sha256": security_policies.SecurityPolicyBasic256Sha256,
    "Aes128_Sha256_RsaOaep": security_policies.SecurityPolicyAes128Sha256RsaOaep,
    "Aes256_Sha256_RsaPss": security_policies.SecurityPolicyAes256Sha256RsaPss,
}
# asyncua logs every publish response at INFO: far too much for a gateway's journal.
logging.getLogger("asyncua").setLevel(logging.WARNING)


class SecurityError(Exception):
    """The configured security cannot be used with this server (a clear reason)."""


def first_certificate(chain: bytes) -> bytes:
    """The first DER certificate of a chain (servers may send their CA chain after it)."""
    if len(chain) < 2 or chain[0] != 0x30:
        return chain
    length = chain[1]
    if length < 0x80:
        return chain[:2 + length]
    size = length & 0x7F
    return chain[:2 + size + int.from_bytes(chain[2:2 + size], "big")]


def _endpoint(endpoints: list[ua.EndpointDescription], config: OpcUaDeviceConfig,
              ) -> ua.EndpointDescription:
    policy_uri = POLICIES[config.security_policy].URI
    mode = getattr(ua.MessageSecurityMode, config.security_mode)
    for endpoint in endpoints:
        if endpoint.SecurityPolicyUri == policy_uri and endpoint.SecurityMode == mode:
            return endpoint
    offered = sorted({f"{e.SecurityPolicyUri.rsplit('#', 1)[-1]} {e.SecurityMode.name}"
                      for e in endpoints})
    raise SecurityError(f"the server offers no endpoint with {config.security_policy} "
                        f"{config.security_mode} (it offers: {', '.join(offered)})")


def make_client(config: OpcUaDeviceConfig) -> Client:
    """A client for the endpoint with the device's timeouts and user identity (no I/O)."""
    client = Client(config.endpoint, timeout=config.request_timeout,
                    watchdog_intervall=config.keepalive)
    client.application_uri = APPLICATION_URI
    client.name = client.description = "outpost bridge"
    client.session_timeout = int(config.session_timeout * 1000)
    if config.username is not None:
        client.set_user(config.username)
        client.set_password(config.password or "")
    return client


async def secure(client: Client, config: OpcUaDeviceConfig, pki: Pki | None) -> None:
    """Set the client's security for the device (GetEndpoints first, then the trust check)."""
    if config.user_certificate is not None and config.user_key is not None:
        await client.load_client_certificate(str(config.user_certificate))
        await client.load_private_key(Path(config.user_key))
    if config.security_policy == "None":
        return
    if pki is None:
        raise SecurityError(f"security_policy {config.security_policy} needs a state directory "
                            f"for the client certificate (outpost run --state-dir, or "
                            f"[storage] state_dir)")
    endpoint = _endpoint(await client.connect_and_get_server_endpoints(), config)
    server_der = first_certificate(endpoint.ServerCertificate or b"")
    if not server_der:
        raise UntrustedServerError("the server sent no certificate with its secure endpoint")
    pki.check_server(config.name, x509.load_der_x509_certificate(server_der),
                     list(config.trusted_certificates), config.trust_on_first_use)
    cert, key = await pki.client_certificate()
    await client.set_security(POLICIES[config.security_policy], str(cert), str(key),
                              server_certificate=server_der,
                              mode=getattr(ua.MessageSecurityMode, config.security_mode))


async def open_client(config: OpcUaDeviceConfig, pki: Pki | None) -> Client:
    """A connected client with an active session; raises on any failure (nothing left open)."""
    client = make_client(config)
    try:
        async with asyncio.timeout(config.request_timeout * 2 + 5):
            await secure(client, config, pki)
            await client.connect()
    except BaseException:
        await close_quietly(client)
        raise
    return client


async def close_quietly(client: Client) -> None:
    """Close the session and the socket; a dead server does not make this wait long."""
    try:
        async with asyncio.timeout(2.0):
            await client.disconnect()
    except Exception:  # the connection is being dropped: nothing to report about it
        log.debug("opcua: disconnect failed", exc_info=True)
    client.disconnect_socket()
