"""`outpost opcua browse|probe`, `outpost s7 probe`, `outpost bacnet discover|probe`, `outpost
enip probe|browse`: one-off commands that talk to one device of a family.

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

Each command takes its device from `--config FILE --device NAME` (`configured_device`) or makes
one from its arguments, and answers the same way (`answer`): a configuration that does not load
or arguments that make no device exit 2 with the reasons, a device that cannot be reached 1
with why, otherwise the lines the family's tool printed, and 1 when a point failed.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from bridge.bacnet.config import BacnetDeviceConfig
from bridge.config import BridgeConfig
from bridge.enip.config import EnipDeviceConfig
from bridge.opcua.config import OpcUaDeviceConfig
from bridge.s7.config import S7DeviceConfig
from gateway.base.hostport import parse_host_port
from gateway.base.settings import ConfigError, format_errors

DeviceT = TypeVar("DeviceT")
ModelT = TypeVar("ModelT", bound=BaseModel)


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register `opcua`, `s7`, `bacnet` and `enip` under the `outpost` parser."""
    _add_opcua_parser(sub)
    _add_s7_parser(sub)
    _add_bacnet_parser(sub)
    _add_enip_parser(sub)


def invalid(exc: ConfigError) -> int:
    """Say why a configuration file does not load; the exit status of that (2)."""
    print(f"{exc.source}: invalid configuration", file=sys.stderr)
    for line in exc.errors:
        print(f"  {line}", file=sys.stderr)
    return 2


def configured_device(args: argparse.Namespace, load_bridge: Callable[[Path], BridgeConfig],
                      family: str, model: type[ModelT]) -> ModelT | None:
    """The `[[bridge.<family>]]` device (a `model`) that `--config FILE --device NAME` name, or
    None when the command has neither option."""
    if getattr(args, "config", None) is None and getattr(args, "device", None) is None:
        return None
    if args.config is None or args.device is None:
        raise ValueError("--config and --device go together")
    devices = {d.name: d for d in getattr(load_bridge(args.config), family)}
    if args.device not in devices:
        raise ValueError(f"no [[bridge.{family}]] device {args.device!r} in {args.config} "
                         f"(devices: {', '.join(sorted(devices)) or 'none'})")
    device = devices[args.device]
    assert isinstance(device, model)
    return device


def answer(command: str, model: type[BaseModel], target: Callable[[], DeviceT],
           talk: Callable[[DeviceT], tuple[list[str], int]]) -> int:
    """Run `command` ("s7 probe"): make its device with `target`, `talk` to it, print what it
    says; the exit status (0, 1 when a point or the device failed, 2 for bad input)."""
    family = command.split(maxsplit=1)[0]
    try:
        device = target()
    except ConfigError as exc:
        return invalid(exc)
    except ValidationError as exc:
        print(f"{family}: invalid arguments:", file=sys.stderr)
        for line in format_errors(exc, model):
            print(f"  {line}", file=sys.stderr)
        return 2
    except ValueError as exc:
        print(f"{family}: {exc}", file=sys.stderr)
        return 2
    try:
        lines, failed = talk(device)
    except Exception as exc:  # every failure of a one-off command is its answer
        print(f"{command} failed: {exc or type(exc).__name__}", file=sys.stderr)
        return 1
    for line in lines:
        print(line)
    return 1 if failed else 0


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

    def talk(config: OpcUaDeviceConfig) -> tuple[list[str], int]:
        with tempfile.TemporaryDirectory(prefix="outpost-opcua-") as scratch:
            pki = Pki((args.state_dir or Path(scratch)) / "opcua")
            if args.opcua_command == "browse":
                return asyncio.run(tools.browse(config, pki, args.node, args.depth)), 0
            return asyncio.run(tools.probe(config, pki, args.save_certificate))

    return answer(f"opcua {args.opcua_command}", OpcUaDeviceConfig,
                  lambda: _opcua_target(args, load_bridge), talk)


def _opcua_target(args: argparse.Namespace, load_bridge: Callable[[Path], BridgeConfig],
                  ) -> OpcUaDeviceConfig:
    """The device to talk to: from --config/--device, or made from the arguments."""
    device = configured_device(args, load_bridge, "opcua", OpcUaDeviceConfig)
    if device is not None:
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

    def talk(config: S7DeviceConfig) -> tuple[list[str], int]:
        from bridge.s7 import tools  # noqa: PLC0415 (python-snap7: only this command loads it)

        return asyncio.run(tools.probe(config))

    return answer("s7 probe", S7DeviceConfig, lambda: _s7_target(args, load_bridge), talk)


def _s7_target(args: argparse.Namespace, load_bridge: Callable[[Path], BridgeConfig],
               ) -> S7DeviceConfig:
    """The PLC to probe: from --config/--device, or made from the arguments."""
    host_port = parse_host_port(args.host, 102) if args.host else None
    device = configured_device(args, load_bridge, "s7", S7DeviceConfig)
    if device is not None:
        if host_port is not None:
            device = device.model_copy(update={"host": host_port.host,
                                               "port": host_port.port})
        return device
    if host_port is None:
        raise ValueError("probe needs a HOST (or --config FILE --device NAME)")
    points = []
    for i, text in enumerate(args.point):
        address, _, kind = text.partition(":")
        point: dict[str, Any] = {"name": f"p{i + 1}", "address": address}
        if kind:
            point["type"] = kind.upper()
        points.append(point)
    data: dict[str, Any] = {"name": "probe", "host": host_port.host, "port": host_port.port,
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
    return answer("bacnet probe", BacnetDeviceConfig, lambda: _bacnet_target(args, load_bridge),
                  lambda config: asyncio.run(tools.probe(config)))


def _bacnet_target(args: argparse.Namespace, load_bridge: Callable[[Path], BridgeConfig],
                   ) -> BacnetDeviceConfig:
    """The device to probe: from --config/--device, or made from the arguments."""
    device = configured_device(args, load_bridge, "bacnet", BacnetDeviceConfig)
    if device is not None:
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

    def talk(config: EnipDeviceConfig) -> tuple[list[str], int]:
        from bridge.enip import tools  # noqa: PLC0415 (pycomm3: only this command needs it)

        if args.enip_command == "browse":
            return asyncio.run(tools.browse(config)), 0
        return asyncio.run(tools.probe(config))

    return answer(f"enip {args.enip_command}", EnipDeviceConfig,
                  lambda: _enip_target(args, load_bridge), talk)


def _enip_target(args: argparse.Namespace, load_bridge: Callable[[Path], BridgeConfig],
                 ) -> EnipDeviceConfig:
    """The controller: from --config/--device, or made from the arguments."""
    host_port = parse_host_port(args.host, 44818) if args.host else None
    device = configured_device(args, load_bridge, "enip", EnipDeviceConfig)
    if device is not None:
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
