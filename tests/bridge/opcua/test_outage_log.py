"""What the journal gets while an OPC UA server is away: one WARNING, then one INFO.

node-opcua is killed (SIGKILL, as a crashed PLC) while a device has a subscription on it, the
bridge retries a few times, and the server starts again. Every log record of every logger at
INFO and above (what `outpost run` sends to the journal) is counted: the device says it went
away once and came back once; asyncua's per-attempt lines and tracebacks stay out.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.bridge.opcua.support import Harness, NodeServer, until

POINTS = [{"name": "counter", "node": "ns=1;s=Counter", "type": "uint32", "report": "poll"},
          {"name": "temperature", "node": "ns=1;s=Temperature", "type": "float64"}]


class Records(logging.Handler):
    """Every record at INFO and above that reaches the root logger."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def journal() -> Iterator[Records]:
    root = logging.getLogger()
    handler, level = Records(), root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)  # as `outpost run` (--log-level INFO)
    yield handler
    root.removeHandler(handler)
    root.setLevel(level)


def test_a_server_away_and_back_is_one_warning_and_one_info(tmp_path: Path,
                                                             journal: Records) -> None:
    plc = NodeServer(tmp_path / "pki").start()

    async def main() -> None:
        h = Harness({"opcua": [{
            "name": "plc", "endpoint": plc.endpoint, "publishing_interval": 0.1,
            "sampling_interval": 0.05, "keepalive": 0.3, "reconnect_initial": 0.1,
            "reconnect_max": 0.2, "request_timeout": 2.0, "points": POINTS}]})
        await h.bridge.start()
        device = h.bridge.devices["plc"]
        await until(lambda: (h.last("devices/plc/counter") or {}).get("quality") == "good")
        mark = len(journal.records)
        plc.kill()
        await until(lambda: h.last("devices/plc/status") == "offline")
        failed = device.counters.timeouts
        await until(lambda: device.counters.timeouts >= failed + 5)  # attempts in vain
        await asyncio.get_running_loop().run_in_executor(None, plc.start)
        await until(lambda: h.last("devices/plc/status") == "online")
        await until(lambda: (h.last("devices/plc/counter") or {}).get("quality") == "good")
        outage = journal.records[mark:]
        await h.bridge.stop()

        lines = [f"{r.levelname} {r.name}: {r.getMessage()}" for r in outage]
        warnings = [r for r in outage if r.levelno >= logging.WARNING]
        assert len(warnings) == 1, lines
        assert warnings[0].name == "outpost.bridge.opcua" and "unreachable" in \
            warnings[0].getMessage()
        assert not [r for r in outage if r.exc_info], lines  # no traceback
        assert not [r for r in outage if r.name.startswith("asyncua")], lines
        back = [r for r in outage if r.levelno == logging.INFO]
        assert len(back) == 1 and "back" in back[0].getMessage(), lines

    try:
        asyncio.run(main())
    finally:
        plc.kill()
