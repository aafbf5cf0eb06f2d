"""asyncua's own OPC UA server in a thread, for the security matrix of the OPC UA tests.

`SecureServers` runs two servers on one event loop in a background thread (shared by a whole
test module: RSA handshakes are slow, servers should not be made per test):
- `endpoint`: every policy asyncua has (None, Basic256Sha256, Aes128_Sha256_RsaOaep,
  Aes256_Sha256_RsaPss, each Sign and SignAndEncrypt), anonymous, username/password
  (`operator` / `secret`) and X.509 user identities (the certificate `user_cert`);
- `expired_endpoint`: the same with a server certificate that expired yesterday.
Both serve `ns=2;s=Value` (a Double, 12.5).
"""

from __future__ import annotations

import asyncio
import datetime
import socket
import threading
from pathlib import Path
from typing import Any

from asyncua import Server, ua
from asyncua.crypto import cert_gen
from asyncua.crypto.permission_rules import User, UserRole
from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.hazmat.primitives.serialization import Encoding
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from tests.bridge.opcua.support import free_port

SERVER_URI = "urn:outpost:test:asyncua-server"
ALL_POLICIES = [
    ua.SecurityPolicyType.NoSecurity,
    ua.SecurityPolicyType.Basic256Sha256_Sign, ua.SecurityPolicyType.Basic256Sha256_SignAndEncrypt,
    ua.SecurityPolicyType.Aes128Sha256RsaOaep_Sign,
    ua.SecurityPolicyType.Aes128Sha256RsaOaep_SignAndEncrypt,
    ua.SecurityPolicyType.Aes256Sha256RsaPss_Sign,
    ua.SecurityPolicyType.Aes256Sha256RsaPss_SignAndEncrypt,
]


def make_certificate(directory: Path, name: str, uri: str, days: int = 365,
                     client: bool = False) -> tuple[Path, Path]:
    """(certificate DER, key PEM) for an application or user; days < 0: already expired."""
    key = cert_gen.generate_private_key()
    now = datetime.datetime.now(datetime.UTC)
    start, end = now - datetime.timedelta(days=30), now + datetime.timedelta(days=days)
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    usage = ExtendedKeyUsageOID.CLIENT_AUTH if client else ExtendedKeyUsageOID.SERVER_AUTH
    certificate = (
        x509.CertificateBuilder().subject_name(subject).issuer_name(subject)
        .public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(start).not_valid_after(end)
        .add_extension(x509.SubjectAlternativeName([x509.UniformResourceIdentifier(uri),
                                                    x509.DNSName(socket.gethostname())]),
                       critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=True,
                                     key_encipherment=True, data_encipherment=True,
                                     key_agreement=False, key_cert_sign=False, crl_sign=False,
                                     encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        .sign(key, hashes.SHA256()))
    assert isinstance(key, rsa.RSAPrivateKey)
    cert_path, key_path = directory / f"{name}.der", directory / f"{name}-key.pem"
    cert_path.write_bytes(certificate.public_bytes(Encoding.DER))
    key_path.write_bytes(cert_gen.dump_private_key_as_pem(key))
    return cert_path, key_path


class Users:
    """operator/secret, the user certificate, and anonymous; a wrong password is refused."""

    def __init__(self, user_cert: Path) -> None:
        self.user_der = user_cert.read_bytes()

    def get_user(self, iserver: Any, username: str | None = None, password: str | None = None,
                 certificate: Any = None) -> User | None:
        # `certificate` is the user token's, or else the client's application certificate
        if certificate:
            der = certificate if isinstance(certificate, bytes) else \
                certificate.public_bytes(Encoding.DER)
            if der == self.user_der:
                return User(role=UserRole.User)
        if username is not None:
            ok = (username, password) == ("operator", "secret")
            return User(role=UserRole.User) if ok else None
        return User(role=UserRole.User)


class SecureServers:
    """Two asyncua servers (valid and expired certificate) on a loop in a thread."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.server_cert, self.server_key = make_certificate(directory, "server", SERVER_URI)
        self.expired_cert, self.expired_key = make_certificate(directory, "expired", SERVER_URI,
                                                               days=-1)
        self.user_cert, self.user_key = make_certificate(directory, "user", "urn:user",
                                                         client=True)
        self.port, self.expired_port = free_port(), free_port()
        self.endpoint = f"opc.tcp://127.0.0.1:{self.port}/test"
        self.expired_endpoint = f"opc.tcp://127.0.0.1:{self.expired_port}/test"
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.servers: list[Server] = []

    def start(self) -> SecureServers:
        self.thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self.loop).result(60)
        return self

    async def _server(self, port: int, cert: Path, key: Path) -> Server:
        server = Server(user_manager=Users(self.user_cert))  # type: ignore[arg-type]
        await server.init()
        server.set_endpoint(f"opc.tcp://127.0.0.1:{port}/test")
        await server.set_application_uri(SERVER_URI)
        server.set_security_policy(ALL_POLICIES)
        server.set_identity_tokens([ua.AnonymousIdentityToken, ua.UserNameIdentityToken,
                                    ua.X509IdentityToken])
        await server.load_certificate(str(cert))
        await server.load_private_key(str(key))
        namespace = await server.register_namespace("urn:outpost:test")
        objects = server.nodes.objects
        await objects.add_variable(ua.NodeId("Value", namespace), "Value", 12.5)
        await server.start()
        return server

    async def _start(self) -> None:
        self.servers = [
            await self._server(self.port, self.server_cert, self.server_key),
            await self._server(self.expired_port, self.expired_cert, self.expired_key)]

    def stop(self) -> None:
        async def stop_all() -> None:
            for server in self.servers:
                await server.stop()

        asyncio.run_coroutine_threadsafe(stop_all(), self.loop).result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
