"""The uplink over TLS with a client certificate, and its drain rate limit."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.bridge.uplink.test_uplink_e2e import (
    Recorder,
    props,
    publish_local,
    uplink_config,
    wait_for,
)
from tests.conftest import require
from tests.gateway.broker.auth.support import make_pki
from tests.support.broker_proc import BrokerProcess
from tests.support.mosquitto import free_port, start_mosquitto


def test_forwarding_over_tls_with_a_client_certificate(
    broker_factory: Callable[..., BrokerProcess], tmp_path: Path
) -> None:
    require("mosquitto")
    pki = make_pki(tmp_path / "pki", clients=("gateway",))
    cert, key = pki.clients["gateway"]
    tls_port = free_port()
    tls = (
        f"listener {tls_port} 127.0.0.1", f"cafile {pki.ca}", f"certfile {pki.server_cert}",
        f"keyfile {pki.server_key}", "require_certificate true",
    )
    for path in (pki.ca, pki.server_cert, pki.server_key):
        path.chmod(0o644)
    with start_mosquitto(tmp_path / "cloud", extra_config=tls) as cloud:
        config = uplink_config(tls_port).replace(
            'client_id = "uplink-site7"',
            f'client_id = "uplink-site7"\n'
            f'tls = {{ ca_file = "{pki.ca}", cert_file = "{cert}", key_file = "{key}" }}',
        )
        gateway = broker_factory(config)
        recorder = Recorder(cloud.port, "site7/#").start()  # plain listener of the same broker
        try:
            publish_local(gateway.port, [("devices/m1/t", b"secure")])
            wait_for(lambda: recorder.count() >= 1)
            message = recorder.messages[0]
            assert (message.topic, message.payload) == ("site7/m1/t", b"secure")
            assert props(message)["seq"] == "1"
            assert f"connected to 127.0.0.1:{tls_port}" in gateway.log()
        finally:
            recorder.stop()


# Two broker restarts, a gateway start and a paced drain: minutes on a loaded machine.
@pytest.mark.timeout(400)
def test_drain_after_an_outage_respects_the_rate_limit(
    broker_factory: Callable[..., BrokerProcess], tmp_path: Path
) -> None:
    require("mosquitto")
    # The recorder's session is made before the outage and kept by the cloud (persistence),
    # so it gets every message however late it reconnects on a busy machine.
    with start_mosquitto(tmp_path / "cloud", persistence=True,
                         extra_config=("max_queued_messages 0",)) as cloud:
        Recorder(cloud.port, "site7/#", client_id="rate-recorder", clean=False).start().stop()
        cloud.stop()
        gateway = broker_factory(uplink_config(cloud.port, remote_extra="rate_messages = 100"))
        publish_local(gateway.port, [(f"devices/m/{i}", b"%d" % i) for i in range(300)])
        cloud.start()
        started = time.monotonic()
        recorder = Recorder(cloud.port, "site7/#", client_id="rate-recorder", clean=False).start()
        # at least once: a copy resent after a slow PUBACK may arrive twice; every id must come
        # The gateway reconnects within backoff_max (1 s in uplink_config) of the restart; the
        # drain then takes ~3 s at 100 msg/s. The bound only stops a broken drain from hanging.
        wait_for(lambda: len(seqs_of(recorder)) >= 300, timeout=180)
        elapsed = time.monotonic() - started
        recorder.stop()
        # 300 messages at 100/s with one second of burst cannot arrive in under ~2 s; a slow
        # machine only makes it longer, so this bound cannot flake.
        assert elapsed >= 1.8, f"300 messages drained in {elapsed:.2f} s despite 100 msg/s"
        assert sorted(seqs_of(recorder)) == list(range(1, 301))


def seqs_of(recorder: Recorder) -> set[int]:
    with recorder.lock:
        return {int(props(m)["seq"]) for m in recorder.messages}


