"""20 tls: TLS listeners with mosquitto_pub/sub and paho-mqtt (certificates made by the test
with openssl); client certificates required, the certificate's CN as the username and its ACL;
clients without a (trusted) certificate and plaintext clients are refused while others work."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

from gateway.broker.codec import MQTT_5, PubAck, SubAck
from tests.gateway.broker.auth.support import (
    PKI,
    Paho,
    SecureBroker,
    broker_pool,
    make_pki,
    mosquitto_tool,
    outpost_counter,
    run_tool,
    tcp_client,
    tls_client,
)
from tests.gateway.broker.e2e.helpers import ClosedError, MosquittoSub, wait_for

ACCEPTED = bytes.fromhex("20020000")


@pytest.fixture
def secure_broker(tmp_path: Path) -> Iterator[Callable[[str, int], SecureBroker]]:
    with broker_pool(tmp_path) as start:
        yield start


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> PKI:
    return make_pki(tmp_path_factory.mktemp("pki"))


def tls_listener(pki: PKI, extra: str = "") -> str:
    return (f'[[listeners]]\ntype = "tls"\nbind = "127.0.0.1:0"\ncertfile = "{pki.server_cert}"\n'
            f'keyfile = "{pki.server_key}"\n{extra}')


def sys_counter(broker, name: str) -> int:
    return outpost_counter(broker.of("tcp"), name)


def test_01_mosquitto_and_paho_over_tls(secure_broker, pki):
    broker = secure_broker('[[listeners]]\nbind = "127.0.0.1:0"\n' + tls_listener(pki), 2)
    tls = broker.of("tls")
    target = SimpleNamespace(host=tls.host, port=tls.port)
    with MosquittoSub(target, "-t", "c20/01/#", "-q", "1", "--cafile", str(pki.ca)) as sub, \
            Paho(tls, "c20-01-paho", pki=pki) as paho:
        assert paho.connect() == 0
        assert paho.subscribe("c20/01/#") == [1]
        paho.publish("c20/01/from-paho", b"hello over tls")
        result = run_tool(mosquitto_tool("mosquitto_pub"), "-h", tls.host, "-p", str(tls.port),
                          "--cafile", str(pki.ca), "-t", "c20/01/from-mosquitto", "-m", "hi",
                          "-q", "1")
        assert result.returncode == 0, result.stderr
        assert sorted(sub.wait_lines(2)) == ["c20/01/from-mosquitto|1|0|hi",
                                              "c20/01/from-paho|1|0|hello over tls"]
        assert paho.wait_messages(2)[-1] == ("c20/01/from-mosquitto", b"hi")
    assert "listening on 127.0.0.1:" in broker.log() and "(tls)" in broker.log()


def test_02_plaintext_and_untrusted_clients_fail_others_keep_working(secure_broker, pki):
    broker = secure_broker('[[listeners]]\nbind = "127.0.0.1:0"\n' + tls_listener(pki), 2)
    tls = broker.of("tls")
    with tls_client(tls, pki) as good:
        assert good.connect("c20-02-good") == ACCEPTED
        # plain MQTT on the TLS port: the handshake fails, the socket is closed
        with tcp_client(tls) as plain:
            plain.send(bytes.fromhex("100c00044d5154540402003c0000"))
            assert plain.expect_closed() == b""
        # a client that does not trust our CA gives up during the handshake
        result = run_tool(mosquitto_tool("mosquitto_pub"), "-h", tls.host, "-p", str(tls.port),
                          "--cafile", str(pki.dir / "rogue-ca.crt"), "-t", "x", "-m", "y")
        assert result.returncode != 0
        assert good.sync() == []  # still served
    wait_for(lambda: sys_counter(broker, "clients/refused/tls") >= 2, timeout=15)
    assert "TLS handshake with 127.0.0.1 failed" in broker.log()


IDENTITY_ACL = """\
user alice
topic readwrite plant/alice/#
user bob
topic read plant/#
topic write plant/bob/#
"""


def identity_broker(secure_broker, pki: PKI, tmp_path):
    acl = tmp_path / "acl"
    acl.write_text(IDENTITY_ACL, encoding="utf-8")
    return secure_broker(
        '[[listeners]]\nbind = "127.0.0.1:0"\n' + tls_listener(pki, (
            f'cafile = "{pki.ca}"\nrequire_certificate = true\n'
            f'use_identity_as_username = true\nacl_file = "{acl}"\n')), 2)


def test_03_client_certificate_cn_is_the_username(secure_broker, pki, tmp_path):
    broker = identity_broker(secure_broker, pki, tmp_path)
    tls = broker.of("tls")
    assert "client certificate required, its CN is the username" in broker.log()
    with Paho(tls, "c20-03-bob", pki=pki, cert="bob") as bob:
        assert bob.connect() == 0
        assert bob.subscribe("plant/#") == [1]
        # mosquitto_pub with alice's certificate: the username it sends is ignored
        result = run_tool(mosquitto_tool("mosquitto_pub"), "-h", tls.host, "-p", str(tls.port),
                          "--cafile", str(pki.ca), "--cert", str(pki.clients["alice"][0]),
                          "--key", str(pki.clients["alice"][1]), "-u", "bob",
                          "-t", "plant/alice/temp", "-m", "21.5", "-q", "1")
        assert result.returncode == 0, result.stderr
        assert bob.wait_messages(1) == [("plant/alice/temp", b"21.5")]
    # alice (v5, raw) may not write into bob's tree nor subscribe to all of plant/#
    with tls_client(tls, pki, cert="alice", version=MQTT_5) as alice:
        alice.connect("c20-03-alice", username="bob", password=b"ignored")
        [ack] = [alice.decode(f) for f in alice.publish("plant/bob/x", b"1", qos=1)]
        assert isinstance(ack, PubAck) and ack.reason_code == 0x87
        suback = alice.decode(alice.subscribe(("plant/#", 1), ("plant/alice/#", 1)))
        assert isinstance(suback, SubAck) and suback.reason_codes == [0x87, 1]


def test_04_without_a_trusted_certificate_no_connection(secure_broker, pki, tmp_path):
    broker = identity_broker(secure_broker, pki, tmp_path)
    tls = broker.of("tls")
    for cert in (None, "mallory"):  # none at all; CN "alice" but signed by another CA
        with pytest.raises((OSError, ClosedError)), tls_client(tls, pki, cert=cert) as client:
            client.connect("c20-04")  # TLS 1.3 reports the refusal on first use
    sub = mosquitto_tool("mosquitto_sub")
    result = run_tool(sub, "-h", tls.host, "-p", str(tls.port), "--cafile", str(pki.ca),
                      "-t", "plant/#", "-C", "1", "-W", "3")
    assert result.returncode != 0
    with tls_client(tls, pki, cert="alice") as alice:
        assert alice.connect("c20-04-alice") == ACCEPTED
    wait_for(lambda: sys_counter(broker, "clients/refused/tls") >= 2, timeout=15)
