"""When points are published and the exact payloads (docs/message-format.md)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from bridge.report import Reporter, ReportPolicy, diagnostics_payload, point_payload
from cloud_spark import contract


def test_point_payload_matches_the_contract_example() -> None:
    example: dict[str, Any] = dict(contract.EXAMPLE_POINT)
    payload = point_payload(example["value"], json.dumps(example["unit"]), example["ts"],
                            example["quality"])
    assert json.loads(payload) == example
    assert tuple(json.loads(payload)) == contract.POINT_FIELDS
    assert json.loads(point_payload(None, "null", 1, "bad")) == {
        "value": None, "unit": None, "ts": 1, "quality": "bad"}
    assert json.loads(point_payload("running", "null", 1, "good"))["value"] == "running"
    assert json.loads(point_payload(True, "null", 1, "good"))["value"] is True
    assert json.loads(point_payload(float("nan"), "null", 1, "bad"))["value"] is None


def test_diagnostics_payload_has_the_contract_fields() -> None:
    payload = json.loads(diagnostics_payload(1717430400000, 5321, 4, 1, 0, 2, 38.5))
    assert payload == contract.EXAMPLE_DEVICE_DIAGNOSTICS
    assert tuple(payload) == contract.DEVICE_DIAGNOSTICS_FIELDS


def offers(reporter: Reporter, readings: Sequence[tuple[Any, str, float]]) -> list[object]:
    published = []
    for value, quality, now in readings:
        payload = reporter.offer(value, quality, now, 0)
        if payload is not None:
            published.append(json.loads(payload)["value"])
    return published


def test_every_poll() -> None:
    reporter = Reporter("t", None, ReportPolicy("poll"))
    assert offers(reporter, [(1, "good", 0), (1, "good", 1), (1, "good", 2)]) == [1, 1, 1]


def test_absolute_deadband_and_heartbeat() -> None:
    reporter = Reporter("t", "V", ReportPolicy("change", deadband=0.5, heartbeat=60))
    readings = [(230.0, "good", 0), (230.4, "good", 1), (230.6, "good", 2), (230.2, "good", 3),
                (229.9, "good", 4), (230.0, "good", 64)]
    assert offers(reporter, readings) == [230.0, 230.6, 229.9, 230.0]  # last: heartbeat


def test_percent_deadband_and_quality_changes() -> None:
    reporter = Reporter("t", None, ReportPolicy("change", deadband_percent=10))
    readings = [(100, "good", 0), (109, "good", 1), (111, "good", 2), (111, "uncertain", 3),
                (None, "bad", 4), (None, "bad", 5), (0, "good", 6), (0.01, "good", 7)]
    assert offers(reporter, readings) == [100, 111, 111, None, 0, 0.01]


def test_change_without_deadband_and_non_numbers() -> None:
    reporter = Reporter("t", None, ReportPolicy.resolve(None, "change", None, None, None))
    assert offers(reporter, [(1, "good", 0), (1, "good", 1), (2, "good", 2)]) == [1, 2]
    states = Reporter("t", None, ReportPolicy("change"))
    assert offers(states, [("run", "good", 0), ("run", "good", 1), ("stop", "good", 2),
                           (True, "good", 3), (1, "good", 4)]) == ["run", "stop", True, 1]


def test_policy_resolution() -> None:
    assert ReportPolicy.resolve(None, "poll", 0.5, None, None).mode == "change"
    assert ReportPolicy.resolve("poll", "change", 0.5, None, None).mode == "poll"
    assert ReportPolicy.resolve(None, "poll", None, None, None).mode == "poll"
