"""`outpost modbus plan|probe`, `outpost opcua browse|probe`, `outpost s7 probe`, `outpost
bacnet discover|probe`, `outpost enip probe|browse`: thin commands over the families.

`modbus probe` reads once, without retries: either a block of registers decoded every way
(`--address`, `--count`), or every point of a device map or shipped profile (`--map
FILE|profile:NAME`), one request per point so that each point says by itself whether it answers
and why not.

`opcua browse ENDPOINT [NODE]` lists node ids to configure; `opcua probe ENDPOINT` shows the
server's endpoints and certificate, and with `--config FILE --device NAME` reads every point of
a configured device once (bridge/opcua/tools.py; asyncua is imported only by these commands).

`s7 probe HOST[:PORT] --point ADDRESS[:TYPE] ...` or `s7 probe --config FILE --device NAME`
connects to a PLC, prints the PDU size it agreed to and the read plan for it, and reads every
point once (bridge/s7/tools.py; python-snap7 is imported only by this command).

`bacnet discover` lists the devices that answer a Who-Is (with the keys that configure them);
`bacnet probe ADDRESS --device-id N --object AI:1 ...` or `bacnet probe --config FILE --device
NAME` reads every point once with the device's plan (bridge/bacnet/tools.py).

`enip probe HOST[:PORT] --point TAG:TYPE ...` or `enip probe --config FILE --device NAME`
connects to a Logix controller, prints the connection size it granted and the read plan, and
reads every point once; `enip browse HOST[:PORT]` lists the controller's tags
(bridge/enip/tools.py; pycomm3 is imported only by these commands).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from bridge.bacnet.config import BacnetDeviceConfig
from bridge.config import BridgeConfig
from bridge.enip.config import EnipDeviceConfig
from bridge.modbus import convert
from bridge.modbus.config import BusConfig, DeviceConfig, PointConfig
from bridge.modbus.frames import Request
from bridge.modbus.plan import BIT_TABLES, READ_FUNCTION
from bridge.modbus.probe import read_once
from bridge.opcua.config import OpcUaDeviceConfig
from bridge.s7.config import S7DeviceConfig
from gateway.base.hostport import parse_host_port
from gateway.base.settings import ConfigError, format_errors

TABLES = ("coil", "discrete", "holding", "input")


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register `modbus plan|probe`, `opcua browse|probe`, `s7 probe`, `bacnet
    discover|probe` and `enip probe|browse` under the `outpost` parser."""
    _add_opcua_parser(sub)
    _add_s7_parser(sub)
    _add_bacnet_parser(sub)
    _add_enip_parser(sub)
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
        return _invalid(exc)
    for line in format_plan(bridge):
        print(line)
    return 0


def _invalid(exc: ConfigError) -> int:
    """Say why a configuration file does not load; the exit status of that (2)."""
    print(f"{exc.source}: invalid configuration", file=sys.stderr)
    for line in exc.errors:
        print(f"  {line}", file=sys.stderr)
    return 2


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


# -- outpost opcua ------------------------------------------------------------------------------

def _add_opcua_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    opcua = sub.add_parser("opcua", help="OPC UA tools: browse a server, probe a server")
    commands = opcua.add_subparsers(dest="opcua_command", required=True)
    browse = commands.add_parser("browse", help="list the nodes below a node (default: the "
                                 "Objects folder) with their node ids, types and values")
    browse.add_argument("endpoint", help="opc.tcp://host:port/path")
    browse.add_argument("node", nargs="?", help="NodeId (ns=2;s=PLC) or browse path (/2:PLC)")
    browse.add_argument("--depth", type=int, default=1, help="levels to descend (default 1)")
    probe = commands.add_parser(
        "probe", help="show a server's endpoints and certificate; with --config and --device "
        "read every point of a configured device once")
    probe.add_argument("endpoint", nargs="?", help="opc.tcp://host:port/path (default: the "
                       "device's, with --config)")
    probe.add_argument("--config", type=Path, help="TOML configuration file")
    probe.add_argument("--device", help="an [[bridge.opcua]] device of --config")
    probe.add_argument("--save-certificate", type=Path, metavar="FILE",
                       help="write the server's certificate here (for trusted_certificates)")
    for command in (browse, probe):
        command.add_argument("--security-policy", default="None",
                             choices=("None", "Basic256Sha256", "Aes128_Sha256_RsaOaep",
                                      "Aes256_Sha256_RsaPss"))
        command.add_argument("--security-mode", default=None,
                             choices=("None", "Sign", "SignAndEncrypt"),
                             help="default: SignAndEncrypt with a policy, else None")
        command.add_argument("--username", help="the password from $OUTPOST_OPCUA_PASSWORD")
        command.add_argument("--trusted-certificate", type=Path, action="append", default=[],
                             help="a server certificate to trust (repeatable)")
        command.add_argument("--trust-server", action="store_true",
                             help="trust the certificate the server presents, for this run")
        command.add_argument("--state-dir", type=Path, help="where the client certificate is "
                             "(default: a temporary one for this run)")
        command.add_argument("--timeout", type=float, default=5.0, help="seconds (default 5)")


def run_opcua(args: argparse.Namespace, load_bridge: Callable[[Path], BridgeConfig]) -> int:
    """Dispatch `outpost opcua ...` (`load_bridge` as for `run`)."""
    # asyncua takes seconds to import: only these commands load it.
    from bridge.opcua import tools  # noqa: PLC0415
    from bridge.opcua.pki import Pki  # noqa: PLC0415

    try:
        config = _opcua_target(args, load_bridge)
    except ConfigError as exc:
        return _invalid(exc)
    except (ValueError, ValidationError) as exc:
        print(f"opcua: {exc}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="outpost-opcua-") as scratch:
        pki = Pki((args.state_dir or Path(scratch)) / "opcua")
        try:
            if args.opcua_command == "browse":
                lines = asyncio.run(tools.browse(config, pki, args.node, args.depth))
                failed = 0
            else:
                lines, failed = asyncio.run(tools.probe(config, pki, args.save_certificate))
        except Exception as exc:  # every failure of a one-off command is its answer
            print(f"opcua {args.opcua_command} failed: {exc or type(exc).__name__}",
                  file=sys.stderr)
            return 1
    for line in lines:
        print(line)
    return 1 if failed else 0


def _opcua_target(args: argparse.Namespace, load_bridge: Callable[[Path], BridgeConfig],
                  ) -> OpcUaDeviceConfig:
    """The device to talk to: from --config/--device, or made from the arguments."""
    if getattr(args, "config", None) is not None or getattr(args, "device", None) is not None:
        if args.config is None or args.device is None:
            raise ValueError("--config and --device go together")
        devices = {d.name: d for d in load_bridge(args.config).opcua}
        if args.device not in devices:
            raise ValueError(f"no [[bridge.opcua]] device {args.device!r} in {args.config} "
                             f"(devices: {', '.join(sorted(devices)) or 'none'})")
        device = devices[args.device]
        return device.model_copy(update={"endpoint": args.endpoint}) if args.endpoint \
            else device
    if not args.endpoint:
        raise ValueError("probe needs an ENDPOINT (or --config FILE --device NAME)")
    policy = args.security_policy
    data: dict[str, Any] = {
        "name": "probe", "endpoint": args.endpoint, "security_policy": policy,
        "security_mode": args.security_mode or ("None" if policy == "None"
                                                 else "SignAndEncrypt"),
        "trusted_certificates": args.trusted_certificate,
        "trust_on_first_use": args.trust_server, "request_timeout": args.timeout}
    if args.username:
        data |= {"username": args.username,
                 "password": os.environ.get("OUTPOST_OPCUA_PASSWORD", "")}
    return OpcUaDeviceConfig.model_validate(data)


# -- outpost s7 ---------------------------------------------------------------------------------

def _add_s7_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    s7 = sub.add_parser("s7", help="Siemens S7 tools: probe a PLC")
    commands = s7.add_subparsers(dest="s7_command", required=True)
    probe = commands.add_parser(
        "probe", help="connect to a PLC, print the PDU size and the read plan, and read every "
        "point once (--point ..., or --config and --device)",
        description="Addresses in TIA Portal notation: DB10.DBD4, DB10.DBX2.3, M0.1, IW64.")
    probe.add_argument("host", nargs="?", help="HOST or HOST:PORT (default port 102; default: "
                       "the device's, with --config)")
    probe.add_argument("--point", action="append", default=[], metavar="ADDRESS[:TYPE]",
                       help="an address and its S7 type, e.g. DB10.DBD4:REAL or M0.1 "
                       "(repeatable; a bit needs no type)")
    probe.add_argument("--config", type=Path, help="TOML configuration file")
    probe.add_argument("--device", help="an [[bridge.s7]] device of --config")
    probe.add_argument("--rack", type=int, default=0)
    probe.add_argument("--slot", type=int, default=1,
                       help="1 for S7-1200/1500 (default), 2 for S7-300")
    probe.add_argument("--tsap", help="remote TSAP instead of rack/slot, e.g. 02.00")
    probe.add_argument("--pdu-size", type=int, default=480)
    probe.add_argument("--timeout", type=float, default=2.0, help="seconds (default 2)")


def run_s7(args: argparse.Namespace, load_bridge: Callable[[Path], BridgeConfig]) -> int:
    """Dispatch `outpost s7 ...` (`load_bridge` as for `run`)."""
    try:
        config = _s7_target(args, load_bridge)
    except ConfigError as exc:
        return _invalid(exc)
    except ValidationError as exc:
        print("s7: invalid arguments:", file=sys.stderr)
        for line in format_errors(exc, S7DeviceConfig):
            print(f"  {line}", file=sys.stderr)
        return 2
    except ValueError as exc:
        print(f"s7: {exc}", file=sys.stderr)
        return 2
    from bridge.s7 import tools  # noqa: PLC0415 (python-snap7: only this command loads it)

    try:
        lines, failed = asyncio.run(tools.probe(config))
    except Exception as exc:  # every failure of a one-off command is its answer
        print(f"s7 probe failed: {exc or type(exc).__name__}", file=sys.stderr)
        return 1
    for line in lines:
        print(line)
    return 1 if failed else 0


def _s7_target(args: argparse.Namespace, load_bridge: Callable[[Path], BridgeConfig],
               ) -> S7DeviceConfig:
    """The PLC to probe: from --config/--device, or made from the arguments."""
    if args.config is not None or args.device is not None:
        if args.config is None or args.device is None:
            raise ValueError("--config and --device go together")
        devices = {d.name: d for d in load_bridge(args.config).s7}
        if args.device not in devices:
            raise ValueError(f"no [[bridge.s7]] device {args.device!r} in {args.config} "
                             f"(devices: {', '.join(sorted(devices)) or 'none'})")
        device = devices[args.device]
        if args.host:
            host, _, port = args.host.partition(":")
            device = device.model_copy(update={"host": host, "port": int(port or 102)})
        return device
    if not args.host:
        raise ValueError("probe needs a HOST (or --config FILE --device NAME)")
    host, _, port = args.host.partition(":")
    points = []
    for i, text in enumerate(args.point):
        address, _, kind = text.partition(":")
        point: dict[str, Any] = {"name": f"p{i + 1}", "address": address}
        if kind:
            point["type"] = kind.upper()
        points.append(point)
    data: dict[str, Any] = {"name": "probe", "host": host, "port": int(port or 102),
                            "pdu_size": args.pdu_size, "timeout": args.timeout,
                            "points": points}
    if args.tsap:
        data["tsap"] = args.tsap
    else:
        data |= {"rack": args.rack, "slot": args.slot}
    return S7DeviceConfig.model_validate(data)


# -- outpost bacnet -----------------------------------------------------------------------------

def _add_bacnet_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    bacnet = sub.add_parser("bacnet", help="BACnet/IP tools: discover devices, probe a device")
    commands = bacnet.add_subparsers(dest="bacnet_command", required=True)
    discover = commands.add_parser(
        "discover", help="send a global Who-Is and list the devices that answer (also those "
        "behind routers), with the keys that configure them")
    discover.add_argument("--broadcast", default="255.255.255.255:47808", metavar="HOST:PORT",
                          help="where the Who-Is goes (default 255.255.255.255:47808; a "
                          "subnet's broadcast address, or one device's address)")
    discover.add_argument("--bind", default="0.0.0.0:47808", metavar="HOST:PORT",
                          help="the local address (default 0.0.0.0:47808: devices that "
                          "answer by broadcast are heard only on port 47808)")
    discover.add_argument("--wait", type=float, default=3.0,
                          help="seconds to collect answers (default 3)")
    discover.add_argument("--low", type=int, help="lowest device instance asked for")
    discover.add_argument("--high", type=int, help="highest device instance asked for")
    probe = commands.add_parser(
        "probe", help="reach a device, print its max APDU and read plan, and read every "
        "point once (--object ..., or --config and --device)")
    probe.add_argument("address", nargs="?", help="HOST[:PORT] of the device or its router "
                       "(default: the device's, with --config)")
    probe.add_argument("--device-id", type=int, help="the device instance")
    probe.add_argument("--network", type=int, help="behind a router: the network number")
    probe.add_argument("--mac", help="behind a router: the MAC in hex")
    probe.add_argument("--object", action="append", default=[], metavar="TYPE:INSTANCE",
                       help="an object to read, e.g. AI:1 or analog-value:3 (repeatable)")
    probe.add_argument("--config", type=Path, help="TOML configuration file")
    probe.add_argument("--device", help="a [[bridge.bacnet]] device of --config")
    probe.add_argument("--bind", default="0.0.0.0:0", metavar="HOST:PORT",
                       help="the local address (default: any free port)")
    probe.add_argument("--timeout", type=float, default=2.0, help="seconds (default 2)")


def run_bacnet(args: argparse.Namespace, load_bridge: Callable[[Path], BridgeConfig]) -> int:
    """Dispatch `outpost bacnet ...` (`load_bridge` as for `run`)."""
    from bridge.bacnet import tools  # noqa: PLC0415 (only this command needs it)

    if args.bacnet_command == "discover":
        try:
            bind = parse_host_port(args.bind, 47808)
            target = parse_host_port(args.broadcast, 47808)
            devices = asyncio.run(tools.discover((bind.host, bind.port),
                                                 (target.host, target.port), args.wait,
                                                 args.low, args.high))
        except (OSError, ValueError) as exc:
            print(f"bacnet discover failed: {exc}", file=sys.stderr)
            return 1
        for line in tools.format_discovered(devices):
            print(line)
        return 0 if devices else 1
    try:
        config = _bacnet_target(args, load_bridge)
    except ConfigError as exc:
        return _invalid(exc)
    except ValidationError as exc:
        print("bacnet: invalid arguments:", file=sys.stderr)
        for line in format_errors(exc, BacnetDeviceConfig):
            print(f"  {line}", file=sys.stderr)
        return 2
    except ValueError as exc:
        print(f"bacnet: {exc}", file=sys.stderr)
        return 2
    try:
        lines, failed = asyncio.run(tools.probe(config))
    except Exception as exc:  # every failure of a one-off command is its answer
        print(f"bacnet probe failed: {exc or type(exc).__name__}", file=sys.stderr)
        return 1
    for line in lines:
        print(line)
    return 1 if failed else 0


def _bacnet_target(args: argparse.Namespace, load_bridge: Callable[[Path], BridgeConfig],
                   ) -> BacnetDeviceConfig:
    """The device to probe: from --config/--device, or made from the arguments."""
    if args.config is not None or args.device is not None:
        if args.config is None or args.device is None:
            raise ValueError("--config and --device go together")
        devices = {d.name: d for d in load_bridge(args.config).bacnet}
        if args.device not in devices:
            raise ValueError(f"no [[bridge.bacnet]] device {args.device!r} in {args.config} "
                             f"(devices: {', '.join(sorted(devices)) or 'none'})")
        device = devices[args.device]
        return device.model_copy(update={"address": args.address}) if args.address else device
    if not args.address or args.device_id is None:
        raise ValueError("probe needs an ADDRESS and --device-id (or --config FILE --device "
                         "NAME)")
    data: dict[str, Any] = {
        "name": "probe", "address": args.address, "device_id": args.device_id,
        "local_address": args.bind, "timeout": args.timeout, "retries": 0,
        "points": [{"name": f"p{i + 1}", "object": text} for i, text in enumerate(args.object)]}
    if args.network is not None or args.mac is not None:
        data |= {"network": args.network, "mac": args.mac}
    return BacnetDeviceConfig.model_validate(data)


# -- outpost enip -------------------------------------------------------------------------------

def _add_enip_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    enip = sub.add_parser("enip", help="EtherNet/IP (Logix) tools: probe a controller, list "
                          "its tags")
    commands = enip.add_subparsers(dest="enip_command", required=True)
    probe = commands.add_parser(
        "probe", help="connect to a controller, print the connection size and the read plan, "
        "and read every point once (--point ..., or --config and --device)",
        description="Tags as Studio 5000 names them: Speed, Recipe[3], Motor.Speed, "
        "Program:Main.Count.")
    browse = commands.add_parser("browse", help="list the controller's tags (controller and "
                                 "program scope) with their data types")
    for command in (probe, browse):
        command.add_argument("host", nargs="?", help="HOST or HOST:PORT (default port 44818; "
                             "default: the device's, with --config)")
        command.add_argument("--path", help="the route to the controller as port,link pairs: "
                             "1,0 (backplane, slot 0: the default), \"\" for none")
        command.add_argument("--config", type=Path, help="TOML configuration file")
        command.add_argument("--device", help="an [[bridge.enip]] device of --config")
        command.add_argument("--timeout", type=float, default=2.0, help="seconds (default 2)")
    probe.add_argument("--point", action="append", default=[], metavar="TAG:TYPE",
                       help="a tag and its Logix type, e.g. Motor.Speed:REAL (repeatable)")


def run_enip(args: argparse.Namespace, load_bridge: Callable[[Path], BridgeConfig]) -> int:
    """Dispatch `outpost enip ...` (`load_bridge` as for `run`)."""
    try:
        config = _enip_target(args, load_bridge)
    except ConfigError as exc:
        return _invalid(exc)
    except ValidationError as exc:
        print("enip: invalid arguments:", file=sys.stderr)
        for line in format_errors(exc, EnipDeviceConfig):
            print(f"  {line}", file=sys.stderr)
        return 2
    except ValueError as exc:
        print(f"enip: {exc}", file=sys.stderr)
        return 2
    from bridge.enip import tools  # noqa: PLC0415 (pycomm3: only this command needs it)

    try:
        if args.enip_command == "browse":
            lines, failed = asyncio.run(tools.browse(config)), 0
        else:
            lines, failed = asyncio.run(tools.probe(config))
    except Exception as exc:  # every failure of a one-off command is its answer
        print(f"enip {args.enip_command} failed: {exc or type(exc).__name__}", file=sys.stderr)
        return 1
    for line in lines:
        print(line)
    return 1 if failed else 0


def _enip_target(args: argparse.Namespace, load_bridge: Callable[[Path], BridgeConfig],
                 ) -> EnipDeviceConfig:
    """The controller: from --config/--device, or made from the arguments."""
    host_port = parse_host_port(args.host, 44818) if args.host else None
    if args.config is not None or args.device is not None:
        if args.config is None or args.device is None:
            raise ValueError("--config and --device go together")
        devices = {d.name: d for d in load_bridge(args.config).enip}
        if args.device not in devices:
            raise ValueError(f"no [[bridge.enip]] device {args.device!r} in {args.config} "
                             f"(devices: {', '.join(sorted(devices)) or 'none'})")
        device = devices[args.device]
        if host_port is not None:
            device = device.model_copy(update={"host": host_port.host,
                                               "port": host_port.port})
        return device
    if host_port is None:
        raise ValueError(f"{args.enip_command} needs a HOST (or --config FILE --device NAME)")
    points = []
    for i, text in enumerate(getattr(args, "point", [])):
        tag, _, kind = text.rpartition(":")
        if not tag:
            raise ValueError(f"--point {text!r}: write TAG:TYPE, e.g. Motor.Speed:REAL")
        points.append({"name": f"p{i + 1}", "tag": tag, "type": kind.upper()})
    data: dict[str, Any] = {"name": "probe", "host": host_port.host, "port": host_port.port,
                            "timeout": args.timeout, "points": points}
    if args.path is not None:
        data["path"] = args.path
    return EnipDeviceConfig.model_validate(data)
