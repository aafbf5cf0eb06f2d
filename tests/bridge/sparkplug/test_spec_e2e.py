"""Sparkplug B 3.0 rules a host application relies on, checked by a host application (paho +
the official .proto) at a real mosquitto, with `outpost run` and a pymodbus simulator:

- bdSeq goes on counting across a SIGKILL of the gateway (state directory), and the NDEATH
  a server publishes for a session carries that session's NBIRTH bdSeq;
- the primary host's STATE offline ends the session: NDEATH, reconnect with the next bdSeq,
  births once the host is back, the values read meanwhile sent as historical;
- a DCMD with one refused metric writes none;
- the session over TLS with a client certificate.

(A device's DBIRTH with the values of the poll that brought it back is checked by the device
outage test of test_edge_node_e2e.py.)
"""

from __future__ import annotations

import logging
import signal
import time
from collections.abc import Callable
from pathlib import Path

from bench.bridge.simulator import Simulator
from bridge.sparkplug.sparkplug_b_pb2 import Payload
from tests.bridge.sparkplug.host import Seen, SparkplugHost
from tests.bridge.sparkplug.test_edge_node_e2e import check_seq, gateway_config
from tests.conftest import require
from tests.gateway.broker.auth.support import make_pki
from tests.gateway.broker.e2e.helpers import PahoClient, wait_for
from tests.support.broker_proc import BrokerProcess
from tests.support.mosquitto import Mosquitto, free_port, start_mosquitto

logging.getLogger("pymodbus").setLevel(logging.CRITICAL)
BOOLEAN, UINT16 = 11, 6


def bdseq(message: Seen) -> int:
    """The bdSeq metric of an NBIRTH or NDEATH."""
    metric = next(m for m in message.payload.metrics if m.name == "bdSeq")
    return int(metric.long_value)


def test_bdseq_goes_on_after_sigkill(
    mosquitto: Mosquitto, sim: Simulator, host: SparkplugHost,
    broker_factory: Callable[..., BrokerProcess], tmp_path: Path,
) -> None:
    text = gateway_config(mosquitto, sim.port)
    state = str(tmp_path / "state")
    first = broker_factory(text, "--state-dir", state)
    host.wait_count("DBIRTH", 1, "plc")
    number = bdseq(host.of("NBIRTH")[0])
    first.stop(signal.SIGKILL)
    assert bdseq(host.wait_count("NDEATH", 1)[0]) == number  # the will of that session

    second = broker_factory(text, "--state-dir", state)
    host.wait_count("DBIRTH", 2, "plc")
    assert bdseq(host.of("NBIRTH")[1]) == (number + 1) % 256
    second.stop(signal.SIGKILL)
    assert bdseq(host.wait_count("NDEATH", 2)[1]) == (number + 1) % 256
    assert (Path(state) / "sparkplug-plant-gw1.bdseq").read_text().strip() == str(
        (number + 1) % 256)


def test_primary_host_offline_ends_the_session(
    mosquitto: Mosquitto, sim: Simulator, host: SparkplugHost,
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    gateway = broker_factory(gateway_config(mosquitto, sim.port, 'primary_host = "scada"'))
    host.announce(True)
    host.wait_count("DBIRTH", 1, "plc")
    number = bdseq(host.of("NBIRTH")[0])

    host.announce(False)
    death = host.wait_count("NDEATH", 1)[0]
    assert bdseq(death) == number
    wait_for(lambda: gateway.log().count("sparkplug: edge node plant/gw1 connected") == 2, 15,
             message="the edge node did not connect again after the host went offline")
    assert len(host.of("NBIRTH")) == 1  # the new session waits for the host
    with PahoClient(gateway) as local:  # the bridge read it: the node had to hold it
        local.connect()
        local.subscribe("devices/plc/level", 1)
        sim.set_registers(1, "holding", 0, [5555])
        wait_for(lambda: any(b'"value":5555' in m.payload for m in local.messages), 15)

    host.announce(True)
    birth = host.wait_count("NBIRTH", 2)[1]
    assert bdseq(birth) == (number + 1) % 256
    held = host.wait_value("plc", "level", lambda v: v == 5555)
    assert held[2] is True  # historical, after the new births
    check_seq(host.seen())


def dcmd(**values: bool | int) -> Payload:
    payload = Payload(timestamp=int(time.time() * 1000))
    for name, value in values.items():
        if isinstance(value, bool):
            payload.metrics.add(name=name, datatype=BOOLEAN, boolean_value=value)
        else:
            payload.metrics.add(name=name, datatype=UINT16, int_value=value)
    return payload


def test_a_dcmd_with_one_refused_metric_writes_nothing(
    mosquitto: Mosquitto, sim: Simulator, host: SparkplugHost,
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    text = gateway_config(mosquitto, sim.port).replace(
        '{ name = "setpoint", address = 1, writable = true }',
        '{ name = "setpoint", address = 1, writable = true, max = 1000 }')
    gateway = broker_factory(text)
    host.wait_count("DBIRTH", 1, "plc")
    setpoint = sim.registers(1, "holding")[1]

    host.command("plant", "gw1", "plc", dcmd(pump=True, setpoint=5000))
    # One connection keeps the order: once this write landed, the command before was handled.
    host.command("plant", "gw1", "plc", dcmd(setpoint=700))
    wait_for(lambda: sim.registers(1, "holding")[1] == 700, 15,
             message="the valid DCMD did not reach the simulator")
    assert sim.get_bit(1, "coil", 5) is False, "the pump was written from a refused DCMD"
    assert setpoint != 700
    refused = [line for line in gateway.log().splitlines() if "DCMD for plc refused" in line]
    assert len(refused) == 1 and "'setpoint': 5000 is outside [0, 1000]" in refused[0]
    assert "nothing written" in refused[0]

    host.command("plant", "gw1", "plc", dcmd(pump=True, setpoint=900))
    wait_for(lambda: sim.get_bit(1, "coil", 5) and sim.registers(1, "holding")[1] == 900, 15,
             message="a valid DCMD of two metrics was not written whole")


def test_session_over_tls_with_a_client_certificate(
    sim: Simulator, broker_factory: Callable[..., BrokerProcess], tmp_path: Path,
) -> None:
    require("mosquitto")
    pki = make_pki(tmp_path / "pki", clients=("edge",))
    tls_port = free_port()
    listener = (f"listener {tls_port} 127.0.0.1", f"cafile {pki.ca}",
                f"certfile {pki.server_cert}", f"keyfile {pki.server_key}",
                "require_certificate true")
    cert, key = pki.clients["edge"]
    with start_mosquitto(tmp_path / "mosquitto", extra_config=listener) as broker, \
            SparkplugHost(broker) as host:
        plain = f'addresses = ["127.0.0.1:{broker.port}"]'
        text = gateway_config(broker, sim.port).replace(
            plain, f'addresses = ["127.0.0.1:{tls_port}"]')
        refused = broker_factory(text.replace(
            "[bridge]", f'[sparkplug.tls]\nca_file = "{pki.ca}"\n\n[bridge]'))
        wait_for(lambda: "CERTIFICATE_REQUIRED" in refused.log(), 15,
                 message="a session without a client certificate was not refused")
        assert host.of("NBIRTH") == []
        refused.stop()

        broker_factory(text.replace("[bridge]", f'[sparkplug.tls]\nca_file = "{pki.ca}"\n'
                                    f'cert_file = "{cert}"\nkey_file = "{key}"\n\n[bridge]'))
        host.wait_count("DBIRTH", 1, "plc")
        sim.set_registers(1, "holding", 0, [4242])
        host.wait_value("plc", "level", lambda v: v == 4242)
