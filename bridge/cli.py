"""`outpost modbus plan|probe`, and the registration of every family's commands (the others are
in bridge/device_commands.py): thin commands over the families.

`modbus probe` reads once, without retries: either a block of registers decoded every way
(`--address`, `--count`), or every point of a device map or shipped profile (`--map
FILE|profile:NAME`), one request per point so that each point says by itself whether it answers
and why not.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from collections.abc import Callable
from pathlib import Path

from pydantic import ValidationError

from bridge import device_commands
from bridge.config import BridgeConfig
from bridge.device_commands import invalid
from bridge.modbus import convert
from bridge.modbus.config import BusConfig, DeviceConfig, PointConfig
from bridge.modbus.frames import Request
from bridge.modbus.plan import BIT_TABLES, READ_FUNCTION
from bridge.modbus.probe import read_once
from gateway.base.settings import ConfigError, format_errors

TABLES = ("coil", "discrete", "holding", "input")


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register `modbus plan|probe`, `opcua browse|probe`, `s7 probe`, `bacnet
    discover|probe` and `enip probe|browse` under the `outpost` parser."""
    device_commands.add_parsers(sub)
    modbus = sub.add_parser("modbus", help="Modbus tools: read plan, probe a device")
    commands = modbus.add_subparsers(dest="modbus_command", required=True)
    plan = commands.add_parser("plan", help="print the requests one poll cycle makes")
    plan.add_argument("config", type=Path, help="TOML configuration file")
    probe = commands.add_parser(
        "probe", help="read registers once and print them decoded in every type and order, "
        "or read every point of a device map / profile (--map)",
        description="Read once, without retries. Numbers may be decimal or hex (0x48).")
    target = probe.add_mutually_exclusive_group(required=True)
    target.add_argument("--tcp", metavar="HOST:PORT", help="Modbus TCP")
    target.add_argument("--rtu-over-tcp", metavar="HOST:PORT", help="RTU frames over TCP")
    target.add_argument("--serial", metavar="PORT", help="serial RTU, e.g. /dev/ttyUSB0")
    probe.add_argument("--baudrate", type=int, default=9600)
    probe.add_argument("--parity", choices=("N", "E", "O"), default="N")
    probe.add_argument("--stopbits", type=int, choices=(1, 2), default=1)
    probe.add_argument("--unit-id", "--unit", dest="unit", type=number, default=1,
                       help="Modbus unit id (default 1)")
    probe.add_argument("--map", metavar="FILE|profile:NAME",
                       help="read every point of a device map or shipped profile instead of "
                       "--address")
    probe.add_argument("--table", choices=TABLES, default="holding",
                       help="default holding (FC03); meters keep measurements in input (FC04)")
    probe.add_argument("--address", type=number,
                       help="first register, decimal or hex (0x48), in --address-base")
    probe.add_argument("--address-base", type=int, choices=(0, 1),
                       help="1 when the device manual counts registers from 1 (required with "
                       "--address; with --map the map's own address_base is the default)")
    probe.add_argument("--count", type=number, default=4,
                       help="registers or bits to read (default 4)")
    probe.add_argument("--timeout", type=float, default=1.0, help="seconds (default 1.0)")


def number(text: str) -> int:
    """An integer as typed: decimal (72, also with leading zeros) or 0x / 0o / 0b prefixed."""
    try:
        return int(text, 10)
    except ValueError:
        pass
    try:
        return int(text, 0)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r} (decimal or hex like 0x48)")\
            from None


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
        return invalid(exc)
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
            lines.append(f"  device {device.name} (unit_id {device.unit_id}, address_base "
                         f"{device.address_base}, {len(device.points)} points)")
            for group, reads in device.read_plan().items():
                lines.append(f"    group {group} every {device.interval(group):g} s: "
                             f"{len(reads)} request(s)")
                total += len(reads)
                for read in reads:
                    unit = "bits" if read.table in BIT_TABLES else "registers"
                    first = read.address + device.address_base
                    last = first + read.count - 1
                    wire_last = read.address + read.count - 1
                    names = ", ".join(span.key for span in read.spans)
                    lines.append(f"      FC{read.function:02d} {read.table} {first}..{last} "
                                 f"= wire 0x{read.address:04X}..0x{wire_last:04X} "
                                 f"({read.count} {unit}, {read.unused} unused): {names}")
    lines.append(f"total: {total} request(s) per cycle of every group")
    return lines


def probe_bus(args: argparse.Namespace) -> BusConfig:
    """The one-off bus a probe reads over (no retries)."""
    if args.serial:
        return BusConfig(name="probe", type="rtu", device=args.serial, baudrate=args.baudrate,
                         parity=args.parity, stopbits=args.stopbits, timeout=args.timeout,
                         retries=0)
    host, _, port = (args.tcp or args.rtu_over_tcp).rpartition(":")
    return BusConfig(name="probe", type="tcp" if args.tcp else "rtu-over-tcp", host=host,
                     port=int(port), timeout=args.timeout, retries=0)


def cmd_probe(args: argparse.Namespace) -> int:
    """Read once and print the registers decoded every way, or every point of a map."""
    # The probe reports failures itself; the bus's "retrying" log lines are for the daemon.
    logging.getLogger("outpost.bridge.modbus").setLevel(logging.CRITICAL)
    if args.map:
        return probe_map(args)
    if args.address is None or args.address_base is None:
        print("probe needs --address and --address-base (or --map FILE|profile:NAME)",
              file=sys.stderr)
        return 2
    wire = args.address - args.address_base
    if wire < 0:
        print(f"address {args.address} is below --address-base {args.address_base}",
              file=sys.stderr)
        return 2
    request = Request(args.unit, READ_FUNCTION[args.table], wire, args.count)
    result = asyncio.run(read_once(probe_bus(args), [request]))[0]
    if isinstance(result, str):
        print(f"probe failed: {result}", file=sys.stderr)
        if "exception 2" in result:
            print(f"  the device has no {args.table} register(s) at {args.address}.."
                  f"{args.address + args.count - 1} (wire 0x{wire:04X}): check --table "
                  f"(meters keep measurements in input registers), --address-base, and "
                  f"--count (default 4: reading past the last register fails)", file=sys.stderr)
        return 1
    for line in format_probe(args.table, args.address, result):
        print(line)
    return 0


def probe_map(args: argparse.Namespace) -> int:
    """Read every point of a map once; print which answer (value, unit) and which fail, why."""
    data: dict[str, object] = {"name": "probe", "bus": "probe", "unit_id": args.unit,
                               "map": args.map}
    if args.address_base is not None:
        data["address_base"] = args.address_base
    try:
        device = DeviceConfig.model_validate(data, context={"base_dir": Path.cwd()})
    except ValidationError as exc:
        print(f"probe: cannot use map {args.map}:", file=sys.stderr)
        for line in format_errors(exc, DeviceConfig):
            print(f"  {line}", file=sys.stderr)
        return 2
    requests = [Request(args.unit, READ_FUNCTION[point.table], device.span(point).address,
                        point.size) for point in device.points]
    results = asyncio.run(read_once(probe_bus(args), requests))
    lines, failed = format_map_probe(device, results)
    for line in lines:
        print(line)
    return 1 if failed else 0


def format_map_probe(device: DeviceConfig, results: list[tuple[int, ...] | str],
                     ) -> tuple[list[str], int]:
    """One line per point: where it is, and its value and unit or why it failed."""
    lines = [f"{'point':<24} {'table':<8} {'address':>7} {'wire':>6}  result"]
    failed = 0
    for point, result in zip(device.points, results, strict=True):
        where = (f"{point.name:<24} {point.table:<8} {point.address:>7} "
                 f"0x{device.span(point).address:04X}  ")
        if isinstance(result, str):
            failed += 1
            lines.append(where + f"FAILED: {result}{_failure_hint(point, result)}")
            continue
        value, quality = convert.decode(device.value_spec(point), result)
        unit = f" {point.unit}" if point.unit else ""
        lines.append(where + f"{value!r}{unit}" + ("" if quality == "good" else f" ({quality})"))
    answered = len(device.points) - failed
    lines.append(f"{answered} of {len(device.points)} point(s) answered, {failed} failed")
    return lines, failed


def _failure_hint(point: PointConfig, reason: str) -> str:
    if "exception 2" in reason:
        return f" (the device has no {point.table} register here: a different model or map?)"
    if "exception 1" in reason:
        return f" (the device does not support reading the {point.table} table)"
    return ""


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
