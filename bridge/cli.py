"""`outpost modbus plan|probe`: thin commands over the planner, the converter and the bus."""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Callable
from pathlib import Path

from bridge.config import BridgeConfig, BusConfig
from bridge.modbus import convert
from bridge.modbus.bus import ModbusBus, TransactionError
from bridge.modbus.frames import Request
from bridge.modbus.plan import BIT_TABLES, READ_FUNCTION
from gateway.base.settings import ConfigError

TABLES = ("coil", "discrete", "holding", "input")


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register `modbus plan` and `modbus probe` under the `outpost` parser."""
    modbus = sub.add_parser("modbus", help="Modbus tools: read plan, probe a device")
    commands = modbus.add_subparsers(dest="modbus_command", required=True)
    plan = commands.add_parser("plan", help="print the requests one poll cycle makes")
    plan.add_argument("config", type=Path, help="TOML configuration file")
    probe = commands.add_parser(
        "probe", help="read registers once and print them decoded in every type and order")
    target = probe.add_mutually_exclusive_group(required=True)
    target.add_argument("--tcp", metavar="HOST:PORT", help="Modbus TCP")
    target.add_argument("--rtu-over-tcp", metavar="HOST:PORT", help="RTU frames over TCP")
    target.add_argument("--serial", metavar="PORT", help="serial RTU, e.g. /dev/ttyUSB0")
    probe.add_argument("--baudrate", type=int, default=9600)
    probe.add_argument("--parity", choices=("N", "E", "O"), default="N")
    probe.add_argument("--stopbits", type=int, choices=(1, 2), default=1)
    probe.add_argument("--unit", type=int, default=1, help="unit id (default 1)")
    probe.add_argument("--table", choices=TABLES, default="holding")
    probe.add_argument("--address", type=int, required=True)
    probe.add_argument("--address-base", type=int, choices=(0, 1), required=True,
                       help="1 when the device manual counts registers from 1")
    probe.add_argument("--count", type=int, default=4, help="registers or bits (default 4)")
    probe.add_argument("--timeout", type=float, default=1.0)


def run(args: argparse.Namespace, load_bridge: Callable[[Path], BridgeConfig]) -> int:
    """Dispatch `outpost modbus ...`; `load_bridge` reads a configuration file's `[bridge]`
    section (the appliance's loader: it raises `ConfigError` listing every problem)."""
    if args.modbus_command == "plan":
        return cmd_plan(args.config, load_bridge)
    return cmd_probe(args)


def cmd_plan(path: Path, load_bridge: Callable[[Path], BridgeConfig]) -> int:
    """Print the read plan of every Modbus device in a configuration file."""
    try:
        bridge = load_bridge(path)
    except ConfigError as exc:
        print(f"{exc.source}: invalid configuration", file=sys.stderr)
        for line in exc.errors:
            print(f"  {line}", file=sys.stderr)
        return 2
    for line in format_plan(bridge):
        print(line)
    return 0


def format_plan(bridge: BridgeConfig) -> list[str]:
    """The read plan as text: per bus, device and poll group, one line per request."""
    lines: list[str] = []
    total = 0
    for bus in bridge.buses:
        where = (f"{bus.device} {bus.baudrate} {bus.bytesize}{bus.parity}{bus.stopbits}"
                 if bus.type == "rtu" else f"{bus.host}:{bus.port}")
        lines.append(f"bus {bus.name} ({bus.type} {where})")
        for device in (d for d in bridge.devices if d.bus == bus.name):
            lines.append(f"  device {device.name} (unit {device.unit}, address_base "
                         f"{device.address_base}, {len(device.points)} points)")
            for group, reads in device.read_plan().items():
                lines.append(f"    group {group} every {device.interval(group):g} s: "
                             f"{len(reads)} request(s)")
                total += len(reads)
                for read in reads:
                    unit = "bits" if read.table in BIT_TABLES else "registers"
                    first = read.address + device.address_base
                    last = first + read.count - 1
                    names = ", ".join(span.key for span in read.spans)
                    lines.append(f"      FC{read.function:02d} {read.table} {first}..{last} "
                                 f"({read.count} {unit}, {read.unused} unused): {names}")
    lines.append(f"total: {total} request(s) per cycle of every group")
    return lines


def cmd_probe(args: argparse.Namespace) -> int:
    """Read once and print the registers decoded every way."""
    if args.serial:
        bus = BusConfig(name="probe", type="rtu", device=args.serial, baudrate=args.baudrate,
                        parity=args.parity, stopbits=args.stopbits, timeout=args.timeout,
                        retries=0)
    else:
        host, _, port = (args.tcp or args.rtu_over_tcp).rpartition(":")
        bus = BusConfig(name="probe", type="tcp" if args.tcp else "rtu-over-tcp", host=host,
                        port=int(port), timeout=args.timeout, retries=0)
    wire = args.address - args.address_base
    if wire < 0:
        print(f"address {args.address} is below --address-base {args.address_base}",
              file=sys.stderr)
        return 2
    request = Request(args.unit, READ_FUNCTION[args.table], wire, args.count)

    async def read() -> tuple[int, ...]:
        modbus = ModbusBus(bus)
        try:
            return (await modbus.execute(request)).values
        finally:
            await modbus.close()

    try:
        values = asyncio.run(read())
    except TransactionError as exc:
        print(f"probe failed: {exc}", file=sys.stderr)
        return 1
    for line in format_probe(args.table, args.address, values):
        print(line)
    return 0


def format_probe(table: str, address: int, values: tuple[int, ...]) -> list[str]:
    """Registers (hex, unsigned, signed) and every multi-register reading."""
    if table in BIT_TABLES:
        return [f"{table} {address + i}: {bit}" for i, bit in enumerate(values)]
    lines = [f"{table} {address + i}: 0x{word:04X} {word} "
             f"{word - 0x10000 if word & 0x8000 else word}" for i, word in enumerate(values)]
    lines.append("")
    lines.append(f"{'address':>8}  {'type':<11} {'order':<5} value")
    for offset, kind, order, value in convert.interpretations(values):
        lines.append(f"{address + offset:>8}  {kind:<11} {order:<5} {value}")
    return lines
