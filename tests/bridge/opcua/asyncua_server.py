"""asyncua's own OPC UA server as a process, for the security matrix of the OPC UA tests.

`SecureServers` makes the certificates, then runs two servers in one process
(`python -m tests.bridge.opcua.asyncua_server DIR PORT EXPIRED_PORT`; a process of its own
so the handshakes of server and client use both cores; shared by a whole test module: RSA
handshakes are slow, servers should not be made per test):
- `endpoint`: every policy asyncua has (None, Basic256Sha256, Aes128_Sha256_RsaOaep,
  Aes256_Sha256_RsaPss, each Sign and SignAndEncrypt), anonymous, username/password
  (`operator` / `secret`) and X.509 user identities (the certificate `user_cert`);
- `expired_endpoint`: the same with a server certificate that expired yesterday.
Both serve `ns=2;s=Value` (a Double, 12.5).
"""

from __future__ import annotations

import asyncio
import datetime
import os
import socket
import subprocess
import sys
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
    """Two asyncua servers (valid and expired certificate) in a process of their own."""

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
        self.process: subprocess.Popen[str] | None = None

    def start(self) -> SecureServers:
        root = Path(__file__).resolve().parents[3]
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.bridge.opcua.asyncua_server", str(self.directory),
             str(self.port), str(self.expired_port)],
            cwd=root, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"})
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        assert line.startswith("READY"), f"asyncua server did not start: {line!r}"
        return self

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(10)


async def serve_one(directory: Path, port: int, name: str) -> Server:
    """One server with every policy and identity, its certificate `name`.der."""
    server = Server(user_manager=Users(directory / "user.der"))  # type: ignore[arg-type]
    await server.init()
    server.set_endpoint(f"opc.tcp://127.0.0.1:{port}/test")
    await server.set_application_uri(SERVER_URI)
    server.set_security_policy(ALL_POLICIES)
    server.set_identity_tokens([ua.AnonymousIdentityToken, ua.UserNameIdentityToken,
                                ua.X509IdentityToken])
    await server.load_certificate(str(directory / f"{name}.der"))
    await server.load_private_key(str(directory / f"{name}-key.pem"))
    namespace = await server.register_namespace("urn:outpost:test")
    await server.nodes.objects.add_variable(ua.NodeId("Value", namespace), "Value", 12.5)
    await server.start()
    return server


async def main(directory: Path, port: int, expired_port: int) -> None:
    await serve_one(directory, port, "server")
    await serve_one(directory, expired_port, "expired")
    print("READY", flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])))
