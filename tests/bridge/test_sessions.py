"""The outage behaviour every session family shares (bridge/sessions.py), seen in the journal.

The peer is node-snap7 (an S7 PLC of another implementation than the client): killed, left
away while the device retries several times, started again. An operator expects one WARNING
when it goes away and one INFO when it is back, whatever the number of attempts in between
(those are DEBUG lines); an offline device publishes every point bad once.
"""

from __future__ import annotations

import asyncio
import logging

import pytest

from tests.bridge.opcua.support import Harness, until
from tests.bridge.s7.support import S7Server

DEVICE = "plc"
TOPIC = f"devices/{DEVICE}"


def test_an_outage_is_one_warning_and_one_info_however_many_attempts(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, "outpost.bridge.s7")
    plc = S7Server().start()
    config = {"s7": [{"name": DEVICE, "host": "127.0.0.1", "port": plc.port,
                      "poll_interval": 0.05, "timeout": 0.5, "reconnect_initial": 0.01,
                      "reconnect_max": 0.02,
                      "points": [{"name": "real", "address": "DB1.DBD14", "type": "REAL"}]}]}

    async def main() -> None:
        h = Harness(config)
        await h.bridge.start()
        dev = h.bridge.devices[DEVICE]
        await until(lambda: (h.last(f"{TOPIC}/real") or {}).get("quality") == "good")
        plc.kill()
        await until(lambda: h.last(f"{TOPIC}/status") == "offline")
        lost = dev.counters.timeouts
        await until(lambda: dev.counters.timeouts >= lost + 5)  # attempts that failed
        await asyncio.get_running_loop().run_in_executor(None, plc.start)
        await until(lambda: (h.last(f"{TOPIC}/real") or {}).get("quality") == "good")
        assert [v["quality"] for v in h.values(f"{TOPIC}/real")] == ["good", "bad", "good"]
        statuses = [s for t, s in h.seen if t == f"{TOPIC}/status"]
        assert statuses[statuses.index(b"online"):] == [b"online", b"offline", b"online"]
        await h.bridge.stop()

    try:
        asyncio.run(main())
    finally:
        plc.kill()
    lines = [(r.levelno, r.getMessage()) for r in caplog.records
             if r.name == "outpost.bridge.s7" and r.getMessage().startswith(f"{DEVICE}:")]
    warnings = [m for level, m in lines if level == logging.WARNING]
    infos = [m for level, m in lines if level == logging.INFO]
    assert len(warnings) == 1 and "unreachable" in warnings[0], warnings
    assert len(infos) == 2 and "connected to" in infos[0] and "back after" in infos[1], infos
    assert len([m for level, m in lines if level == logging.DEBUG
                and "still unreachable" in m]) >= 4
    assert not [m for level, m in lines if level >= logging.ERROR]
