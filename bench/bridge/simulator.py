"""A pymodbus 3.16 server holding several units, for the bridge's tests and benchmark.

How this works: `Simulator` runs pymodbus's `ModbusTcpServer` (MBAP or RTU framing over TCP) or
`ModbusSerialServer` (RTU on a serial port / pty) on its own event loop in a background thread.
Every unit has the four tables (coils and discrete inputs as bits, holding and input registers)
of `size` entries. Tests read and change the values directly in the server's live register
lists (`set_registers`, `set_bits`, `registers`), which is what a PLC program changing its
memory looks like from the bus.

As a program (`python -m bench.bridge.simulator --port 5020 --units 1,2,3`) it serves until
killed and prints `simulator listening on PORT` first; tests kill -9 it to take a device away.
Holding and input register i start at `(unit * 1000 + i) % 65536` so every value is known.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import threading
from collections.abc import Iterable
from typing import Any

from pymodbus.framer import FramerType
from pymodbus.server import ModbusSerialServer, ModbusTcpServer
from pymodbus.simulator import SimData, SimDevice
from pymodbus.simulator.simutils import DataType

TABLE_KEYS = {"coil": "c", "discrete": "d", "holding": "h", "input": "i"}


def initial_value(unit: int, address: int) -> int:
    """The register value a fresh simulator holds."""
    return (unit * 1000 + address) % 65536


def build_devices(units: Iterable[int], size: int) -> list[SimDevice]:
    """One SimDevice per unit with separate coil / discrete / holding / input blocks."""
    devices = []
    for unit in units:
        regs = [initial_value(unit, a) for a in range(size)]
        devices.append(SimDevice(id=unit, simdata=(
            [SimData(0, values=[False] * size, datatype=DataType.BITS)],
            [SimData(0, values=[False] * size, datatype=DataType.BITS)],
            [SimData(0, values=list(regs), datatype=DataType.REGISTERS)],
            [SimData(0, values=list(regs), datatype=DataType.REGISTERS)],
        )))
    return devices


class Simulator:
    """A pymodbus server in a background thread."""

    def __init__(self, units: Iterable[int] = (1,), framer: str = "tcp", port: int = 0,
                 device: str | None = None, size: int = 1000, baudrate: int = 19200) -> None:
        self.units = list(units)
        self.framer = framer
        self.port = port
        self.device = device
        self.size = size
        self.baudrate = baudrate
        self.loop: asyncio.AbstractEventLoop | None = None
        self.server: Any = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None

    def start(self) -> int:
        """Start serving; returns the TCP port (0 for serial)."""
        self._thread = threading.Thread(target=self._run, name="modbus-sim", daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("simulator did not start")
        if self._error is not None:
            raise RuntimeError(f"simulator failed: {self._error}")
        return self.port

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        self.loop = loop
        try:
            loop.run_until_complete(self._serve())
        except BaseException as exc:  # reported to start()
            self._error = exc
            self._ready.set()
        finally:
            loop.close()

    async def _serve(self) -> None:
        devices = build_devices(self.units, self.size)
        if self.framer == "rtu":
            self.server = ModbusSerialServer(devices, framer=FramerType.RTU, port=self.device or "",
                                             baudrate=self.baudrate, timeout=0.01)
        else:
            framer = FramerType.SOCKET if self.framer == "tcp" else FramerType.RTU
            self.server = ModbusTcpServer(devices, framer=framer,
                                          address=("127.0.0.1", self.port))
        await self.server.serve_forever(background=True)
        if self.framer != "rtu":
            self.port = self.server.transport.sockets[0].getsockname()[1]
        self._stopped = asyncio.Event()
        self._ready.set()
        await self._stopped.wait()
        await self.server.shutdown()

    def stop(self) -> None:
        """Stop serving and close every connection."""
        if self.loop is not None and self._thread is not None and self._thread.is_alive():
            self.loop.call_soon_threadsafe(self._stopped.set)
            self._thread.join(10)

    def registers(self, unit: int, table: str) -> list[int]:
        """The live register list of a table (bit tables: 16 bits per entry, LSB first)."""
        block = self.server.context.devices[unit].block[TABLE_KEYS[table]]
        registers: list[int] = block[2]
        return registers

    def set_registers(self, unit: int, table: str, address: int, values: list[int]) -> None:
        """Change holding or input registers."""
        self.registers(unit, table)[address:address + len(values)] = values

    def get_registers(self, unit: int, table: str, address: int, count: int) -> list[int]:
        """Read holding or input registers."""
        return list(self.registers(unit, table)[address:address + count])

    def set_bits(self, unit: int, table: str, address: int, bits: list[bool]) -> None:
        """Change coils or discrete inputs."""
        regs = self.registers(unit, table)
        for i, bit in enumerate(bits):
            word, shift = divmod(address + i, 16)
            regs[word] = regs[word] | (1 << shift) if bit else regs[word] & ~(1 << shift)

    def get_bit(self, unit: int, table: str, address: int) -> bool:
        """One coil or discrete input."""
        word, shift = divmod(address, 16)
        return bool(self.registers(unit, table)[word] >> shift & 1)


def main(argv: list[str] | None = None) -> None:
    """Serve until killed."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=5020)
    parser.add_argument("--framer", choices=("tcp", "rtu-over-tcp"), default="tcp")
    parser.add_argument("--units", default="1", help="comma-separated unit ids")
    parser.add_argument("--size", type=int, default=1000, help="entries per table")
    args = parser.parse_args(argv)
    logging.getLogger("pymodbus").setLevel(logging.CRITICAL)
    sim = Simulator([int(u) for u in args.units.split(",")], args.framer, args.port,
                    size=args.size)
    port = sim.start()
    print(f"simulator listening on {port}", flush=True)
    with contextlib.suppress(KeyboardInterrupt):
        threading.Event().wait()


if __name__ == "__main__":
    main()
