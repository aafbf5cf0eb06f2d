"""In-process links publish and receive through the broker without bytes."""

from __future__ import annotations

from gateway.broker.codec.packets import Publish
from gateway.broker.core.message import Message
from gateway.broker.engine.links import Link
from tests.gateway.broker.core.fakes import Harness


def test_link_publishes_to_clients_and_receives_from_them() -> None:
    h = Harness()
    client, sink = h.connect("client")
    h.subscribe(client, "devices/#", qos=1)
    sink.packets()
    received: list[tuple[str, bytes, int, bool]] = []

    def on_message(message: Message, qos: int, retain: bool) -> None:
        received.append((message.topic, message.payload, qos, retain))

    link = Link(h.broker, "bridge", lambda: h.now, on_message)
    link.subscribe("devices/+/set", qos=1)
    assert link.publish("devices/m1/power", b"42", qos=1) == 1
    got = [p for p in sink.packets() if isinstance(p, Publish)]
    assert [(p.topic, p.payload, p.qos) for p in got] == [("devices/m1/power", b"42", 1)]
    h.send(client, Publish("devices/m1/set", b"7", qos=1, packet_id=3))
    assert received == [("devices/m1/set", b"7", 1, False)]
    link.close()
    assert "bridge" not in h.broker.sessions


def test_links_do_not_count_towards_max_connections() -> None:
    h = Harness(max_connections=1)
    bridge = Link(h.broker, "bridge", lambda: h.now)
    Link(h.broker, "uplink", lambda: h.now)
    _, first = h.connect("first")
    _, second = h.connect("second")
    assert [p.reason_code for p in first.packets()] == [0]  # type: ignore[attr-defined]
    assert [p.reason_code for p in second.packets()] == [3]  # type: ignore[attr-defined]
    bridge.close()
    assert h.broker.links_connected == 1
    assert h.broker.clients_connected == 2


def test_network_clients_cannot_take_a_links_identifier() -> None:
    h = Harness()
    received: list[str] = []
    bridge = Link(h.broker, "outpost-bridge", lambda: h.now,
                  lambda message, qos, retain: received.append(message.topic))
    bridge.subscribe("devices/+/set", qos=1)
    # A network client with the identifier of a connected link: refused, the link stays.
    _, impostor = h.connect("outpost-bridge")
    assert [p.reason_code for p in impostor.packets()] == [2]  # type: ignore[attr-defined]
    # `$` identifiers are the gateway's own, connected or not.
    _, dollar = h.connect("$outpost-uplink-inbound")
    assert [p.reason_code for p in dollar.packets()] == [2]  # type: ignore[attr-defined]
    client, _ = h.connect("client")
    h.send(client, Publish("devices/m1/set", b"7", qos=0))
    assert received == ["devices/m1/set"]  # still delivered to the link
    # Once the link is gone, its plain identifier is an ordinary one again.
    bridge.close()
    _, later = h.connect("outpost-bridge")
    assert [p.reason_code for p in later.packets()] == [0]  # type: ignore[attr-defined]
