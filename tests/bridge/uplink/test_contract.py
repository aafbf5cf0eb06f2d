"""The uplink and the cloud side agree on every name that crosses the link."""

from __future__ import annotations

import json

from bridge.uplink import envelope
from cloud_spark import contract
from gateway.base.outbox import OutboxRecord


def test_names_match_the_cloud_contract() -> None:
    assert envelope.USER_PROPERTIES == contract.USER_PROPERTIES
    assert (envelope.ENV_ENCODING, envelope.ENV_PAYLOAD) == (
        contract.ENV_ENCODING, contract.ENV_PAYLOAD
    )
    record = OutboxRecord(7, "r", "devices/m1/p", b"\xff", 1, False, 1700000000000)
    body = json.loads(envelope.json_envelope("gw", "ep", record))
    assert tuple(body) == contract.ENVELOPE_KEYS
    assert body["encoding"] in contract.ENCODINGS
    assert [k for k, _ in envelope.id_properties("gw", "ep", record)] == list(
        contract.USER_PROPERTIES
    )
    assert envelope.id_properties("gw", "ep", record)[2] == ("seq", "7")
