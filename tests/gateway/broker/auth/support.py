"""Helpers for the listener and access-control tests (tests/auth, tests/e2e/test_2x_*.py).

- `make_pki(dir)`: a CA, a server certificate for localhost / 127.0.0.1 and client
  certificates (CN alice, bob, and one from a foreign CA), made with the `openssl` tool.
- `start_secure_broker(dir, toml, count)`: `outpost run --config` with the listeners of the
  config (no `--listen` override); learns every bound address from the `listening on` lines.
- `RawClient` subclasses that connect from a chosen source address (`127.0.0.2` ... are all
  loopback on Linux), over TLS, over a WebSocket (`WSSocket`), or over a unix socket.
- `Paho(...)`: paho-mqtt 2.x over TCP, TLS, WebSocket, secure WebSocket and unix sockets.
"""

from __future__ import annotations

import base64
import contextlib
import os
import re
import shutil
import signal
import socket
import ssl
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from gateway.broker.codec import MQTT_3_1_1
from tests.gateway.broker.e2e.helpers import TIMEOUT, RawClient, wait_for

ROOT = Path(__file__).resolve().parents[4]
_LISTENING = re.compile(r"outpost: listening on (?:unix:(\S+)|(\S+):(\d+)(?: \((\w+)\))?)$")
PREAMBLE = "[status]\nenabled = false\n[sys]\ninterval = 0.5\n"


# -- certificates -------------------------------------------------------------------------------


@dataclass
class PKI:
    """Paths of the test certificates."""

    dir: Path
    ca: Path
    server_cert: Path
    server_key: Path
    clients: dict[str, tuple[Path, Path]] = field(default_factory=dict)  # CN -> (cert, key)


def _openssl(*args: str, cwd: Path) -> None:
    tool = shutil.which("openssl")
    if tool is None:
        pytest.skip("openssl is not installed")
    result = subprocess.run([tool, *args], cwd=cwd, capture_output=True, text=True, check=False)
    assert result.returncode == 0, f"openssl {' '.join(args)}: {result.stderr}"


def _key_and_csr(name: str, cn: str, cwd: Path) -> None:
    _openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
             "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={cn}", cwd=cwd)


def _sign(name: str, ca: str, ext: str, cwd: Path) -> None:
    (cwd / f"{name}.ext").write_text(ext, encoding="ascii")
    _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.crt", "-CAkey", f"{ca}.key",
             "-CAcreateserial", "-out", f"{name}.crt", "-days", "2", "-extfile", f"{name}.ext",
             cwd=cwd)


def _make_ca(name: str, cn: str, cwd: Path) -> None:
    _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
             "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.crt", "-days", "2",
             "-subj", f"/CN={cn}", cwd=cwd)


def make_pki(directory: Path, clients: tuple[str, ...] = ("alice", "bob"),
             server_ips: tuple[str, ...] = ()) -> PKI:
    """A CA, a server certificate and client certificates (plus `mallory` from another CA).

    The server's certificate is for localhost and 127.0.0.1, and `server_ips` (a VM's view
    of the host)."""
    directory.mkdir(parents=True, exist_ok=True)
    _make_ca("ca", "outpost test CA", directory)
    _key_and_csr("server", "localhost", directory)
    names = ",".join(["DNS:localhost", "IP:127.0.0.1", *(f"IP:{ip}" for ip in server_ips)])
    _sign("server", "ca", f"subjectAltName={names}\nextendedKeyUsage=serverAuth\n", directory)
    pki = PKI(directory, directory / "ca.crt", directory / "server.crt", directory / "server.key")
    for cn in clients:
        _key_and_csr(cn, cn, directory)
        _sign(cn, "ca", "extendedKeyUsage=clientAuth\n", directory)
        pki.clients[cn] = (directory / f"{cn}.crt", directory / f"{cn}.key")
    _make_ca("rogue-ca", "rogue CA", directory)
    _key_and_csr("mallory", "alice", directory)  # claims to be alice, signed by the wrong CA
    _sign("mallory", "rogue-ca", "extendedKeyUsage=clientAuth\n", directory)
    pki.clients["mallory"] = (directory / "mallory.crt", directory / "mallory.key")
    return pki


def client_context(pki: PKI, cert: str | None = None) -> ssl.SSLContext:
    """A client TLS context trusting the test CA, optionally with a client certificate."""
    context = ssl.create_default_context(cafile=str(pki.ca))
    if cert is not None:
        path, key = pki.clients[cert]
        context.load_cert_chain(str(path), str(key))
    return context


# -- the broker ---------------------------------------------------------------------------------


@dataclass
class Address:
    kind: str  # tcp, tls, ws, wss, unix
    host: str
    port: int
    path: str = ""  # unix socket path


@dataclass
class SecureBroker:
    """A running `outpost run --config` and its bound listeners, in config order."""

    process: subprocess.Popen[str]
    addresses: list[Address]
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def of(self, kind: str, index: int = 0) -> Address:
        return [a for a in self.addresses if a.kind == kind][index]

    @property
    def host(self) -> str:  # so helpers written for BrokerProcess work on the tcp listener
        return self.of("tcp").host

    @property
    def port(self) -> int:
        return self.of("tcp").port

    def alive(self) -> bool:
        return self.process.poll() is None

    def stop(self, sig: int = signal.SIGTERM) -> int:
        if self.process.poll() is None:
            self.process.send_signal(sig)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        if self.process.stdout is not None:
            self.process.stdout.close()
        return self.process.returncode


def start_secure_broker(workdir: Path, config_text: str, listeners: int,
                        timeout: float = 20.0) -> SecureBroker:
    """Start `outpost run --config` and wait for `listeners` bound addresses."""
    workdir.mkdir(parents=True, exist_ok=True)
    config = workdir / "outpost.toml"
    config.write_text(PREAMBLE + config_text, encoding="utf-8")
    log_path = workdir / "broker.log"
    with log_path.open("w", encoding="utf-8") as log_file:
        process = subprocess.Popen(
            [sys.executable, "-m", "outpost", "--log-level", "DEBUG", "run", "--config",
             str(config)],
            stdout=subprocess.PIPE, stderr=log_file, text=True, cwd=ROOT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
    assert process.stdout is not None
    addresses: list[Address] = []
    deadline = time.monotonic() + timeout
    while len(addresses) < listeners and time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line:
            break
        match = _LISTENING.search(line.strip())
        if match is None:
            continue
        if match.group(1):
            addresses.append(Address("unix", "", 0, match.group(1)))
        else:
            addresses.append(Address(match.group(4) or "tcp", match.group(2),
                                     int(match.group(3))))
    if len(addresses) < listeners:
        process.kill()
        process.wait()
        raise RuntimeError(f"broker did not start:\n{log_path.read_text()}")
    return SecureBroker(process, addresses, log_path)


@contextlib.contextmanager
def broker_pool(tmp_path: Path) -> Iterator[Callable[[str, int], SecureBroker]]:
    """`start(config_text, listeners)` inside; every broker is stopped on exit."""
    started: list[SecureBroker] = []

    def start(config_text: str, listeners: int = 1) -> SecureBroker:
        broker = start_secure_broker(tmp_path / f"broker{len(started)}", config_text, listeners)
        started.append(broker)
        return broker

    try:
        yield start
    finally:
        for broker in started:
            broker.stop()


# -- raw clients over every transport ----------------------------------------------------------


class SockClient(RawClient):
    """`RawClient` over an already connected socket-like object."""

    def __init__(self, sock: Any, version: int = MQTT_3_1_1, timeout: float = TIMEOUT) -> None:
        self.version = version
        self.timeout = timeout
        self.sock = sock
        self.sock.settimeout(timeout)
        self.buffer = bytearray()
        self.stash: list[bytes] = []
        self.eof = False
        self._next_id = 0


def tcp_socket(host: str, port: int, source: str | None = None,
               timeout: float = TIMEOUT) -> socket.socket:
    """A TCP connection, from `source` (e.g. 127.0.0.2) when given."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        if source is not None:
            sock.bind((source, 0))
        sock.connect((host, port))
    except OSError:
        sock.close()
        raise
    return sock


def tcp_client(address: Address, source: str | None = None, version: int = MQTT_3_1_1
               ) -> SockClient:
    return SockClient(tcp_socket(address.host, address.port, source), version)


def tls_client(address: Address, pki: PKI, cert: str | None = None,
               version: int = MQTT_3_1_1, source: str | None = None) -> SockClient:
    context = client_context(pki, cert)
    raw = tcp_socket(address.host, address.port, source)
    return SockClient(_TLSSock(context.wrap_socket(raw, server_hostname="localhost")), version)


class _TLSSock:
    """An SSL socket whose abrupt close reads as end of stream."""

    def __init__(self, sock: ssl.SSLSocket) -> None:
        self.sock = sock

    def sendall(self, data: bytes) -> None:
        self.sock.sendall(data)

    def recv(self, size: int) -> bytes:
        try:
            return self.sock.recv(size)
        except (ssl.SSLError, ConnectionResetError, BrokenPipeError):
            return b""

    def settimeout(self, value: float | None) -> None:
        self.sock.settimeout(value)

    def close(self) -> None:
        self.sock.close()


def unix_client(path: str, version: int = MQTT_3_1_1) -> SockClient:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(TIMEOUT)
    sock.connect(path)
    return SockClient(sock, version)


def ws_request(path: str = "/mqtt", protocol: str | None = "mqtt",
               extra: dict[str, str] | None = None, key: bytes = b"0123456789abcdef") -> bytes:
    """An HTTP/1.1 upgrade request."""
    lines = [f"GET {path} HTTP/1.1", "Host: localhost", "Upgrade: websocket",
             "Connection: Upgrade", f"Sec-WebSocket-Key: {base64.b64encode(key).decode()}",
             "Sec-WebSocket-Version: 13"]
    if protocol:
        lines.append(f"Sec-WebSocket-Protocol: {protocol}")
    for name, value in (extra or {}).items():
        lines.append(f"{name}: {value}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def read_http_head(sock: Any, timeout: float = TIMEOUT) -> tuple[bytes, bytes]:
    """(response head, bytes after it)."""
    sock.settimeout(timeout)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(4096)
        if not chunk:
            break
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    return head, rest


def client_frame(opcode: int, payload: bytes, fin: bool = True, mask: bytes = b"\x01\x02\x03\x04"
                 ) -> bytes:
    """A masked client frame."""
    first = (0x80 if fin else 0) | opcode
    size = len(payload)
    if size < 126:
        header = bytes((first, 0x80 | size))
    elif size < 65536:
        header = struct.pack("!BBH", first, 0xFE, size)
    else:
        header = struct.pack("!BBQ", first, 0xFF, size)
    masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
    return header + mask + masked


class WSSocket:
    """A minimal WebSocket client with a socket-like API (binary frames both ways)."""

    def __init__(self, sock: Any, path: str = "/mqtt", protocol: str | None = "mqtt") -> None:
        self.sock = sock
        sock.sendall(ws_request(path, protocol))
        head, rest = read_http_head(sock)
        assert head.startswith(b"HTTP/1.1 101 "), head
        self.head = head
        self.buffer = bytearray(rest)
        self.closed = False
        self.close_code: int | None = None

    def sendall(self, data: bytes) -> None:
        self.sock.sendall(client_frame(0x2, data))

    def _frame(self) -> tuple[int, bytes] | None:
        buf = self.buffer
        if len(buf) < 2:
            return None
        size = buf[1] & 0x7F
        offset = 2
        if size == 126:
            if len(buf) < 4:
                return None
            size, offset = struct.unpack_from("!H", buf, 2)[0], 4
        elif size == 127:
            if len(buf) < 10:
                return None
            size, offset = struct.unpack_from("!Q", buf, 2)[0], 10
        if buf[1] & 0x80:
            raise AssertionError("server frames must not be masked")
        if len(buf) < offset + size:
            return None
        opcode, payload = buf[0] & 0x0F, bytes(buf[offset:offset + size])
        del buf[:offset + size]
        return opcode, payload

    def next_frame(self) -> tuple[int, bytes]:
        """The next frame from the server as it came: (opcode, payload); (-1, b"") at EOF."""
        while (parsed := self._frame()) is None:
            chunk = self.sock.recv(65536)
            if not chunk:
                return -1, b""
            self.buffer += chunk
        return parsed

    def recv(self, size: int) -> bytes:
        while True:
            if self.closed:
                return b""
            parsed = self._frame()
            if parsed is not None:
                opcode, payload = parsed
                if opcode == 0x8:
                    self.closed = True
                    self.close_code = struct.unpack("!H", payload[:2])[0] if payload else None
                    return b""
                if opcode == 0x9:
                    self.sock.sendall(client_frame(0xA, payload))
                    continue
                if opcode in (0x0, 0x2):
                    if payload:
                        return payload
                    continue
                continue
            try:
                chunk = self.sock.recv(65536)
            except (ConnectionResetError, ssl.SSLError):
                chunk = b""
            if not chunk:
                self.closed = True
                return b""
            self.buffer += chunk

    def settimeout(self, value: float | None) -> None:
        self.sock.settimeout(value)

    def close(self) -> None:
        self.sock.close()


def ws_client(address: Address, version: int = MQTT_3_1_1, pki: PKI | None = None,
              path: str = "/mqtt", source: str | None = None) -> SockClient:
    raw: Any = tcp_socket(address.host, address.port, source)
    if pki is not None:
        raw = client_context(pki).wrap_socket(raw, server_hostname="localhost")
    return SockClient(WSSocket(raw, path), version)


# -- paho -----------------------------------------------------------------------------------


class Paho:
    """paho-mqtt 2.x over tcp / tls / websockets / unix sockets with blocking helpers."""

    def __init__(self, address: Address, client_id: str, *, pki: PKI | None = None,
                 cert: str | None = None, username: str | None = None,
                 password: str | None = None, ws_path: str = "/mqtt",
                 protocol: int = 4) -> None:
        import paho.mqtt.client as mqtt
        from paho.mqtt.enums import CallbackAPIVersion

        transport = {"ws": "websockets", "wss": "websockets", "unix": "unix"}.get(
            address.kind, "tcp")
        self.address = address
        self.client = mqtt.Client(callback_api_version=CallbackAPIVersion.VERSION2,
                                  client_id=client_id, transport=transport,
                                  protocol=mqtt.MQTTv5 if protocol == 5 else mqtt.MQTTv311)
        self.client.reconnect_delay_set(60, 120)
        if transport == "websockets":
            self.client.ws_set_options(path=ws_path)
        if address.kind in ("tls", "wss"):
            assert pki is not None
            cert_args = {}
            if cert is not None:
                path, key = pki.clients[cert]
                cert_args = {"certfile": str(path), "keyfile": str(key)}
            self.client.tls_set(ca_certs=str(pki.ca), **cert_args)
        if username is not None:
            self.client.username_pw_set(username, password)
        self.lock = threading.Lock()
        self.messages: list[tuple[str, bytes]] = []
        self.connack: list[int] = []
        self.subacks: dict[int, list[int]] = {}
        self.client.on_message = self._on_message
        self.client.on_connect = self._on_connect
        self.client.on_subscribe = self._on_subscribe
        self.started = False

    def _on_message(self, client: Any, userdata: Any, msg: Any) -> None:
        with self.lock:
            self.messages.append((msg.topic, bytes(msg.payload)))

    def _on_connect(self, client: Any, userdata: Any, flags: Any, reason: Any,
                    properties: Any) -> None:
        self.connack.append(reason.value)

    def _on_subscribe(self, client: Any, userdata: Any, mid: int, reasons: Any,
                      properties: Any) -> None:
        self.subacks[mid] = [r.value for r in reasons]

    def connect(self) -> int:
        """Connect and wait for CONNACK; returns its code (v5 reason code numbering)."""
        if self.address.kind == "unix":  # paho: host is the socket path, the port unused
            self.client.connect(self.address.path, 1883, 30)
        else:
            self.client.connect(self.address.host, self.address.port, 30)
        self.client.loop_start()
        self.started = True
        wait_for(lambda: self.connack, message="paho: no CONNACK")
        return self.connack[-1]

    def subscribe(self, topic: str, qos: int = 1) -> list[int]:
        _, mid = self.client.subscribe(topic, qos)
        result: list[int] = wait_for(lambda: self.subacks.get(mid), message="paho: no SUBACK")
        return result

    def publish(self, topic: str, payload: bytes, qos: int = 1) -> None:
        info = self.client.publish(topic, payload, qos)
        info.wait_for_publish(TIMEOUT)
        assert info.is_published()

    def wait_messages(self, count: int) -> list[tuple[str, bytes]]:
        wait_for(lambda: len(self.messages) >= count,
                 message=f"paho: expected {count} messages, got {self.messages}")
        with self.lock:
            return list(self.messages)

    def close(self) -> None:
        try:
            self.client.disconnect()
        finally:
            if self.started:
                self.client.loop_stop()

    def __enter__(self) -> Paho:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def outpost_counter(address: Address, name: str) -> int:
    """`$SYS/outpost/<name>` (0 until the first `$SYS` interval), read over a tcp listener."""
    with tcp_client(address) as client:
        client.connect("")
        client.subscribe((f"$SYS/outpost/{name}", 0))
        values = [int(p.payload) for p in client.sync() if getattr(p, "topic", None)]
        return values[-1] if values else 0


def mosquitto_tool(name: str) -> str:
    """Path of a mosquitto command-line tool, or skip."""
    path = shutil.which(name)
    if path is None:
        pytest.skip(f"{name} is not installed (Debian package mosquitto-clients)")
    return path


def run_tool(*args: str, timeout: float = 10.0, input_text: str | None = None
             ) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(args), capture_output=True, text=True, timeout=timeout,
                          input=input_text, check=False)
