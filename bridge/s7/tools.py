"""`outpost s7 probe`: check a PLC before configuring it, and see how its points are read.

`probe` connects as the device would (TSAPs, PDU size), prints the PDU size the PLC agreed
to and the read plan for it (each request with its items, their bytes and the points they
carry: bridge/s7/plan.py), then reads every point once with that plan and prints one line per
point: its value and unit, or why it fails (a DB that does not exist, an address past a DB's
end, access refused, with what an S7-1200/1500 needs). `explore` is the same for the console,
as rows.
"""

from __future__ import annotations

import logging

from bridge.driver import Exploration
from bridge.probe import ProbeRun, point_lines
from bridge.s7.config import S7DeviceConfig
from bridge.s7.device import S7Device
from bridge.s7.plan import describe
from bridge.s7.session import open_session


async def probe(config: S7DeviceConfig) -> tuple[list[str], int]:
    """The connection, the plan and every point read once; (lines, points that failed)."""
    exploration = await explore(config)
    lines, failed = point_lines(exploration.points, (("point", 24), ("address", 16),
                                                     ("type", 14)))
    return [*exploration.lines, *lines], failed


async def explore(config: S7DeviceConfig) -> Exploration:
    """The connection (PDU size agreed), the read plan, and every point read once with it
    (`S7Family.explore`, the console's probe); an S7 PLC lists no symbols over PUT/GET, so
    nothing is found besides the points."""
    logging.getLogger("outpost.bridge.s7").setLevel(logging.CRITICAL)  # the rows say it
    run = ProbeRun()
    device = S7Device(config, run.context)
    session = await open_session(config)
    try:
        lines = [f"connected to {config.host}:{config.port} (remote TSAP "
                 f"{config.remote_tsap():04X}), PDU {session.pdu} bytes"]
        if not config.points:
            return Exploration(tuple(lines))
        device.replan(session.pdu)
        planned = len(device.plan)
        await device.poll(session)
        if len(device.alone):  # some points were read again apart: read once more so
            await device.poll(session)
        lines.append(f"plan: {len(device.plan)} request(s) per poll for {len(config.points)} "
                     f"point(s)" + (f" ({planned} before points past a DB's end were read "
                                    f"apart)" if planned != len(device.plan) else ""))
        lines += describe(device.plan, session.pdu)
    finally:
        await session.close()
    rows = run.rows(device.points.values(), lambda point: point.address,
                    lambda point: point.kind)
    return Exploration(tuple(lines), rows)
