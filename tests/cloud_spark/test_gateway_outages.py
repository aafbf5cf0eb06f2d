"""availability with the gateway's own status: gateway outages, start-up and shutdown device
statuses, device outages without the time the gateway was down; silver lands that status."""

from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.testing import assertDataFrameEqual

from cloud_spark import contract as c
from cloud_spark.jobs import silver
from cloud_spark.jobs.availability import (
    AvailabilityParams,
    device_outages,
    gateway_outages,
    horizon,
    uptime,
)
from tests.cloud_spark.conftest import T0, bronze_frame, bronze_row
from tests.cloud_spark.frames import point, points, table

S = 1000
PARAMS = AvailabilityParams(expected_interval_ms=60 * S, gap_factor=2.0)


def statuses(spark: SparkSession, rows: list[tuple[float, str | None, str]]) -> DataFrame:
    """``(seconds after T0, device or None for the gateway, status)``."""
    return table(
        spark,
        "STATUS",
        [
            {
                "seq": None if device is None else n + 1,
                "device": device,
                "status": value,
                "event_ms": T0 + int(s * S),
                "ingest_ms": T0 + int(s * S),
            }
            for n, (s, device, value) in enumerate(rows)
        ],
    )


def reports(spark: SparkSession, plan: dict[str, list[int]]) -> DataFrame:
    rows = []
    for device, seconds in plan.items():
        rows += [point(len(rows) + 1, T0 + s * S, 1.0, device=device) for s in seconds]
    return points(spark, rows)


def killed_and_restarted(spark: SparkSession) -> tuple[DataFrame, DataFrame]:
    """Two devices reporting every 10 s; the gateway is killed at 100 s and back at 130 s;
    m2 really goes offline from 200 to 250 s; a clean stop at 300 s."""
    plan = {
        "m1": [s for s in range(0, 300, 10) if not 100 <= s < 130],
        "m2": [s for s in range(0, 300, 10) if not 100 <= s < 130 and not 200 <= s < 250],
    }
    rows: list[tuple[float, str | None, str]] = []
    for device in ("m1", "m2"):  # start-up: not polled yet, then the first answer
        rows += [(-0.5, device, "offline"), (-0.2, device, "online")]
    rows.append((-0.1, None, "online"))  # the uplink connected
    rows.append((100.0, None, "offline"))  # SIGKILL: the cloud broker publishes the will
    for device in ("m1", "m2"):
        rows += [(128.1, device, "offline"), (128.4, device, "online")]
    rows.append((130.0, None, "online"))
    rows += [(200.0, "m2", "offline"), (250.0, "m2", "online")]
    for device in ("m1", "m2"):  # the bridge stops first, then the uplink says offline
        rows.append((300.0, device, "offline"))
    rows += [(300.05, None, "offline")]
    return reports(spark, plan), statuses(spark, rows)


def test_a_killed_gateway_is_one_gateway_outage_and_no_device_outage(
    spark: SparkSession,
) -> None:
    pts, sts = killed_and_restarted(spark)
    edge = horizon(pts, sts)
    assertDataFrameEqual(
        gateway_outages(sts, edge),
        # the clean stop at 300.05 s lies beyond the device data (horizon 300 s)
        [Row(gateway="gw-1", start_ms=T0 + 100 * S, end_ms=T0 + 130 * S, open=False)],
    )
    got = device_outages(pts, sts, PARAMS).select("device", "start_ms", "end_ms", "cause")
    # start-up offlines (not polled yet) and the stop's offlines are no outages: only m2's
    assertDataFrameEqual(
        got, [Row(device="m2", start_ms=T0 + 200 * S, end_ms=T0 + 250 * S, cause="offline")]
    )


def test_a_device_that_fails_its_first_polls_is_down_from_its_second_offline(
    spark: SparkSession,
) -> None:
    pts = reports(spark, {"m1": [60, 70, 80]})
    sts = statuses(
        spark,
        [(0.1, "m1", "offline"), (3.0, "m1", "offline"), (58.0, "m1", "online"),
         (1.0, None, "online")],
    )  # fmt: skip
    got = device_outages(pts, sts, PARAMS).select("start_ms", "end_ms", "cause")
    assertDataFrameEqual(got, [Row(start_ms=T0 + 3 * S, end_ms=T0 + 58 * S, cause="offline")])


def test_a_first_offline_after_the_device_reported_is_an_outage(spark: SparkSession) -> None:
    """Data whose statuses do not begin with the bridge's start-up status (another producer,
    a generator): an offline after points of the device is the device's."""
    pts = reports(spark, {"m1": [0, 10, 20, 30, 100, 110]})
    sts = statuses(spark, [(35.0, "m1", "offline"), (95.0, "m1", "online")])
    got = device_outages(pts, sts, PARAMS).select("start_ms", "end_ms", "cause")
    assertDataFrameEqual(got, [Row(start_ms=T0 + 35 * S, end_ms=T0 + 95 * S, cause="offline")])


def test_silence_while_the_gateway_was_down_is_the_gateway_outage(spark: SparkSession) -> None:
    # m1 reports until 100 s and from 700 s; m2 until 100 s and from 900 s; the gateway is
    # down 100-700 s
    pts = reports(spark, {"m1": [0, 50, 100, 700, 800, 900, 960], "m2": [0, 50, 100, 900, 960]})
    sts = statuses(spark, [(1.0, None, "online"), (100.5, None, "offline"),
                           (700.0, None, "online")])  # fmt: skip
    got = device_outages(pts, sts, PARAMS).select("device", "start_ms", "end_ms", "cause")
    # m1: silent 160-700 s, all of it inside the gateway outage; m2: 160-900 s less 100-700 s
    assertDataFrameEqual(
        got, [Row(device="m2", start_ms=T0 + 700 * S, end_ms=T0 + 900 * S, cause="silence")]
    )
    days = uptime(pts, sts, device_outages(pts, sts, PARAMS)).where("device = 'm2'")
    row = days.first()
    assert row is not None
    # observed 0-960 s less the 599.5 s the gateway was down; down 200 s
    assert (row["observed_s"], row["down_s"]) == (960.0 - 599.5, 200.0)


def test_repeated_offline_copies_make_one_gateway_outage(spark: SparkSession) -> None:
    pts = reports(spark, {"m1": list(range(0, 400, 10))})
    sts = statuses(
        spark,
        [(1.0, None, "online"), (100.0, None, "offline"), (150.0, None, "offline"),
         (200.0, None, "online"), (200.0, None, "online"), (380.0, None, "offline")],
    )  # fmt: skip
    got = gateway_outages(sts, horizon(pts, sts))
    assertDataFrameEqual(
        got,
        [
            Row(gateway="gw-1", start_ms=T0 + 100 * S, end_ms=T0 + 200 * S, open=False),
            Row(gateway="gw-1", start_ms=T0 + 380 * S, end_ms=T0 + 390 * S, open=True),
        ],
    )


def _gateway_status(payload: str, **meta: Any) -> dict[str, Any]:
    row = bronze_row(1, c.GATEWAY_STATUS_TOPIC, payload, **meta)
    row["seq"] = None  # the gateway status has no seq: it is not an outbox message
    return row


def test_silver_lands_the_gateway_status_without_a_device(spark: SparkSession) -> None:
    announced = _gateway_status("online", received_ms=T0 + 5 * S)
    will = _gateway_status("offline", ingest_ms=T0 + 9 * S)
    will["received_ms"] = None  # the cloud broker published it: only the landing time
    anonymous = _gateway_status("offline", gateway=None)
    anonymous["gateway"] = None
    garbled = _gateway_status("maybe")
    frames = silver.silver_tables(
        bronze_frame(spark, [announced, will, anonymous, garbled]), silver.SilverParams()
    )
    assertDataFrameEqual(
        frames["status"].select("gateway", "seq", "device", "status", "event_ms"),
        [
            Row(gateway="gw-1", seq=None, device=None, status="online", event_ms=T0 + 5 * S),
            Row(gateway="gw-1", seq=None, device=None, status="offline", event_ms=T0 + 9 * S),
        ],
    )
    assertDataFrameEqual(
        frames["quarantine"].select("reason"),
        [Row(reason="missing_id"), Row(reason="invalid_value:status")],
    )
    assert frames["messages"].count() == 0  # no seq: not in the ledger of sequence numbers


def test_an_offline_the_gateway_outlived_is_a_link_outage_not_a_gateway_outage(
    spark: SparkSession,
) -> None:
    """The cloud broker stopped at 100 s (and published the gateway's will as it went); the
    gateway reconnected at 145 s; the lander landed that will at 160 s, after the gateway's
    online. The gateway is killed at 200 s (its will lands at once) and back at 212 s."""
    pts = reports(spark, {"m1": list(range(0, 300, 10))})
    sts = statuses(spark, [(1.0, None, "online"), (145.0, None, "online"),
                           (160.0, None, "offline"), (200.5, None, "offline"),
                           (212.0, None, "online")])  # fmt: skip
    alive = [s for s in range(0, 300, 5) if not 200 <= s < 212]
    diagnostics = table(
        spark,
        "UPLINK_DIAGNOSTICS",
        [
            {"seq": 1000 + s, "event_ms": T0 + s * S, "connected": not 100 <= s < 145}
            for s in alive
        ],
    )
    edge = horizon(pts, sts)
    # from the status alone, the late will makes one outage of 160-212 s
    assert [r["start_ms"] for r in gateway_outages(sts, edge).collect()] == [T0 + 160 * S]
    # the gateway reported between 160 and 200 s: only the kill is a gateway outage
    assertDataFrameEqual(
        gateway_outages(sts, edge, diagnostics),
        [Row(gateway="gw-1", start_ms=T0 + 200_500, end_ms=T0 + 212 * S, open=False)],
    )
    early = statuses(spark, [(1.0, None, "online"), (120.0, None, "offline"),
                             (145.0, None, "online")])  # fmt: skip
    # landed while the gateway's last report said connected = false: the link, not the gateway
    before = diagnostics.where(f"event_ms < {T0 + 120 * S}")
    assert gateway_outages(early, edge, before).count() == 0
    assert gateway_outages(early, edge).count() == 1


def test_late_copies_of_a_will_the_gateway_outlived_are_not_an_outage(
    spark: SparkSession,
) -> None:
    """The gateway is killed at 100 s and back at 130 s; a lander draining its backlog lands two
    more copies of the will at 131.0 and 131.002 s, after the new online (as in the demo). The
    gateway reported from 135 s on: only the kill is an outage, not the copies."""
    pts = reports(spark, {"m1": list(range(0, 300, 10))})
    sts = statuses(spark, [(1.0, None, "online"), (100.5, None, "offline"),
                           (130.0, None, "online"), (131.0, None, "offline"),
                           (131.002, None, "offline")])  # fmt: skip
    diagnostics = table(
        spark,
        "UPLINK_DIAGNOSTICS",
        [
            {"seq": 1000 + s, "event_ms": T0 + s * S, "connected": True}
            for s in range(0, 300, 5)
            if not 100 <= s < 135
        ],
    )
    assertDataFrameEqual(
        gateway_outages(sts, horizon(pts, sts), diagnostics),
        [Row(gateway="gw-1", start_ms=T0 + 100_500, end_ms=T0 + 130 * S, open=False)],
    )
