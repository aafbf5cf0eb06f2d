"""Reading a Modbus device once, for `outpost modbus probe` and the console's probe.

One request per point, without retries, so that each point says by itself whether it
answers and why not. `explore` reads over the bridge's own bus when that bus is running with
the same configuration (the bus lock keeps the probe between two polls, never across one: a
serial line has one master), else over a one-off connection without retries and with a short
timeout, closed again at the end.
"""

from __future__ import annotations

from bridge.driver import Exploration, Found
from bridge.modbus import convert
from bridge.modbus.bus import ModbusBus, TransactionError
from bridge.modbus.config import BusConfig, DeviceConfig
from bridge.modbus.frames import Request
from bridge.modbus.plan import READ_FUNCTION


async def read_once(bus: BusConfig, requests: list[Request]) -> list[tuple[int, ...] | str]:
    """Each request's values, or why it got none."""
    modbus = ModbusBus(bus)
    results: list[tuple[int, ...] | str] = []
    try:
        for request in requests:
            try:
                results.append((await modbus.execute(request, retries=0)).values)
            except TransactionError as exc:
                results.append(str(exc))
                if exc.kind == "unavailable":  # no line: the other requests cannot fare better
                    results += [str(exc)] * (len(requests) - len(results))
                    break
    finally:
        await modbus.close()
    return results


def one_off(bus: BusConfig) -> BusConfig:
    """The bus as a probe opens it when the bridge does not run it: no retries, at most 1 s."""
    return bus.model_copy(update={"retries": 0, "timeout": min(bus.timeout, 1.0)})


async def explore(device: DeviceConfig, bus: BusConfig, running: ModbusBus | None
                  ) -> Exploration:
    """Every point of `device` read once; `running`: the bridge's bus of that configuration,
    when it has one."""
    requests = [Request(device.unit_id, READ_FUNCTION[p.table], device.span(p).address, p.size)
                for p in device.points]
    if running is None:
        results = await read_once(one_off(bus), requests)
    else:
        results = []
        for request in requests:
            try:
                results.append((await running.execute(request, retries=0)).values)
            except TransactionError as exc:
                results.append(str(exc))
    rows = []
    for point, result in zip(device.points, results, strict=True):
        where = f"{point.table} {point.address}"
        if isinstance(result, str):
            rows.append(Found(point.name, where, error=result))
            continue
        value, quality = convert.decode(device.value_spec(point), result)
        rows.append(Found(point.name, where, value, point.unit, quality))
    shown = bus.host if bus.type != "rtu" else bus.device
    return Exploration((f"unit {device.unit_id} on bus {bus.name} ({bus.type} {shown})",),
                       tuple(rows))
