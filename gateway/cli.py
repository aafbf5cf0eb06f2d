"""The `outpost` command: thin subcommands over library functions."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from gateway.config import Config, ConfigError, ListenerConfig, load_config, parse_host_port


def _host_port(value: str) -> str:
    try:
        parse_host_port(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return value


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand."""
    parser = argparse.ArgumentParser(prog="outpost", description="outpost edge gateway")
    parser.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING or ERROR")
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="run the gateway")
    run.add_argument("--config", type=Path, help="TOML configuration file")
    run.add_argument(
        "--listen", action="append", type=_host_port, metavar="HOST:PORT",
        help="listen here instead of the configured listeners (repeatable)",
    )
    run.add_argument("--state-dir", type=Path, help="directory for persistent state")

    check = sub.add_parser("check-config", help="validate a configuration file")
    check.add_argument("file", type=Path)

    demo = sub.add_parser("demo", help="run the demo on embedded defaults")
    demo.add_argument("--listen", default="127.0.0.1:1883", type=_host_port)
    return parser


def _with_listeners(config: Config, listen: list[str] | None) -> Config:
    if not listen:
        return config
    listeners = [ListenerConfig(bind=address) for address in listen]
    return config.model_copy(update={"listeners": listeners})


def cmd_run(args: argparse.Namespace) -> int:
    """`outpost run`."""
    from gateway.app import run

    try:
        config = _with_listeners(load_config(args.config), args.listen)
    except ConfigError as exc:
        _print_config_errors(exc)
        return 2
    if args.state_dir is not None:
        args.state_dir.mkdir(parents=True, exist_ok=True)
    return run(config, args.state_dir)


def cmd_check_config(args: argparse.Namespace) -> int:
    """`outpost check-config FILE`: exit 0 when valid, else print every error and exit 2."""
    try:
        load_config(args.file)
    except ConfigError as exc:
        _print_config_errors(exc)
        return 2
    print(f"{args.file}: OK")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    """`outpost demo`: the broker on embedded defaults, with instructions."""
    from gateway.app import run

    host, port = parse_host_port(args.listen)
    print("outpost demo: starting the broker with embedded defaults")
    print(f"  subscribe:  mosquitto_sub -h {host} -p {port} -t '#' -v")
    print(f"  publish:    mosquitto_pub -h {host} -p {port} -t demo/hello -m world")
    print("  stop with Ctrl-C")
    config = _with_listeners(Config(), [args.listen])
    return run(config)


def _print_config_errors(exc: ConfigError) -> None:
    print(f"{exc.source}: invalid configuration", file=sys.stderr)
    for line in exc.errors:
        print(f"  {line}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    """Console entry point."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=getattr(logging, str(args.log_level).upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    handlers = {"run": cmd_run, "check-config": cmd_check_config, "demo": cmd_demo}
    return handlers[args.command](args)
