"""The unix socket listener end to end: `outpost run` with `type = "unix"` listeners, real
clients (paho-mqtt's unix transport and raw sockets) publishing and subscribing across
listeners, the socket file's permissions (`socket_mode`, default 0o660), anonymous access
(allowed by default on unix sockets, refused with `allow_anonymous = false`), and the socket
file removed at shutdown."""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway.broker.codec import MQTT_5, ConnAck
from gateway.broker.contracts.passwords import hash_password
from tests.gateway.broker.auth.support import Paho, tcp_client, unix_client

ACCEPTED = bytes.fromhex("20020000")
BAD_PASSWORD = bytes.fromhex("20020004")  # 3.1.1 return code 4
NOT_AUTHORIZED = bytes.fromhex("20020005")  # 3.1.1 return code 5


@pytest.fixture
def sockets() -> Iterator[Path]:
    """A short directory for the sockets (a unix socket path has at most 107 bytes)."""
    path = Path(tempfile.mkdtemp(prefix="outpost-unix-", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def test_unix_listeners_end_to_end(secure_broker, sockets, tmp_path):
    passwd = tmp_path / "passwd"
    passwd.write_text(f"alice:{hash_password(b'secret', 1000)}\n", encoding="utf-8")
    passwd.chmod(0o600)
    open_path, private_path, locked_path = (sockets / name for name in (
        "open.sock", "private.sock", "locked.sock"))
    broker = secure_broker(
        f'[[listeners]]\ntype = "unix"\nbind = "{open_path}"\n'  # the defaults
        f'[[listeners]]\ntype = "unix"\nbind = "{private_path}"\nsocket_mode = 0o600\n'
        f'[[listeners]]\ntype = "unix"\nbind = "{locked_path}"\nallow_anonymous = false\n'
        f'password_file = "{passwd}"\n'
        '[[listeners]]\nbind = "127.0.0.1:0"\n', 4)
    opened, private, locked, tcp = broker.addresses
    assert [a.kind for a in broker.addresses] == ["unix", "unix", "unix", "tcp"]
    assert (opened.path, private.path, locked.path) == tuple(
        map(str, (open_path, private_path, locked_path)))

    # the socket files and their permission bits
    for path, mode in ((open_path, 0o660), (private_path, 0o600), (locked_path, 0o660)):
        info = path.lstat()
        assert stat.S_ISSOCK(info.st_mode), path
        assert stat.S_IMODE(info.st_mode) == mode, (path, oct(info.st_mode))
        assert info.st_uid == os.getuid()
    log = broker.log()
    assert f"listening on unix:{open_path} [unix:{open_path}]: anonymous clients allowed " \
        "(local listener)" in log
    assert f"listening on unix:{locked_path} [unix:{locked_path}]: anonymous clients REFUSED " \
        "(allow_anonymous = false)" in log

    # paho over the default unix listener: anonymous by default; publish and subscribe, also
    # across listeners (a raw unix client, a TCP client)
    with Paho(opened, "c-unix-paho") as paho, unix_client(private.path) as raw, \
            tcp_client(tcp) as over_tcp:
        assert paho.connect() == 0
        assert paho.subscribe("unix/#", qos=1) == [1]
        assert raw.connect("c-unix-raw") == ACCEPTED
        raw.subscribe(("unix/#", 1))
        assert over_tcp.connect("c-unix-tcp") == ACCEPTED
        over_tcp.subscribe(("unix/#", 1))
        paho.publish("unix/from-paho", b"hello over a unix socket", qos=1)
        raw.publish("unix/from-raw", b"raw", qos=1)
        got = paho.wait_messages(2)
        assert sorted(got) == [("unix/from-paho", b"hello over a unix socket"),
                               ("unix/from-raw", b"raw")]
        for client in (raw, over_tcp):
            received = client.receive_publishes(2)
            assert sorted((p.topic, p.payload) for p in received) == [
                ("unix/from-paho", b"hello over a unix socket"), ("unix/from-raw", b"raw")]
        # a username nothing verifies is anonymous: still allowed on a unix listener
        with unix_client(opened.path) as named:
            assert named.connect("c-unix-named", username="whoever") == ACCEPTED

    # allow_anonymous = false on a unix listener: the password file decides
    with unix_client(locked.path) as anonymous:
        assert anonymous.connect("c-unix-anon") == NOT_AUTHORIZED
        assert anonymous.expect_closed() == b""
    with unix_client(locked.path) as wrong:
        assert wrong.connect("c-unix-wrong", username="alice", password=b"nope") == BAD_PASSWORD
    with Paho(locked, "c-unix-alice", username="alice", password="secret") as alice, \
            unix_client(locked.path, version=MQTT_5) as v5:
        assert alice.connect() == 0
        assert alice.subscribe("locked/#", qos=1) == [1]
        refused = v5.decode(v5.connect("c-unix-v5"))
        assert isinstance(refused, ConnAck) and refused.reason_code == 0x87
        alice.publish("locked/x", b"only for alice", qos=1)
        assert alice.wait_messages(1) == [("locked/x", b"only for alice")]

    # a clean stop removes the socket files
    assert broker.stop() == 0
    assert not any(path.exists() for path in (open_path, private_path, locked_path))


def test_a_socket_left_behind_is_replaced_but_a_live_one_is_not(tmp_path):
    import socket

    from gateway.broker.net.listeners import _remove_stale_socket

    path = tmp_path / "mqtt.sock"
    live = socket.socket(socket.AF_UNIX)
    live.bind(str(path))
    live.listen()
    try:
        with pytest.raises(OSError, match="in use by another process"):
            _remove_stale_socket(path)
        assert path.exists()
    finally:
        live.close()
    _remove_stale_socket(path)  # nobody accepts on it any more: a leftover
    assert not path.exists()
    path.write_text("not a socket")
    with pytest.raises(OSError, match="not a socket"):
        _remove_stale_socket(path)
