"""26 MQTT.js: the client inside Node-RED, from npm, bursting publishes without awaiting them.

MQTT.js 5.16 does not limit what it sends to the broker's Receive Maximum (64 by default): a
flow that publishes 1,000 QoS 1 messages in a loop has them all in flight at once. The broker
stops reading the client while its window is full and reads on as its PUBACKs go out, so
every message is acknowledged and delivered, over TCP and over WebSocket, with the store
holding PUBACKs for its commits (`durability = "full"`, the ack hold on) and without it. A
QoS 2 burst is still cut off with DISCONNECT 0x93: its PUBRELs queue behind the excess
publishes, so waiting for them could never end (docs/flow-control.md).

The peer is `mqttjs/burst.js` (npm project `mqttjs/`, installed by `make node-packages`).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gateway.broker.codec import ReasonCode
from tests.gateway.broker.auth.support import Address, SecureBroker, start_secure_broker

MQTTJS = Path(__file__).with_name("mqttjs")
BURST = 1000
# Bounds a stuck run only: a burst takes about a second on an idle machine.
RUN_TIMEOUT = 180.0

LISTENERS = """
[[listeners]]
bind = "127.0.0.1:0"
[[listeners]]
type = "ws"
bind = "127.0.0.1:0"
"""
DURABLE = """
[storage]
durability = "full"
state_dir = "{state}"
ack_hold_ms = 1000
""" + LISTENERS
IN_MEMORY = '[storage]\ndurability = "memory"\n' + LISTENERS


def _node() -> str:
    node = shutil.which("node")
    if node is None or not (MQTTJS / "node_modules" / "mqtt").is_dir():
        pytest.skip("MQTT.js is not installed (make node-packages)")
    return node


def burst(address: Address, qos: int, topic: str, count: int = BURST) -> dict[str, Any]:
    """Run the MQTT.js burst against `address`; its JSON summary."""
    scheme = "ws" if address.kind == "ws" else "mqtt"
    url = f"{scheme}://{address.host}:{address.port}" + ("/mqtt" if scheme == "ws" else "")
    done = subprocess.run(
        [_node(), "burst.js", url, str(count), str(qos), topic], cwd=MQTTJS,
        capture_output=True, text=True, timeout=RUN_TIMEOUT, check=False,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _start(tmp_path_factory: pytest.TempPathFactory, name: str, config: str) -> SecureBroker:
    workdir = tmp_path_factory.mktemp(f"mqttjs-{name}")
    return start_secure_broker(workdir, config.format(state=workdir / "state"), 2)


@pytest.fixture(scope="module")
def durable(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureBroker]:
    """PUBACKs wait for the store's commits (and the ack hold)."""
    proc = _start(tmp_path_factory, "durable", DURABLE)
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def in_memory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureBroker]:
    """PUBACKs are written at once."""
    proc = _start(tmp_path_factory, "in-memory", IN_MEMORY)
    yield proc
    proc.stop()


@pytest.mark.parametrize(("store", "kind"), [
    ("durable", "tcp"), ("durable", "ws"), ("in_memory", "tcp"),
])
def test_a_qos1_burst_beyond_receive_maximum_is_read_as_the_window_frees(
    request: pytest.FixtureRequest, store: str, kind: str
) -> None:
    broker: SecureBroker = request.getfixturevalue(store)
    result = burst(broker.of(kind), 1, f"c26/qos1/{kind}")
    assert result == {"acked": BURST, "delivered": BURST, "disconnect": None, "errors": []}


def test_a_qos2_burst_beyond_receive_maximum_still_gets_0x93(durable: SecureBroker) -> None:
    result = burst(durable.of("tcp"), 2, "c26/qos2")
    assert result["disconnect"] == ReasonCode.RECEIVE_MAXIMUM_EXCEEDED
    assert result["acked"] < BURST
