"""Opening an OPC UA session for a device configuration: security, identity, trust.

How this works: `open_client` makes an asyncua `Client` for the endpoint, sets the user
identity (anonymous, username/password, or an X.509 user certificate) and, for a security
policy other than None, first asks the server for its endpoints over an unsecured channel
(GetEndpoints is always allowed), picks the one with the configured policy and mode, checks
the server certificate it carries against the trust list (bridge/opcua/pki.py) and only then
opens the secure channel with the client's application certificate. `connect` gives up after
`request_timeout` twice over, so a host that swallows packets costs one bounded wait.

The first secure channel to an endpoint opens alone (`first_secure_channel`): servers that
accept unknown client certificates automatically (node-opcua's option, the default of
Node-RED's OPC UA server) move ours from `rejected/` to `trusted/` at that moment, and
node-opcua-pki before 7.0 does it without a lock. Devices starting together on one server
then race there, and the losers are refused with BadInternalError on every attempt until the
server restarts. Once one channel to the endpoint opened, the others are not held back.

asyncua's own reconnect is off: the device (bridge/opcua/device.py) opens a new session after
a loss, which re-creates its subscription and monitored items from scratch.

asyncua's log lines stay out of the journal: while a server is away it logs every attempt
(`close_secure_channel was called but connection is closed`, `Publish iteration crashed` with
its traceback, ...), hundreds of lines for one outage that the device reports itself, once
(bridge/opcua/device.py). `quiet_library_logs` keeps its WARNING and above (nothing below is
ever made: its debug lines cost time on every message) and hands them on at DEBUG level to
`outpost.bridge.opcua.asyncua`, so `--log-level debug` still shows them with their tracebacks.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

from asyncua import Client, ua
from asyncua.crypto import security_policies
from cryptography import x509

from bridge.opcua.config import OpcUaDeviceConfig
from bridge.opcua.pki import APPLICATION_URI, Pki, UntrustedServerError

log = logging.getLogger("outpost.bridge.opcua")
LIBRARY_LOG = logging.getLogger("outpost.bridge.opcua.asyncua")
POLICIES: dict[str, type[security_policies.SecurityPolicy]] = {
    "Basic256Sha256": security_policies.SecurityPolicyBasic256Sha256,
    "Aes128_Sha256_RsaOaep": security_policies.SecurityPolicyAes128Sha256RsaOaep,
    "Aes256_Sha256_RsaPss": security_policies.SecurityPolicyAes256Sha256RsaPss,
}


class _AtDebug(logging.Handler):
    """Hands asyncua's records on to LIBRARY_LOG as DEBUG records."""

    def emit(self, record: logging.LogRecord) -> None:
        if LIBRARY_LOG.isEnabledFor(logging.DEBUG):
            record.msg = f"[{record.levelname} {record.name}] {record.msg}"
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
            record.name = LIBRARY_LOG.name
            LIBRARY_LOG.handle(record)


def quiet_library_logs() -> None:
    """Keep asyncua's per-attempt noise out of the journal (DEBUG of LIBRARY_LOG instead)."""
    library = logging.getLogger("asyncua")
    if not any(isinstance(handler, _AtDebug) for handler in library.handlers):
        library.addHandler(_AtDebug())
    library.setLevel(logging.WARNING)  # asyncua logs every publish response at INFO
    library.propagate = False


quiet_library_logs()


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
    pair = await pki.client_certificate()  # bytes checked under the lock: a matching pair
    await client.set_security(POLICIES[config.security_policy], pair.certificate, pair.key,
                              server_certificate=server_der,
                              mode=getattr(ua.MessageSecurityMode, config.security_mode))


@dataclass
class _SecureChannels:
    """Of one event loop: the endpoints a secure channel opened to, a lock per other one."""

    opened: set[str] = field(default_factory=set)
    first: dict[str, asyncio.Lock] = field(default_factory=dict)


_CHANNELS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _SecureChannels] = (
    weakref.WeakKeyDictionary())


@asynccontextmanager
async def first_secure_channel(endpoint: str) -> AsyncIterator[None]:
    """Holds the opening of a secure channel to `endpoint` while another is the first to
    open one (see the module comment); once one has opened, nothing waits."""
    channels = _CHANNELS.setdefault(asyncio.get_running_loop(), _SecureChannels())
    if endpoint in channels.opened:
        yield
        return
    async with channels.first.setdefault(endpoint, asyncio.Lock()):
        yield
        channels.opened.add(endpoint)


async def open_client(config: OpcUaDeviceConfig, pki: Pki | None) -> Client:
    """A connected client with an active session; raises on any failure (nothing left open)."""
    client = make_client(config)
    try:
        async with asyncio.timeout(config.request_timeout * 2 + 5):
            await secure(client, config, pki)
            if config.security_policy == "None":
                await client.connect()
            else:
                async with first_secure_channel(config.endpoint):
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
