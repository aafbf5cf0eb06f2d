"""The demo's simulated devices, run as child processes of `outpost demo`.

`python -m outpost.demo.devices modbus --port P --units 1,2,3`: a pymodbus TCP server
holding
one meter per unit whose input registers change every half second (voltage, current, power,
an energy counter), as a PLC changing its memory looks from the bus. Prints
`simulator listening on P` once serving.

`python -m outpost.demo.devices serial --tty PATH`: writes `T=21.53 H=45.2` lines twice a
second to one end of a socat pty pair (a serial temperature / humidity sensor).
Both run until killed.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import math
import struct
import time
from typing import Any

INPUT_REGISTERS = 8
POINTS = (  # (name, address, type, unit, scale): the register map of one demo meter
    ("voltage", 0, "uint16", "V", 0.1),
    ("current", 1, "uint16", "A", 0.01),
    ("power", 2, "float32", "W", 1.0),
    ("energy", 4, "uint32", "Wh", 1.0),
)


def meter_registers(unit: int, t: float, energy: int) -> list[int]:
    """The input registers of meter `unit` at time `t` (seconds)."""
    voltage = 2300 + int(40 * math.sin(t / 7 + unit))
    current = 500 + unit * 150 + int(120 * math.sin(t / 3 + unit * 2))
    power = voltage / 10 * current / 100
    hi, lo = struct.unpack(">HH", struct.pack(">f", power))
    return [voltage, current, hi, lo, (energy >> 16) & 0xFFFF, energy & 0xFFFF, 0, 0]


async def serve_modbus(port: int, units: list[int]) -> None:
    """Serve until cancelled, changing the registers every 0.5 s."""
    # pymodbus is installed for the demo and the tests, not on every gateway: imported here.
    from pymodbus.server import ModbusTcpServer  # noqa: PLC0415
    from pymodbus.simulator import SimData, SimDevice  # noqa: PLC0415
    from pymodbus.simulator.simutils import DataType  # noqa: PLC0415

    devices = [
        SimDevice(id=unit, simdata=(
            [SimData(0, values=[False] * 16, datatype=DataType.BITS)],
            [SimData(0, values=[False] * 16, datatype=DataType.BITS)],
            [SimData(0, values=[0] * INPUT_REGISTERS, datatype=DataType.REGISTERS)],
            [SimData(0, values=meter_registers(unit, 0.0, 0), datatype=DataType.REGISTERS)],
        ))
        for unit in units
    ]
    server: Any = ModbusTcpServer(devices, address=("127.0.0.1", port))
    await server.serve_forever(background=True)
    print(f"simulator listening on {port}", flush=True)
    start = time.monotonic()
    energy = dict.fromkeys(units, 0)
    while True:
        await asyncio.sleep(0.5)
        t = time.monotonic() - start
        for unit in units:
            energy[unit] += 1 + unit
            live = server.context.devices[unit].block["i"][2]
            live[0:INPUT_REGISTERS] = meter_registers(unit, t, energy[unit])


def write_serial(tty: str) -> None:
    """Write sensor lines to `tty` until killed."""
    start = time.monotonic()
    with open(tty, "wb", buffering=0) as port:
        print(f"serial sensor writing to {tty}", flush=True)
        while True:
            t = time.monotonic() - start
            temp = 21.5 + 2.0 * math.sin(t / 11)
            hum = 45.0 + 5.0 * math.cos(t / 13)
            port.write(f"T={temp:.2f} H={hum:.1f}\r\n".encode())
            time.sleep(0.5)


def main(argv: list[str] | None = None) -> None:
    """`modbus` or `serial`, see the module comment."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="kind", required=True)
    modbus = sub.add_parser("modbus")
    modbus.add_argument("--port", type=int, required=True)
    modbus.add_argument("--units", default="1,2,3")
    serial = sub.add_parser("serial")
    serial.add_argument("--tty", required=True)
    args = parser.parse_args(argv)
    logging.getLogger("pymodbus").setLevel(logging.CRITICAL)
    if args.kind == "modbus":
        asyncio.run(serve_modbus(args.port, [int(u) for u in args.units.split(",")]))
    else:
        write_serial(args.tty)


if __name__ == "__main__":
    main()
